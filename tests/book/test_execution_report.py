"""The stall check of scripts/execution_report.py: a missed reply is caught and named."""

import datetime

import nbformat

from execution_report import cell_timings, main, problems   # scripts/ (see conftest.py)

T0 = datetime.datetime(2026, 11, 23, 12, 0, 0, tzinfo=datetime.timezone.utc)


def _stamp(seconds: float) -> str:
    return (T0 + datetime.timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def _notebook(spans: list[tuple[float, float]]) -> nbformat.NotebookNode:
    """Code cells whose kernel started and replied at the given seconds, a markdown cell
    between the first two."""
    nb = nbformat.v4.new_notebook()
    for i, (start, reply) in enumerate(spans):
        cell = nbformat.v4.new_code_cell(f"x = {i}")
        cell.metadata["execution"] = {"iopub.execute_input": _stamp(start),
                                      "shell.execute_reply": _stamp(reply)}
        nb.cells.append(cell)
        if i == 0:
            nb.cells.append(nbformat.v4.new_markdown_cell("text"))
    return nb


def test_kernel_times_and_waits_between_cells():
    timings = cell_timings(_notebook([(0.0, 2.0), (2.01, 5.0), (5.02, 5.5)]))
    assert [t.index for t in timings] == [0, 2, 3]            # the markdown cell is skipped
    assert [round(t.kernel_seconds, 2) for t in timings] == [2.0, 2.99, 0.48]
    assert [round(t.wait_before, 2) for t in timings] == [0.0, 0.01, 0.02]


def test_a_reply_seen_late_is_named_with_its_notebook_and_cell():
    # the kernel replied to cell 2 at 5 s; the client only sent cell 3 at 65 s (a stall
    # at a 60 s timeout, as measured in issue 11)
    nb = _notebook([(0.0, 2.0), (2.01, 5.0), (65.0, 65.5)])
    found = problems("01_layernorm_geometry.ipynb", cell_timings(nb), max_wait=20.0,
                     max_notebook=300.0)
    assert len(found) == 1
    assert "01_layernorm_geometry.ipynb: cell 3 (`x = 2`)" in found[0] and "stall" in found[0]


def test_a_notebook_over_its_time_budget_is_named_with_its_slowest_cell():
    nb = _notebook([(0.0, 10.0), (10.0, 400.0)])
    found = problems("03_majority.ipynb", cell_timings(nb), max_wait=20.0, max_notebook=300.0)
    assert found == ["03_majority.ipynb: kernel time 400 s exceeds 300 s (slowest: cell 2, "
                     "`x = 1`, 390 s)"]


def test_command_line_exit_status(tmp_path, capsys):
    good, stalled = tmp_path / "good.ipynb", tmp_path / "stalled.ipynb"
    nbformat.write(_notebook([(0.0, 1.0), (1.0, 2.0)]), good)
    nbformat.write(_notebook([(0.0, 1.0), (61.0, 62.0)]), stalled)
    assert main([str(good)]) == 0
    assert main([str(good), str(stalled)]) == 1
    assert "FAIL" in capsys.readouterr().err


def test_a_slow_notebook_is_a_warning_in_the_site_build(tmp_path, capsys, monkeypatch):
    """Issue 19: a busy machine makes a chapter slow; with --warn-notebook (the site build)
    a notebook over its budget is a warning and the build goes on; a stall still fails."""
    import execution_report

    monkeypatch.setattr(execution_report, "cached_seconds",
                        lambda cache: {"02_unselectable_keys.ipynb": 416.0})
    assert main(["--cache", str(tmp_path), "--warn-notebook", "300"]) == 0
    err = capsys.readouterr().err
    assert "WARNING 02_unselectable_keys.ipynb: took 416 s" in err and "FAIL" not in err
    assert main(["--cache", str(tmp_path), "--max-notebook", "300"]) == 1   # as before
    stalled = tmp_path / "stalled.ipynb"
    nbformat.write(_notebook([(0.0, 1.0), (61.0, 62.0)]), stalled)
    assert main([str(stalled), "--warn-notebook", "300"]) == 1
