"""The machinery behind every exercise check.

A check calls ``run_check`` once: it runs the learner's function on fixed and edge-case
inputs (``hidden=True`` adds teacher-only ones: more shapes, edge cases and seeds) and
judges each answer, either against a reference computed in float64 or, where the
exercise asks for a property rather than one answer, with a ``judge``. The course's
checks take the reference and the mistakes from ``Key``: stored outputs on the visible
inputs, the teacher's key (``lncourse.checks.key``) on the teacher-only ones. When an answer
fails, the known mistakes are evaluated on that input; if the answer matches one, the
error names it. Every check returns None and prints one line when it passes.

In a notebook a failing check shows its message only (``CheckFailure``: IPython shows
what ``_render_traceback_`` returns instead of a traceback through the check's source and
its inputs), and a stub (``raise NotImplementedError``) prints "not done yet" instead of
raising, so that "Run all" runs to the end. The grader sets ``configure(unfinished=
"raise")``: there a stub's ``NotImplementedError`` goes through and scores 0.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import math
import textwrap
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lncourse.checks._compare import (Verdict, compare, describe, describe_case, precision_of, tolerance, upcast)
from lncourse.guard import call_learner
from lncourse.results import COLUMN_CHARS

Case = tuple[tuple, dict]
Mistake = tuple[str, Callable[..., Any]]            # (message, the wrong answer)
Judge = Callable[[Any, tuple, dict, torch.dtype], Verdict]  # (answer, args, kwargs, precision)

SECONDS = 60.0   # time limit for all calls of one check together in a notebook (the grader sets its own, --timeout)


HIDDEN_KEY: str | None = None   # the grader's secret for teacher-only inputs (--hidden-key)

# What a check does with an unfinished stub (its NotImplementedError): "report" (a
# notebook: print "not done yet" and return, so that "Run all" goes on) or "raise" (the
# grader, where it scores 0)
UNFINISHED = "report"

# partial credit (the grader's assignment file, ``partial = true``): while a list, every
# case is judged and recorded here as (passed, message) instead of the first failure
# raising; the grader scores the share of cases passed (lncourse.grading.checker)
TALLY: list[tuple[bool, str]] | None = None


_UNSET = object()


def configure(seconds: float | object = _UNSET, hidden_key: str | None | object = _UNSET,
              unfinished: str | object = _UNSET,
              tally: list | None | object = _UNSET) -> None:
    """Set the checks' time limit (``SECONDS``), the grader's secret for teacher-only
    inputs (``HIDDEN_KEY``; None: none), what a stub does (``UNFINISHED``: "report" or
    "raise") and the list that records every case for partial credit (``TALLY``; None:
    the first failure raises); an argument left out is left as it is. The grader calls
    this in each checker process."""
    global SECONDS, HIDDEN_KEY, UNFINISHED, TALLY
    if seconds is not _UNSET:
        SECONDS = float(seconds)
    if hidden_key is not _UNSET:
        HIDDEN_KEY = hidden_key
    if unfinished is not _UNSET:
        if unfinished not in ("report", "raise"):
            raise ValueError(f"unfinished: 'report' or 'raise', not {unfinished!r}")
        UNFINISHED = unfinished
    if tally is not _UNSET:
        TALLY = tally


class CheckFailure(AssertionError):
    """A check's verdict on a wrong answer: an ``AssertionError`` (the grader and the
    tests read it as one) that a notebook shows as its message alone. IPython shows the
    lines ``_render_traceback_`` returns in place of a traceback, which would print the
    check's source and its inputs; where the learner's own code raised, its frames are
    shown (theirs only) under the message."""

    def _render_traceback_(self) -> list[str]:
        lines = [f"{type(self).__name__}: {self}"]
        cause = self.__cause__
        if cause is not None and cause.__traceback__ is not None:
            import lncourse
            ours = str(Path(lncourse.__file__).resolve().parent)
            frames = [f for f in traceback.extract_tb(cause.__traceback__)
                      if not str(Path(f.filename).resolve()).startswith(ours)
                      and "site-packages" not in f.filename]
            if frames:
                lines += ["", "Where your code raised it:"]
                lines += "".join(traceback.format_list(frames)).rstrip().splitlines()
                lines += "".join(traceback.format_exception_only(
                    type(cause), cause)).rstrip().splitlines()
        return lines


def generator(seed: int) -> torch.Generator:
    """The random generator of a check's inputs: fixed seeds make every run the same.
    While the grader checks teacher-only inputs it sets ``HIDDEN_KEY`` (a secret the
    teacher holds, never in the repository): the seed is then mixed with it, so the
    random inputs cannot be known, or hard-coded, from this code."""
    if HIDDEN_KEY:
        import hashlib
        digest = hashlib.sha256(f"{HIDDEN_KEY}\0{seed}".encode()).digest()
        seed = int.from_bytes(digest[:8], "big") >> 1
    return torch.Generator().manual_seed(seed)


def drawn_ints(seed: int, low: int, high: int, n: int = 1) -> tuple[int, ...]:
    """``n`` integers in [low, high] from ``generator(seed)``: where a check's input is a
    size (``centering_matrix(d)``), its teacher-only sizes are drawn this way, so that
    they too depend on the grader's key and cannot be answered from a lookup table."""
    g = generator(seed)
    return tuple(int(v) for v in torch.randint(low, high + 1, (n,), generator=g))


