"""Open every page of the built site in headless Chromium, as a reader would."""

import functools
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
    if page.locator(".math").count():  # Sphinx loads MathJax only on pages with math
        page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise",
                               timeout=20000)
        page.evaluate("() => MathJax.startup.promise")
    return page, problems


def test_site_has_all_pages():
    assert (SITE / "index.html").exists()
    names = {Path(p).stem for p in PAGES}
    assert {"intro", "teaching", "bibliography"} <= names
    assert len(CHAPTER_PAGES) >= 1


@pytest.mark.parametrize("page_path", PAGES)
def test_page_renders_cleanly(browser, server, page_path):
    page, problems = _open(browser, server, page_path)
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
    page.close()


@pytest.mark.parametrize("page_path", CHAPTER_PAGES)
def test_chapter_page(browser, server, page_path):
    page, problems = _open(browser, server, page_path)
    assert page.locator(".math mjx-container").count() > 10
    figures = page.locator("figure")
    assert figures.count() >= 3
    for i in range(figures.count()):
        caption = figures.nth(i).locator("figcaption")
        assert caption.count() == 1 and caption.inner_text().strip().startswith("Fig"), \
            "numbered figure with a caption"
        assert figures.nth(i).locator("img").count() >= 1
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
    page.close()
