"""Tests for lncourse.results: stored results carry their provenance, load with clear errors."""

from __future__ import annotations

import json

import pytest
import torch

from lncourse import results as R


def test_provenance_names_command_commit_device_and_versions():
    p = R.provenance("cpu", 12.34, command="python -m x --y")
    assert p["command"] == "python -m x --y" and p["wall_seconds"] == 12.3
    assert p["torch"] == torch.__version__ and p["device"].startswith("cpu: ")
    assert p["device"].endswith(f"{torch.get_num_threads()} threads")
    assert len(p["git_commit"].split("+")[0]) == 40


def test_write_and_load_round_trip(tmp_path):
    with pytest.raises(ValueError, match=r"needs \['provenance'\]"):
        R.write_result(tmp_path / "a.json", {"config": {}})
    payload = {"config": {"steps": 10}, "step": [0, 10],
               "provenance": R.provenance("cpu", 3600.0, command="c")}
    path = R.write_result(tmp_path / "sub" / "a.json", payload)
    assert R.load_result(path) == json.loads(path.read_text())
    assert "1.0 h" in R.describe(payload) and "INCOMPLETE" not in R.describe(payload)
    payload["step"] = [0, 5]
    assert "INCOMPLETE: the first 5 of 10 steps" in R.describe(payload)


def test_load_result_explains_what_is_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match="results/README.md lists the command"):
        R.load_result(tmp_path / "nothing.json")
    (tmp_path / "bare.json").write_text(json.dumps({"config": {}}))
    with pytest.raises(ValueError, match="has no provenance record"):
        R.load_result(tmp_path / "bare.json")


