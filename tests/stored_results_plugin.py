"""Which tests read a stored result, so that the perturbed pass runs every one of them.

A test that compares a recomputation with a number under ``results/`` passes on the CPU
that wrote the number and may fail on another: a reader's machine has other kernels,
another BLAS path, another thread count. ``scripts/perturbed.sh`` runs those tests a
second time under the most different numerics one machine offers (TESTING.md, "The
perturbed pass"); it selects them with the marker ``replay``. Nobody has to remember
that marker:

* **At collection**, a test is marked ``replay`` when it can reach a stored result: its
  function, a fixture it requests, a parameter it takes, or any function of this
  repository that those call (followed name by name through their globals) mentions
  ``RESULTS_DIR``, ``load_result`` or ``load_ledger``, or holds a path under ``results/``.
* **At run time**, an audit hook sees every file a test opens. A test that opens one
  under ``results/`` without the marker fails, saying so (the static reading missed a
  path; mark it ``replay`` by hand). So a new test that reads a stored result is in the
  perturbed pass, or it is red. A ledger read to print its entries as text (the pages'
  ``{ledger}`` role, :func:`lncourse.evidence.claims.quote`) is not counted. The one exemption, ``stored_files(reason)``, is for a
  test that handles stored results as files (packs, publishes, downloads them) and
  compares none of their numbers.

``LNCOURSE_PERTURBED=1`` (set by the perturbed pass) also sets PyTorch's own thread count
(``LNCOURSE_PERTURBED_THREADS``, default 3; PyTorch caps ``OMP_NUM_THREADS`` at the
machine's cores) and turns oneDNN off.
"""

from __future__ import annotations

import os
import re
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RESULTS = (ROOT / "results").resolve()
LOADER_NAMES = frozenset({"RESULTS_DIR", "load_result", "load_ledger"})


def _under_results(value) -> bool:
    if isinstance(value, (str, os.PathLike)) and not isinstance(value, bytes):
        try:
            p = Path(value)
            return p.is_absolute() and p.resolve().is_relative_to(RESULTS)
        except (OSError, ValueError):
            return False
    if isinstance(value, (list, tuple, set, frozenset)):
        return any(_under_results(v) for v in list(value)[:1000])
    if isinstance(value, dict):
        return any(_under_results(v) for v in list(value.values())[:1000])
    return False


def _ours(obj) -> bool:
    """A function or module of this repository (not the standard library, not a package)."""
    f = getattr(obj, "__file__", None)
    if f is None:
        code = getattr(obj, "__code__", None)
        f = code.co_filename if code is not None else None
    return bool(f) and f.startswith(str(ROOT)) and "/.venv/" not in f


def _codes(code: types.CodeType):
    yield code
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield from _codes(c)


class _Reach:
    """Whether a function can reach a stored result (memoised over the session)."""

    def __init__(self):
        self.memo: dict[int, bool] = {}

    def function(self, fn) -> bool:
        fn = getattr(fn, "__wrapped__", fn)
        fn = getattr(fn, "__func__", fn)
        if isinstance(fn, (staticmethod, classmethod)):
            fn = fn.__func__
        code = getattr(fn, "__code__", None)
        if code is None or not _ours(fn):
            return False
        key = id(code)
        if key in self.memo:
            return self.memo[key]
        self.memo[key] = False                   # a cycle reaches nothing new
        names = {n for c in _codes(code) for n in c.co_names + c.co_freevars}
        found = bool(names & LOADER_NAMES) or any(
            _under_results(c) for co in _codes(code) for c in co.co_consts
            if isinstance(c, str) and c.startswith("/"))
        g = getattr(fn, "__globals__", {})
        cells = {}
        if getattr(fn, "__closure__", None):
            cells = {n: c.cell_contents for n, c in zip(code.co_freevars, fn.__closure__)
                     if _alive(c)}
        for name in sorted(names):
            if found:
                break
            value = cells.get(name, g.get(name))
            found = self.value(value, names)
        for d in (getattr(fn, "__defaults__", None) or ()):
            found = found or _under_results(d)
        self.memo[key] = found
        return found

    def value(self, value, names) -> bool:
        if value is None:
            return False
        if _under_results(value):
            return True
        if isinstance(value, types.ModuleType):
            if not _ours(value):
                return False
            return any(self.value(getattr(value, a, None), ()) for a in names
                       if not isinstance(getattr(value, a, None), types.ModuleType))
        if isinstance(value, type):
            if not _ours(sys.modules.get(value.__module__)):
                return False
            return any(self.function(m) for a in names
                       if (m := value.__dict__.get(a)) is not None)
        if isinstance(value, types.FunctionType):
            return self.function(value)
        return False


def _alive(cell) -> bool:
    try:
        cell.cell_contents
        return True
    except ValueError:
        return False


_REACH = _Reach()


