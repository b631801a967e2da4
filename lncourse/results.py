"""Stored results: long runs written once, with their provenance, and shown by chapters.

Some evidence takes longer than a build (paper-scale training). A command writes it to
``results/<chapter>/<name>.json``: the measurements, the full configuration and a
``provenance`` record (the exact command, git commit, device, torch version, wall time).
Chapters load these files and label each figure with :func:`describe`. What the tests
guard, file by file, is listed in ``results/README.md`` ("What the tests guard").

A run refuses to start, and :func:`store_run` refuses to write, from a checkout whose
tracked files differ from its commit (``git_commit`` ending in ``+dirty``): such a
result could not be traced to code anyone can check out. ``--allow-dirty`` (added by
:func:`run_arguments`) overrides this, and the ``+dirty`` stays in the provenance.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import textwrap
from pathlib import Path

import torch

from lncourse import published

__all__ = ["DirtyTreeError", "RESULTS_DIR", "provenance", "run_started", "device_name", "write_result",
           "load_result", "load_arrays", "describe", "run_arguments", "command_line", "store_run",
           "RENAMED", "today_command", "encode_state", "decode_state"]



def _results_dir() -> Path:
    """Where stored results live: ``$LNCOURSE_RESULTS`` if set; else ``results/`` of the
    checkout this package runs from; else (the published wheel, which carries the code
    only) a cache, ``$LNCOURSE_CACHE/results/<commit>`` (default ``~/.cache/lncourse``),
    into which :func:`lncourse.published.fetch` downloads a folder of results the first
    time a chapter loads one from it (``lncourse_results``, older wheels' copy, is read)."""
    if os.environ.get("LNCOURSE_RESULTS"):
        return Path(os.environ["LNCOURSE_RESULTS"])
    checkout = Path(__file__).resolve().parent.parent / "results"
    if checkout.is_dir():
        return checkout
    if published.manifest():
        return published.cache_dir()
    try:
        import lncourse_results
    except ImportError:
        return checkout
    return Path(next(iter(lncourse_results.__path__)))


RESULTS_DIR = _results_dir()



def git_commit() -> str:
    """The checkout's commit, with ``+dirty`` if tracked files differ from it. Checkpoints
    (``results/checkpoints/``) do not count: a run committed there to be resumed keeps
    rewriting its own checkpoint, which changes no code and no stored result."""
    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                                text=True, check=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--",
                                ".", ":(exclude)results/checkpoints"],
                               cwd=root, capture_output=True, text=True, check=True,
                               timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown (not a git checkout)"
    return commit + ("+dirty" if dirty else "")


class DirtyTreeError(RuntimeError):
    """A stored run from modified code, refused without ``--allow-dirty``."""


ALLOW_DIRTY = "--allow-dirty"


def _refuse_dirty(commits: list[str], command: str, what: str) -> None:
    dirty = [c for c in commits if c.endswith("+dirty")]
    if dirty and ALLOW_DIRTY not in command.split():
        raise DirtyTreeError(
            f"refusing to {what} from a modified checkout ({dirty[0]}): commit your changes "
            f"first, so that the provenance names code anyone can check out, or pass "
            f"{ALLOW_DIRTY} (the '+dirty' is then kept in the provenance)")


def device_name(device: torch.device | str) -> str:
    """A readable name of the hardware behind ``device``."""
    device = torch.device(device)
    if device.type == "cuda":
        return f"cuda: {torch.cuda.get_device_name(device)}"
    if device.type == "cpu":
        model = platform.processor() or platform.machine()
        try:
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
        except OSError:
            pass
        return f"cpu: {model}, {torch.get_num_threads()} threads"
    return device.type


def provenance(device: torch.device | str, wall_seconds: float, command: str | None = None,
               **extra) -> dict:
    """Where a result came from: command, commit, device, versions, wall time, date."""
    command = command or " ".join([Path(sys.executable).name, *sys.argv])
    return {"command": command,
            "git_commit": git_commit(), "device": device_name(device),
            "torch": torch.__version__, "python": platform.python_version(),
            "wall_seconds": round(float(wall_seconds), 1),
            "written": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            **extra}


