"""The same seed prints the same numbers: nbval re-executes every chapter the site built and
compares, cell by cell, the outputs of the cells the chapter tags ``deterministic``.

The reference outputs are the site build's own (MyST-NB keeps each executed notebook in
``_build/jupyter_execute``); nbval runs the notebook again in a fresh kernel, in fast mode
as the site did, and fails on any difference in those cells' text. Cells that print
timings, or numbers that depend on the machine, are simply not tagged.
"""

import os
import subprocess
import sys

import nbformat
import pytest

from conftest import ROOT

SITE_EXECUTED = ROOT / "_build" / "jupyter_execute" / "book"
CHAPTERS = sorted((ROOT / "book").glob("[0-9][0-9]_*.md"))


def tagged(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The notebook with nbval's check marker on (only) its ``deterministic`` cells."""
    for cell in nb.cells:
        tags = cell.get("metadata", {}).get("tags", [])
        if "deterministic" in tags:
            cell.metadata["tags"] = [*tags, "nbval-check-output"]
    return nb


def test_every_chapter_marks_deterministic_cells():
    import jupytext

    for source in CHAPTERS:
        nb = jupytext.read(source)
        marked = [c for c in nb.cells if "deterministic" in c.metadata.get("tags", [])]
        assert len(marked) >= 3, f"{source.name} tags only {len(marked)} cells deterministic"


@pytest.mark.notebooks
@pytest.mark.parametrize("source", CHAPTERS, ids=lambda p: p.stem)
def test_deterministic_cells_print_the_same_numbers_again(source, tmp_path):
    executed = SITE_EXECUTED / f"{source.stem}.ipynb"
    assert executed.exists(), "build the site first: bash scripts/build_site.sh"
    nb = tagged(nbformat.read(executed, as_version=4))
    # nbval starts the kernel in the notebook's folder: put it where the chapter ran
    path = ROOT / "book" / f"_nbval_{source.stem}.ipynb"
    nbformat.write(nb, path)
    try:
        env = {**os.environ, "LNCOURSE_NO_WIDGETS": "1"}
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "--nbval-lax", "--nbval-kernel-name", "python3",
             "--nbval-cell-timeout", "300", "-p", "no:cacheprovider", "-q", "-x",
             "--rootdir", str(tmp_path), "-c", os.devnull, str(path)],
            cwd=ROOT / "book", env=env, capture_output=True, text=True, timeout=900)
    finally:
        path.unlink(missing_ok=True)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