def numpy_rng(seed: int) -> np.random.Generator:
    """A NumPy generator seeded from ``generator(seed)``: mixed with the grader's key
    like every other random input of a check."""
    return np.random.default_rng(int(torch.randint(2**62, (1,), generator=generator(seed))))


class TeacherOnly(RuntimeError):
    """A check asked for what only the teacher's checkout holds (its key)."""


# The teacher's key (``lncourse.checks.key``): every check's reference and its named
# mistakes, one module per check module. It is left out of the published package
# (``pyproject.toml`` does not list it, ``scripts/publish.py`` skips it): a learner's
# install has the stored outputs (``expected/<module>.pt``, written by
# ``python -m lncourse.checks.key.store``) and judges the visible inputs against them.
KEY_PACKAGE = "lncourse.checks.key"
EXPECTED = Path(__file__).resolve().parent / "expected"

# While a dict (``lncourse.checks.key.store``): a check run records, by its function's
# name, the answers of the key on its visible inputs instead of judging a function
RECORD: dict[str, dict] | None = None


@contextlib.contextmanager
def recording():
    """While in it, every check records the key's answers on its visible inputs into the
    dict it yields (``RECORD``), by function, instead of judging ``fn``; the grader's key
    is unset meanwhile. ``lncourse.checks.key.store`` writes them."""
    global RECORD, HIDDEN_KEY
    saved = RECORD, HIDDEN_KEY
    RECORD, HIDDEN_KEY = {}, None
    try:
        yield RECORD
    finally:
        RECORD, HIDDEN_KEY = saved


class Key:
    """Where a check finds its answers: ``Key(__name__, hidden)`` in a check module.

    On the visible inputs (``hidden=False``, no grader's key set) the stored outputs of
    ``expected/<module>.pt``; on the teacher-only ones the teacher's key module
    ``lncourse.checks.key.<module>`` (``REFERENCES``, ``MISTAKES``), which a learner's
    install lacks: there ``hidden=True`` raises ``TeacherOnly``."""

    def __init__(self, module: str, hidden: bool = False):
        self.module = module.rsplit(".", 1)[-1]
        self.hidden = hidden

    @property
    def live(self) -> bool:
        """Judge with the key's functions (the grader's inputs, or recording them)."""
        return self.hidden or HIDDEN_KEY is not None or RECORD is not None

    def teacher(self, function: str):
        """The key's module; ``TeacherOnly`` where this install has none."""
        import importlib
        try:
            return importlib.import_module(f"{KEY_PACKAGE}.{self.module}")
        except ImportError as err:
            if not (err.name or "").startswith(KEY_PACKAGE):
                raise
            asked = "(hidden=True)" if self.hidden else " under the grader's key"
            raise TeacherOnly(
                f"check_{function}{asked}: the teacher-only inputs are judged by the "
                f"teacher's key ({KEY_PACKAGE}), which only the teacher's checkout of the "
                f"course holds (the published package leaves it out); run the check "
                f"without hidden=True, or grade from the teacher's checkout") from None

    def stored(self, function: str, cases: Sequence[Case]) -> dict:
        """The stored answers of ``function``'s visible inputs, checked against ``cases``."""
        entry = stored_answers(self.module).get(function)
        if entry is None or entry["calls"] != [call_print(a, k) for a, k in cases]:
            raise RuntimeError(
                f"check_{function}: the stored outputs of its visible inputs "
                f"({EXPECTED.name}/{self.module}.pt) do not match its inputs; the teacher "
                f"regenerates them with python -m {KEY_PACKAGE}.store")
        return entry