# Modules that moved: when the package took one folder per chapter (issue 20), and when
# the evidence went beneath the chapters (issue 59). A stored result's provenance keeps
# the command really run; today_command() says it today. Every name maps to today's
# (never to a name that moved again), so a move updates the older entries as well.
RENAMED = {
    "lncourse.exercises": "lncourse.grading.exercises",
    "lncourse.grade": "lncourse.grading.grade",
    "lncourse.grade_cli": "lncourse.grading.cli",
    "lncourse.grade_sheet": "lncourse.grading.sheet",
    "lncourse.layernorm_claims": "lncourse.evidence.geometry.claims",
    "lncourse.majority": "lncourse.majority.task",
    "lncourse.majority_bench": "lncourse.evidence.majority.bench",
    "lncourse.majority_claims": "lncourse.evidence.majority.claims",
    "lncourse.majority_config": "lncourse.majority.config",
    "lncourse.majority_report": "lncourse.evidence.majority.ledger",
    "lncourse.majority_single": "lncourse.majority.single",
    "lncourse.majority_snapshots": "lncourse.evidence.majority.snapshots",
    "lncourse.majority_stats": "lncourse.majority.stats",
    "lncourse.majority_train": "lncourse.evidence.majority.runs",
    "lncourse.majority_verdict": "lncourse.evidence.majority.claims",
    "lncourse.multiset": "lncourse.majority.multiset",
    "lncourse.multiset_fused": "lncourse.majority.multiset_fused",
    "lncourse.nope": "lncourse.nope.variance",
    "lncourse.nope_ablation": "lncourse.evidence.nope.ablation",
    "lncourse.nope_features": "lncourse.evidence.nope.features",
    "lncourse.nope_lemmas": "lncourse.nope.lemmas",
    "lncourse.nope_lm": "lncourse.nope.lm",
    "lncourse.nope_probe": "lncourse.evidence.nope.probe",
    "lncourse.nope_stream": "lncourse.evidence.nope.stream_run",
    "lncourse.nope_verdict": "lncourse.evidence.nope.claims",
    "lncourse.sandbox": "lncourse.grading.sandbox",
    "lncourse.sandbox_contain": "lncourse.grading.contain",
    "lncourse.sandbox_guard": "lncourse.guard",
    "lncourse.sandbox_landlock": "lncourse.grading.landlock",
    "lncourse.sandbox_learner": "lncourse.grading.learner",
    "lncourse.sandbox_wire": "lncourse.grading.wire",
    "lncourse.selectability": "lncourse.selectability.exact",
    "lncourse.selectability_experiments": "lncourse.selectability.experiments",
    "lncourse.selectability_fused": "lncourse.evidence.selectability.fused",
    "lncourse.selectability_kernel": "lncourse.evidence.selectability.kernel",
    "lncourse.selectability_lm": "lncourse.selectability.lm",
    "lncourse.selectability_report": "lncourse.evidence.selectability.measure",
    "lncourse.evidence.selectability.report": "lncourse.evidence.selectability.measure",
    "lncourse.selectability_seeds": "lncourse.evidence.selectability.seeds",
    "lncourse.selectability_seeds_measure": "lncourse.evidence.selectability.seeds_measure",
    "lncourse.selectability_train": "lncourse.evidence.selectability.train",
    "lncourse.submission": "lncourse.grading.submission",
    # the evidence beneath the chapters moved under lncourse.evidence (issue 59)
    "lncourse.claims": "lncourse.evidence.claims",
    "lncourse.geometry.claims": "lncourse.evidence.geometry.claims",
    "lncourse.selectability.claims": "lncourse.evidence.selectability.claims",
    "lncourse.selectability.ledger": "lncourse.evidence.selectability.ledger",
    "lncourse.selectability.report": "lncourse.evidence.selectability.measure",
    "lncourse.selectability.seeds": "lncourse.evidence.selectability.seeds",
    "lncourse.selectability.seeds_continue": "lncourse.evidence.selectability.seeds_continue",
    "lncourse.selectability.seeds_measure": "lncourse.evidence.selectability.seeds_measure",
    "lncourse.selectability.seeds_stats": "lncourse.evidence.selectability.seeds_stats",
    "lncourse.selectability.train": "lncourse.evidence.selectability.train",
    "lncourse.selectability.fused": "lncourse.evidence.selectability.fused",
    "lncourse.selectability.kernel": "lncourse.evidence.selectability.kernel",
    "lncourse.majority.bench": "lncourse.evidence.majority.bench",
    "lncourse.majority.claims": "lncourse.evidence.majority.claims",
    "lncourse.majority.report": "lncourse.evidence.majority.ledger",
    "lncourse.majority.verdict": "lncourse.evidence.majority.claims",
    "lncourse.nope.ablation": "lncourse.evidence.nope.ablation",
    "lncourse.nope.decode": "lncourse.evidence.nope.decode",
    "lncourse.nope.ledger": "lncourse.evidence.nope.ledger",
    "lncourse.nope.probe": "lncourse.evidence.nope.probe",
    "lncourse.nope.features": "lncourse.evidence.nope.features",
    "lncourse.nope.retrained": "lncourse.evidence.nope.retrained",
    "lncourse.nope.retrained_models": "lncourse.evidence.nope.retrained_models",
    "lncourse.nope.retrained_report": "lncourse.evidence.nope.retrained_report",
    "lncourse.nope.stream": "lncourse.evidence.nope.stream_run",
    "lncourse.nope.stream_device": "lncourse.evidence.nope.stream_device",
    "lncourse.nope.stream_fast": "lncourse.evidence.nope.stream_device",
    "lncourse.nope.stream_gpu": "lncourse.evidence.nope.stream_read",
    "lncourse.nope.stream_import": "lncourse.evidence.nope.stream_read",
    "lncourse.nope.stream_report": "lncourse.evidence.nope.stream_read",
    "lncourse.nope.trained": "lncourse.evidence.nope.trained",
    "lncourse.nope.verdict": "lncourse.evidence.nope.claims",
    "lncourse.norms.context_use": "lncourse.evidence.norms.context_use",
    "lncourse.norms.ledger": "lncourse.evidence.norms.ledger",
    "lncourse.norms.logits": "lncourse.evidence.norms.logits",
    "lncourse.norms.logits_config": "lncourse.evidence.norms.logits_config",
    "lncourse.norms.logits_summary": "lncourse.evidence.norms.logits_summary",
    "lncourse.norms.majority_report": "lncourse.evidence.norms.majority_report",
    "lncourse.norms.majority_run": "lncourse.evidence.norms.majority_run",
    "lncourse.norms.periln": "lncourse.evidence.norms.periln",
    "lncourse.norms.periln_report": "lncourse.evidence.norms.periln_report",
    "lncourse.norms.real": "lncourse.evidence.norms.real",
    "lncourse.norms.retrained": "lncourse.evidence.norms.retrained",
    "lncourse.norms.retrained_models": "lncourse.evidence.norms.retrained_models",
    "lncourse.norms.review": "lncourse.evidence.norms.review",
    "lncourse.norms.trained": "lncourse.evidence.norms.trained",
    "lncourse.norms.verdict": "lncourse.evidence.norms.claims",
    # chapter 3's trainer trains and its caller records (issue 59): the stored runs'
    # command line and their parameter snapshots left lncourse.majority.train (which
    # stays, the course's trainer) for the evidence
    "lncourse.majority.train": "lncourse.evidence.majority.runs",
    "lncourse.majority.snapshots": "lncourse.evidence.majority.snapshots",
    # chapter 4's six stream modules merged by what they do (issue 59): the run, its
    # device path, the reading of stored runs (the older names above point here too)
    "lncourse.evidence.nope.stream": "lncourse.evidence.nope.stream_run",
    "lncourse.evidence.nope.stream_fast": "lncourse.evidence.nope.stream_device",
    "lncourse.evidence.nope.stream_gpu": "lncourse.evidence.nope.stream_read",
    "lncourse.evidence.nope.stream_import": "lncourse.evidence.nope.stream_read",
    "lncourse.evidence.nope.stream_report": "lncourse.evidence.nope.stream_read",
    # issue 59: uniform evidence names: every chapter's ledger is ledger.py and its
    # checked sentences claims.py (chapter 3's verdict.py merged into its claims.py;
    # chapters 4 and 5 renamed theirs)
    "lncourse.evidence.majority.report": "lncourse.evidence.majority.ledger",
    "lncourse.evidence.majority.verdict": "lncourse.evidence.majority.claims",
    "lncourse.evidence.norms.verdict": "lncourse.evidence.norms.claims",
    "lncourse.evidence.nope.verdict": "lncourse.evidence.nope.claims",
}


