"""Judging one answer: its kind and dtype, its shape, its values within a tolerance.

References are computed in float64. The tolerance comes from the precision of the
inputs: how far the exact answer moves when every input entry is rounded to that
precision (estimated by perturbing the inputs), plus rounding of the answer itself.
So a float32 answer to float32 inputs passes, and so does a more accurate float64 one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

Verdict = tuple[bool, float, str]   # (passed, largest difference or measure, why not)

SAFETY = 16.0       # tolerance = SAFETY x (what input rounding moves + output rounding)
PERTURBATIONS = 3   # random perturbations used to estimate what input rounding moves


# ------------------------------------------------------------------------ descriptions
def describe(value: Any) -> str:
    """A short description of a value for messages: tensor(4, 8), 1e-05, ..."""
    if isinstance(value, Tensor):
        return f"tensor{tuple(value.shape)}"
    if isinstance(value, np.ndarray):
        return f"array{value.shape}"
    if isinstance(value, (list, tuple)):
        return "(" + ", ".join(describe(v) for v in value) + ")"
    if isinstance(value, dict):     # its shapes, never its values (say four arrays)
        parts = {describe(v) for v in value.values()}
        if len(value) > 1 and len(parts) == 1:
            return f"a dict of {len(value)} entries, each {parts.pop()}"
        return "{" + ", ".join(f"{k!s}: {describe(v)}" for k, v in value.items()) + "}"
    text = repr(value)
    return text if len(text) <= 40 else f"{type(value).__name__} of {len(text)} characters"


def describe_case(args: tuple, kwargs: dict) -> str:
    return ", ".join([describe(a) for a in args] + [f"{k}={describe(v)}" for k, v in kwargs.items()])


def _a(word: str) -> str:
    return ("an " if word[0] in "aeiou" else "a ") + word


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


# ------------------------------------------------------------------------ conversions
def as_tensor(value: Any) -> Tensor | None:
    """A tensor (device kept) for tensors, arrays and Python/NumPy scalars; else None."""
    if isinstance(value, Tensor):
        value = value.detach()
        return value.to_dense() if value.layout != torch.strided else value   # sparse
    if isinstance(value, np.ndarray) and value.dtype != object:
        if not value.dtype.isnative:       # another byte order: the same numbers, native
            value = value.astype(value.dtype.newbyteorder("="))
        return torch.from_numpy(np.ascontiguousarray(value))
    if isinstance(value, (bool, np.bool_)):
        return torch.tensor(bool(value))
    if isinstance(value, (int, np.integer)):
        return torch.tensor(int(value))
    if isinstance(value, (float, np.floating)):
        return torch.tensor(float(value), dtype=torch.float64)
    return None


def _kind(t: Tensor) -> str:
    if t.dtype == torch.bool:
        return "boolean"
    if t.is_floating_point():
        return "floating-point"
    if t.is_complex():
        return "complex"
    return "integer"


def upcast(value: Any) -> Any:
    """Floating tensors (and arrays) in float64; everything else unchanged (copied)."""
    if isinstance(value, Tensor):
        return value.detach().to(torch.float64) if value.is_floating_point() else value.clone()
    if isinstance(value, np.ndarray):
        return value.astype(np.float64) if np.issubdtype(value.dtype, np.floating) else value.copy()
    if isinstance(value, (list, tuple)):
        return type(value)(upcast(v) for v in value)
    return value


def precision_of(args: tuple, kwargs: dict, default: torch.dtype) -> torch.dtype:
    """The precision of a case: its most precise floating tensor input, else ``default``."""
    dtypes = [a.dtype for a in (*args, *kwargs.values())
              if isinstance(a, Tensor) and a.is_floating_point()]
    return max(dtypes, key=lambda t: torch.finfo(t).bits) if dtypes else default


# ------------------------------------------------------------------------ kind and dtype
def kind_problem(got: Any, expected: Tensor, precision: torch.dtype) -> str | None:
    """Why ``got`` cannot be the answer whatever its values (None, wrong dtype...)."""
    if got is None:
        return "your function returned None: did you forget `return`?"
    g = as_tensor(got)
    if g is None and isinstance(got, (list, tuple)):
        return (f"your function returned a {type(got).__name__}; the answer is a tensor "
                "(torch.tensor(...) turns a list into one)")
    if g is None:
        return f"expected a tensor or a number, got {type(got).__name__}"
    if g.device.type == "meta":
        return ("your function returned a tensor on the meta device, which has a shape but "
                "no values; compute on the input's device (for example "
                "torch.zeros(..., device=x.device))")
    want, have = _kind(expected), _kind(g)
    if want != have:
        if not isinstance(got, (Tensor, np.ndarray)):
            return (f"your function returned {got!r} ({type(got).__name__}); the answer is "
                    f"{_a(want)} {'number' if expected.dim() == 0 else 'tensor'}")
        hint = {"boolean": " (a comparison such as `a > b` gives booleans)",
                "floating-point": f" (use dtype={_dtype_name(precision)})"}.get(want, "")
        return (f"your function returned {_a(have)} tensor (dtype {_dtype_name(g.dtype)}); "
                f"the answer is {_a(want)} tensor{hint}")
    if want == "floating-point" and torch.finfo(g.dtype).eps > torch.finfo(precision).eps:
        return (f"your function returned {_dtype_name(g.dtype)}, but this exercise works in "
                f"{_dtype_name(precision)}: keep that precision (torch.ones, torch.eye, "
                f"torch.zeros and torch.tensor default to float32; pass "
                f"dtype={_dtype_name(precision)} or dtype=x.dtype)")
    return None


# ------------------------------------------------------------------------ values
def compare(got: Any, expected: Any, tolerance: Any, precision: torch.dtype,
            outputs: Sequence[str] = (), float32_seen: bool = False) -> Verdict:
    """Compare an answer with the float64 reference, elementwise within ``tolerance``.

    ``expected`` may be a tuple of outputs (``tolerance`` then has the same structure);
    ``outputs`` names them, for the message that says which one is wrong.
    ``float32_seen``: a float32 tensor was present in the call (an input, the answer, or
    made on the way); only then does a difference the size of float32's rounding get
    the float32 hint.
    """
    if isinstance(expected, (tuple, list)):
        named = len(outputs) == len(expected)
        if not isinstance(got, (tuple, list)) or len(got) != len(expected):
            what = "None: did you forget `return`?" if got is None else describe(got)
            which = f" ({', '.join(outputs)})" if named else ""
            return False, math.inf, (f"expected a tuple of {len(expected)} values{which}, "
                                     f"got {what}")
        worst = 0.0
        for i, (g, e, t) in enumerate(zip(got, expected, tolerance)):
            ok, diff, why = compare(g, e, t, precision, float32_seen=float32_seen)
            if not ok:
                where = (f"{outputs[i]} (item {i} of the tuple)" if named
                         else f"item {i} of the tuple")
                return False, diff, f"{where}: {why.replace('your output', 'it', 1)}"
            worst = max(worst, diff)
        return True, worst, ""
    e = as_tensor(expected)
    problem = kind_problem(got, e, precision)
    if problem:
        return False, math.inf, problem
    g = as_tensor(got).cpu()
    if tuple(g.shape) != tuple(e.shape):
        return False, math.inf, (f"your output has shape {tuple(g.shape)}, expected "
                                 f"{tuple(e.shape)}")
    if not e.is_floating_point():
        wrong = int((g != e).sum())
        return wrong == 0, float(wrong), f"{wrong} of {e.numel()} entries differ"
    g64, e64 = g.double(), e.double()
    if (torch.isnan(g64) & ~torch.isnan(e64)).any():
        return False, math.inf, "your output contains NaN"
    if (torch.isinf(g64) & ~torch.isinf(e64)).any():
        return False, math.inf, "your output contains infinite values"
    same = (g64 == e64) | (torch.isnan(g64) & torch.isnan(e64))   # equal infinities too
    diff = torch.where(same, 0.0, (g64 - e64).abs())
    worst = float(diff.max()) if diff.numel() else 0.0
    if bool((diff <= torch.as_tensor(tolerance, dtype=torch.float64)).all()):
        return True, worst, ""
    why = f"largest difference {worst:.3g}"
    scale = float(e64.abs().max()) if e64.numel() else 0.0
    if (float32_seen and precision == torch.float64 and scale > 0
            and 1e-10 < worst / scale < 1e-5):
        why += (" (about the rounding of float32: did a tensor get created in float32? "
                "torch.ones, torch.eye and torch.tensor default to float32)")
    return False, worst, why


# ------------------------------------------------------------------------ tolerance
def _perturb(value: Any, u: float, gen: torch.Generator) -> Any:
    if isinstance(value, Tensor) and value.is_floating_point():
        noise = torch.rand(value.shape, generator=gen, dtype=torch.float64) * 2 - 1
        return value * (1 + u * noise)
    return value


def _map2(f: Callable, a: Any, b: Any) -> Any:
    if isinstance(a, (tuple, list)):
        return tuple(_map2(f, x, y) for x, y in zip(a, b))
    return f(a, b)


def tolerance(reference: Callable, args64: tuple, kwargs64: dict, expected: Any,
              precision: torch.dtype, smooth: bool = True,
              slack: Callable[[float], float] | None = None) -> Any:
    """Elementwise absolute tolerance for ``expected`` (same structure).

    ``SAFETY`` x (the largest change of the exact answer, over each output tensor, when
    each floating input entry moves by a relative machine epsilon of ``precision`` + that
    epsilon x the answer's largest entry), plus ``slack(eps)`` for algorithms that lose
    more than their inputs' rounding (``smooth=False``: answers that jump, such as argmax
    paths, get no perturbation estimate).
    """
    u = torch.finfo(precision).eps
    extra = slack(u) if slack else 0.0

    def base(e: Any) -> Any:
        t = as_tensor(e)
        if t is None or not t.is_floating_point():
            return 0.0
        finite = t[torch.isfinite(t)].abs()
        return torch.full(t.shape, u * (float(finite.max()) if finite.numel() else 0.0),
                          dtype=torch.float64)

    def leaves(e: Any) -> Any:
        return tuple(leaves(x) for x in e) if isinstance(e, (tuple, list)) else base(e)

    def floating(e: Any) -> bool:
        if isinstance(e, (tuple, list)):
            return any(floating(x) for x in e)
        t = as_tensor(e)
        return t is not None and t.is_floating_point()

    spread = _map2(lambda e, b: b * 0.0, expected, leaves(expected))
    if smooth and floating(expected):        # booleans and integers are compared exactly
        gen = torch.Generator().manual_seed(0)
        for _ in range(PERTURBATIONS):
            moved = reference(*(_perturb(a, u, gen) for a in args64),
                              **{k: _perturb(v, u, gen) for k, v in kwargs64.items()})

            def change(e, m):
                te, tm = as_tensor(e), as_tensor(m)
                if te is None or not te.is_floating_point():
                    return 0.0
                moved_by = (tm.double() - te.double()).abs().nan_to_num(0.0, posinf=0.0)
                # normwise, as rounding-error bounds are: three random perturbations
                # estimate a tensor's largest change well, but not each entry's (an entry
                # whose noise happened to cancel got a tolerance 15x too small, stop 39)
                return moved_by.max() if moved_by.numel() else 0.0
            spread = _map2(lambda s, c: torch.maximum(torch.as_tensor(s, dtype=torch.float64),
                                                      torch.as_tensor(c, dtype=torch.float64)),
                           spread, _map2(change, expected, moved))
    return _map2(lambda s, b: SAFETY * (torch.as_tensor(s) + torch.as_tensor(b)) + extra,
                 spread, leaves(expected))
