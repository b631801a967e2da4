"""The site's Sphinx extensions (book/_ext), without building the site."""

import sys
from pathlib import Path

import pytest
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


def test_the_ledger_role_prints_a_ledgers_entry_and_refuses_an_unknown_one(tmp_path,
                                                                            monkeypatch):
    import json

    from lncourse import results
    from lncourse.evidence import claims as C
    from ledger_role import ledger_role

    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path)
    C._numbers.cache_clear()
    (tmp_path / "nope").mkdir()
    (tmp_path / "norms").mkdir()
    ledger = {"config": {}, "provenance": {"command": "c"}}
    (tmp_path / "nope" / "reported.json").write_text(json.dumps(
        {**ledger, "numbers": {"decode/depth0": 104.2049, "n": 3, "a: b": "text"}}))
    (tmp_path / "norms" / "majority_reported.json").write_text(json.dumps(
        {**ledger, "numbers": {"arms/x/0": -14.0}}))
    assert C.quote("nope/decode/depth0:.1f") == "104.2"
    assert C.quote("nope/decode/depth0") == "104.2049"
    assert C.quote("nope/n:,d") == "3" and C.quote("nope/a: b") == "text"
    assert C.quote("norms.majority/arms/x/0:+.0f") == "-14"
    with pytest.raises(KeyError, match=r"no entry 'decode/depth1'.*nearest: \['decode/depth0'"):
        C.quote("nope/decode/depth1:.1f")
    with pytest.raises(FileNotFoundError, match="no ledger"):
        C.quote("norms.periln/x")
    with pytest.raises(ValueError, match="not a ledger's name"):
        C.quote("../nope/x")

    class Reporter:
        def error(self, text, line):
            return text

    class Inliner:
        reporter = Reporter()

        def problematic(self, rawtext, text, message):
            return ("problem", message)

    nodes, messages = ledger_role("ledger", "{ledger}`nope/n`", "nope/n", 1, Inliner())
    assert [str(n) for n in nodes] == ["3"] and messages == []
    nodes, messages = ledger_role("ledger", "raw", "nope/m", 1, Inliner())
    assert nodes[0][0] == "problem" and "no entry 'm'" in messages[0]
    C._numbers.cache_clear()


def test_the_editions_builder_writes_the_ledgers_value_into_the_notebook():
    sys.path.insert(0, str(ROOT / "scripts"))
    import myst
    from lncourse.evidence.claims import quote

    key = "probe_paper/per_model/causal/0/mae/0"
    ctx = myst.Context(4, myst.read_book(ROOT))
    line = myst._inline(f"error {{ledger}}`nope/{key}:.1f` at depth 0", ctx)
    assert line == f"error {quote(f'nope/{key}:.1f')} at depth 0" and "ledger" not in line


GLUE_BUDGET = 40


def glue_count(text: str) -> int:
    """glue(...) calls in a page's code and {glue} roles in its prose, together."""
    import re
    return len(re.findall(r"(?<![\w.])glue\(", text)) + len(re.findall(r"\{glue(?::\w+)?\}`", text))


def test_a_page_quotes_at_most_40_glued_values():
    counts = {p.stem: glue_count(p.read_text(encoding="utf-8"))
              for p in sorted((ROOT / "book").glob("*.md"))}
    over = {page: n for page, n in counts.items() if n > GLUE_BUDGET}
    assert not over, f"pages over {GLUE_BUDGET} glue calls and roles together: {over}"


def test_the_glue_count_sees_calls_and_roles():
    assert glue_count('glue("a", 1)\nx = glue_it(2)\nfor k in r:\n    glue(k, v)\n'
                      "text {glue:text}`a:.1f` and {glue}`b`, {ledger}`nope/x`") == 4


def test_the_chapter_render_counts_the_chapters_problems_not_its_links_elsewhere(tmp_path):
    """scripts/render_chapter.py: the chapter's pages, the site's configuration with the
    site's execution cache and absolute extension paths; a warning that only says a
    reference leads outside the chapter is not a problem, any other is."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import yaml
    from render_chapter import problems, write_inputs

    toc, config = write_inputs(3, tmp_path)
    t, c = yaml.safe_load(toc.read_text()), yaml.safe_load(config.read_text())
    chapter = t["parts"][0]["chapters"][0]
    assert chapter["file"] == "book/03_majority"
    assert chapter["sections"] == [{"file": "book/03_majority_replication"}]
    assert c["execute"]["cache"] == str(ROOT / "_build" / ".jupyter_cache")
    assert all(Path(p).is_absolute() and (Path(p) / f"{name}.py").exists()
               for name, p in c["sphinx"]["local_extensions"].items())
    log = ("book/intro.md:52: WARNING: undefined label: 'ch-nope'\n"
           "book/03_majority.md:9: ERROR: Unknown interpreted text role \"ledgr\".\n"
           "book/03_majority.md:12: WARNING: glue target not found: 'x'\n")
    assert [ln.split(": ", 1)[0] for ln in problems(log)] == [
        "book/03_majority.md:9", "book/03_majority.md:12"]