_STORED: dict[str, dict] = {}


def stored_answers(module: str) -> dict:
    """``expected/<module>.pt``: {function: {"calls", "messages", "cases"}}, each case
    {"expected", "tol", "mistakes": [(output, tolerance) or None per message]}."""
    if module not in _STORED:
        path = EXPECTED / f"{module}.pt"
        _STORED[module] = torch.load(path, weights_only=True) if path.exists() else {}
    return _STORED[module]


def call_print(args: tuple, kwargs: dict) -> str:
    """A case's inputs as their shapes, dtypes and plain values: what the stored outputs
    of a case are filed under (the numbers of its tensors are not: they may differ in
    their last bits under other numerics, and the recompute test compares the outputs)."""
    def one(v: Any) -> str:
        if isinstance(v, torch.Tensor):
            return f"{str(v.dtype).removeprefix('torch.')}{tuple(v.shape)}"
        if isinstance(v, np.ndarray):
            return f"{v.dtype}{v.shape}"
        if isinstance(v, (list, tuple)):
            return "(" + ",".join(one(x) for x in v) + ")"
        if isinstance(v, dict):
            return "{" + ",".join(f"{k}:{one(x)}" for k, x in v.items()) + "}"
        return repr(v)
    return ";".join([one(a) for a in args] + [f"{k}={one(v)}" for k, v in kwargs.items()])


