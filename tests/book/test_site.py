"""Open every page of the built site in headless Chromium, as a reader would."""

import functools
import io
import json
import re
import zipfile
import http.server
import shutil
import threading
from pathlib import Path

import pytest

from conftest import ROOT

SITE = ROOT / "_build" / "html"
SHOTS = ROOT / "_build" / "screenshots"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
PAGES = sorted(p.relative_to(SITE).as_posix() for p in (SITE / "book").glob("*.html")) \
    if (SITE / "book").exists() else []
CHAPTER_PAGES = [p for p in PAGES if Path(p).name[:2].isdigit()]
# issue 36: a chapter is a lesson (book/NN_topic) and, beside it, its replication page
# (book/NN_topic_replication), which holds stored runs and claims but no exercises
LESSON_PAGES = [p for p in CHAPTER_PAGES if not Path(p).stem.endswith("_replication")]


# A page marked in KNOWN_FAILING (below) for a test is an expected failure of that test
# (not strict), so every other page stays guarded while one page's fix is pending.
def known(pages, test: str, reason: str):
    broken = KNOWN_FAILING.get(test, set())
    return [pytest.param(p, marks=pytest.mark.xfail(reason=reason, strict=False))
            if (p in broken or "*" in broken) else p for p in pages]


# Pages expected to fail a test, with the reason (not strict: a fixed page passes). Stop
# 31 marked the lessons' first figures, code lines, phone tables and the sidebar's unnamed
# expander here; stop 38 fixed them, and the fresh-clone run of 22ea6ae confirmed it in
# the browser (first figures of chapters 2-4 within 700 px, chapter 2's code within its
# box: the four marked cases passed). Empty: every page is guarded by every test.
KNOWN_FAILING: dict[str, set[str]] = {}

pytestmark = pytest.mark.site


@pytest.fixture(scope="module")
def server():
    assert (SITE / "index.html").exists(), "build the site first: bash scripts/build_site.sh"
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=str(SITE))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM, headless=True,
            args=["--no-sandbox", "--disable-gpu", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--disable-quic"])
        yield browser
        browser.close()


def _typeset(page):
    """Wait until MathJax has typeset the page (Sphinx loads it only on pages with math)."""
    if page.locator(".math").count():
        page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise",
                               timeout=20000)
        page.evaluate("() => MathJax.startup.promise")


def _open_phone(browser, server, page_path):
    """``page_path`` loaded and typeset on a 390 x 844 phone screen at 2x."""
    page = browser.new_page(viewport={"width": 390, "height": 844}, device_scale_factor=2)
    page.goto(f"{server}/{page_path}", wait_until="load")
    _typeset(page)
    return page


def _open(browser, server, page_path):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    problems = []
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}")
            if m.type == "error" and "Failed to load resource" not in m.text else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("response", lambda r: problems.append(f"HTTP {r.status}: {r.url}")
            if r.status >= 400 else None)
    page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url}"))
    page.on("request", lambda r: problems.append(f"external request: {r.url}")
            if not r.url.startswith(server) and not r.url.startswith("data:") else None)
    page.goto(f"{server}/{page_path}", wait_until="load")
    _typeset(page)
    return page, problems


@pytest.fixture(scope="module")
def opened(browser, server):
    """Each page loaded once at 1280 px, shared by every desktop test of it (a chapter
    page takes seconds to load and typeset). The tests that only read the page come first
    in this file; the one that clicks (test_chapter_page) comes last. ``problems`` keeps
    collecting: a test that asserts it sees everything since the load."""
    pages = {}

    def get(page_path):
        if page_path not in pages:
            pages[page_path] = _open(browser, server, page_path)
        return pages[page_path]

    yield get
    for page, _ in pages.values():
        page.close()


def test_site_has_all_pages():
    assert (SITE / "index.html").exists()
    names = {Path(p).stem for p in PAGES}
    assert {"intro", "teaching", "bibliography"} <= names
    assert len(CHAPTER_PAGES) >= 1


