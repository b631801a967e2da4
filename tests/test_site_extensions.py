"""The site's Sphinx extensions (book/_ext), without building the site."""

import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "book" / "_ext"))

from figure_text import PATHLIKE, alt_text, without_glue  # noqa: E402


def test_alt_text_is_the_captions_first_sentence():
    caption = ("Relative error of the variance of 64-dimensional vectors, as their mean "
               "grows. The one-pass formula (dashed) loses all its digits.")
    assert alt_text(caption) == ("Relative error of the variance of 64-dimensional "
                                 "vectors, as their mean grows")
    assert alt_text("Keys (red), e.g. two. Then more.") == "Keys (red), e.g. two"
    long = alt_text("word " * 100)
    assert len(long) <= 201 and long.endswith("…")
    assert PATHLIKE.search("../_images/0a1b2c.png") and not PATHLIKE.search(alt_text(caption))


def test_glue_calls_are_dropped_from_the_shown_code():
    source = ('x = 1\nglue("a", x,\n     display=False)\n'
              'for k in (1, 2):\n    glue(f"p{k}", k, display=False)\nprint(x)\n'
              'for k in (1, 2):\n    print(k)\n')
    assert without_glue(source) == "x = 1\nprint(x)\nfor k in (1, 2):\n    print(k)"
    assert without_glue('glue("a", 1, display=False)\n') == ""
    assert without_glue("glue = 3\nprint(glue)") == "glue = 3\nprint(glue)"


def test_the_phone_png_is_taken_out_of_the_figure_png(monkeypatch):
    """phone_figures.split_png: the desktop PNG without the phone's chunk (its other
    chunks kept, its pixels unchanged), and the phone's PNG exactly as figure_png drew it."""
    import base64
    import io

    from PIL import Image

    from lncourse.plotting.phone import PHONE_PNG_KEY
    from lncourse.plotting.style import PNG_TEXT_KEY, figure_and_axes, figure_png
    from phone_figures import png_size, split_png

    monkeypatch.setenv("LNCOURSE_SITE_FIGURES", "1")
    fig, axes = figure_and_axes(n=2, width=9.0, height=3.0)
    data, meta = figure_png(fig)
    page, phone = split_png(data)
    full = Image.open(io.BytesIO(data))
    assert phone == base64.b64decode(full.text[PHONE_PNG_KEY])
    assert len(page) < len(data) - len(phone) and PHONE_PNG_KEY not in Image.open(io.BytesIO(page)).text
    assert Image.open(io.BytesIO(page)).text[PNG_TEXT_KEY] == full.text[PNG_TEXT_KEY]
    assert Image.open(io.BytesIO(page)).tobytes() == full.tobytes()
    assert png_size(phone) == Image.open(io.BytesIO(phone)).size
    assert split_png(page) == (page, None)


def test_sidebar_expanders_are_named_after_their_chapter():
    """axe-core's summary-name on every page (stop 31): the theme's expander of a chapter
    with pages under it held only an icon. toc_labels names it; a summary that follows no
    link (none in the theme's sidebar) is left alone, and the title is escaped once."""
    from toc_labels import name_expanders

    theme = ('<li class="toctree-l1"><a class="reference internal" href="01.html">1. One</a>'
             '</li><li class="toctree-l1 current active has-children"><a class="current '
             'reference internal" href="#">2. Keys &amp; LayerNorm&#8217;s <em>scaling</em>'
             '</a><details open="open"><summary><span class="toctree-toggle" role='
             '"presentation"><i class="fa-solid fa-chevron-down"></i></span></summary><ul>'
             '<li class="toctree-l1 has-children"><a class="reference internal" href="03.html">'
             '3. Majority</a><details><summary><span></span></summary>'
             '<details><summary>Show code</summary>')
    named = name_expanders(theme)
    assert named.count('<summary aria-label=') == 2
    assert '<summary aria-label="Pages under 2. Keys &amp; LayerNorm’s scaling">' in named
    assert '<summary aria-label="Pages under 3. Majority">' in named
    assert named.endswith("<details><summary>Show code</summary>")