def plain(value: Any) -> Any:
    """``value`` as ``torch.load(weights_only=True)`` reads it back: arrays as tensors,
    NumPy scalars as Python numbers (the comparison reads both alike)."""
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(value))
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (list, tuple)):
        return type(value)(plain(v) for v in value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def case(*args: Any, **kwargs: Any) -> Case:
    """One input of a check: ``case(x, gamma, beta, 1e-5)``."""
    return args, kwargs


def _clone(value: Any) -> Any:
    return value.clone() if isinstance(value, torch.Tensor) else copy.deepcopy(value)


def _same_inputs(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return (isinstance(b, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype
                and bool(torch.equal(a, b) or torch.allclose(a, b, rtol=0, atol=0,
                                                              equal_nan=True)))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same_inputs(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same_inputs(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    return True


def _shapes(args: tuple, kwargs: dict) -> str:
    """The inputs' shapes and kinds, without one of their numbers (``describe_case``
    spells out a scalar)."""
    def kind(value: Any) -> str:
        if isinstance(value, (torch.Tensor, np.ndarray)):
            return describe(value)
        if isinstance(value, (list, tuple)):
            return "(" + ", ".join(kind(v) for v in value) + ")"
        if isinstance(value, dict):
            return "{" + ", ".join(f"{k!s}: {kind(v)}" for k, v in value.items()) + "}"
        return f"{_an(type(value).__name__)}"
    return ", ".join([kind(a) for a in args] + [f"{k}={kind(v)}" for k, v in kwargs.items()])


def _an(word: str) -> str:
    return ("an " if word[:1] in tuple("aeiou") else "a ") + word


def fair_precision(args: tuple, kwargs: dict, precision: torch.dtype) -> torch.dtype:
    """The precision a tolerance allows for: ``precision``, or the default float dtype
    when an input is an integer tensor, which the natural recipes turn into floats of the
    default dtype (a function of integer counts returns float32 even beside float64
    scores)."""
    ints = any(isinstance(a, torch.Tensor) and not a.is_floating_point() and not a.is_complex()
               and a.dtype != torch.bool for a in (*args, *kwargs.values()))
    default = torch.get_default_dtype()
    if ints and torch.finfo(default).eps > torch.finfo(precision).eps:
        return default
    return precision


def non_finite(value: Any) -> bool:
    """True if ``value`` (a tensor, array, number, or a tuple/list/dict of them) holds a NaN
    or an infinity."""
    if isinstance(value, torch.Tensor):
        return bool((value.is_floating_point() or value.is_complex()) and value.device.type != "meta"
                    and not torch.isfinite(value.detach()).all())
    if isinstance(value, np.ndarray) and value.dtype.kind in "fc":
        return not bool(np.isfinite(value).all())
    if isinstance(value, (float, np.floating, complex)):
        return not math.isfinite(abs(value))
    if isinstance(value, (tuple, list)):
        return any(non_finite(v) for v in value)
    if isinstance(value, dict):
        return any(non_finite(v) for v in value.values())
    return False


def _calls(cases: Sequence[Case]) -> list[tuple[int, tuple[str, ...]]]:
    """How the cases call the function: (number of arguments in order, keyword names)."""
    seen: list[tuple[int, tuple[str, ...]]] = []
    for args, kwargs in cases:
        call = (len(args), tuple(kwargs))
        if call not in seen:
            seen.append(call)
    return seen


def assert_signature(fn: Callable, params: Sequence[str], name: str,
                     cases: Sequence[Case] | None = None) -> None:
    """Fail unless ``fn`` is a function that accepts every call the check makes.

    A right answer is judged by what it computes: its parameters may have any names where
    the check passes them in order (their number and order matter, ``params`` only names
    them in the message), and must have the names the check uses where it calls by
    keyword (``level=0.9``), which the message then says. ``cases``: the check's calls
    (None: one call with every parameter in order).
    """
    if not callable(fn):
        raise AssertionError(f"check_{name} expects a function, got {type(fn).__name__}")
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        raise AssertionError(
            f"{name}: {getattr(fn, '__name__', fn)!r} is a built-in whose parameters cannot "
            f"be read; write your own function, def {name}({', '.join(params)}): ...") from None
    got = ", ".join({inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"
                     }.get(p.kind, "") + p.name for p in signature.parameters.values())
    calls = _calls(cases) if cases is not None else [(len(params), ())]
    for n, keywords in calls:
        try:
            signature.bind(*range(n), **{k: None for k in keywords})
        except TypeError:
            pass
        else:
            continue
        by_name = {p.name for p in signature.parameters.values()
                   if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        any_name = any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())
        for k in keywords:       # a keyword the function lacks: its name matters
            if k not in by_name and not any_name:
                example = f"{name}({', '.join([*params[:n], f'{k}=...'])})"
                raise AssertionError(
                    f"{name} should have a parameter named `{k}`: the check calls it by "
                    f"keyword, {example}, as the exercise's signature names it, so that "
                    f"name matters (the other parameters' names are yours to choose); "
                    f"yours takes ({got})") from None
        order = ", ".join(params[:n])
        required = [p.name for p in signature.parameters.values()
                    if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY,
                                                           p.POSITIONAL_OR_KEYWORD)]
        if len(required) > n and n < len(params):
            raise AssertionError(
                f"{name}: the check calls it with {n} argument{'s' * (n != 1)} in order, "
                f"{name}({', '.join([*params[:n], *(f'{k}=...' for k in keywords)])}), "
                f"so every further parameter needs a default, as in the exercise's "
                f"signature, but yours takes ({got})")
        if n == 1:
            raise AssertionError(f"{name} should take 1 parameter, ({order}); its name is "
                                 f"yours to choose (the check passes it in order), but "
                                 f"yours takes ({got})")
        raise AssertionError(f"{name} should take {n} parameters, in this order: ({order}); "
                             f"their names are yours to choose (the check passes them in "
                             f"order), but yours takes ({got})")


def _float32_in(value: Any) -> bool:
    """True if ``value`` holds a float32 tensor (in a tuple, list or dict at any depth)."""
    if isinstance(value, torch.Tensor):
        return value.dtype == torch.float32
    if isinstance(value, np.ndarray):
        return value.dtype == np.float32
    if isinstance(value, (tuple, list)):
        return any(_float32_in(v) for v in value)
    if isinstance(value, dict):
        return any(_float32_in(v) for v in value.values())
    return False


def mistake_outputs(mistakes: Sequence[Mistake], args64: tuple, kwargs64: dict,
                    precision: torch.dtype, smooth: bool) -> list[tuple[Any, Any] | None]:
    """Each known mistake's output on one input and its tolerance; None where the mistake
    does not apply to the input (it raises)."""
    made: list[tuple[Any, Any] | None] = []
    for _, wrong in mistakes:
        try:
            wrong_out = wrong(*map(_clone, args64), **{k: _clone(v) for k, v in kwargs64.items()})
            tol = tolerance(wrong, args64, kwargs64, wrong_out, precision, smooth=smooth)
        except Exception:  # a mistake that does not apply to this input
            made.append(None)
            continue
        made.append((wrong_out, tol))
    return made


def _named_mistake(got: Any, messages: Sequence[str],
                   outputs: Sequence[tuple[Any, Any] | None],
                   precision: torch.dtype) -> str | None:
    for message, made in zip(messages, outputs):
        if made is not None and compare(got, made[0], made[1], precision)[0]:
            return message
    return None


def expected_output(reference: Callable, args: tuple, kwargs: dict, dtype: torch.dtype,
                    smooth: bool, slack: Callable[[float], float] | None) -> tuple[Any, Any]:
    """The reference's answer on one input, in float64, and its tolerance."""
    precision = precision_of(args, kwargs, dtype)
    args64, kwargs64 = upcast(args), {k: upcast(v) for k, v in kwargs.items()}
    expected = reference(*map(_clone, args64), **{k: _clone(v) for k, v in kwargs64.items()})
    return expected, tolerance(reference, args64, kwargs64, expected,
                               fair_precision(args, kwargs, precision), smooth, slack)


def _one_tolerance(tol: Any) -> Any:
    """A tolerance as stored: a tensor whose entries are all equal (as ``tolerance``
    makes them) as that one number, which compares alike."""
    if isinstance(tol, (tuple, list)):
        return type(tol)(_one_tolerance(t) for t in tol)
    if isinstance(tol, torch.Tensor) and tol.numel() and bool((tol == tol.reshape(-1)[0]).all()):
        return tol.reshape(-1)[0].clone()
    return plain(tol)


def _record(name: str, cases: Sequence[Case], reference: Callable | None,
            mistakes: Sequence[Mistake], dtype: torch.dtype, smooth: bool,
            slack: Callable[[float], float] | None) -> None:
    """``RECORD[name]``: the key's answers on ``cases`` (lncourse.checks.key.store)."""
    entries = []
    for args, kwargs in cases:
        entry: dict[str, Any] = {"expected": None, "tol": None}
        if reference is not None:
            expected, tol = expected_output(reference, args, kwargs, dtype, smooth, slack)
            entry["expected"], entry["tol"] = plain(expected), _one_tolerance(tol)
        args64, kwargs64 = upcast(args), {k: upcast(v) for k, v in kwargs.items()}
        entry["mistakes"] = [None if m is None else (plain(m[0]), _one_tolerance(m[1]))
                             for m in mistake_outputs(
            mistakes, args64, kwargs64, precision_of(args, kwargs, dtype), smooth)]
        entries.append(entry)
    RECORD[name] = {"calls": [call_print(a, k) for a, k in cases],
                    "messages": [message for message, _ in mistakes], "cases": entries}


def run_check(fn: Callable, name: str, params: Sequence[str], cases: Sequence[Case], *,
              reference: Callable | None = None, judge: Judge | None = None,
              passed: str = "matches the reference", mistakes: Sequence[Mistake] = (),
              forbidden: dict[str, str] | None = None, dtype: torch.dtype = torch.float64,
              smooth: bool = True, slack: Callable[[float], float] | None = None,
              seconds: float | None = None, outputs: Sequence[str] = (),
              inputs: str | None = None, key: Key | None = None) -> None:
    """Judge ``fn`` (the learner's ``name``) on every case; name the mistake when it fails.

    At most one of ``reference`` (compared in float64, within a tolerance set by the
    inputs' precision, see ``_compare.tolerance``) and ``judge`` (a property) is given;
    ``key`` (the course's checks: ``Key(__name__, hidden)``) brings the reference, where
    no judge is given, and the mistakes: the teacher's key's functions on teacher-only
    inputs, the stored outputs of ``expected/<module>.pt`` on the visible ones.
    ``dtype`` is the precision of cases without floating inputs. ``forbidden`` maps the
    dotted names of calls the exercise forbids to the reason shown if one is made;
    ``seconds`` (default ``SECONDS``) limits the time of all calls together.
    ``outputs`` names the outputs of a function that returns a tuple, for the messages.
    ``inputs`` (a teacher's exercise: "the teacher's input") names a failing case by its
    number only, "the teacher's input 2 of 5", and leaves the differences out, so that
    neither the inputs nor the reference's outputs reach the learner.
    Prints one line when every case passes (two where one would not fit the book's
    column); raises ``CheckFailure`` (an ``AssertionError``) otherwise. An unfinished
    stub (its ``NotImplementedError``) prints "not done yet" and returns, or, where the
    grader set ``configure(unfinished="raise")``, goes through.
    """
    try:
        _run_check(fn, name, params, cases, reference=reference, judge=judge,
                   passed=passed, mistakes=mistakes, forbidden=forbidden, dtype=dtype,
                   smooth=smooth, slack=slack, seconds=seconds, outputs=outputs,
                   inputs=inputs, key=key)
    except NotImplementedError:
        if UNFINISHED == "raise":
            raise
        print(textwrap.fill(
            f"check_{name}: not done yet: {name} still raises NotImplementedError (the "
            f"stub). Replace its raise line with your code, then run this cell again.",
            COLUMN_CHARS, subsequent_indent="  ", break_on_hyphens=False))
    except CheckFailure:
        raise
    except AssertionError as err:
        failure = CheckFailure(*err.args)
        failure.__cause__ = err.__cause__
        failure.__suppress_context__ = True
        raise failure.with_traceback(err.__traceback__) from err.__cause__


def _run_check(fn: Callable, name: str, params: Sequence[str], cases: Sequence[Case], *,
               reference: Callable | None, judge: Judge | None, passed: str,
               mistakes: Sequence[Mistake], forbidden: dict[str, str] | None,
               dtype: torch.dtype, smooth: bool, slack: Callable[[float], float] | None,
               seconds: float | None, outputs: Sequence[str], inputs: str | None,
               key: Key | None = None) -> None:
    stored = None
    if key is not None:
        if reference is not None or mistakes:
            raise ValueError("key brings the reference and the mistakes: give neither")
        if key.live:
            teacher = key.teacher(name)
            reference = None if judge is not None else teacher.REFERENCES[name]
            mistakes = teacher.MISTAKES[name]
            if RECORD is not None:
                _record(name, cases, reference, mistakes, dtype, smooth, slack)
                return
        else:
            stored = key.stored(name, cases)
    if stored is None and (reference is None) == (judge is None):
        raise ValueError("give exactly one of reference and judge")
    assert_signature(fn, params, name, cases)
    limit = SECONDS if seconds is None else seconds
    deadline = time.monotonic() + limit
    worst = 0.0
    failed = False
    for k, (args, kwargs) in enumerate(cases, 1):
        label = f"{inputs} {k} of {len(cases)}" if inputs else None
        answers = (None if stored is None else
                   (stored["messages"], stored["cases"][k - 1]))
        if TALLY is None:
            worst = max(worst, _judge_case(fn, name, args, kwargs, reference, judge,
                                           mistakes, forbidden, dtype, smooth, slack,
                                           outputs, deadline, limit, label, answers))
            continue
        try:
            worst = max(worst, _judge_case(fn, name, args, kwargs, reference, judge,
                                           mistakes, forbidden, dtype, smooth, slack,
                                           outputs, deadline, limit, label, answers))
            TALLY.append((True, ""))
        except AssertionError as err:
            TALLY.append((False, str(err)))
            failed = True
    if failed:      # partial credit: the grader reads TALLY; no "passed" line
        return
    line = f"check_{name} passed: {passed} on {len(cases)} inputs"
    detail = f"largest difference {worst:.2e}" if judge is None else ""
    if detail and len(line) + 2 + len(detail) <= COLUMN_CHARS:   # the book's column
        print(f"{line}, {detail}")
    else:   # wrapped, the largest difference on a line of its own
        print(textwrap.fill(line + ("," if detail else ""), COLUMN_CHARS,
                            subsequent_indent="  ", break_on_hyphens=False)
              + (f"\n  {detail}" if detail else ""))


def _judge_case(fn, name, args, kwargs, reference, judge, mistakes, forbidden, dtype,
                smooth, slack, outputs, deadline, limit, label=None, answers=None) -> float:
    """One case of ``run_check``: its difference if it passes; AssertionError if not.
    ``label``: the case's name where its values are not to be shown. ``answers``: the
    stored (messages, case) that stand for ``reference`` and ``mistakes``."""
    # Under the grader's key (--hidden) the inputs are the teacher's secret: a failure
    # says which mistake it is and the inputs' shapes, never a number that the inputs or
    # the learner's function chose (its error's text, its output's shape, a difference),
    # so that resubmitting cannot read the inputs out of the feedback.
    secret = HIDDEN_KEY is not None
    where = label or (f"a teacher-only input: {_shapes(args, kwargs)}" if secret
                      else describe_case(args, kwargs))
    precision = precision_of(args, kwargs, dtype)
    args64, kwargs64 = upcast(args), {k: upcast(v) for k, v in kwargs.items()}
    if judge is None:       # a reference's answer, stored or computed
        expected, tol = ((answers[1]["expected"], answers[1]["tol"]) if answers is not None
                         else expected_output(reference, args, kwargs, dtype, smooth, slack))
    try:
        got, args_after, kwargs_after = call_learner(
            fn, tuple(map(_clone, args)), {k: _clone(v) for k, v in kwargs.items()},
            name=name, where=where, forbidden=forbidden,
            seconds=max(deadline - time.monotonic(), 1e-3), limit=limit)
    except AssertionError:
        if not secret:
            raise
        raise AssertionError(
            f"{name}: your function gave no answer on {where} (it raised an error, ran "
            "out of time or memory, or called what the exercise forbids; its message "
            "is not shown, since it could hold the teacher's inputs)") from None
    if not _same_inputs(args_after, args) or not _same_inputs(kwargs_after, kwargs):
        raise AssertionError(f"{name}: your function modified its input in place; "
                             "compute a new tensor instead (for example x - m, "
                             "not x -= m)")
    if judge is None:
        ok, diff, why = compare(got, expected, tol, precision, outputs,
                                _float32_in((args, kwargs, got)))
        hinted = (compare(got, expected, tol, precision, outputs, True)[2]
                  if not ok and math.isfinite(diff) else why)
        if hinted != why:
            # a float32 tensor made inside the function? Run it again, watched
            seen: set = set()
            with contextlib.suppress(Exception):
                call_learner(fn, tuple(map(_clone, args)),
                             {k: _clone(v) for k, v in kwargs.items()}, name=name,
                             where=where, forbidden=forbidden, seen=seen,
                             seconds=max(deadline - time.monotonic(), 1e-3), limit=limit)
            if torch.float32 in seen:
                why = hinted
    else:
        ok, diff, why = judge(got, args64, kwargs64, precision)
    if ok and non_finite(got) and (judge is not None or not non_finite(expected)):
        ok, diff, why = False, math.inf, "your answer contains NaN or inf"
    if ok:
        return diff
    if answers is not None:
        mistake = _named_mistake(got, answers[0], answers[1]["mistakes"], precision)
    else:
        mistake = _named_mistake(got, [m for m, _ in mistakes], mistake_outputs(
            mistakes, args64, kwargs64, precision, smooth), precision)
    if secret and not label:
        raise AssertionError(f"{name}: {mistake} (on {where})" if mistake else
                             f"{name}: your output is wrong on {where}")
    if label:       # no value of the input's or of the reference's output
        if mistake:
            raise AssertionError(f"{name}: {mistake} (on {label})")
        if judge is None and math.isfinite(diff):
            raise AssertionError(f"{name}: your output differs from the reference "
                                 f"(on {label})")
        raise AssertionError(f"{name}: {why} (on {label})")
    if mistake:
        raise AssertionError(f"{name}: {mistake} (on input ({where}): {why})")
    if judge is None and math.isfinite(diff):
        raise AssertionError(f"{name}: your output differs from the reference on input "
                             f"({where}): {why}")
    raise AssertionError(f"{name}: {why} (on input ({where}))")