@pytest.mark.parametrize("page_path", PAGES)
def test_page_renders_cleanly(opened, page_path):
    page, problems = opened(page_path)
    # math: every math element was typeset by MathJax, none failed
    n_math = page.locator(".math").count()
    typeset = page.locator(".math mjx-container").count()
    assert typeset >= n_math, f"{n_math - typeset} math elements left as raw TeX"
    assert page.locator("mjx-merror").count() == 0
    # figures and images: all loaded
    broken = page.evaluate("() => [...document.images].filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src)")
    assert not broken, broken
    # no raw widget repr or empty widget box
    text = page.inner_text("body")
    assert "interactive(children=" not in text and "Widget(" not in text
    assert page.locator(".jupyter-widgets, .widget-area").count() == 0
    assert not problems, problems


# ---------------------------------------------------------------- what readers saw (issue 19)
# Text outside code and maths, as a reader sees it: a Markdown table left as raw text
# shows its separator row ("|---|---|") or rows of cells between pipes.
_PROSE = """() => { const b = document.querySelector('main') || document.body;
  const c = b.cloneNode(true);
  c.querySelectorAll('pre, code, .highlight, mjx-container, script, style').forEach(e => e.remove());
  return c.innerText; }"""
RAW_TABLE = re.compile(r"\|\s*:?-{3,}:?\s*\||^\s*\|.*\|.*\|\s*$", re.M)
PATHLIKE = re.compile(r"(^|/)[\w.-]+\.(png|jpe?g|svg|gif)$")
MIN_FIGURE_TEXT_PX = 9.0      # at a 1280 px window (lncourse.plotting.style: 10 px at the column)


@pytest.mark.parametrize("page_path", PAGES)
def test_no_raw_table_pipes(opened, page_path):
    page, _ = opened(page_path)
    raw = [m.group(0).strip()[:80] for m in RAW_TABLE.finditer(page.evaluate(_PROSE))]
    assert not raw, f"tables left as raw text: {raw[:3]}"


@pytest.mark.parametrize("page_path", CHAPTER_PAGES)
def test_figures_have_alt_text_and_readable_text(opened, page_path):
    """Alt text is a description, not the image's path; and the smallest text of each
    figure, as the page shows it at 1280 px, is at least MIN_FIGURE_TEXT_PX."""
    page, _ = opened(page_path)
    images = page.evaluate(_IMAGES)
    sizes = _figure_text(page, images)
    for img in images:
        assert img["alt"].strip() and not PATHLIKE.search(img["alt"]), img
        assert not img["src"].endswith("-phone.png"), "the desktop's layout at 1280 px"
    small = [f"{i['alt'][:50]}: {px:.1f} px" for i, px in zip(images, sizes) if px < MIN_FIGURE_TEXT_PX]
    assert not small, small


# Code blocks (a cell's input, or what it printed) wider than their box at 1280 px; the
# chapters' code and printed lines keep to 77 characters (tests/book/test_code_width.py)
_SCROLLING_CODE = """() => [...document.querySelectorAll('div.cell_input pre, div.cell_output pre')]
    .filter(p => p.scrollWidth > p.clientWidth + 1)
    .map(p => (p.textContent.split('\\n').find(l => l.length > 74) || p.textContent).slice(0, 90))"""


@pytest.mark.parametrize("page_path", known(CHAPTER_PAGES, "code", "lines over 77 characters (stop 31)"))
def test_code_fits_the_column(opened, page_path):
    """Issue 19: 33-48 code blocks per chapter scrolled sideways at 1280 px (192 of 245
    before the code was formatted to the column). Solutions count although they start
    closed: their admonition made the box 22 px narrower, and 5 of them scrolled."""
    page, _ = opened(page_path)
    assert page.locator("div.cell_input pre").count() > 0
    scrolling = page.evaluate(_SCROLLING_CODE)
    assert not scrolling, f"{len(scrolling)} code blocks scroll sideways: {scrolling[:3]}"


