"""The same seed prints the same numbers: nbval re-executes every chapter the site built and
compares, cell by cell, the outputs of the cells the chapter tags ``deterministic``.

The reference outputs are the site build's own, as nbclient recorded them in the build's
execution cache (``_build/.jupyter_cache``; the copies in ``_build/jupyter_execute`` have
their streams half-merged by MyST-NB); nbval runs the notebook again in a fresh kernel, in
fast mode as the site did, and fails on any difference in those cells' text. Cells that print
timings, or numbers that depend on the machine, are simply not tagged.
"""

import os
import re
import subprocess
import sys

import nbformat
import pytest

from conftest import ROOT
from myst import chapter_sources

SITE_CACHE = ROOT / "_build" / ".jupyter_cache"
CHAPTERS = chapter_sources()


def site_notebook(source) -> nbformat.NotebookNode:
    """The notebook the site build executed for ``source``, from its execution cache."""
    from jupyter_cache import get_cache

    assert SITE_CACHE.exists(), "build the site first: bash scripts/build_site.sh"
    cache = get_cache(str(SITE_CACHE))
    records = sorted((r for r in cache.list_cache_records() if r.uri == str(source)),
                     key=lambda r: r.created)
    assert records, f"the site build has not executed {source.name}"
    return cache.get_cache_bundle(records[-1].pk).nb


def coalesced(outputs: list) -> list:
    """Consecutive stream outputs of one stream joined into one, as nbval joins the
    outputs of its own run (how a cell's prints were split into messages is timing)."""
    out = []
    for o in outputs:
        if (o.get("output_type") == "stream" and out and out[-1].get("output_type") == "stream"
                and out[-1].get("name") == o.get("name")):
            out[-1]["text"] = out[-1]["text"] + o["text"]
        else:
            out.append(o)
    return out


def tagged(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The notebook with nbval's check marker on (only) its ``deterministic`` cells."""
    for cell in nb.cells:
        tags = cell.get("metadata", {}).get("tags", [])
        if "deterministic" in tags:
            cell.metadata["tags"] = [*tags, "nbval-check-output"]
            cell.outputs = coalesced(cell.get("outputs", []))
    return nb


def test_every_chapter_marks_deterministic_cells():
    import jupytext

    for source in CHAPTERS:
        nb = jupytext.read(source)
        marked = [c for c in nb.cells if "deterministic" in c.metadata.get("tags", [])]
        # a replication page's numbers are guarded by its chapter's ledger; it needs one
        need = 1 if source.stem.endswith("_replication") else 3
        assert len(marked) >= need, f"{source.name} tags only {len(marked)} cells deterministic"


def run_nbval(path, rootdir, *options: str) -> subprocess.CompletedProcess:
    """nbval in lax mode (only tagged cells compared) on one notebook, in its folder,
    stopping at the first failure unless ``options`` say otherwise."""
    env = {**os.environ, "LNCOURSE_NO_WIDGETS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "--nbval-lax", "--nbval-kernel-name", "python3",
         "--nbval-cell-timeout", "300", "-p", "no:cacheprovider", "-q",
         *(options or ("-x",)), "--rootdir", str(rootdir), "-c", os.devnull, str(path)],
        cwd=path.parent, env=env, capture_output=True, text=True, timeout=900)


def test_a_deterministic_cell_that_prints_other_numbers_fails(tmp_path):
    """The comparison bites: a tagged cell whose stored output differs fails, and the same
    cell untagged is not compared. One notebook, one nbval run (its start-up and kernel,
    seconds each, paid once): cell 0 is tagged and stores what it prints, cell 1 is tagged
    and stores one digit off, cell 2 is cell 1 untagged."""
    source = "import random\nrandom.seed(0)\nprint(random.random())"
    import random

    random.seed(0)
    printed = f"{random.random()}\n"                   # what the kernel will print
    off = printed[:4] + str((int(printed[4]) + 1) % 10) + printed[5:]      # one digit off
    cells = []
    for k, (tags, text) in enumerate([(["deterministic"], printed), (["deterministic"], off),
                                      ([], off)]):
        cell = nbformat.v4.new_code_cell(source, metadata={"tags": tags})
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
        cell.execution_count = k + 1            # nbval ignores the outputs of unrun cells
        cells.append(cell)
    path = tmp_path / "cells.ipynb"
    nbformat.write(tagged(nbformat.v4.new_notebook(cells=cells)), path)
    run = run_nbval(path, tmp_path, "-rA")
    outcomes = {cell: outcome for outcome, cell in
                re.findall(r"^(PASSED|FAILED) \S*cells\.ipynb::Cell (\d+)", run.stdout, re.M)}
    assert outcomes == {"0": "PASSED", "1": "FAILED", "2": "PASSED"}, run.stdout[-3000:]
    assert run.returncode != 0


# The chapters whose re-execution is left to `pytest -m slow`: the three longest (66, 105
# and 60 s in a fresh clone's build, 2026-11-24; nbval of chapter 4 took 73 s), which the
# test command's 10-minute budget does not hold beside the site's and the grader's tests.
# Their trainers and stored results are still replayed by the unit tests, and the site
# build executes them.
SLOW = {"02_unselectable_keys", "03_majority", "04_nope",
        "02_unselectable_keys_replication",   # it trains the build's pair again
        "04_nope_replication",   # it trains the build's probes
        "03_majority_replication",   # it trains the 2 x 2 design again (about 8 min)
        "05_norms_replication"}   # its trained heads, logit and Peri-LN runs (4-8 min)


@pytest.mark.notebooks
@pytest.mark.parametrize("source", [pytest.param(s, marks=pytest.mark.slow) if s.stem in SLOW
                                    else s for s in CHAPTERS], ids=lambda p: p.stem)
def test_deterministic_cells_print_the_same_numbers_again(source, tmp_path):
    nb = tagged(site_notebook(source))
    # nbval starts the kernel in the notebook's folder: put it where the chapter ran
    path = ROOT / "book" / f"_nbval_{source.stem}.ipynb"
    nbformat.write(nb, path)
    try:
        run = run_nbval(path, tmp_path)
    finally:
        path.unlink(missing_ok=True)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
