"""Sphinx extension: the PDF numbers chapters, figures and sections as the site does.

LaTeX numbers every ``\\chapter``. The front page's five sections ("What the course
teaches", ...) became chapters 1 to 5 of the PDF, so the course's chapter 1 was the PDF's
chapter 6 and its first figure "Figure 6.1", where the site and the notebook say
"Figure 1.1" (issue 19). Only the documents of the numbered part of ``_toc.yml`` (those
with section numbers on the site) are numbered in the PDF; the front page and the
reference pages (teaching, bibliography, errata) are unnumbered chapters, which LaTeX does
not count.
"""

from __future__ import annotations

from docutils import nodes

from sphinx import addnodes

NUMBERED = "\\setcounter{secnumdepth}{0}\n"   # chapters only, as the site (_toc.yml: numbered: 1)
UNNUMBERED = "\\setcounter{secnumdepth}{-1}\n"


def numbered(env, docname: str) -> bool:
    """Whether the site numbers ``docname`` (a chapter of the numbered toctree)."""
    return bool(env.toc_secnumbers.get(docname))


def _latex_numbering(app, doctree, docname) -> None:
    if app.builder.format != "latex":
        return
    root = UNNUMBERED if not numbered(app.env, docname) else NUMBERED
    doctree.insert(0, nodes.raw("", root, format="latex"))
    for start in doctree.findall(addnodes.start_of_file):
        counter = NUMBERED if numbered(app.env, start["docname"]) else UNNUMBERED
        start.insert(0, nodes.raw("", counter, format="latex"))


def setup(app):
    app.connect("doctree-resolved", _latex_numbering)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "0.1"}