def today_command(command: str) -> str:
    """``command`` with its module (the word after ``-m``), if it has moved since it ran,
    named as it is today; its arguments are left as they are."""
    words = command.split()
    return " ".join(RENAMED.get(w, w) if i and words[i - 1] == "-m" else w
                    for i, w in enumerate(words))


def _what_runs(command: str) -> list[str]:
    """A command without the options that change where and how visibly it runs, not what:
    ``--device X``, ``--quiet`` and ``--allow-dirty``. A run started on a CPU may resume
    on a GPU; a module that has moved since is read under its new name."""
    words, out = today_command(command).split(), []
    skip = False
    for word in words:
        if skip:
            skip = False
        elif word == "--device":
            skip = True
        elif not (word in ("--quiet", ALLOW_DIRTY) or word.startswith("--device=")):
            out.append(word)
    return out


def run_started(checkpoint: str | os.PathLike, command: str) -> dict:
    """The command and commit a (possibly resumed) run started from, kept beside its
    checkpoint; a resumed run adds the commit it resumed at. For :func:`provenance`.
    Raises :class:`DirtyTreeError` from a modified checkout unless ``command`` holds
    ``--allow-dirty``."""
    meta = Path(str(checkpoint) + ".start.json")
    commit = git_commit()
    _refuse_dirty([commit], command, "start a stored run")
    if Path(checkpoint).exists() and meta.exists():
        started = json.loads(meta.read_text())
        if _what_runs(started["command"]) != _what_runs(command):
            raise ValueError(f"{checkpoint} was started by `{started['command']}`, not "
                             f"`{command}`; delete it to start afresh")
        started.setdefault("resumed_at_commits", []).append(commit)
        if command != started["command"]:      # the same run on other hardware, say a GPU
            started.setdefault("resumed_with", []).append(command)
    else:
        started = {"command": command, "git_commit": commit}
    meta.parent.mkdir(parents=True, exist_ok=True)
    meta.write_text(json.dumps(started))
    return started