def reads_stored_results(item) -> bool:
    """The static reading: can this collected test reach a stored result?"""
    fn = getattr(item, "function", None)
    if fn is not None and _REACH.function(fn):
        return True
    callspec = getattr(item, "callspec", None)
    if callspec is not None and any(_under_results(v) for v in callspec.params.values()):
        return True
    info = getattr(item, "_fixtureinfo", None)
    for defs in (info.name2fixturedefs.values() if info else ()):
        for d in defs:
            if _REACH.function(d.func):
                return True
    return False


RECOMPUTES = re.compile(r"recompute|replay")
MADE_HERE = re.compile(r"tiny|stores")    # a run the test makes and stores itself


def collection_modifyitems(items) -> None:
    for item in items:
        if item.get_closest_marker("replay") is None and reads_stored_results(item):
            item.add_marker(pytest.mark.replay)
        # A test that recomputes a stored run, from its weights or by training again from
        # its seed, says so in its name (or carries the marker by hand); those are the
        # tests whose numbers hang on the CPU's arithmetic, and CI runs them natively and
        # perturbed (.ci/run) rather than the README's test command, whose budget they
        # would break. A test of a run it makes itself stays in the test command.
        name = getattr(item, "originalname", item.name)
        if (item.get_closest_marker("replay") is not None
                and item.get_closest_marker("recompute") is None
                and RECOMPUTES.search(name) and not MADE_HERE.search(name)):
            item.add_marker(pytest.mark.recompute)


# ---- run time: what each test opens --------------------------------------------------
_current: dict = {"item": None, "opened": set()}


def _audit(event, args):
    if event != "open" or _current["item"] is None:
        return
    path = args[0]
    if isinstance(path, (str, bytes, os.PathLike)):
        try:
            p = os.path.abspath(os.fsdecode(path))
        except (TypeError, ValueError):
            return
        if p.startswith(str(RESULTS) + os.sep) and not _quoting():
            _current["opened"].add(os.path.relpath(p, RESULTS))


# A page's {ledger} role reads its ledger to print an entry as text (rendering a page or
# its notebook): no comparison of a stored number, which the ledger's own test makes.
_QUOTE = (os.path.join("lncourse", "evidence", "claims.py"), "_numbers")


def _quoting() -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        code = frame.f_code
        if code.co_name == _QUOTE[1] and code.co_filename.endswith(_QUOTE[0]):
            return True
        frame = frame.f_back
    return False


sys.addaudithook(_audit)


def start(item) -> None:
    _current["item"], _current["opened"] = item, set()
    # margins (lncourse.tolerance.record) are kept for the tests that read stored results
    os.environ["LNCOURSE_MARGINS_RECORD"] = "1" if item.get_closest_marker("replay") else "0"


def stop(item, report) -> None:
    """At the end of a test's call: fail it if it opened a stored result unmarked."""
    opened, _current["item"] = sorted(_current["opened"]), None
    if item.get_closest_marker("stored_files") is not None:
        return      # it packs or publishes stored files; it compares no number of them
    if opened and item.get_closest_marker("replay") is None and report.passed:
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} opened stored results ({', '.join(opened[:4])}) but is not "
            f"marked `replay`, so the perturbed pass (scripts/perturbed.sh) would not run "
            f"it. The static reading of tests/stored_results_plugin.py did not see the "
            f"path; add @pytest.mark.replay to the test.")


def configure_perturbed() -> None:
    if os.environ.get("LNCOURSE_PERTURBED") == "1":
        import torch

        torch.set_num_threads(int(os.environ.get("LNCOURSE_PERTURBED_THREADS", "3")))
        torch.backends.mkldnn.enabled = False


def marked(value, reaches, ids=None):
    """``value`` as a parameter marked ``replay`` when ``reaches`` (a function chosen by
    a string at run time, such as an exercise's check, which the static reading cannot
    follow) can reach a stored result."""
    marks = [pytest.mark.replay] if _REACH.function(reaches) else []
    return pytest.param(value, marks=marks, id=ids)


def representative(paths, fast, why: str):
    """``paths`` (stored runs) as test parameters: those whose name is in ``fast`` run in
    the test command and the perturbed pass, the others only in the slow suite. For a
    replay that takes the same code path for every stored run, where a representative
    part guards the code and the tolerances and the slow suite checks every run; ``why``
    says which part is kept and what the rest costs (it is the test's record of the
    choice). A name in ``fast`` that is not a stored run is an error, so a renamed run
    cannot leave the fast suite with nothing."""
    assert why.strip(), "say why the rest of the runs are slow"
    unknown = set(fast) - {p.stem for p in paths}
    assert not unknown, f"not stored runs: {sorted(unknown)}"
    return [pytest.param(p, id=p.stem, marks=() if p.stem in fast else [pytest.mark.slow])
            for p in paths]