# Tables wider than the box that holds them (the theme wraps each in a scrolling container,
# so a wide table scrolls sideways inside the column without widening the page): issue
# 36 found chapter 5's prediction table 788 px wide in a 688 px column, its last column
# clipped. Tables inside closed dropdowns have no width and are not counted.
_SCROLLING_TABLES = """() => [...document.querySelectorAll('main table')].filter(t => {
      const box = t.parentElement.closest('div, section, article, main');
      const w = t.getBoundingClientRect().width;
      return w > 0 && (t.scrollWidth > t.clientWidth + 1 || w > box.clientWidth + 1);
    }).map(t => `${Math.round(t.getBoundingClientRect().width)} px: `
                + t.innerText.replace(/\\s+/g, ' ').slice(0, 60))"""


@pytest.mark.parametrize("page_path", PAGES)
def test_tables_fit_the_column(opened, page_path):
    """Issue 36, item 8: no table on any page scrolls sideways at 1280 px."""
    page, _ = opened(page_path)
    wide = page.evaluate(_SCROLLING_TABLES)
    assert not wide, f"{page_path}: {len(wide)} tables wider than the column: {wide[:3]}"


FIRST_SCREEN_PX = 800    # a 1280 x 800 screen: the page's top 800 px at scroll 0
FIGURE_SHOWN_PX = 100    # at least the figure's top 100 px on that screen
_FIRST_FIGURE_TOP = """() => { const f = document.querySelector('main figure img');
    return f ? f.getBoundingClientRect().top + window.scrollY : null; }"""


@pytest.mark.parametrize("page_path", known(LESSON_PAGES, "first_figure", "first figure 737-860 px down (stop 31)"))
def test_first_figure_on_the_first_screen(opened, page_path):
    """Issue 36, item 8: a lesson's first figure (the one that shows its key idea) starts
    on the first screen at 1280 px, below the title, the buttons and the key-idea box.
    tests/book/test_lessons.py checks the same from the source; this is the page."""
    page, _ = opened(page_path)
    top = page.evaluate(_FIRST_FIGURE_TOP)
    assert top is not None, f"{page_path}: a lesson without a figure"
    print(f"{page_path}: first figure at {top:.0f} px")     # shown with pytest -s
    assert top + FIGURE_SHOWN_PX <= FIRST_SCREEN_PX, \
        f"{page_path}: the first figure starts at {top:.0f} px, below the first screen"
    assert page.locator("main .key-idea").count() == 1, f"{page_path}: its key-idea box"


PHONE_MIN_FIGURE_TEXT_PX = 9.0   # at a 390 px phone (lncourse.plotting.phone: 10 px there)


def _figure_text(page, images):
    """The smallest text of each shown figure in CSS pixels: the size it was drawn at (PNG
    text chunk written by plotting.style.figure_png, in 1x pixels; figures are drawn at
    2x) times the scale the page shows it at."""
    from PIL import Image

    from lncourse.plotting.style import PNG_TEXT_KEY

    sizes = []
    for img in images:
        png = Image.open(io.BytesIO(page.request.get(img["src"]).body()))
        assert PNG_TEXT_KEY in png.text, f"{img['src']}: not drawn by plotting.style.figure_png"
        sizes.append(float(png.text[PNG_TEXT_KEY]) * img["shown"] / (png.size[0] / 2))
    return sizes


_IMAGES = """() => [...document.querySelectorAll('figure img')].map(i => {
    const r = i.getBoundingClientRect();
    return {src: i.currentSrc || i.src, alt: i.getAttribute('alt') || '', shown: r.width,
            aspect: (r.width / r.height) / (i.naturalWidth / i.naturalHeight)}; })"""