def write_result(path: str | os.PathLike, payload: dict) -> Path:
    """Write a result (which must hold ``config`` and ``provenance``) as JSON, atomically."""
    missing = {"config", "provenance"} - payload.keys()
    if missing:
        raise ValueError(f"a stored result needs {sorted(missing)} besides its measurements")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(payload, indent=None, separators=(",", ":")))
    os.replace(tmp, path)
    return path


def run_arguments(module: str, description: str, presets) -> argparse.ArgumentParser:
    """The command line every stored run starts from: ``--preset`` (one of ``presets``,
    default ``paper``), ``--device`` and ``--quiet``. Add a run's own options to it."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=description)
    parser.add_argument("--preset", choices=sorted(presets), default="paper")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or mps")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument(ALLOW_DIRTY, action="store_true",
                        help="run and store from a modified checkout (the provenance then "
                        "says '+dirty'); refused otherwise")
    return parser


def command_line(module: str, argv: list[str] | None = None) -> str:
    """The command as provenance records it: ``python -m module`` and its arguments."""
    return f"python -m {module} " + " ".join(sys.argv[1:] if argv is None else argv)


def store_run(path: str | os.PathLike, payload: dict, device: torch.device | str,
              wall_seconds: float, started: dict, device_note: str | None = None,
              allow_dirty: bool = False) -> Path:
    """Add the provenance of a run (``started``: from :func:`run_started`) to ``payload``,
    write it to ``path`` and say so. ``device_note`` replaces the thread count. Raises
    :class:`DirtyTreeError` if the run started or resumed from a modified checkout, or
    the checkout is modified now, unless ``allow_dirty`` or its command holds
    ``--allow-dirty``."""
    commits = [started.get("git_commit", ""), *started.get("resumed_at_commits", []),
               git_commit()]
    _refuse_dirty(commits, " ".join([started.get("command", ""),
                                     *started.get("resumed_with", []),
                                     ALLOW_DIRTY if allow_dirty else ""]), "store a result")
    payload["provenance"] = prov = provenance(device, wall_seconds, **started)
    if device_note:
        prov["device"] = f"{prov['device'].rsplit(', ', 1)[0]} ({device_note})"
    path = write_result(path, payload)
    print(f"wrote {path} ({prov['wall_seconds']:.0f} s on {prov['device']})")
    return path


def load_result(name: str | os.PathLike) -> dict:
    """Load ``results/<name>.json`` (or a path); a clear error if it is missing."""
    path = Path(name)
    if not path.suffix:
        published.fetch(Path(name).parts[0], RESULTS_DIR)   # the published wheel: once
        path = RESULTS_DIR / f"{name}.json"
    if not path.exists():
        raise FileNotFoundError(
            f"no stored result at {path}. results/README.md lists the command that writes "
            f"it (LNCOURSE_RESULTS, if set, says where results are read: {RESULTS_DIR}).")
    result = json.loads(path.read_text())
    if "provenance" not in result:
        raise ValueError(f"{path} has no provenance record; it is not a stored result")
    return result


def load_arrays(name: str, field: str) -> dict:
    """The arrays a stored result keeps beside it, out of its JSON: the ``.npz`` file in
    the folder of ``results/<name>.json`` that its entry ``field`` names, as {key: array}."""
    import numpy as np

    result = load_result(name)
    if not isinstance(result.get(field), str):
        raise KeyError(f"results/{name}.json names no file of arrays under {field!r}")
    path = RESULTS_DIR / Path(name).parent / result[field]
    if not path.exists():
        raise FileNotFoundError(f"results/{name}.json names {result[field]}, which is not "
                                f"in {path.parent}")
    with np.load(path) as f:
        return {k: f[k] for k in f.files}


# Characters of code or printed text a line of the book's column shows without scrolling
# (the site at 1280 px; tests/book/test_code_width.py holds the chapters' code to it).
COLUMN_CHARS = 77


def describe(result: dict, width: int | None = None, today: bool = False) -> str:
    """One line saying what ran where: for captions and printed labels. With ``width``,
    wrapped into lines of at most ``width`` characters (printed in the book: COLUMN_CHARS).
    With ``today``, the command as it runs today (:func:`today_command`: a module that has
    moved since is named as it is now), to run it again."""
    p = result["provenance"]
    command = today_command(p["command"]) if today else p["command"]
    hours = p["wall_seconds"] / 3600
    took = f"{hours:.1f} h" if hours >= 1 else f"{p['wall_seconds'] / 60:.0f} min"
    done = ""
    steps = result.get("config", {}).get("steps")
    if steps and result.get("step") and result["step"][-1] != steps:
        done = f"; INCOMPLETE: the first {result['step'][-1]:,} of {steps:,} steps"
    line = (f"stored result: `{command}`, commit {p['git_commit'][:10]}, "
            f"{p['device']}, torch {p['torch']}, {took}{done}")
    return line if width is None else textwrap.fill(line, width, subsequent_indent="  ",
                                                    break_on_hyphens=False)


def encode_state(state: dict) -> dict:
    """A state_dict as JSON: {name: {"shape", "float32": base64 of little-endian bytes}}."""
    import base64
    return {k: {"shape": list(v.shape), "float32": base64.b64encode(
        v.detach().cpu().float().contiguous().numpy().astype("<f4").tobytes()).decode()}
        for k, v in state.items()}


def decode_state(encoded: dict) -> dict:
    """The inverse of :func:`encode_state`: {name: float32 tensor}."""
    import base64

    import numpy as np
    return {k: torch.from_numpy(np.frombuffer(base64.b64decode(v["float32"]), dtype="<f4")
                                .copy()).reshape(v["shape"]) for k, v in encoded.items()}
