"""Sphinx extension: the course's key picture (Figure 1.1) on the front page.

The front page is plain MyST, with no cells to execute, so the figure is drawn here when
the build starts, by the same code as chapter 1's Figure 1.1
(``lncourse.geometry.figures.ln_pipeline_demo``), and written to
``book/_generated/ln-pipeline.png`` (ignored by git), which ``book/intro.md`` shows.
"""

from __future__ import annotations

from pathlib import Path

TARGET = Path("book") / "_generated" / "ln-pipeline.png"


def _draw(app) -> None:
    from lncourse.geometry.figures import ln_pipeline_demo
    from lncourse.plotting.style import figure_png

    data, _ = figure_png(ln_pipeline_demo())
    path = Path(app.srcdir) / TARGET
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_bytes() != data:   # unchanged: no rebuild of the page
        path.write_bytes(data)


def setup(app):
    app.connect("builder-inited", _draw)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
