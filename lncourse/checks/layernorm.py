"""Checks for the exercises of chapter 1 (LayerNorm as projection and scaling); those on
LayerNorm's derivatives (the Jacobian, the backward pass) are in :mod:`.layernorm_grad`.
Their references and known mistakes are the teacher's key
(:mod:`lncourse.checks.key.layernorm`)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from lncourse.checks._core import Key, case, drawn_ints, generator, run_check

__all__ = ["check_layer_norm_fgh", "check_centering_matrix", "check_layer_norm_on_plane",
           "check_fold_into_linear", "check_rms_norm_gain"]

_NO_LAYER_NORM = "this exercise asks you to write LayerNorm yourself, without calling one"

NO_LAYER_NORM = {path: _NO_LAYER_NORM for path in (
    "torch.nn.functional.layer_norm", "torch.layer_norm", "torch.native_layer_norm",
    "lncourse.layernorm.layer_norm", "lncourse.layernorm.FactorizedLayerNorm.forward",
    "torch.nn.functional.group_norm", "torch.group_norm", "torch.nn.LayerNorm.forward",
    "torch.nn.GroupNorm.forward",
    # the operators themselves, whatever the route (torch.ops.aten..., F.group_norm(x, 1))
    "aten.native_layer_norm", "aten.native_group_norm", "aten.layer_norm", "aten.group_norm")}

_NO_RMS_NORM = "this exercise asks you to write RMSNorm yourself, without calling one"

NO_RMS_NORM = {path: _NO_RMS_NORM for path in (
    "torch.nn.functional.rms_norm", "torch.rms_norm", "torch.nn.RMSNorm.forward",
    "aten.rms_norm", "aten._fused_rms_norm")}

_NO_PROJECTION = "this exercise asks you to build P yourself, not to call the course's helper"

NO_PROJECTION = {"lncourse.layernorm.projection_matrix": _NO_PROJECTION}


def _fgh_cases(hidden: bool) -> list:
    g = generator(0)
    specs = [((4, 8), 1e-5, 0.0, 1.0), ((6, 16), 0.1, 3.0, 1.0), ((2, 3, 5), 1e-5, -2.0, 4.0),
             ((5, 2), 1e-5, 0.0, 1.0), ((3, 8), 1e-3, 100.0, 0.01)]
    if hidden:
        specs += [((1, 2), 1e-5, 0.5, 1.0), ((2, 2, 3, 6), 1e-5, 0.0, 2.0),
                  ((64, 32), 1e-5, 0.0, 1.0), ((4, 8), 0.5, 10.0, 0.1),
                  ((3, 7), 1e-5, 1000.0, 1.0)]
    cases = []
    for shape, eps, offset, spread in specs:
        d = shape[-1]
        x = torch.randn(shape, generator=g) * spread + offset
        cases.append(case(x, torch.randn(d, generator=g) + 1.0, torch.randn(d, generator=g), eps))
    if hidden:
        constant = torch.full((2, 5), 3.0)                    # a constant row: LN gives beta
        cases.append(case(constant, -torch.rand(5, generator=g), torch.randn(5, generator=g), 1e-5))
        x = torch.randn(3, 4, generator=g, dtype=torch.float64)
        cases.append(case(x, torch.rand(4, generator=g, dtype=torch.float64),
                          torch.zeros(4, dtype=torch.float64), 1e-5))
    return cases


def check_layer_norm_fgh(fn: Callable[[Tensor, Tensor, Tensor, float], Tensor], *,
                         hidden: bool = False) -> None:
    """``layer_norm_fgh(x, gamma, beta, eps)``: x (..., d), gamma and beta (d,), eps a
    number -> (..., d), LayerNorm over the last axis as h(g(f(x))), judged against
    F.layer_norm."""
    run_check(fn, "layer_norm_fgh", ["x", "gamma", "beta", "eps"], _fgh_cases(hidden),
              key=Key(__name__, hidden), forbidden=NO_LAYER_NORM)


def check_centering_matrix(fn: Callable[[int], Tensor], *, hidden: bool = False) -> None:
    """``centering_matrix(d)``: an int -> the (d, d) centring matrix P, with
    P x = x - mu(x) 1 for every x, in float64."""
    # teacher-only sizes: two small, one large, drawn from the grader's key
    sizes = (3, 5, 16, 2) + ((*drawn_ints(10, 4, 40, 2), *drawn_ints(11, 41, 128))
                             if hidden else ())
    run_check(fn, "centering_matrix", ["d"], [case(d) for d in sizes],
              key=Key(__name__, hidden), forbidden=NO_PROJECTION)


def _unit_orthogonal_to_ones(d: int, g: torch.Generator) -> Tensor:
    v = torch.randn(d, generator=g, dtype=torch.float64)
    v = v - v.mean()
    return v / v.norm()


def check_layer_norm_on_plane(fn: Callable[[Tensor, Tensor, Tensor], Tensor], *,
                              hidden: bool = False) -> None:
    """``layer_norm_on_plane(s, t, v)``: s and t (n,), v (d,) a unit vector orthogonal
    to 1 -> (n, d), the LayerNorm of s_k v + t_k 1 for every pair (s_k, t_k)."""
    g = generator(1)
    sizes = [(3, 5), (8, 7), (16, 4)] + ([(2, 6), (64, 3), (5, 1)] if hidden else [])
    cases = []
    for d, n in sizes:
        s = torch.randn(n, generator=g, dtype=torch.float64) * 3
        s[0] = abs(s[0]) + 0.5
        if n > 1:
            s[1] = -abs(s[1]) - 0.5  # both signs present
        t = torch.randn(n, generator=g, dtype=torch.float64) * 5
        cases.append(case(s, t, _unit_orthogonal_to_ones(d, g)))
    if hidden:  # tiny s against a large t
        cases.append(case(torch.tensor([1e-3, -1e-3], dtype=torch.float64),
                          torch.tensor([50.0, -50.0], dtype=torch.float64),
                          _unit_orthogonal_to_ones(4, g)))
    run_check(fn, "layer_norm_on_plane", ["s", "t", "v"], cases,
              key=Key(__name__, hidden), forbidden=NO_LAYER_NORM)


def check_fold_into_linear(fn: Callable[[Tensor, Tensor, Tensor, Tensor],
                                        tuple[Tensor, Tensor]], *, hidden: bool = False) -> None:
    """``fold_into_linear(W, b, gamma, beta)``: W (d_out, d), b (d_out,), gamma and beta
    (d,) -> (W_folded, b_folded), the weight and bias of LayerNorm followed by
    y = W z + b, folded into one linear map of x / sigma(x)."""
    g = generator(2)
    sizes = [(3, 4), (5, 6), (16, 16)] + ([(1, 2), (32, 64), (7, 3)] if hidden else [])
    cases = []
    for d_out, d in sizes:
        W = torch.randn(d_out, d, generator=g, dtype=torch.float64)
        b = torch.randn(d_out, generator=g, dtype=torch.float64)
        gamma = torch.randn(d, generator=g, dtype=torch.float64) + 1
        beta = torch.randn(d, generator=g, dtype=torch.float64)
        cases.append(case(W, b, gamma, beta))
    run_check(fn, "fold_into_linear", ["W", "b", "gamma", "beta"], cases,
              key=Key(__name__, hidden), outputs=("the folded W", "the folded b"))


def check_rms_norm_gain(fn: Callable[[Tensor, Tensor, float], Tensor], *,
                        hidden: bool = False) -> None:
    """``rms_norm_gain(x, gain, eps)``: x (..., d), gain (d,), eps a number -> (..., d),
    RMSNorm with its gain over the last axis."""
    g = generator(3)
    specs = [((4, 8), 1e-6, 0.0), ((3, 16), 1e-6, 2.0), ((2, 5, 4), 0.1, -1.0), ((6, 2), 1e-6, 0.5)]
    if hidden:
        specs += [((1, 2), 1e-6, 0.0), ((2, 2, 2, 9), 1e-6, 0.0), ((3, 8), 1e-6, 500.0)]
    cases = [case(torch.randn(shape, generator=g) + offset,
                  torch.randn(shape[-1], generator=g) + 1, eps) for shape, eps, offset in specs]
    if hidden:
        cases.append(case(torch.zeros(2, 3), torch.ones(3), 1e-6))           # zero rows
        cases.append(case(torch.randn(2, 6, generator=g, dtype=torch.float64),
                          torch.ones(6, dtype=torch.float64), 1e-6))
    run_check(fn, "rms_norm_gain", ["x", "gain", "eps"], cases,
              key=Key(__name__, hidden), forbidden=NO_RMS_NORM)
