"""Sphinx extension: an "Open in Colab" and "download" bar under each chapter's title.

Chapters are the documents named ``book/NN_topic``. The links point to the notebooks
that ``scripts/editions.py`` generates and ``scripts/build_site.sh`` copies into
the site under ``notebooks/``; the Colab link opens the published copy on the
``lncourse_notebook_branch`` branch of the repository (see README, "Publishing").
"""

from __future__ import annotations

import os
import re

from docutils import nodes

CHAPTER = re.compile(r"(^|/)(\d\d_[\w-]+)$")


def _no_solutions(app) -> bool:
    """LNCOURSE_NO_SOLUTIONS=1 bash scripts/build_site.sh: a site without solutions."""
    return os.environ.get("LNCOURSE_NO_SOLUTIONS", "") not in ("", "0")


def _drop_solutions(app, doctree) -> None:
    # after sphinx-exercise has merged each solution-start ... solution-end into one node
    from sphinx_exercise.nodes import solution_node

    for node in list(doctree.findall(solution_node)):
        node.parent.remove(node)


def _links(app, doctree) -> None:
    if _no_solutions(app):
        _drop_solutions(app, doctree)
    docname = app.env.docname
    match = CHAPTER.search(docname)
    if not match:
        return
    stem = match.group(2)
    repo = app.config.html_theme_options.get("repository_url", "").rstrip("/")
    owner_repo = repo.split("github.com/")[-1]
    branch = app.config.lncourse_notebook_branch
    up = "../" * docname.count("/")
    colab = (f"https://colab.research.google.com/github/{owner_repo}/blob/{branch}/"
             f"notebooks/student/{stem}.ipynb")
    para = nodes.paragraph(classes=["lncourse-notebook-links"])
    for text, uri in [("Open in Colab", colab),
                      ("Download the student notebook", f"{up}notebooks/student/{stem}.ipynb"),
                      ("Download the solution notebook", f"{up}notebooks/solution/{stem}.ipynb")
                      ][:2 if _no_solutions(app) else 3]:
        ref = nodes.reference("", text, refuri=uri, classes=["lncourse-link"])
        para += ref
        para += nodes.Text(" ")
    container = nodes.container(classes=["lncourse-notebook-bar"])
    container += para
    section = next(iter(doctree.findall(nodes.section)), None)
    if section is None:
        doctree.insert(0, container)
        return
    title = next(iter(section.findall(nodes.title)), None)
    section.insert(section.index(title) + 1 if title is not None else 0, container)


def _tidy_assets(app, pagename, templatename, context, doctree) -> None:
    # Jupyter Book 1 always loads sphinx-thebe, and declares its inline configuration
    # twice (a JavaScript error in every browser). The course has no live code cells on
    # the site, so thebe's scripts and styles are dropped altogether. Widget state is
    # dropped too: interactive cells are removed from the pages (tag remove-cell), and
    # their state would only add dead weight.
    def keep(asset) -> bool:
        attributes = getattr(asset, "attributes", {}) or {}
        text = f"{getattr(asset, 'filename', '') or ''} {attributes.get('body', '')} {asset}"
        return ("thebe" not in text.lower()
                and attributes.get("type") != "application/vnd.jupyter.widget-state+json")

    for key in ("script_files", "css_files"):
        if key in context:
            context[key] = [a for a in context[key] if keep(a)]


# MathJax files a page of this book can load: the TeX-to-CommonHTML combined component,
# the TeX extensions it autoloads, its fonts, and the accessibility tools of its menu.
MATHJAX_KEEP = ("tex-chtml.js", "input/tex/extensions", "output/chtml/fonts", "a11y", "sre",
                "ui")
FONTAWESOME_JS = re.compile(r'<script[^>]*src="[^"]*scripts/fontawesome\.js[^"]*"[^>]*>\s*</script>\s*')


def _trim_site(app, exception) -> None:
    """Page weight and accessibility (issue 19): drop the theme's 1.5 MB fontawesome.js (the same icons come
    from the theme's CSS web fonts, which every page loads anyway), the source maps, and
    every MathJax file outside MATHJAX_KEEP (24 MB of the 34 MB deployed were unused)."""
    import shutil
    from pathlib import Path

    if exception is not None or app.builder.format != "html":
        return
    out = Path(app.outdir)
    for page in out.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        # docutils marks bibliography entries role="doc-biblioentry", deprecated in ARIA and
        # not allowed in its role="list" (axe-core: 27 findings on the bibliography page)
        trimmed = FONTAWESOME_JS.sub("", text).replace('role="doc-biblioentry"', 'role="listitem"')
        if trimmed != text:
            page.write_text(trimmed, encoding="utf-8")
    for path in [*(out / "_static").rglob("*.js.map"), out / "_static" / "scripts" / "fontawesome.js"]:
        path.unlink(missing_ok=True)
    mathjax = out / "_static" / "mathjax"
    if not (mathjax / "tex-chtml.js").exists():
        return
    keep = [mathjax / k for k in MATHJAX_KEEP]
    for path in sorted(mathjax.rglob("*"), reverse=True):
        inside = any(path == k or k in path.parents for k in keep)
        above = any(path in k.parents for k in keep)
        if not inside and not above:
            shutil.rmtree(path) if path.is_dir() else path.unlink()


def setup(app):
    app.connect("html-page-context", _tidy_assets)
    app.connect("build-finished", _trim_site)
    app.add_config_value("lncourse_notebook_branch", "gh-pages", "html")
    app.connect("doctree-read", _links)
    app.add_css_file("lncourse.css")
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "0.1"}
