"""The machinery behind every exercise check.

A check runs the learner's function and the reference on the same fixed and edge-case
inputs. When they disagree it evaluates a list of known mistakes on the failing input;
if the learner's output matches one of them, the error names that mistake.
"""

from __future__ import annotations

import copy
import inspect
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

Case = tuple[tuple, dict]
Mistake = tuple[str, Callable[..., Any]]


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"tensor{tuple(value.shape)}"
    if isinstance(value, np.ndarray):
        return f"array{value.shape}"
    if isinstance(value, (list, tuple)):
        return "(" + ", ".join(_describe(v) for v in value) + ")"
    return repr(value)


def describe_case(case: Case) -> str:
    args, kwargs = case
    parts = [_describe(a) for a in args] + [f"{k}={_describe(v)}" for k, v in kwargs.items()]
    return ", ".join(parts)


def _as_tensor(value: Any) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu")
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value)
    if isinstance(value, (bool, int, float, np.number, np.bool_)):
        return torch.tensor(value)
    return None


def compare(got: Any, expected: Any, atol: float, rtol: float) -> tuple[bool, float, str]:
    """Compare two outputs. Returns (equal within tolerance, largest difference, reason)."""
    if isinstance(expected, (tuple, list)):
        if not isinstance(got, (tuple, list)) or len(got) != len(expected):
            return False, math.inf, (f"expected a sequence of {len(expected)} values, "
                                     f"got {_describe(got)}")
        worst = 0.0
        for i, (g, e) in enumerate(zip(got, expected)):
            ok, diff, why = compare(g, e, atol, rtol)
            if not ok:
                return False, diff, f"item {i}: {why}"
            worst = max(worst, diff)
        return True, worst, ""
    e = _as_tensor(expected)
    g = _as_tensor(got)
    if e is None:
        ok = got == expected
        return bool(ok), 0.0 if ok else math.inf, "" if ok else f"got {got!r}, expected {expected!r}"
    if g is None:
        return False, math.inf, f"expected a tensor or number, got {type(got).__name__}"
    if tuple(g.shape) != tuple(e.shape):
        return False, math.inf, f"shape {tuple(g.shape)}, expected {tuple(e.shape)}"
    if e.dtype == torch.bool or g.dtype == torch.bool:
        mismatches = int((g.bool() != e.bool()).sum())
        return mismatches == 0, float(mismatches), f"{mismatches} boolean entries differ"
    g64, e64 = g.double(), e.double()
    if torch.isnan(g64).any() and not torch.isnan(e64).any():
        return False, math.inf, "your output contains NaN"
    both_nan = torch.isnan(g64) & torch.isnan(e64)
    diff = (g64 - e64).abs().masked_fill(both_nan, 0.0)
    worst = float(diff.max()) if diff.numel() else 0.0
    ok = bool((diff <= atol + rtol * e64.abs().masked_fill(both_nan, 0.0)).all())
    return ok, worst, f"largest difference {worst:.3g}"


def _clone(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.clone()
    return copy.deepcopy(value)


def _same_inputs(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.shape == b.shape and bool(
            torch.equal(a, b) or (torch.isnan(a).any() and torch.allclose(a, b, equal_nan=True)))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same_inputs(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same_inputs(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    return True


def assert_signature(fn: Callable, params: Sequence[str], name: str | None = None) -> None:
    """Fail unless ``fn`` takes exactly the parameters ``params``, in order."""
    name = name or getattr(fn, "__name__", "your function")
    if not callable(fn):
        raise AssertionError(f"expected a function, got {type(fn).__name__}")
    got = list(inspect.signature(fn).parameters)
    if got != list(params):
        raise AssertionError(f"{name} should take parameters ({', '.join(params)}), "
                             f"but takes ({', '.join(got)})")


def run_check(name: str, fn: Callable, cases: Sequence[Case], reference: Callable,
              mistakes: Sequence[Mistake] = (), atol: float = 1e-5, rtol: float = 1e-4,
              compare_fn: Callable[[Any, Any], tuple[bool, float, str]] | None = None) -> None:
    """Compare ``fn`` with ``reference`` on every case; name the mistake when they differ.

    Prints one line with the largest difference when all cases pass (and returns None,
    so that a notebook cell ending in a check shows only that line). Raises ``AssertionError`` otherwise. ``NotImplementedError`` from a stub propagates
    unchanged so that an unfinished exercise reads as unfinished.
    """
    cmp = compare_fn or (lambda g, e: compare(g, e, atol, rtol))
    if not callable(fn):
        raise AssertionError(f"check_{name} expects a function, got {type(fn).__name__}")
    worst = 0.0
    for case in cases:
        args, kwargs = case
        expected = reference(*map(_clone, args), **{k: _clone(v) for k, v in kwargs.items()})
        call_args = tuple(map(_clone, args))
        call_kwargs = {k: _clone(v) for k, v in kwargs.items()}
        try:
            got = fn(*call_args, **call_kwargs)
        except (NotImplementedError, AssertionError):
            raise
        except Exception as err:  # the learner's code crashed: say on what
            raise AssertionError(f"{name}: your function raised {type(err).__name__}: {err} "
                                 f"on input ({describe_case(case)})") from err
        if not _same_inputs(call_args, args) or not _same_inputs(call_kwargs, kwargs):
            raise AssertionError(f"{name}: your function modified its input in place; "
                                 "compute a new tensor instead (for example x - m, "
                                 "not x -= m)")
        ok, diff, why = cmp(got, expected)
        if ok:
            worst = max(worst, diff)
            continue
        for message, wrong in mistakes:
            try:
                wrong_out = wrong(*map(_clone, args), **{k: _clone(v) for k, v in kwargs.items()})
            except Exception:
                continue
            if cmp(got, wrong_out)[0]:
                raise AssertionError(f"{name}: {message} (on input {describe_case(case)}: {why})")
        raise AssertionError(f"{name}: your output differs from the reference on input "
                             f"({describe_case(case)}): {why}")
    print(f"check_{name} passed: matches the reference on {len(cases)} inputs, "
          f"largest difference {worst:.2e}")