@pytest.mark.parametrize("page_path", known(PAGES, "phone", "tables scroll on a phone (stop 31)"))
def test_a_phone_shows_the_page_without_sideways_scrolling_and_figures_readable(
        browser, server, page_path):
    """Issue 19, on a 390 px phone: no page scrolls sideways (chapters 2 and 3 did, by 81
    and 30 px), and (issue 36) no table of a lesson or of the front and reference pages
    is wider than the column; every figure keeps its shape (they were squashed sideways to 0.34-0.53
    of their aspect ratio) and is the phone's layout, its smallest text at least
    PHONE_MIN_FIGURE_TEXT_PX (25 of 28 figures were under 9 px, multi-panel ones 5 px)."""
    page = _open_phone(browser, server, page_path)
    over = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
    wide_tables = page.evaluate(_SCROLLING_TABLES)      # issue 36: inside the column too
    images = page.evaluate(_IMAGES)
    sizes = _figure_text(page, images)
    page.close()
    assert over <= 0, f"the page scrolls sideways by {over} px at 390 px"
    # a replication page's tables of measurements may scroll inside their box on a
    # phone (the page itself does not); every other page's tables fit the phone's column
    if not Path(page_path).stem.endswith("_replication"):
        assert not wide_tables, f"tables scroll sideways at 390 px: {wide_tables[:3]}"
    squashed = [f"{i['alt'][:50]}: {i['aspect']}" for i in images
                if not abs((i["aspect"] or 0) - 1) <= 0.02]
    assert not squashed, squashed
    assert all(i["src"].endswith("-phone.png") for i in images), "the phone's layout of each figure"
    small = [f"{i['alt'][:50]}: {px:.1f} px" for i, px in zip(images, sizes)
             if px < PHONE_MIN_FIGURE_TEXT_PX]
    assert not small, small


# Issue 61, item 6: what may be wider than the column on a phone, and must then scroll
# inside its own box and say so: display equations and printed outputs (and code).
_WIDE_BOXES = """() => {
  const col = document.querySelector('main article') || document.querySelector('main');
  const edge = col.getBoundingClientRect().right;
  const sel = 'mjx-container[display="true"], .cell_output pre, .cell_input pre';
  return [...document.querySelectorAll(sel)].map((e, i) => {
    const r = e.getBoundingClientRect(), cs = getComputedStyle(e);
    e.dataset.lncWide = i;
    return {i, kind: e.matches('mjx-container') ? 'equation' : 'output or code',
            wide: e.scrollWidth > e.clientWidth + 1,
            shown: r.width > 0 && e.checkVisibility({visibilityProperty: true}),
            scrolls: ['auto', 'scroll'].includes(cs.overflowX),
            cut: r.right > edge + 1,
            text: (e.innerText || '').replace(/\\s+/g, ' ').trim().slice(0, 50)};
  }).filter(b => b.shown && (b.wide || b.cut));
}"""
# The cue is read in pixels with the box's text made invisible, so that only its
# background (cover and shadow) is left: a column near the right edge against one near the
# middle, the box scrolled to its start (something is hidden to the right: a shadow) and
# to its end (nothing is: no shadow, the cover in the box's own colour).
_NO_TEXT = ("[data-lnc-wide], [data-lnc-wide] * { color: transparent !important;"
            " text-shadow: none !important; border-color: transparent !important; }")
CUE_DARKER = 8.0     # grey levels (of 255) the edge must be darker than the box's middle


