"""Checks for chapter 1's exercises on LayerNorm's derivatives: its Jacobian at one vector
and its backward pass, each in closed form, without autograd. Their references and known
mistakes are the teacher's key (:mod:`lncourse.checks.key.layernorm_grad`)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from lncourse.checks._core import Key, case, generator, run_check

__all__ = ["check_layer_norm_jacobian", "check_layer_norm_backward"]

_NO_AUTOGRAD = "this exercise asks for the closed form, without autograd"

NO_AUTOGRAD = {path: _NO_AUTOGRAD for path in (
    "torch.autograd.grad", "torch.autograd.backward", "torch.Tensor.backward",
    "torch.autograd.functional.jacobian", "torch.autograd.functional.vjp",
    "torch.autograd.functional.jvp", "torch.autograd.functional.hessian",
    "torch.func.jacrev", "torch.func.jacfwd", "torch.func.vjp", "torch.func.jvp",
    "torch.func.grad", "torch.func.linearize", "torch.func.hessian", "torch.func.grad_and_value",
    "torch._functorch.eager_transforms.linearize", "torch._functorch.eager_transforms.jvp",
    "torch._functorch.eager_transforms.vjp", "torch._functorch.eager_transforms.jacrev",
    "torch._functorch.eager_transforms.jacfwd", "torch._functorch.eager_transforms.grad",
    "torch._functorch.eager_transforms.hessian", "torch.autograd.forward_ad.make_dual",
    "torch.autograd.forward_ad.dual_level", "torch.autograd.functional.vhp",
    "torch.autograd.functional.hvp", "torch.autograd.functional.jacobian",
    "torch.Tensor.requires_grad_",
    # the forward-mode machinery under jvp, linearize and make_dual
    "aten._new_zeros_with_same_feature_meta", "aten._make_dual")}


def check_layer_norm_jacobian(fn: Callable[[Tensor, Tensor, float], Tensor], *,
                              hidden: bool = False) -> None:
    """``layer_norm_jacobian(x, gamma, eps)``: x and gamma (d,), eps a number -> (d, d),
    the Jacobian of LayerNorm with gain gamma and eps at x, in closed form, judged
    against autograd."""
    g = generator(4)
    specs = [(3, 1.0, 0.0, 1e-5), (5, 2.0, 1.0, 0.1), (8, 0.5, -3.0, 1.0), (16, 1.0, 0.0, 1e-5)]
    if hidden:   # d = 3, not 2: at d = 2 every row is (+-1, -+1) after scaling, the exact
        # Jacobian is ~eps/var, and any formula returns rounding noise of its O(1/s) terms
        specs += [(3, 1.0, 0.0, 1e-5), (32, 1.0, 5.0, 0.01), (6, 0.01, 0.0, 1e-3)]
    cases = [case(torch.randn(d, generator=g, dtype=torch.float64) * spread + offset,
                  torch.randn(d, generator=g, dtype=torch.float64) + 1, eps)
             for d, spread, offset, eps in specs]
    if hidden:  # a constant vector: only eps keeps LayerNorm defined
        cases.append(case(torch.full((4,), 2.0, dtype=torch.float64),
                          torch.randn(4, generator=g, dtype=torch.float64), 0.5))
    run_check(fn, "layer_norm_jacobian", ["x", "gamma", "eps"], cases,
              key=Key(__name__, hidden), forbidden=NO_AUTOGRAD)


def check_layer_norm_backward(fn: Callable[[Tensor, Tensor, float, Tensor],
                                           tuple[Tensor, Tensor, Tensor]], *,
                              hidden: bool = False) -> None:
    """``layer_norm_backward(x, gamma, eps, grad_out)``: x and grad_out (..., d), gamma
    (d,), eps a number -> (grad_x, grad_gamma, grad_beta), LayerNorm's backward pass
    without autograd, judged against autograd through F.layer_norm."""
    g = generator(5)
    specs = [((4, 8), 1.0, 0.0, 1e-5), ((3, 5, 16), 2.0, 1.0, 0.1), ((6, 3), 0.5, -3.0, 1.0),
             ((2, 32), 1.0, 0.0, 1e-5)]
    if hidden:
        # a batch of one row; d = 3, not 2, where grad_x is pure rounding noise (a correct
        # answer failed by 5.8e-16 against a reference of that size, stop 37)
        specs += [((1, 3), 1.0, 0.0, 1e-5), ((2, 2, 2, 24), 1.0, 50.0, 1e-3),
                  ((5, 7), 0.01, 0.0, 1e-2), ((64, 384), 3.0, 0.5, 1e-12)]
    cases = []
    for shape, spread, offset, eps in specs:
        x = torch.randn(shape, generator=g, dtype=torch.float64) * spread + offset
        gamma = torch.randn(shape[-1], generator=g, dtype=torch.float64) + 1
        grad_out = torch.randn(shape, generator=g, dtype=torch.float64)
        cases.append(case(x, gamma, eps, grad_out))
    if hidden:   # float32 inputs, as a model has them; constant rows, kept defined by eps
        cases.append(case(torch.randn(8, 12, generator=g) * 4 + 2,
                          torch.randn(12, generator=g) + 1, 1e-5, torch.randn(8, 12, generator=g)))
        cases.append(case(torch.full((3, 4), 2.0, dtype=torch.float64),
                          torch.randn(4, generator=g, dtype=torch.float64), 0.5,
                          torch.randn(3, 4, generator=g, dtype=torch.float64)))
    run_check(fn, "layer_norm_backward", ["x", "gamma", "eps", "grad_out"], cases,
              key=Key(__name__, hidden), forbidden=NO_AUTOGRAD,
              outputs=("grad_x", "grad_gamma", "grad_beta"))
