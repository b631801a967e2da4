"""The chapters' code fits the book's column, and no cell shows its glue bookkeeping.

Cheap (no kernel, no browser, no site): reads the chapter sources with jupytext.

* The site's column at 1280 px shows ``COLUMN_CHARS`` (77) characters of code; a longer
  line makes its code block scroll sideways (issue 19: 192 of 245 blocks did).
* ``glue(...)`` calls hand numbers to the prose and teach nothing. The site drops
  top-level glue calls (and loops of nothing else) from the shown code
  (``book/_ext/figure_text.py``), so a cell of only glue calls shows no input; a glue call
  anywhere else (inside a loop that also prints, in a function) would be shown, and a
  cell that teaches would also do bookkeeping. Such a cell is split in two.
"""

import sys

import jupytext
import pytest

from conftest import ROOT
from lncourse.results import COLUMN_CHARS
from myst import chapter_sources

sys.path.insert(0, str(ROOT / "book" / "_ext"))
from figure_text import without_glue  # noqa: E402

CHAPTERS = chapter_sources(ROOT)


def code_cells(source):
    nb = jupytext.read(source)
    return [c for c in nb.cells if c.cell_type == "code"]


def long_lines(source, width=COLUMN_CHARS):
    """(cell number, line) for every code line wider than ``width`` characters."""
    return [(i, line) for i, cell in enumerate(code_cells(source))
            for line in cell.source.splitlines() if len(line) > width]


def shown_glue(source):
    """The code cells whose page would still show a glue(...) call."""
    return [(i, cell.source.splitlines()[0]) for i, cell in enumerate(code_cells(source))
            if "glue(" in without_glue(cell.source)
            and not {"remove-input", "remove-cell"} & set(cell.metadata.get("tags", []))]


def test_there_are_chapters():
    assert len(CHAPTERS) >= 5


@pytest.mark.parametrize("source", CHAPTERS, ids=lambda p: p.stem)
def test_code_lines_fit_the_column(source):
    too_long = long_lines(source)
    assert not too_long, "\n".join(f"code cell {i}: {len(line)} > {COLUMN_CHARS}: {line}"
                                   for i, line in too_long)


@pytest.mark.parametrize("source", CHAPTERS, ids=lambda p: p.stem)
def test_glue_bookkeeping_is_never_shown(source):
    assert not shown_glue(source), shown_glue(source)


def _chapter_with(tmp_path, code):
    text = CHAPTERS[-1].read_text(encoding="utf-8")
    path = tmp_path / CHAPTERS[-1].name
    path.write_text(text + f"\n```{{code-cell}} ipython3\n{code}\n```\n", encoding="utf-8")
    return path


def test_a_long_line_fails(tmp_path):
    line = "x = " + "1 + " * 18 + "10"                   # 78 characters
    assert len(line) == COLUMN_CHARS + 1
    assert [line] == [code for _, code in long_lines(_chapter_with(tmp_path, line))]
    assert not long_lines(_chapter_with(tmp_path, line[:-1]))   # 77: fits


def test_a_cell_that_prints_and_glues_in_one_loop_fails(tmp_path):
    mixed = ('for k, v in {"a": 1}.items():\n    print(k, v)\n'
             '    glue(k, v, display=False)')
    assert len(shown_glue(_chapter_with(tmp_path, mixed))) == 1
    split = ('for k, v in {"a": 1}.items():\n    print(k, v)\n'
             'for k, v in {"a": 1}.items():\n    glue(k, v, display=False)')
    assert not shown_glue(_chapter_with(tmp_path, split))


# ------------------------------------------------------ printed text fits the column too
def test_a_wide_table_wraps_to_the_column_and_keeps_every_number():
    from lncourse.paper import format_table

    rows = [["no scaling before attention, resid_pre (8-D)", 28.1, 49.8, "0.291", "0.301"],
            ["Gaussian proxy (8-D)", 48.7, 1024.0, "0.252", "0.252"],
            ["interval", "53.6 [51.5, 56.1]", 1.0, "x", "y"]]
    header = ["at n = 1024", "% unselectable", "distinct tokens", "CV whitened", "CV raw"]
    wide = format_table(header, rows, width=1000)
    assert max(map(len, wide.splitlines())) > COLUMN_CHARS   # the old, one-line layout
    fitted = format_table(header, rows)
    assert max(map(len, fitted.splitlines())) <= COLUMN_CHARS, fitted
    for value in ("28.1", "49.8", "0.291", "0.301", "48.7", "1024.0", "53.6 [51.5, 56.1]"):
        assert value in fitted          # numbers and intervals are never split
    assert " ".join(fitted.split()).count("Gaussian") == 1
    narrow = [["a", 1.0], ["b", 2.0]]
    assert format_table(["x", "y"], narrow) == format_table(["x", "y"], narrow, width=1000)


def test_a_long_check_message_wraps(capsys):
    import torch

    from lncourse.checks._core import run_check

    def reference(x):
        return 2 * x

    run_check(reference, "a_rather_long_function_name_for_the_check", ["x"],
              [((torch.ones(3),), {})], reference=reference)
    out = capsys.readouterr().out
    assert "passed" in out and "largest difference" in out
    assert max(map(len, out.splitlines())) <= COLUMN_CHARS, out


def test_describe_wraps_to_a_width():
    from lncourse.results import describe, load_result

    stored = load_result("norms/real_paper")
    assert "\n" not in describe(stored)                 # ledgers and captions: one line
    wrapped = describe(stored, width=COLUMN_CHARS)
    assert max(map(len, wrapped.splitlines())) <= COLUMN_CHARS
    assert " ".join(wrapped.split()) == " ".join(describe(stored).split())
    # a stored command whose module moved since, named as it runs today, still wraps
    moved = load_result("majority/paper_snapshots")
    then = moved["provenance"]["command"]
    assert "lncourse.majority_train" in then and f"`{then}`" in describe(moved)
    now = describe(moved, width=COLUMN_CHARS, today=True)
    assert max(map(len, now.splitlines())) <= COLUMN_CHARS
    assert "`python -m lncourse.evidence.majority.runs --preset paper" in " ".join(now.split())