def _edge_darkening(png: bytes) -> float:
    """How much darker the box's right edge (3-6 px in) is than its middle, in grey levels,
    over the middle half of its height (the scrollbar lies along the bottom)."""
    from PIL import Image

    img = Image.open(io.BytesIO(png)).convert("L")
    w, h = img.size
    rows = range(h // 4, max(h // 4 + 1, 3 * h // 4))

    def column(x):
        return sum(img.getpixel((x, y)) for y in rows) / len(rows)
    scale = w / max(1, round(w / 2))          # the screenshot is at device scale 2
    return column(w // 2) - min(column(w - 1 - round(k * scale)) for k in (3, 4, 5, 6))


@pytest.mark.parametrize("page_path", LESSON_PAGES)
def test_a_phone_shows_where_equations_and_outputs_scroll(browser, server, page_path):
    """Issue 61, item 6: at 390 x 844, 11 display equations and most printed outputs were
    cut at the column's right edge with no cue that they scroll. Each one wider than the
    column scrolls inside its own box (it is not cut by the page), and shows a shadow on the
    side where more is hidden (book/_static/lncourse.css), which goes when the reader has
    scrolled to the end."""
    page = _open_phone(browser, server, page_path)
    boxes = page.evaluate(_WIDE_BOXES)
    page.add_style_tag(content=_NO_TEXT)
    problems = []
    for b in boxes:
        what = f"{b['kind']} {b['text']!r}"
        if b["cut"] or not b["scrolls"]:
            problems.append(f"{what}: cut at the edge, not scrolled inside its box")
            continue
        box = page.locator(f"[data-lnc-wide='{b['i']}']")
        box.evaluate("e => { e.scrollLeft = 0; }")
        at_start = _edge_darkening(box.screenshot(animations="disabled"))
        box.evaluate("e => { e.scrollLeft = e.scrollWidth; }")
        at_end = _edge_darkening(box.screenshot(animations="disabled"))
        if at_start < CUE_DARKER:
            problems.append(f"{what}: no cue that it scrolls (edge {at_start:.1f} grey "
                            f"levels darker than its middle)")
        elif at_end >= CUE_DARKER:
            problems.append(f"{what}: the cue stays at the end ({at_end:.1f})")
    page.close()
    assert boxes, f"{page_path}: nothing wider than a phone's column (is the measure wrong?)"
    assert not problems, f"{page_path}: {len(problems)} of {len(boxes)}: {problems[:4]}"


@pytest.mark.slow
def test_offline_downloads_open(opened, server):
    """The front page links a PDF of the book and a zip of every chapter's student and
    solution notebooks; both are there and open. The PDF (scripts/build_pdf.sh, about
    65 s of LaTeX) is built by the README's site command, not by the test command's build
    (LNCOURSE_PDF_LATER): this test, in the slow suite, builds it when it is missing."""
    if not (SITE / "downloads" / "the-geometry-of-layernorm.pdf").exists():
        import subprocess   # noqa: PLC0415
        subprocess.run(["bash", "scripts/build_pdf.sh"], cwd=ROOT, check=True)
    page, problems = opened("book/intro.html")
    hrefs = page.evaluate("() => [...document.querySelectorAll('a.lncourse-download')].map(a => a.href)")
    assert len(hrefs) == 2, hrefs
    pdf = next(h for h in hrefs if h.endswith(".pdf"))
    body = (SITE / pdf.split(server + "/", 1)[1]).read_bytes()
    from pypdf import PdfReader   # noqa: PLC0415

    reader = PdfReader(io.BytesIO(body))
    assert body.startswith(b"%PDF") and len(reader.pages) > 80, "a PDF of the whole book"
    text = re.sub(r"\s+", "", "".join(p.extract_text() or "" for p in reader.pages))
    for title in ("LayerNormisaprojectionandascaling", "Bibliography"):
        assert title in text
    # numbered as on the site and in the notebooks: chapter 1's first figure is "Figure 1.1"
    # (the front page's sections were chapters 1 to 5 of the PDF, and it said "Figure 6.1")
    from myst import read_book   # noqa: PLC0415

    figures = {v.replace(" ", "") for k, v in read_book(ROOT).numbers.items() if k.startswith("fig-")}
    captions = {f"Figure{n}" for n in re.findall(r"Figure(\d+\.\d+):", text)}
    assert captions == figures, "figure captions numbered as on the site"
    archive = zipfile.ZipFile(SITE / next(h for h in hrefs if h.endswith(".zip")).split(server + "/", 1)[1])
    names = sorted(archive.namelist())
    chapters = sorted(p.name for p in (ROOT / "book").glob("[0-9][0-9]_*.md"))
    for edition in ("student", "solution"):
        for chapter in chapters:
            name = f"{edition}/{chapter[:-3]}.ipynb"
            assert name in names, (name, names)
            assert json.loads(archive.read(name))["cells"]
    assert not problems, problems


# axe-core's findings that come from the theme (sphinx-book-theme / pydata-sphinx-theme),
# not from the course, documented rather than fixed: "region" is the theme's layout
# (the skip link, the secondary sidebar's toggles and the footer sit outside landmarks).
THEME_AXE_FINDINGS = {"region"}
AXE_VERSION = "4.10.2"


@pytest.fixture(scope="module")
def axe_source():
    """axe-core from the npm registry (once, into _build/axe), as MathJax is fetched."""
    import subprocess
    import tarfile
    import tempfile

    path = ROOT / "_build" / "axe" / "axe.min.js"
    if not path.exists():
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run(["npm", "pack", "--silent", f"axe-core@{AXE_VERSION}"], cwd=tmp,
                           check=True, capture_output=True)
            with tarfile.open(next(Path(tmp).glob("axe-core-*.tgz"))) as tar:
                member = tar.extractfile("package/axe.min.js").read()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(member)
    return path.read_text(encoding="utf-8")


# axe's audit takes 5-13 s a page: the test command audits the lessons, the front page and
# the teaching page; the replication pages (tables of stored runs, no new components)
# are audited by the slow suite (issue 32's budget)
AXE_PAGES = [pytest.param(p, marks=pytest.mark.slow) if Path(p).stem.endswith("_replication")
             else p for p in known(PAGES, "axe", "the nested toctree's <summary> has no name (stop 31)")]


@pytest.mark.parametrize("page_path", AXE_PAGES)
def test_axe_finds_nothing_of_ours(opened, axe_source, page_path):
    page, problems = opened(page_path)       # as loaded: no solution or hint opened yet
    before = len(problems)
    page.add_script_tag(content=axe_source)
    found = page.evaluate("""async () => (await axe.run(document, {resultTypes: ['violations']}))
        .violations.map(v => ({id: v.id, n: v.nodes.length,
                               where: v.nodes.slice(0, 2).map(n => n.target.join(' '))}))""")
    # axe's own requests are not the page's (it fetches the stylesheets it reads, one of
    # them at a wrong address, a 404): the later tests check the page's problems only
    del problems[before:]
    ours = [f for f in found if f["id"] not in THEME_AXE_FINDINGS]
    assert not ours, ours


@pytest.mark.parametrize("page_path", CHAPTER_PAGES)
def test_chapter_page(opened, page_path):
    """Last of the desktop tests: it opens the solutions and hints."""
    page, problems = opened(page_path)
    assert page.locator(".math mjx-container").count() > 10
    figures = page.locator("figure")
    assert figures.count() >= 3
    for i in range(figures.count()):
        caption = figures.nth(i).locator("figcaption")
        assert caption.count() == 1 and re.match(r"Figure \d+\.\d+", caption.inner_text().strip()), \
            "a figure numbered per chapter (as in the notebooks), with a caption"
        assert figures.nth(i).locator("img").count() >= 1
    if page_path not in LESSON_PAGES:   # a replication page: no exercises, no hints
        assert page.locator("div.solution.dropdown").count() == 0
        assert not problems, problems
        return
    # solutions are hidden until opened
    solutions = page.locator("div.solution.dropdown")
    assert solutions.count() >= 4
    for i in range(solutions.count()):
        sol = solutions.nth(i)
        body = sol.locator("div.cell").first
        assert not body.is_visible(), "a solution is visible before it is opened"
        sol.locator("button.toggle-button").first.click()
        body.wait_for(state="visible", timeout=5000)
        assert "passed" in sol.inner_text()
    # hints are in their own dropdowns
    hints = page.locator("details.sd-dropdown")
    assert hints.count() >= 1
    hints.first.locator("summary").click()
    assert hints.first.get_attribute("open") is not None
    # notebook links: Colab, and downloads that exist on the site
    links = page.locator("a.lncourse-link")
    hrefs = [links.nth(i).get_attribute("href") for i in range(links.count())]
    assert any(h.startswith("https://colab.research.google.com/github/") for h in hrefs)
    for h in hrefs:
        if not h.startswith("http"):
            response = page.request.get(f"{page.url.rsplit('/', 1)[0]}/{h}")
            assert response.ok and b'"cells"' in response.body(), h
    assert not problems, problems
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / (Path(page_path).stem + ".png")), full_page=True)