def test_load_arrays_reads_the_file_a_result_names_beside_it(tmp_path, monkeypatch):
    import numpy as np

    monkeypatch.setattr(R, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(R.published, "fetch", lambda *a, **k: None)
    (tmp_path / "ch").mkdir()
    np.savez(tmp_path / "ch" / "run_arrays.npz", a=np.arange(3), b=np.eye(2))
    R.write_result(tmp_path / "ch" / "run.json", {
        "arrays": "run_arrays.npz", "n": 1, "config": {}, "provenance": R.provenance("cpu", 1.0, command="c")})
    got = R.load_arrays("ch/run", "arrays")
    assert sorted(got) == ["a", "b"] and got["b"].tolist() == [[1, 0], [0, 1]]
    with pytest.raises(KeyError, match="names no file of arrays under 'n'"):
        R.load_arrays("ch/run", "n")
    (tmp_path / "ch" / "run_arrays.npz").unlink()
    with pytest.raises(FileNotFoundError, match="names run_arrays.npz, which is not in"):
        R.load_arrays("ch/run", "arrays")


def test_load_arrays_gives_the_stored_probe_answers_chapter_4_shows():
    """The lesson reads them through the core; the evidence's own reader agrees."""
    import numpy as np
    from lncourse.evidence.nope.stream_read import load_predictions

    core = R.load_arrays("nope/stream_paper_lesson", "predictions")
    evidence = load_predictions(R.load_result("nope/stream_paper_lesson"))
    assert sorted(core) == sorted(evidence) and core
    assert all(np.array_equal(core[k], evidence[k]) for k in core)


@pytest.fixture
def clean_tree(monkeypatch):
    """A checkout whose tracked files match its commit (the tests may run in a dirty one)."""
    monkeypatch.setattr(R, "git_commit", lambda: "c" * 40)


def test_run_started_keeps_the_first_command_and_adds_resumes(tmp_path, clean_tree):
    ckpt = tmp_path / "run.ckpt"
    first = R.run_started(ckpt, "cmd --a")
    assert first["command"] == "cmd --a" and "resumed_at_commits" not in first
    ckpt.write_bytes(b"x")                        # a checkpoint now exists: a resume
    again = R.run_started(ckpt, "cmd --a")
    assert again["git_commit"] == first["git_commit"] and len(again["resumed_at_commits"]) == 1
    with pytest.raises(ValueError, match="was started by `cmd --a`"):
        R.run_started(ckpt, "cmd --b")


def test_a_run_may_resume_on_other_hardware_but_not_as_another_run(tmp_path, clean_tree):
    ckpt = tmp_path / "run.ckpt"
    R.run_started(ckpt, "python -m x --preset paper --device cpu --quiet")
    ckpt.write_bytes(b"x")
    again = R.run_started(ckpt, "python -m x --preset paper --device cuda")
    assert again["command"] == "python -m x --preset paper --device cpu --quiet"
    assert again["resumed_with"] == ["python -m x --preset paper --device cuda"]
    with pytest.raises(ValueError, match="was started by"):
        R.run_started(ckpt, "python -m x --preset grid_b500 --device cpu --quiet")
    with pytest.raises(ValueError, match="was started by"):
        R.run_started(ckpt, "python -m x --preset paper --steps 10 --device cpu")


def test_run_command_line_and_store(tmp_path, capsys, clean_tree):
    from lncourse.results import command_line, run_arguments, store_run
    parser = run_arguments("lncourse.example", "an example", {"paper": None, "quick": None})
    args = parser.parse_args(["--preset", "quick", "--quiet"])
    assert (args.preset, args.device, args.quiet) == ("quick", "cpu", True)
    with pytest.raises(SystemExit):
        parser.parse_args(["--preset", "huge"])
    assert command_line("lncourse.example", ["--preset", "quick"]) == \
        "python -m lncourse.example --preset quick"
    started = {"command": "python -m lncourse.example --preset quick", "git_commit": "abc"}
    path = store_run(tmp_path / "r.json", {"config": {}}, "cpu", 12.34, started,
                     device_note="partial export; threads not recorded")
    stored = json.loads(path.read_text())["provenance"]
    assert stored["command"] == started["command"] and stored["git_commit"] == "abc"
    assert stored["wall_seconds"] == 12.3
    assert stored["device"].endswith("(partial export; threads not recorded)")
    assert stored["device"].count("threads") == 1     # the note, not the thread count
    assert f"wrote {path} (12 s on " in capsys.readouterr().out


def test_a_modified_checkout_neither_starts_nor_stores_a_run(tmp_path, monkeypatch):
    """A result from uncommitted code is refused unless --allow-dirty says so."""
    ckpt, out = tmp_path / "run.ckpt", tmp_path / "r.json"
    monkeypatch.setattr(R, "git_commit", lambda: "d" * 40 + "+dirty")
    with pytest.raises(R.DirtyTreeError, match="--allow-dirty"):
        R.run_started(ckpt, "python -m x --preset paper")
    started = R.run_started(ckpt, "python -m x --preset paper --allow-dirty")
    assert started["git_commit"].endswith("+dirty")
    R.store_run(out, {"config": {}}, "cpu", 1.0, started)     # its command allows it
    with pytest.raises(R.DirtyTreeError):
        R.store_run(out, {"config": {}}, "cpu", 1.0, {"command": "c", "git_commit": "e" * 40})
    R.store_run(out, {"config": {}}, "cpu", 1.0, {"command": "c", "git_commit": "e" * 40},
                allow_dirty=True)                            # an export's own flag
    assert json.loads(out.read_text())["provenance"]["git_commit"] == "e" * 40
    # a run started clean but resumed from a modified checkout is refused too
    monkeypatch.setattr(R, "git_commit", lambda: "c" * 40)
    with pytest.raises(R.DirtyTreeError):
        R.store_run(out, {"config": {}}, "cpu", 1.0, {"command": "c", "git_commit": "c" * 40,
                                                     "resumed_at_commits": ["f+dirty"]})
    # --allow-dirty changes how a run is recorded, not what runs: a resume may add it
    assert R._what_runs("python -m x --preset paper --allow-dirty") == \
        R._what_runs("python -m x --preset paper")


def test_a_run_started_before_the_move_resumes_under_the_new_name(tmp_path):
    """Issue 20 moved the modules; a checkpoint started as `python -m lncourse.majority_train`
    (or, before issue 59 took the command out of the trainer, `lncourse.majority.train`)
    resumes as `python -m lncourse.evidence.majority.runs`, and as nothing else."""
    ckpt = tmp_path / "run.ckpt"
    old = "python -m lncourse.majority_train --preset paper --quiet --allow-dirty"
    R.run_started(ckpt, old)
    ckpt.write_bytes(b"x")
    again = R.run_started(ckpt, "python -m lncourse.evidence.majority.runs --preset paper "
                                "--allow-dirty")
    assert again["command"] == old
    assert R.today_command("python -m lncourse.majority.train --preset paper") == \
        "python -m lncourse.evidence.majority.runs --preset paper"
    with pytest.raises(ValueError, match="was started by"):
        R.run_started(ckpt, "python -m lncourse.selectability.lm --preset paper --allow-dirty")
    assert R.today_command("python -m lncourse.nope_probe --preset paper") == \
        "python -m lncourse.evidence.nope.probe --preset paper"
    # moved twice (issue 20, then issue 59's merge of chapter 4's stream modules)
    assert R.today_command("python -m lncourse.nope_stream --preset paper") == \
        R.today_command("python -m lncourse.evidence.nope.stream --preset paper") == \
        "python -m lncourse.evidence.nope.stream_run --preset paper"
    # only the module run is renamed: an argument that spells an old name stays
    assert R.today_command("python -m lncourse.nope_probe --out lncourse.nope_probe") == \
        "python -m lncourse.evidence.nope.probe --out lncourse.nope_probe"
    assert all(new.startswith("lncourse.") and R.RENAMED.get(new) is None
               for new in R.RENAMED.values())           # every new name is final


def _commands(node):
    """Every command line a stored provenance records: the command that made the result
    and each it resumed with."""
    if isinstance(node, dict):
        if isinstance(node.get("command"), str) and "git_commit" in node:
            yield node["command"]
            yield from node.get("resumed_with", [])
        for value in node.values():
            yield from _commands(value)
    elif isinstance(node, list):
        for value in node:
            yield from _commands(value)


def _runs_today(command: str) -> str | None:
    """Why ``command`` would not run today, after :func:`lncourse.results.today_command`:
    no such module, one without a ``main`` run as ``__main__``, or no such script; None
    when it runs."""
    import importlib.util

    words = R.today_command(command).split()
    if "-m" not in words:                       # a script under benchmarks/ or scripts/
        script = next((w for w in words if w.endswith(".py")), None)
        exists = script is not None and (R.RESULTS_DIR.parent / script).is_file()
        return None if exists else f"no script {script}"
    module = words[words.index("-m") + 1]
    try:
        spec = importlib.util.find_spec(module)
    except ModuleNotFoundError:
        spec = None
    if spec is None or spec.origin is None:
        return f"no module {module}"
    source = open(spec.origin, encoding="utf-8").read()
    if "def main(" not in source or '__name__ == "__main__"' not in source:
        return f"{module} has no main run as __main__"
    return _parses_today(module, words[words.index("-m") + 2:])


class _Parsed(Exception):
    pass


def _parses_today(module: str, argv: list[str]) -> str | None:
    """Why ``module``'s main would refuse ``argv`` today (its argparse error), or None.
    main runs only until its arguments are parsed: parsing raises _Parsed."""
    import argparse
    import contextlib
    import importlib
    import io

    parser = argparse.ArgumentParser
    parse, parse_known = parser.parse_args, parser.parse_known_args

    def parse_then_stop(self, args=None, namespace=None):
        self._whole = True                   # parse_args refuses what none knows
        try:
            parse(self, args, namespace)     # exits with argparse's error
        finally:
            self._whole = False
        raise _Parsed

    def parse_known_then_stop(self, args=None, namespace=None):
        known = parse_known(self, args, namespace)
        if getattr(self, "_whole", False):
            return known
        raise _Parsed

    err = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stderr(err):
        mp.setattr(parser, "parse_args", parse_then_stop)
        mp.setattr(parser, "parse_known_args", parse_known_then_stop)
        try:
            importlib.import_module(module).main(argv)
        except _Parsed:
            return None
        except SystemExit:
            lines = err.getvalue().strip().splitlines()
            return f"{module} refuses {argv}: {lines[-1] if lines else 'exit'}"
    return f"{module}.main ran without parsing its arguments with argparse"


def test_every_stored_command_runs_today():
    """Each command a stored result (or a checkpoint's start record) says made it names,
    through RENAMED, a module that exists today and has a main: a module moved without
    its entry in the table (issue 59: majority.report became majority.ledger) fails."""
    stored = sorted(R.RESULTS_DIR.rglob("*.json"))
    found = [(str(p.relative_to(R.RESULTS_DIR)), c) for p in stored
             for c in _commands(json.loads(p.read_text()))]
    assert len({w for w, _ in found}) > 40, "too few stored provenances read"
    why_not = {c: _runs_today(c) for c in sorted({c for _, c in found})}
    broken = sorted({(where, command, why_not[command]) for where, command in found
                     if why_not[command]})
    assert not broken, "\n".join(f"{w}: `{c}`: {why}" for w, c, why in broken)


def test_a_stored_command_that_would_not_parse_is_found():
    """The check reads the arguments too: an old command of the three merged into
    stream_read.main parses there, and an option the module does not know fails."""
    assert _runs_today("python -m lncourse.nope.stream_import /tmp/device_run") is None
    why = _runs_today("python -m lncourse.evidence.majority.runs --preset paper --bogus 3")
    assert why and "refuses" in why and "--bogus" in why, why
    assert _runs_today("python -m lncourse.evidence.majority.runs --preset paper") is None


def test_every_renamed_module_exists_today():
    """Every new name in RENAMED is a module today, so a checkpoint in flight under an
    old name resumes, whether or not a stored result records that name yet."""
    import importlib.util

    missing = sorted(new for new in set(R.RENAMED.values())
                     if importlib.util.find_spec(new) is None)
    assert not missing, missing
