"""Answers to every exercise as learners write them: for each chapter, a reference
solution written apart from the checks, other right answers, and wrong ones.

Each is an ordinary function registered under the exercise's function name with
``@wrong(function, match)`` (``match``: a fragment of the message the check must give)
or ``@right(function)``. The check tests call them; the grader test writes their
source into notebooks, renamed to the exercise's function. So each is self-contained
and uses only names that every chapter's set-up cell imports: ``math``, ``np``,
``torch`` and ``Tensor`` (``torch.nn.functional`` is spelled out).
"""

from __future__ import annotations

import inspect
import math
import re
import textwrap
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch


@dataclass(frozen=True)
class Answer:
    function: str                 # the exercise's function name
    fn: Callable
    match: str | None = None      # for a wrong answer: what the check's message must say

    @property
    def source(self) -> str:
        """The answer's source, as a learner's cell would define it."""
        lines = textwrap.dedent(inspect.getsource(self.fn)).splitlines()
        body = "\n".join(line for line in lines if not line.startswith("@"))
        return re.sub(r"^def \w+\(", f"def {self.function}(", body, count=1)


WRONG: dict[str, list[Answer]] = {}
RIGHT: dict[str, list[Answer]] = {}


def wrong(function: str, match: str):
    def register(fn):
        WRONG.setdefault(function, []).append(Answer(function, fn, match))
        return fn
    return register


def right(function: str):
    def register(fn):
        RIGHT.setdefault(function, []).append(Answer(function, fn))
        return fn
    return register


# ================================================================ chapter 1
# The reference solutions, written apart from the checks' own references.
@right("layer_norm_fgh")
def layer_norm_fgh(x, gamma, beta, eps):
    c = x - x.mean(-1, keepdim=True)
    return c / torch.sqrt((c * c).mean(-1, keepdim=True) + eps) * gamma + beta


@right("centering_matrix")
def centering_matrix(d):
    return torch.eye(d, dtype=torch.float64) - torch.ones(d, d, dtype=torch.float64) / d


@right("layer_norm_on_plane")
def layer_norm_on_plane(s, t, v):
    return math.sqrt(v.shape[-1]) * torch.sign(s)[:, None] * v


@right("fold_into_linear")
def fold_into_linear(W, b, gamma, beta):
    d = W.shape[1]
    P = torch.eye(d, dtype=W.dtype) - torch.ones(d, d, dtype=W.dtype) / d
    return (W * gamma) @ P, W @ beta + b


@right("rms_norm_gain")
def rms_norm_gain(x, gain, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * gain


@right("layer_norm_jacobian")
def layer_norm_jacobian(x, gamma, eps):
    d = x.shape[-1]
    c = x - x.mean()
    s = torch.sqrt((c * c).mean() + eps)
    z = c / s
    P = torch.eye(d, dtype=x.dtype) - torch.ones(d, d, dtype=x.dtype) / d
    return gamma[:, None] * (P - torch.outer(z, z) / d) / s


# Exercise 1.7: LayerNorm's backward pass, without autograd.
@right("layer_norm_backward")
def layer_norm_backward(x, gamma, eps, grad_out):
    c = x - x.mean(-1, keepdim=True)
    s = torch.sqrt((c * c).mean(-1, keepdim=True) + eps)
    z = c / s
    gz = grad_out * gamma
    gx = (gz - gz.mean(-1, keepdim=True) - z * (gz * z).mean(-1, keepdim=True)) / s
    rows = tuple(range(x.dim() - 1))
    return gx, (grad_out * z).sum(rows), grad_out.sum(rows)


@right("layer_norm_backward")
def layer_norm_backward_flattened(x, gamma, eps, grad_out):
    d = x.shape[-1]
    X, G = x.reshape(-1, d), grad_out.reshape(-1, d)
    mu = X.mean(1, keepdim=True)
    inv = 1.0 / torch.sqrt(X.var(1, unbiased=False, keepdim=True) + eps)
    xhat = (X - mu) * inv
    dxhat = G * gamma
    gx = inv / d * (d * dxhat - dxhat.sum(1, keepdim=True)
                    - xhat * (dxhat * xhat).sum(1, keepdim=True))
    return gx.reshape(x.shape), (G * xhat).sum(0), G.sum(0)


@wrong("layer_norm_backward", "lacks the mean term")
def layer_norm_backward_no_mean(x, gamma, eps, grad_out):
    c = x - x.mean(-1, keepdim=True)
    s = torch.sqrt((c * c).mean(-1, keepdim=True) + eps)
    z = c / s
    gz = grad_out * gamma
    rows = tuple(range(x.dim() - 1))
    return (gz - z * (gz * z).mean(-1, keepdim=True)) / s, (grad_out * z).sum(rows), grad_out.sum(rows)


@wrong("layer_norm_backward", "lacks the z term")
def layer_norm_backward_no_z(x, gamma, eps, grad_out):
    c = x - x.mean(-1, keepdim=True)
    s = torch.sqrt((c * c).mean(-1, keepdim=True) + eps)
    gz = grad_out * gamma
    rows = tuple(range(x.dim() - 1))
    return (gz - gz.mean(-1, keepdim=True)) / s, (grad_out * c / s).sum(rows), grad_out.sum(rows)


@wrong("layer_norm_backward", "gamma is missing from grad_x")
def layer_norm_backward_no_gamma(x, gamma, eps, grad_out):
    c = x - x.mean(-1, keepdim=True)
    s = torch.sqrt((c * c).mean(-1, keepdim=True) + eps)
    z = c / s
    gx = (grad_out - grad_out.mean(-1, keepdim=True) - z * (grad_out * z).mean(-1, keepdim=True)) / s
    rows = tuple(range(x.dim() - 1))
    return gx, (grad_out * z).sum(rows), grad_out.sum(rows)


@wrong("layer_norm_backward", "unbiased variance")
def layer_norm_backward_unbiased(x, gamma, eps, grad_out):
    c = x - x.mean(-1, keepdim=True)
    s = torch.sqrt(x.var(-1, keepdim=True) + eps)
    z = c / s
    gz = grad_out * gamma
    gx = (gz - gz.mean(-1, keepdim=True) - z * (gz * z).mean(-1, keepdim=True)) / s
    rows = tuple(range(x.dim() - 1))
    return gx, (grad_out * z).sum(rows), grad_out.sum(rows)


@wrong("layer_norm_backward", "epsilon is missing")
def layer_norm_backward_no_eps(x, gamma, eps, grad_out):
    c = x - x.mean(-1, keepdim=True)
    s = torch.sqrt((c * c).mean(-1, keepdim=True))
    z = c / s
    gz = grad_out * gamma
    gx = (gz - gz.mean(-1, keepdim=True) - z * (gz * z).mean(-1, keepdim=True)) / s
    rows = tuple(range(x.dim() - 1))
    return gx, (grad_out * z).sum(rows), grad_out.sum(rows)


@wrong("layer_norm_backward", "grad_gamma is not summed")
def layer_norm_backward_gamma_per_row(x, gamma, eps, grad_out):
    c = x - x.mean(-1, keepdim=True)
    s = torch.sqrt((c * c).mean(-1, keepdim=True) + eps)
    z = c / s
    gz = grad_out * gamma
    gx = (gz - gz.mean(-1, keepdim=True) - z * (gz * z).mean(-1, keepdim=True)) / s
    rows = tuple(range(x.dim() - 1))
    return gx, grad_out * z, grad_out.sum(rows)


@wrong("layer_norm_backward", "grad_beta is a mean")
def layer_norm_backward_beta_mean(x, gamma, eps, grad_out):
    c = x - x.mean(-1, keepdim=True)
    s = torch.sqrt((c * c).mean(-1, keepdim=True) + eps)
    z = c / s
    gz = grad_out * gamma
    gx = (gz - gz.mean(-1, keepdim=True) - z * (gz * z).mean(-1, keepdim=True)) / s
    rows = tuple(range(x.dim() - 1))
    return gx, (grad_out * z).sum(rows), grad_out.mean(rows)


@wrong("layer_norm_backward", "without autograd")
def layer_norm_backward_autograd(x, gamma, eps, grad_out):
    x = x.clone().requires_grad_(True)
    y = torch.nn.functional.layer_norm(x, x.shape[-1:], gamma, None, eps)
    (gx,) = torch.autograd.grad(y, (x,), grad_out)
    c = x.detach() - x.detach().mean(-1, keepdim=True)
    z = c / torch.sqrt((c * c).mean(-1, keepdim=True) + eps)
    rows = tuple(range(x.dim() - 1))
    return gx, (grad_out * z).sum(rows), grad_out.sum(rows)


# Other right answers, and wrong ones.
@right("layer_norm_fgh")
def layer_norm_in_float64(x, gamma, beta, eps):
    x64 = x.double()
    c = x64 - x64.mean(-1, keepdim=True)
    return c / torch.sqrt((c * c).mean(-1, keepdim=True) + eps) * gamma.double() + beta.double()


@right("layer_norm_fgh")
def layer_norm_with_var(x, gamma, beta, eps):
    return ((x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + eps)
            * gamma + beta)


@wrong("layer_norm_fgh", "unbiased")
def layer_norm_unbiased(x, gamma, beta, eps):
    c = x - x.mean(-1, keepdim=True)
    return c / torch.sqrt(x.var(-1, keepdim=True) + eps) * gamma + beta


@wrong("layer_norm_fgh", "outside the square root")
def layer_norm_eps_outside(x, gamma, beta, eps):
    c = x - x.mean(-1, keepdim=True)
    return c / (torch.sqrt((c * c).mean(-1, keepdim=True)) + eps) * gamma + beta


@wrong("layer_norm_fgh", "no centring")
def layer_norm_not_centred(x, gamma, beta, eps):
    c = x - x.mean(-1, keepdim=True)
    return x / torch.sqrt((c * c).mean(-1, keepdim=True) + eps) * gamma + beta


@wrong("layer_norm_fgh", "no centring")
def layer_norm_root_mean_square(x, gamma, beta, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * gamma + beta


@wrong("layer_norm_fgh", "wrong axis")
def layer_norm_over_batch(x, gamma, beta, eps):
    c = x - x.mean(0, keepdim=True)
    return c / torch.sqrt((c * c).mean(0, keepdim=True) + eps) * gamma + beta


@wrong("layer_norm_fgh", "swapped")
def layer_norm_swapped(x, gamma, beta, eps):
    c = x - x.mean(-1, keepdim=True)
    return c / torch.sqrt((c * c).mean(-1, keepdim=True) + eps) * beta + gamma


@wrong("layer_norm_fgh", "epsilon is ignored")
def layer_norm_no_eps(x, gamma, beta, eps):
    c = x - x.mean(-1, keepdim=True)
    return c / torch.sqrt((c * c).mean(-1, keepdim=True)) * gamma + beta


@wrong("layer_norm_fgh", "called torch.nn.functional.layer_norm")
def layer_norm_by_torch(x, gamma, beta, eps):
    return torch.nn.functional.layer_norm(x, x.shape[-1:], gamma, beta, eps)


@wrong("layer_norm_fgh", "boolean tensor")
def layer_norm_as_bool(x, gamma, beta, eps):
    return torch.ones_like(x, dtype=torch.bool)


@wrong("centering_matrix", "divide the all-ones")
def centering_without_d(d):
    return torch.eye(d, dtype=torch.float64) - torch.ones(d, d, dtype=torch.float64)


@wrong("centering_matrix", "complement")
def centering_onto_ones(d):
    return torch.ones(d, d, dtype=torch.float64) / d


@wrong("centering_matrix", "d - 1")
def centering_by_d_minus_1(d):
    return torch.eye(d, dtype=torch.float64) - torch.ones(d, d, dtype=torch.float64) / (d - 1)


@wrong("centering_matrix", "only the diagonal")
def centering_diagonal(d):
    return torch.eye(d, dtype=torch.float64) * (1 - 1 / d)


@wrong("centering_matrix", "returned float32, but this exercise works in float64")
def centering_in_float32(d):
    return torch.eye(d) - torch.ones(d, d) / d


@wrong("centering_matrix", "did you forget `return`")
def centering_no_return(d):
    torch.eye(d, dtype=torch.float64) - torch.ones(d, d, dtype=torch.float64) / d


@wrong("layer_norm_on_plane", "sign of s")
def plane_sign_lost(s, t, v):
    return math.sqrt(len(v)) * v.expand(len(s), -1)


@wrong("layer_norm_on_plane", "radius")
def plane_unit_radius(s, t, v):
    return torch.sign(s)[:, None] * v


@wrong("layer_norm_on_plane", "t 1 component")
def plane_keeps_t(s, t, v):
    return math.sqrt(len(v)) * torch.sign(s)[:, None] * v + t[:, None]


@wrong("layer_norm_on_plane", "size of s")
def plane_keeps_s(s, t, v):
    return math.sqrt(len(v)) * s[:, None] * v


@wrong("layer_norm_on_plane", "called torch.nn.functional.layer_norm")
def plane_by_layer_norm(s, t, v):
    points = s[:, None] * v + t[:, None]
    return torch.nn.functional.layer_norm(points, points.shape[-1:], eps=0.0)


@right("fold_into_linear")
def fold_without_p(W, b, gamma, beta):
    scaled = W * gamma
    return scaled - scaled.mean(1, keepdim=True), W @ beta + b


@wrong("fold_into_linear", "centring is missing")
def fold_no_centring(W, b, gamma, beta):
    return W * gamma, W @ beta + b


@wrong("fold_into_linear", "wrong order")
def fold_wrong_order(W, b, gamma, beta):
    return (W - W.mean(1, keepdim=True)) * gamma, W @ beta + b


@wrong("fold_into_linear", "forgets beta")
def fold_no_beta(W, b, gamma, beta):
    scaled = W * gamma
    return scaled - scaled.mean(1, keepdim=True), b


@wrong("fold_into_linear", "gamma is missing")
def fold_no_gamma(W, b, gamma, beta):
    return W - W.mean(1, keepdim=True), W @ beta + b


@wrong("fold_into_linear", "multiplies beta by gamma")
def fold_gamma_beta(W, b, gamma, beta):
    scaled = W * gamma
    return scaled - scaled.mean(1, keepdim=True), W @ (gamma * beta) + b


@wrong("rms_norm_gain", "that is LayerNorm")
def rms_centred(x, gain, eps):
    c = x - x.mean(-1, keepdim=True)
    return c / torch.sqrt((c * c).mean(-1, keepdim=True) + eps) * gain


@wrong("rms_norm_gain", "outside the square root")
def rms_eps_outside(x, gain, eps):
    return x / (torch.sqrt((x * x).mean(-1, keepdim=True)) + eps) * gain


@wrong("rms_norm_gain", "Euclidean norm")
def rms_by_norm(x, gain, eps):
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + eps) * gain


@wrong("rms_norm_gain", "standard deviation")
def rms_by_std(x, gain, eps):
    return x / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + eps) * gain


@wrong("rms_norm_gain", "gain is missing")
def rms_no_gain(x, gain, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)



@right("layer_norm_jacobian")
def jacobian_with_projection_matrix(x, gamma, eps):
    d = len(x)
    c = x - x.mean()
    s = torch.sqrt((c * c).mean() + eps)
    z = c / s
    P = torch.eye(d, dtype=x.dtype) - 1 / d
    return torch.diag(gamma) @ (P - torch.outer(z, z) / d) / s


@wrong("layer_norm_jacobian", "epsilon is missing")
def jacobian_no_eps(x, gamma, eps):
    d = len(x)
    c = x - x.mean()
    s = torch.sqrt((c * c).mean())
    z = c / s
    return gamma[:, None] * (torch.eye(d, dtype=x.dtype) - 1 / d - torch.outer(z, z) / d) / s


@wrong("layer_norm_jacobian", "gamma multiplies the columns")
def jacobian_gamma_columns(x, gamma, eps):
    d = len(x)
    c = x - x.mean()
    s = torch.sqrt((c * c).mean() + eps)
    z = c / s
    return (torch.eye(d, dtype=x.dtype) - 1 / d - torch.outer(z, z) / d) / s * gamma


@wrong("layer_norm_jacobian", "gamma is missing")
def jacobian_no_gamma(x, gamma, eps):
    d = len(x)
    c = x - x.mean()
    s = torch.sqrt((c * c).mean() + eps)
    z = c / s
    return (torch.eye(d, dtype=x.dtype) - 1 / d - torch.outer(z, z) / d) / s


@wrong("layer_norm_jacobian", "factor 1 / s is missing")
def jacobian_no_s(x, gamma, eps):
    d = len(x)
    c = x - x.mean()
    z = c / torch.sqrt((c * c).mean() + eps)
    return gamma[:, None] * (torch.eye(d, dtype=x.dtype) - 1 / d - torch.outer(z, z) / d)


@wrong("layer_norm_jacobian", "z z\\^T / d term is missing")
def jacobian_no_outer(x, gamma, eps):
    d = len(x)
    c = x - x.mean()
    s = torch.sqrt((c * c).mean() + eps)
    return gamma[:, None] * (torch.eye(d, dtype=x.dtype) - 1 / d) / s


@wrong("layer_norm_jacobian", "P is missing")
def jacobian_no_p(x, gamma, eps):
    d = len(x)
    c = x - x.mean()
    s = torch.sqrt((c * c).mean() + eps)
    z = c / s
    return gamma[:, None] * (torch.eye(d, dtype=x.dtype) - torch.outer(z, z) / d) / s


@wrong("layer_norm_jacobian", "not divided by d")
def jacobian_outer_not_divided(x, gamma, eps):
    d = len(x)
    c = x - x.mean()
    s = torch.sqrt((c * c).mean() + eps)
    z = c / s
    return gamma[:, None] * (torch.eye(d, dtype=x.dtype) - 1 / d - torch.outer(z, z)) / s


@wrong("layer_norm_jacobian", "without autograd")
def jacobian_by_autograd(x, gamma, eps):
    return torch.autograd.functional.jacobian(
        lambda z: torch.nn.functional.layer_norm(z, z.shape, gamma, None, eps), x)


@wrong("layer_norm_jacobian", "without autograd")
def jacobian_by_backward(x, gamma, eps):
    rows = []
    for k in range(len(x)):
        z = x.clone().requires_grad_()
        c = z - z.mean()
        y = gamma * c / torch.sqrt((c * c).mean() + eps)
        y[k].backward()
        rows.append(z.grad)
    return torch.stack(rows)


# ================================================================ chapter 2
# The reference solutions, written apart from the checks' own references.
@right("hull_vertices_2d")
def hull_vertices_2d(points):
    pts = points.double()
    order = sorted(range(len(pts)), key=lambda j: (float(pts[j, 0]), float(pts[j, 1])))

    def cross(o, a, b):
        return float((pts[a, 0] - pts[o, 0]) * (pts[b, 1] - pts[o, 1])
                     - (pts[a, 1] - pts[o, 1]) * (pts[b, 0] - pts[o, 0]))

    def half(indices):
        stack = []
        for j in indices:
            while len(stack) >= 2 and cross(stack[-2], stack[-1], j) <= 0:
                stack.pop()
            stack.append(j)
        return stack

    out = torch.zeros(len(pts), dtype=torch.bool)
    out[sorted(set(half(order)) | set(half(order[::-1])))] = True
    return out


@right("unselectable_lp")
def unselectable_lp(keys):
    from scipy.optimize import linprog
    K = keys.double().numpy()
    out = torch.zeros(len(K), dtype=torch.bool)
    for i in range(len(K)):
        others = K[np.abs(K - K[i]).max(1) > 0]          # twins are the same point
        if len(others) == 0:
            continue
        res = linprog(np.zeros(len(others)), A_eq=np.vstack([others.T, np.ones(len(others))]),
                      b_eq=np.append(K[i], 1.0), bounds=(0, None), method="highs")
        out[i] = res.status == 0
    return out


@right("ellipsoid_query")
def ellipsoid_query(keys, gamma, beta, i):
    return (keys[i] - beta) / gamma ** 2


@right("braid_reflect")
def braid_reflect(keys, i, steps):
    q = keys[i].clone()
    for _ in range(steps):
        scores = keys @ q
        scores[i] = -math.inf
        j = int(torch.argmax(scores))
        if float(keys[i] @ q) > float(scores[j]):
            return q
        w = keys[j] - keys[i]
        q = q - 2 * (q @ w) / (w @ w) * w
    return q


# Other right answers, and wrong ones.


@wrong("hull_vertices_2d", "middle of an edge")
def hull_keeps_edge_points(points):
    pts = points.double()
    order = sorted(range(len(pts)), key=lambda j: (float(pts[j, 0]), float(pts[j, 1])))

    def cross(o, a, b):
        return float((pts[a, 0] - pts[o, 0]) * (pts[b, 1] - pts[o, 1])
                     - (pts[a, 1] - pts[o, 1]) * (pts[b, 0] - pts[o, 0]))

    def half(indices):
        stack = []
        for j in indices:
            while len(stack) >= 2 and cross(stack[-2], stack[-1], j) < 0:
                stack.pop()
            stack.append(j)
        return stack

    out = torch.zeros(len(pts), dtype=torch.bool)
    out[sorted(set(half(order)) | set(half(order[::-1])))] = True
    return out


@wrong("hull_vertices_2d", "one half of the hull")
def hull_lower_only(points):
    pts = points.double()
    order = sorted(range(len(pts)), key=lambda j: (float(pts[j, 0]), float(pts[j, 1])))

    def cross(o, a, b):
        return float((pts[a, 0] - pts[o, 0]) * (pts[b, 1] - pts[o, 1])
                     - (pts[a, 1] - pts[o, 1]) * (pts[b, 0] - pts[o, 0]))

    stack = []
    for j in order:
        while len(stack) >= 2 and cross(stack[-2], stack[-1], j) <= 0:
            stack.pop()
        stack.append(j)
    out = torch.zeros(len(pts), dtype=torch.bool)
    out[stack] = True
    return out


@wrong("hull_vertices_2d", "interior points")
def hull_interior(points):
    pts = points.double()
    order = sorted(range(len(pts)), key=lambda j: (float(pts[j, 0]), float(pts[j, 1])))

    def cross(o, a, b):
        return float((pts[a, 0] - pts[o, 0]) * (pts[b, 1] - pts[o, 1])
                     - (pts[a, 1] - pts[o, 1]) * (pts[b, 0] - pts[o, 0]))

    def half(indices):
        stack = []
        for j in indices:
            while len(stack) >= 2 and cross(stack[-2], stack[-1], j) <= 0:
                stack.pop()
            stack.append(j)
        return stack

    out = torch.ones(len(pts), dtype=torch.bool)
    out[sorted(set(half(order)) | set(half(order[::-1])))] = False
    return out


@wrong("hull_vertices_2d", "every point")
def hull_everything(points):
    return torch.ones(len(points), dtype=torch.bool)


@wrong("hull_vertices_2d", "called scipy.spatial.ConvexHull")
def hull_by_qhull(points):
    from scipy.spatial import ConvexHull
    out = torch.zeros(len(points), dtype=torch.bool)
    out[ConvexHull(points.numpy()).vertices] = True
    return out


@wrong("unselectable_lp", "twin")
def lp_twins_unselectable(keys):
    from scipy.optimize import linprog
    K = keys.double().numpy()
    out = torch.zeros(len(K), dtype=torch.bool)
    for i in range(len(K)):
        others = np.delete(K, i, axis=0)
        res = linprog(np.zeros(len(others)), A_eq=np.vstack([others.T, np.ones(len(others))]),
                      b_eq=np.append(K[i], 1.0), bounds=(0, None), method="highs")
        out[i] = res.status == 0
    return out


@wrong("unselectable_lp", ">= 0")
def lp_free_weights(keys):
    from scipy.optimize import linprog
    K = keys.double().numpy()
    out = torch.zeros(len(K), dtype=torch.bool)
    for i in range(len(K)):
        others = K[np.abs(K - K[i]).max(1) > 0]
        res = linprog(np.zeros(len(others)), A_eq=np.vstack([others.T, np.ones(len(others))]),
                      b_eq=np.append(K[i], 1.0), bounds=(None, None), method="highs")
        out[i] = res.status == 0
    return out


@wrong("unselectable_lp", "its own candidates")
def lp_with_itself(keys):
    from scipy.optimize import linprog
    K = keys.double().numpy()
    out = torch.zeros(len(K), dtype=torch.bool)
    for i in range(len(K)):
        res = linprog(np.zeros(len(K)), A_eq=np.vstack([K.T, np.ones(len(K))]),
                      b_eq=np.append(K[i], 1.0), bounds=(0, None), method="highs")
        out[i] = res.status == 0
    return out


@wrong("unselectable_lp", "cone")
def lp_cone(keys):
    from scipy.optimize import linprog
    K = keys.double().numpy()
    out = torch.zeros(len(K), dtype=torch.bool)
    for i in range(len(K)):
        others = K[np.abs(K - K[i]).max(1) > 0]
        res = linprog(np.zeros(len(others)), A_eq=others.T, b_eq=K[i], bounds=(0, None),
                      method="highs")
        out[i] = res.status == 0
    return out


@wrong("unselectable_lp", "returned the selectable")
def lp_selectable(keys):
    from scipy.optimize import linprog
    K = keys.double().numpy()
    out = torch.zeros(len(K), dtype=torch.bool)
    for i in range(len(K)):
        others = K[np.abs(K - K[i]).max(1) > 0]
        res = linprog(np.zeros(len(others)), A_eq=np.vstack([others.T, np.ones(len(others))]),
                      b_eq=np.append(K[i], 1.0), bounds=(0, None), method="highs")
        out[i] = res.status != 0
    return out


@wrong("unselectable_lp", "returned a list; the answer is a tensor")
def lp_as_list(keys):
    return [False] * len(keys)


@right("ellipsoid_query")
def ellipsoid_query_scaled(keys, gamma, beta, i):
    return 3.0 * (keys[i] - beta) / gamma ** 2


@right("ellipsoid_query")
def ellipsoid_query_unit(keys, gamma, beta, i):
    q = (keys[i] - beta) / gamma ** 2
    return q / q.norm()


@wrong("ellipsoid_query", "own direction")
def ellipsoid_query_key(keys, gamma, beta, i):
    return keys[i].clone()


@wrong("ellipsoid_query", "divide by gamma twice")
def ellipsoid_query_unshifted(keys, gamma, beta, i):
    return keys[i] - beta


@wrong("ellipsoid_query", "point on the sphere")
def ellipsoid_query_sphere_point(keys, gamma, beta, i):
    return (keys[i] - beta) / gamma


@wrong("ellipsoid_query", "subtract beta")
def ellipsoid_query_beta_kept(keys, gamma, beta, i):
    return keys[i] / gamma ** 2


@wrong("ellipsoid_query", "finite and nonzero")
def ellipsoid_query_zero(keys, gamma, beta, i):
    return torch.zeros_like(keys[i])


@wrong("braid_reflect", r"\(k_j - k_i\) \. q = 0")
def braid_through_origin(keys, i, steps):
    q = keys[i].clone()
    for _ in range(steps):
        scores = keys @ q
        scores[i] = -math.inf
        j = int(torch.argmax(scores))
        if float(keys[i] @ q) > float(scores[j]):
            return q
        w = keys[j]
        q = q - 2 * (q @ w) / (w @ w) * w
    return q


@wrong("braid_reflect", "twice as far")
def braid_projects(keys, i, steps):
    q = keys[i].clone()
    for _ in range(steps):
        scores = keys @ q
        scores[i] = -math.inf
        j = int(torch.argmax(scores))
        if float(keys[i] @ q) > float(scores[j]):
            return q
        w = keys[j] - keys[i]
        q = q - (q @ w) / (w @ w) * w
    return q


@wrong("braid_reflect", "stop and return")
def braid_never_stops(keys, i, steps):
    q = keys[i].clone()
    for _ in range(steps):
        scores = keys @ q
        scores[i] = -math.inf
        j = int(torch.argmax(scores))
        w = keys[j] - keys[i]
        q = q - 2 * (q @ w) / (w @ w) * w
    return q


@wrong("braid_reflect", "start from the key itself")
def braid_centred_start(keys, i, steps):
    q = keys[i] - keys.mean(0)
    for _ in range(steps):
        scores = keys @ q
        scores[i] = -math.inf
        j = int(torch.argmax(scores))
        if float(keys[i] @ q) > float(scores[j]):
            return q
        w = keys[j] - keys[i]
        q = q - 2 * (q @ w) / (w @ w) * w
    return q


@wrong("braid_reflect", "in place")
def braid_moves_keys(keys, i, steps):
    keys -= keys.mean(0)
    return keys[i].clone()



@right("causal_unselectable")
def causal_unselectable(keys, positions):
    from lncourse.selectability.exact import selectability
    unselectable = seen = 0
    for t in positions:
        res = selectability(keys[: t + 1].double())
        unselectable += int((~res.selectable).sum())
        seen += t + 1
    return unselectable / seen


@right("causal_unselectable")
def causal_unselectable_counts(keys, positions):
    from lncourse.selectability.exact import selectability_batch
    counts = [int((~selectability_batch(keys[None, : t + 1]).selectable).sum())
              for t in positions]
    return float(np.sum(counts) / np.sum([t + 1 for t in positions]))


@right("causal_unselectable")
def causal_unselectable_tensor(keys, positions):
    from lncourse.selectability.exact import selectability
    flags = torch.cat([~torch.from_numpy(selectability(keys[: t + 1]).selectable)
                       for t in positions])
    return flags.double().mean()


@wrong("causal_unselectable", "judged among all the keys")
def causal_unselectable_all_keys(keys, positions):
    from lncourse.selectability.exact import selectability
    inside = ~selectability(keys.double()).selectable
    return sum(int(inside[: t + 1].sum()) for t in positions) / sum(t + 1 for t in positions)


@wrong("causal_unselectable", "own key is left out")
def causal_unselectable_without_own(keys, positions):
    from lncourse.selectability.exact import selectability
    unselectable = seen = 0
    for t in positions:
        res = selectability(keys[:t].double())
        unselectable += int((~res.selectable).sum())
        seen += t
    return unselectable / seen


@wrong("causal_unselectable", "averaged the share per query position")
def causal_unselectable_per_position(keys, positions):
    from lncourse.selectability.exact import selectability
    shares = [float((~selectability(keys[: t + 1].double()).selectable).mean())
              for t in positions]
    return sum(shares) / len(shares)


@wrong("causal_unselectable", "share of selectable keys")
def causal_unselectable_selectable(keys, positions):
    from lncourse.selectability.exact import selectability
    kept = seen = 0
    for t in positions:
        kept += int(selectability(keys[: t + 1].double()).selectable.sum())
        seen += t + 1
    return kept / seen

# ================================================================ chapter 3
# The reference solutions, written apart from the checks' own references.
@right("has_clear_majority")
def has_clear_majority(counts, min_margin):
    top2 = counts.topk(2, dim=1).values
    return (top2[:, 0] - top2[:, 1] >= min_margin) & (top2[:, 1] > 0)


@right("uniform_query_weights")
def uniform_query_weights(d):
    w = torch.zeros(d)
    w[0] = 1.0
    return torch.outer(torch.ones(d), w), torch.eye(d)


@right("attend_counts")
def attend_counts(scores, counts, values):
    logits = scores.unsqueeze(0) + torch.log(counts.to(scores.dtype)).unsqueeze(1)
    return torch.softmax(logits, dim=-1) @ values


@right("norm_without_projection")
def norm_without_projection(x):
    return math.sqrt(x.shape[-1]) * x / x.norm(dim=-1, keepdim=True)


@right("query_angle")
def query_angle(queries):
    cos = queries.sum(-1) / (queries.norm(dim=-1) * math.sqrt(queries.shape[-1]))
    return torch.rad2deg(torch.acos(cos.abs().clamp(max=1.0)))


# Other right answers, and wrong ones.
@wrong("has_clear_majority", "use >=")
def majority_strict(counts, min_margin):
    top2 = counts.topk(2, dim=1).values
    return (top2[:, 0] - top2[:, 1] > min_margin) & (top2[:, 1] > 0)


@wrong("has_clear_majority", "single class")
def majority_single_class(counts, min_margin):
    top2 = counts.topk(2, dim=1).values
    return top2[:, 0] - top2[:, 1] >= min_margin


@wrong("has_clear_majority", "two largest")
def majority_first_two(counts, min_margin):
    return (counts[:, 0] - counts[:, 1] >= min_margin) & (counts[:, 1] > 0)


@wrong("has_clear_majority", "not with the smallest")
def majority_against_smallest(counts, min_margin):
    top2 = counts.topk(2, dim=1).values
    return (counts.max(1).values - counts.min(1).values >= min_margin) & (top2[:, 1] > 0)


@wrong("has_clear_majority", "integer tensor")
def majority_as_int(counts, min_margin):
    top2 = counts.topk(2, dim=1).values
    return ((top2[:, 0] - top2[:, 1] >= min_margin) & (top2[:, 1] > 0)).long()


@right("uniform_query_weights")
def uniform_random_w(d):
    w = torch.randn(d, generator=torch.Generator().manual_seed(d))
    return 3.0 * torch.outer(torch.ones(d), w), 2 * torch.eye(d) + torch.ones(d, d)


@wrong("uniform_query_weights", "orthogonal to 1")
def uniform_identity(d):
    return torch.eye(d), torch.eye(d)


@wrong("uniform_query_weights", "query is 0")
def uniform_all_ones(d):
    return torch.ones(d, d), torch.eye(d)


@wrong("uniform_query_weights", "trivially")
def uniform_zeros(d):
    return torch.zeros(d, d), torch.eye(d)


@wrong("uniform_query_weights", "transpose")
def uniform_transposed(d):
    return torch.outer(torch.eye(d)[0], torch.ones(d)), torch.eye(d)


@wrong("uniform_query_weights", "not all parallel to 1")
def uniform_random_keys(d):
    w = torch.zeros(d)
    w[0] = 1.0
    return torch.outer(torch.ones(d), w), torch.randn(d, d, generator=torch.Generator().manual_seed(0))


@wrong("uniform_query_weights", "pair")
def uniform_one_matrix(d):
    return torch.eye(d)


@right("attend_counts")
def attend_counts_explicit(scores, counts, values):
    w = torch.exp(scores - scores.max(dim=1, keepdim=True).values)      # (C, C)
    w = w.unsqueeze(0) * counts.unsqueeze(1).to(scores.dtype)           # (B, C, C)
    return (w / w.sum(-1, keepdim=True)) @ values


@wrong("attend_counts", "weighted by how often")
def attend_each_class_once(scores, counts, values):
    return torch.softmax(scores, -1).unsqueeze(0).expand(counts.shape[0], -1, -1) @ values


@wrong("attend_counts", "once to each present class")
def attend_present_classes(scores, counts, values):
    present = torch.log((counts > 0).to(scores.dtype))
    return torch.softmax(scores.unsqueeze(0) + present.unsqueeze(1), -1) @ values


@wrong("attend_counts", "renormalising")
def attend_counts_after_softmax(scores, counts, values):
    return (torch.softmax(scores, -1).unsqueeze(0) * counts.unsqueeze(1).to(scores.dtype)) @ values


@wrong("attend_counts", "do not multiply")
def attend_scores_times_counts(scores, counts, values):
    return torch.softmax(scores.unsqueeze(0) * counts.unsqueeze(1).to(scores.dtype), -1) @ values


@wrong("norm_without_projection", "released code")
def no_projection_released(x):
    return x / x.norm(dim=-1, keepdim=True) / math.sqrt(x.shape[-1])


@wrong("norm_without_projection", "subtracted the mean")
def no_projection_centred(x):
    c = x - x.mean(-1, keepdim=True)
    return c / torch.sqrt((c * c).mean(-1, keepdim=True) + 1e-12)


@wrong("norm_without_projection", r"norm sqrt\(d\), not 1")
def no_projection_unit(x):
    return x / x.norm(dim=-1, keepdim=True)


@wrong("norm_without_projection", "last axis")
def no_projection_whole_tensor(x):
    return math.sqrt(x.shape[-1]) * x / x.norm()


@right("query_angle")
def query_angle_atan2(queries):
    along = queries.sum(-1).abs() / math.sqrt(queries.shape[-1])
    across = (queries - queries.mean(-1, keepdim=True)).norm(dim=-1)
    return torch.rad2deg(torch.atan2(across, along))


@wrong("query_angle", "fold")
def query_angle_unfolded(queries):
    cos = queries.sum(-1) / (queries.norm(dim=-1) * math.sqrt(queries.shape[-1]))
    return torch.rad2deg(torch.acos(cos.clamp(-1, 1)))


@wrong("query_angle", "radians")
def query_angle_radians(queries):
    cos = queries.sum(-1) / (queries.norm(dim=-1) * math.sqrt(queries.shape[-1]))
    return torch.acos(cos.abs().clamp(max=1.0))


@wrong("query_angle", r"sqrt\(d\)")
def query_angle_unit_ones(queries):
    return torch.rad2deg(torch.acos((queries.sum(-1).abs() / queries.norm(dim=-1)).clamp(max=1.0)))


@wrong("query_angle", "first axis")
def query_angle_first_axis(queries):
    return torch.rad2deg(torch.acos((queries[..., 0].abs() / queries.norm(dim=-1)).clamp(max=1.0)))


# the projection's main effect (chapter 3, from the stored runs); each answer stands alone
# (the grading tests paste it into a notebook)
@right("projection_main_effect")
def projection_main_effect(cells, level=0.95):
    from scipy import stats
    a, b, c, e = (np.asarray(cells[k], dtype=float) for k in
                  ("layernorm", "no_projection", "layernorm_released_scale",
                   "no_projection_released"))
    d = ((a - b) + (c - e)) / 2
    half = stats.t.ppf(0.5 + level / 2, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d))
    return float(d.mean()), float(d.mean() - half), float(d.mean() + half)


@right("projection_main_effect")
def projection_main_effect_scipy_interval(cells, level=0.95):
    from scipy import stats
    a, b, c, e = (np.asarray(cells[k], dtype=float) for k in
                  ("layernorm", "no_projection", "layernorm_released_scale",
                   "no_projection_released"))
    d = (a + c - b - e) / 2
    lo, hi = stats.t.interval(level, len(d) - 1, loc=d.mean(), scale=stats.sem(d))
    return d.mean(), lo, hi


@right("projection_main_effect")
def projection_main_effect_torch(cells, level=0.95):
    from scipy import stats
    t = {k: torch.as_tensor(v, dtype=torch.float64) for k, v in cells.items()}
    d = 0.5 * (t["layernorm"] - t["no_projection"]) + 0.5 * (
        t["layernorm_released_scale"] - t["no_projection_released"])
    q = stats.t.ppf(1 - (1 - level) / 2, d.numel() - 1)
    se = d.std() / d.numel() ** 0.5                 # torch's std divides by n - 1
    return d.mean().item(), (d.mean() - q * se).item(), (d.mean() + q * se).item()


@wrong("projection_main_effect", "pair by seed")
def projection_main_effect_unpaired(cells, level=0.95):
    from scipy import stats
    a, b, c, e = (np.asarray(cells[k], dtype=float) for k in
                  ("layernorm", "no_projection", "layernorm_released_scale",
                   "no_projection_released"))
    n = len(a)
    m = ((a - b) + (c - e)).mean() / 2
    se = math.sqrt((a.var(ddof=1) + b.var(ddof=1) + c.var(ddof=1) + e.var(ddof=1)) / 4 / n)
    q = stats.t.ppf(0.5 + level / 2, n - 1)
    return m, m - q * se, m + q * se

@wrong("projection_main_effect", "1.96")
def projection_main_effect_normal(cells, level=0.95):
    from scipy import stats
    a, b, c, e = (np.asarray(cells[k], dtype=float) for k in
                  ("layernorm", "no_projection", "layernorm_released_scale",
                   "no_projection_released"))
    d = ((a - b) + (c - e)) / 2
    half = 1.96 * d.std(ddof=1) / math.sqrt(len(d))
    return d.mean(), d.mean() - half, d.mean() + half

@wrong("projection_main_effect", "ddof=1")
def projection_main_effect_ddof0(cells, level=0.95):
    from scipy import stats
    a, b, c, e = (np.asarray(cells[k], dtype=float) for k in
                  ("layernorm", "no_projection", "layernorm_released_scale",
                   "no_projection_released"))
    d = ((a - b) + (c - e)) / 2
    half = stats.t.ppf(0.5 + level / 2, len(d) - 1) * d.std() / math.sqrt(len(d))
    return d.mean(), d.mean() - half, d.mean() + half

@wrong("projection_main_effect", "not n ")
def projection_main_effect_df_n(cells, level=0.95):
    from scipy import stats
    a, b, c, e = (np.asarray(cells[k], dtype=float) for k in
                  ("layernorm", "no_projection", "layernorm_released_scale",
                   "no_projection_released"))
    d = ((a - b) + (c - e)) / 2
    half = stats.t.ppf(0.5 + level / 2, len(d)) * d.std(ddof=1) / math.sqrt(len(d))
    return d.mean(), d.mean() - half, d.mean() + half

@wrong("projection_main_effect", "sign reversed")
def projection_main_effect_reversed(cells, level=0.95):
    from scipy import stats
    a, b, c, e = (np.asarray(cells[k], dtype=float) for k in
                  ("layernorm", "no_projection", "layernorm_released_scale",
                   "no_projection_released"))
    d = ((b - a) + (e - c)) / 2
    n = len(d)
    half = stats.t.ppf(0.5 + level / 2, n - 1) * d.std(ddof=1) / math.sqrt(n)
    return d.mean(), d.mean() - half, d.mean() + half

@wrong("projection_main_effect", "not their sum")
def projection_main_effect_sum(cells, level=0.95):
    from scipy import stats
    a, b, c, e = (np.asarray(cells[k], dtype=float) for k in
                  ("layernorm", "no_projection", "layernorm_released_scale",
                   "no_projection_released"))
    d = (a - b) + (c - e)
    n = len(d)
    half = stats.t.ppf(0.5 + level / 2, n - 1) * d.std(ddof=1) / math.sqrt(n)
    return d.mean(), d.mean() - half, d.mean() + half

@wrong("projection_main_effect", "paper's scale only")
def projection_main_effect_one_scale(cells, level=0.95):
    from scipy import stats
    a, b, c, e = (np.asarray(cells[k], dtype=float) for k in
                  ("layernorm", "no_projection", "layernorm_released_scale",
                   "no_projection_released"))
    d = a - b
    n = len(d)
    half = stats.t.ppf(0.5 + level / 2, n - 1) * d.std(ddof=1) / math.sqrt(n)
    return d.mean(), d.mean() - half, d.mean() + half

@wrong("projection_main_effect", "scale's main effect")
def projection_main_effect_of_scale(cells, level=0.95):
    from scipy import stats
    a, b, c, e = (np.asarray(cells[k], dtype=float) for k in
                  ("layernorm", "no_projection", "layernorm_released_scale",
                   "no_projection_released"))
    d = ((a - c) + (b - e)) / 2
    n = len(d)
    half = stats.t.ppf(0.5 + level / 2, n - 1) * d.std(ddof=1) / math.sqrt(n)
    return d.mean(), d.mean() - half, d.mean() + half

@wrong("projection_main_effect", "argument `level`")
def projection_main_effect_fixed_level(cells, level=0.95):
    from scipy import stats
    a, b, c, e = (np.asarray(cells[k], dtype=float) for k in
                  ("layernorm", "no_projection", "layernorm_released_scale",
                   "no_projection_released"))
    d = ((a - b) + (c - e)) / 2
    n = len(d)
    half = stats.t.ppf(0.975, n - 1) * d.std(ddof=1) / math.sqrt(n)
    return d.mean(), d.mean() - half, d.mean() + half

# ================================================================ chapter 4
# The reference solutions, written apart from the checks' own references.
@right("running_mean")
def running_mean(v):
    m = torch.arange(1, v.shape[-2] + 1, dtype=v.dtype)
    return v.cumsum(dim=-2) / m[:, None]


@right("sample_covariance")
def sample_covariance(samples):
    centred = samples - samples.mean(dim=0, keepdim=True)
    return centred.T @ centred / (samples.shape[0] - 1)


@right("fit_loglog_slope")
def fit_loglog_slope(variance, m_min):
    m = torch.arange(1, variance.numel() + 1, dtype=torch.float64)
    keep = m >= m_min
    x, y = m[keep].log(), variance.double()[keep].log()
    x, y = x - x.mean(), y - y.mean()
    return float((x * y).sum() / (x * x).sum())


@right("masked_attention")
def masked_attention(scores, causal):
    if causal:
        T = scores.shape[-1]
        allowed = torch.ones(T, T, dtype=torch.bool).tril()
        scores = scores.masked_fill(~allowed, float("-inf"))
    return scores.softmax(dim=-1)


@right("effective_tokens")
def effective_tokens(weights):
    return 1.0 / weights.pow(2).sum(dim=-1)


@right("posterior_median")
def posterior_median(post):
    return (post.cumsum(dim=-1) < 0.5).sum(dim=-1) + 1


@right("posterior_median")
def posterior_median_searchsorted(post):
    cdf = post.cumsum(-1)
    half = torch.full((*cdf.shape[:-1], 1), 0.5, dtype=cdf.dtype)
    return torch.searchsorted(cdf.contiguous(), half, right=False)[..., 0] + 1


@right("posterior_median")
def posterior_median_numpy(post):
    import numpy as np
    cdf = np.cumsum(post.numpy(), axis=-1)
    return torch.from_numpy(np.argmax(cdf >= 0.5, axis=-1) + 1)


@right("cross_fitted_mae")
def cross_fitted_mae(answers):
    a = answers.double()
    S, L = a.shape
    m = torch.arange(1, L + 1, dtype=torch.float64).repeat(S, 1)
    errors = []
    for fit, score in ((slice(0, S // 2), slice(S // 2, S)),
                       (slice(S // 2, S), slice(0, S // 2))):
        x, y = a[fit].flatten(), m[fit].flatten()
        dx = x - x.mean()
        slope = (dx @ (y - y.mean())) / (dx @ dx) if (dx @ dx) > 0 else 0.0
        guess = y.mean() + slope * (a[score] - x.mean())
        errors.append((guess.clamp(1, L) - m[score]).abs().flatten())
    return torch.cat(errors).mean().item()


@right("cross_fitted_mae")
def cross_fitted_mae_numpy(answers):
    import numpy as np
    a = answers.numpy().astype(float)
    S, L = a.shape
    truth = np.tile(np.arange(1, L + 1, dtype=float), (S, 1))
    h = S // 2
    total = 0.0
    for fit, score in ((a[:h], a[h:]), (a[h:], a[:h])):
        t_fit = truth[: len(fit)]
        X = np.stack([np.ones(fit.size), fit.ravel()], 1)
        (c, b), *_ = np.linalg.lstsq(X, t_fit.ravel(), rcond=None)  # minimum norm when flat
        guess = np.clip(c + b * score, 1, L)
        total += np.abs(guess - truth[: len(score)]).sum()
    return total / a.size


@right("cross_fitted_mae")
def cross_fitted_mae_loop(answers):
    S, L = answers.shape
    h = S // 2
    halves = [list(range(h)), list(range(h, S))]
    total, count = 0.0, 0
    for k in (0, 1):
        fit, score = halves[k], halves[1 - k]
        pairs = [(float(answers[s, j]), j + 1.0) for s in fit for j in range(L)]
        n = len(pairs)
        mx = sum(x for x, _ in pairs) / n
        my = sum(y for _, y in pairs) / n
        sxx = sum((x - mx) ** 2 for x, _ in pairs)
        sxy = sum((x - mx) * (y - my) for x, y in pairs)
        b = sxy / sxx if sxx > 0 else 0.0
        for s in score:
            for j in range(L):
                guess = min(max(my + b * (float(answers[s, j]) - mx), 1.0), float(L))
                total += abs(guess - (j + 1))
                count += 1
    return total / count


# Other right answers, and wrong ones.
@wrong("running_mean", "divided every position by T")
def running_mean_by_length(v):
    return v.cumsum(-2) / v.shape[-2]


@wrong("running_mean", "running sum")
def running_sum(v):
    return v.cumsum(-2)


@wrong("running_mean", "off by one")
def running_mean_off_by_one(v):
    return v.cumsum(-2) / torch.arange(2, v.shape[-2] + 2, dtype=v.dtype)[:, None]


@wrong("running_mean", "feature axis")
def running_mean_over_features(v):
    return v.cumsum(-1) / torch.arange(1, v.shape[-1] + 1, dtype=v.dtype)


@right("sample_covariance")
def covariance_by_torch(samples):
    return torch.cov(samples.T).reshape(samples.shape[1], samples.shape[1])


@wrong("sample_covariance", "N - 1")
def covariance_biased(samples):
    return torch.cov(samples.T, correction=0)


@wrong("sample_covariance", "subtract the mean")
def covariance_not_centred(samples):
    return samples.T @ samples / (samples.shape[0] - 1)


@wrong("sample_covariance", "across coordinates")
def covariance_of_coordinates(samples):
    return torch.cov(samples)


@right("fit_loglog_slope")
def slope_by_lstsq(variance, m_min):
    m = torch.arange(1, variance.numel() + 1, dtype=torch.float64)
    keep = m >= m_min
    A = torch.stack([m[keep].log(), torch.ones(int(keep.sum()), dtype=torch.float64)], 1)
    return float(torch.linalg.lstsq(A, variance.double()[keep].log()[:, None]).solution[0, 0])


@right("fit_loglog_slope")
def slope_by_polyfit(variance, m_min):
    v = np.asarray(variance, dtype=np.float64)
    m = np.arange(1, len(v) + 1)
    keep = m >= m_min
    return float(np.polyfit(np.log(m[keep]), np.log(v[keep]), 1)[0])


@wrong("fit_loglog_slope", "every position")
def slope_everywhere(variance, m_min):
    m = torch.arange(1, variance.numel() + 1, dtype=torch.float64)
    x, y = m.log(), variance.double().log()
    x, y = x - x.mean(), y - y.mean()
    return float((x * y).sum() / (x * x).sum())


@wrong("fit_loglog_slope", "positions count from 1")
def slope_from_zero(variance, m_min):
    m = torch.arange(0, variance.numel(), dtype=torch.float64)
    keep = m >= max(m_min, 1)
    x, y = m[keep].log(), variance.double()[keep].log()
    x, y = x - x.mean(), y - y.mean()
    return float((x * y).sum() / (x * x).sum())


@wrong("fit_loglog_slope", "not on m")
def slope_against_m(variance, m_min):
    m = torch.arange(1, variance.numel() + 1, dtype=torch.float64)
    keep = m >= m_min
    x, y = m[keep], variance.double()[keep].log()
    x, y = x - x.mean(), y - y.mean()
    return float((x * y).sum() / (x * x).sum())


@wrong("fit_loglog_slope", "without logarithms")
def slope_no_logs(variance, m_min):
    m = torch.arange(1, variance.numel() + 1, dtype=torch.float64)
    keep = m >= m_min
    x, y = m[keep], variance.double()[keep]
    x, y = x - x.mean(), y - y.mean()
    return float((x * y).sum() / (x * x).sum())


@wrong("fit_loglog_slope", "a floating-point number")
def slope_as_bool(variance, m_min):
    return True


@wrong("fit_loglog_slope", "called lncourse.nope.variance.loglog_slope")
def slope_by_package(variance, m_min):
    from lncourse.nope import variance as nope
    return nope.loglog_slope(variance, m_min=m_min)


@wrong("masked_attention", "diagonal")
def masked_strict(scores, causal):
    if causal:
        T = scores.shape[-1]
        keep = torch.ones(T, T, dtype=torch.bool).tril(-1)
        keep[0, 0] = True
        scores = scores.masked_fill(~keep, float("-inf"))
    return scores.softmax(-1)


@wrong("masked_attention", "hid the past")
def masked_future(scores, causal):
    if causal:
        T = scores.shape[-1]
        scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).triu(), float("-inf"))
    return scores.softmax(-1)


@wrong("masked_attention", "apply the mask")
def masked_never(scores, causal):
    return scores.softmax(-1)


@wrong("masked_attention", "bidirectional")
def masked_always(scores, causal):
    T = scores.shape[-1]
    return scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf")).softmax(-1)


@wrong("masked_attention", "not the queries")
def masked_over_queries(scores, causal):
    if causal:
        T = scores.shape[-1]
        scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    return scores.softmax(-2).nan_to_num(0.0)


@wrong("effective_tokens", "inverse")
def effective_energy(weights):
    return (weights * weights).sum(-1)


@wrong("effective_tokens", "non-zero")
def effective_count(weights):
    return (weights > 0).sum(-1).double()


@wrong("effective_tokens", "non-zero")
def effective_count_int(weights):
    return (weights > 0).sum(-1)


@wrong("posterior_median", "argmax")
def median_argmax(post):
    return post.argmax(-1) + 1


@wrong("posterior_median", "count from 1")
def median_zero_based(post):
    return (post.cumsum(-1) < 0.5).sum(-1)


@wrong("posterior_median", "mean")
def median_mean(post):
    return (post * torch.arange(1, post.shape[-1] + 1, dtype=post.dtype)).sum(-1)


@wrong("posterior_median", "wrong axis")
def median_first_axis(post):
    return (post.cumsum(0) < 0.5).sum(-1) + 1


@wrong("posterior_median", "exactly 1/2")
def median_strict(post):
    return (post.cumsum(-1) <= 0.5).sum(-1) + 1


@wrong("cross_fitted_mae", "in-sample")
def cross_fitted_in_sample(answers):
    a = answers.double()
    S, L = a.shape
    m = torch.arange(1, L + 1, dtype=torch.float64).repeat(S, 1)
    dx = a.flatten() - a.mean()
    b = (dx @ (m.flatten() - m.mean())) / (dx @ dx)
    return ((m.mean() + b * (a - a.mean())).clamp(1, L) - m).abs().mean().item()


@wrong("cross_fitted_mae", "scored only one half")
def cross_fitted_one_way(answers):
    a = answers.double()
    S, L = a.shape
    m = torch.arange(1, L + 1, dtype=torch.float64).repeat(S, 1)
    x, y = a[: S // 2].flatten(), m[: S // 2].flatten()
    dx = x - x.mean()
    b = (dx @ (y - y.mean())) / (dx @ dx)
    return ((y.mean() + b * (a[S // 2:] - x.mean())).clamp(1, L) - m[S // 2:]).abs().mean().item()


@wrong("cross_fitted_mae", "inverted that line")
def cross_fitted_reversed(answers):
    a = answers.double()
    S, L = a.shape
    m = torch.arange(1, L + 1, dtype=torch.float64).repeat(S, 1)
    errors = []
    for fit, score in ((slice(0, S // 2), slice(S // 2, S)), (slice(S // 2, S), slice(0, S // 2))):
        x, y = a[fit].flatten(), m[fit].flatten()
        dy = y - y.mean()
        b = (dy @ (x - x.mean())) / (dy @ dy)       # answer = c + b * truth
        guess = y.mean() + (a[score] - x.mean()) / b
        errors.append((guess.clamp(1, L) - m[score]).abs().flatten())
    return torch.cat(errors).mean().item()


@wrong("cross_fitted_mae", "outside 1..L")
def cross_fitted_unclipped(answers):
    a = answers.double()
    S, L = a.shape
    m = torch.arange(1, L + 1, dtype=torch.float64).repeat(S, 1)
    errors = []
    for fit, score in ((slice(0, S // 2), slice(S // 2, S)), (slice(S // 2, S), slice(0, S // 2))):
        x, y = a[fit].flatten(), m[fit].flatten()
        dx = x - x.mean()
        b = (dx @ (y - y.mean())) / (dx @ dx) if (dx @ dx) > 0 else 0.0
        errors.append((y.mean() + b * (a[score] - x.mean()) - m[score]).abs().flatten())
    return torch.cat(errors).mean().item()


@wrong("cross_fitted_mae", "split the positions")
def cross_fitted_by_position(answers):
    a = answers.double()
    S, L = a.shape
    m = torch.arange(1, L + 1, dtype=torch.float64).repeat(S, 1)
    errors = []
    for fit, score in ((slice(0, L // 2), slice(L // 2, L)), (slice(L // 2, L), slice(0, L // 2))):
        x, y = a[:, fit].flatten(), m[:, fit].flatten()
        dx = x - x.mean()
        b = (dx @ (y - y.mean())) / (dx @ dx) if (dx @ dx) > 0 else 0.0
        errors.append(((y.mean() + b * (a[:, score] - x.mean())).clamp(1, L)
                       - m[:, score]).abs().flatten())
    return torch.cat(errors).mean().item()


@wrong("cross_fitted_mae", "raw answers")
def cross_fitted_raw(answers):
    S, L = answers.shape
    return (answers.double() - torch.arange(1, L + 1, dtype=torch.float64)).abs().mean().item()


@wrong("effective_tokens", "square the weights")
def effective_sum(weights):
    return 1 / weights.sum(-1)


# ================================================================ chapter 5
@right("dyt")
def dyt(x, alpha, gamma, beta):
    return gamma * torch.tanh(alpha * x) + beta


@right("dyt")
def dyt_from_exp(x, alpha, gamma, beta):
    z = torch.exp(-2 * (alpha * x).abs())
    return gamma * torch.sign(alpha * x) * (1 - z) / (1 + z) + beta


@wrong("dyt", "inside the tanh")
def dyt_alpha_outside(x, alpha, gamma, beta):
    return gamma * alpha * torch.tanh(x) + beta


@wrong("dyt", "the gain gamma multiplies")
def dyt_swapped(x, alpha, gamma, beta):
    return beta * torch.tanh(alpha * x) + gamma


@wrong("dyt", "beta is added after")
def dyt_beta_inside(x, alpha, gamma, beta):
    return gamma * torch.tanh(alpha * x + beta)


@wrong("dyt", "no division")
def dyt_normalised(x, alpha, gamma, beta):
    rms = x.pow(2).mean(-1, keepdim=True).sqrt()
    return gamma * torch.tanh(alpha * x / rms) + beta


@right("chance_abs_cos")
def chance_abs_cos(d):
    return math.exp(math.lgamma(d / 2) - math.lgamma((d + 1) / 2)) / math.sqrt(math.pi)


@right("chance_abs_cos")
def chance_abs_cos_by_beta(d):
    # u_1 has density (1 - t²)^((d-3)/2) / B(1/2, (d-1)/2) on [-1, 1]; integrate |t| against it
    from scipy.special import beta
    return 2 / (d - 1) / beta(0.5, (d - 1) / 2) if d > 1 else 1.0


@wrong("chance_abs_cos", "large-d approximation")
def chance_approx(d):
    return math.sqrt(2 / (math.pi * d))


@wrong("chance_abs_cos", "root-mean-square")
def chance_rms(d):
    return d ** -0.5


@wrong("chance_abs_cos", "swapped the two Gamma")
def chance_swapped(d):
    return math.exp(math.lgamma((d + 1) / 2) - math.lgamma(d / 2)) / math.sqrt(math.pi)


@right("qk_norm_scores")
def qk_norm_scores(q, k, eps):
    qn = q / torch.sqrt((q * q).mean(dim=-1, keepdim=True) + eps)
    kn = k / torch.sqrt((k * k).mean(dim=-1, keepdim=True) + eps)
    return torch.einsum("...id,...jd->...ij", qn, kn) / q.shape[-1] ** 0.5


@wrong("qk_norm_scores", "unit length")
def qk_cosine(q, k, eps):
    return torch.nn.functional.normalize(q, dim=-1) @ torch.nn.functional.normalize(k, dim=-1).mT


@wrong("qk_norm_scores", "1/√dh")
def qk_unscaled(q, k, eps):
    qn = q / torch.sqrt(q.pow(2).mean(-1, keepdim=True) + eps)
    kn = k / torch.sqrt(k.pow(2).mean(-1, keepdim=True) + eps)
    return qn @ kn.mT


@wrong("qk_norm_scores", "centred")
def qk_layer_norm(q, k, eps):
    ln = torch.nn.functional.layer_norm
    return ln(q, q.shape[-1:], eps=eps) @ ln(k, k.shape[-1:], eps=eps).mT / q.shape[-1] ** 0.5


@wrong("qk_norm_scores", "not over tokens")
def qk_over_tokens(q, k, eps):
    qn = q / torch.sqrt(q.pow(2).mean(-2, keepdim=True) + eps)
    kn = k / torch.sqrt(k.pow(2).mean(-2, keepdim=True) + eps)
    return qn @ kn.mT / q.shape[-1] ** 0.5


@right("qk_logit_bound")
def qk_logit_bound(g_q, g_k):
    # q = k = sqrt(dh) e_i on the channel i of the largest |g_q,i g_k,i| (flip k's sign
    # if the product is negative): q·k/sqrt(dh) = sqrt(dh) |g_q,i g_k,i|
    return (g_q * g_k).abs().max(dim=-1).values * g_q.shape[-1] ** 0.5


@right("qk_logit_bound")
def qk_logit_bound_numpy(g_q, g_k):
    prod = np.abs(g_q.detach().cpu().double().numpy() * g_k.detach().cpu().double().numpy())
    return torch.as_tensor(np.asarray(np.sqrt(prod.shape[-1]) * prod.max(axis=-1)))


@wrong("qk_logit_bound", "absolute value")
def qk_bound_signed(g_q, g_k):
    return math.sqrt(g_q.shape[-1]) * (g_q * g_k).max(-1).values


@wrong("qk_logit_bound", "share a channel")
def qk_bound_separate_maxima(g_q, g_k):
    return math.sqrt(g_q.shape[-1]) * g_q.abs().max(-1).values * g_k.abs().max(-1).values


@wrong("qk_logit_bound", "Cauchy-Schwarz")
def qk_bound_gain_norms(g_q, g_k):
    return math.sqrt(g_q.shape[-1]) * torch.linalg.vector_norm(g_q, dim=-1) \
        * torch.linalg.vector_norm(g_k, dim=-1)


@wrong("qk_logit_bound", "divides q·k by √dh")
def qk_bound_without_scale(g_q, g_k):
    return g_q.shape[-1] * (g_q * g_k).abs().max(-1).values


@wrong("qk_logit_bound", "length √dh")
def qk_bound_unit_vectors(g_q, g_k):
    return (g_q * g_k).abs().max(-1).values


@right("bigram_loss")
def bigram_loss(train_ids, test_ids, vocab_size):
    counts = torch.ones(vocab_size, vocab_size, dtype=torch.float64)
    counts.index_put_((train_ids[:-1], train_ids[1:]),
                      torch.ones(len(train_ids) - 1, dtype=torch.float64), accumulate=True)
    p = counts / counts.sum(1, keepdim=True)
    return float(-torch.log(p[test_ids[:-1], test_ids[1:]]).mean())


@right("bigram_loss")
def bigram_loss_cross_entropy(train_ids, test_ids, vocab_size):
    counts = torch.ones(vocab_size, vocab_size)              # float32, a loop
    for i, j in zip(train_ids[:-1].tolist(), train_ids[1:].tolist()):
        counts[i, j] += 1
    return torch.nn.functional.cross_entropy(counts.log()[test_ids[:-1]],
                                             test_ids[1:]).item()


@right("bigram_loss")
def bigram_loss_numpy(train_ids, test_ids, vocab_size):
    t, s = train_ids.numpy(), test_ids.numpy()
    c = np.ones((vocab_size, vocab_size))
    np.add.at(c, (t[:-1], t[1:]), 1)
    return float(-np.log((c / c.sum(1, keepdims=True))[s[:-1], s[1:]]).mean())


@wrong("bigram_loss", "add-one smoothing")
def bigram_unsmoothed(train_ids, test_ids, vocab_size):
    counts = torch.zeros(vocab_size, vocab_size, dtype=torch.float64)
    counts.index_put_((train_ids[:-1], train_ids[1:]),
                      torch.ones(len(train_ids) - 1, dtype=torch.float64), accumulate=True)
    p = counts / counts.sum(1, keepdim=True).clamp_min(1)
    return float(-torch.log(p[test_ids[:-1], test_ids[1:]]).mean())


@wrong("bigram_loss", "rows the current id")
def bigram_transposed(train_ids, test_ids, vocab_size):
    counts = torch.ones(vocab_size, vocab_size, dtype=torch.float64)
    counts.index_put_((train_ids[:-1], train_ids[1:]),
                      torch.ones(len(train_ids) - 1, dtype=torch.float64), accumulate=True)
    p = counts / counts.sum(1, keepdim=True)
    return float(-torch.log(p[test_ids[1:], test_ids[:-1]]).mean())


@wrong("bigram_loss", "each row")
def bigram_columns(train_ids, test_ids, vocab_size):
    counts = torch.ones(vocab_size, vocab_size, dtype=torch.float64)
    counts.index_put_((train_ids[:-1], train_ids[1:]),
                      torch.ones(len(train_ids) - 1, dtype=torch.float64), accumulate=True)
    p = counts / counts.sum(0, keepdim=True)
    return float(-torch.log(p[test_ids[:-1], test_ids[1:]]).mean())


@wrong("bigram_loss", "read them on the test ids")
def bigram_swapped_splits(train_ids, test_ids, vocab_size):
    counts = torch.ones(vocab_size, vocab_size, dtype=torch.float64)   # counted on test
    counts.index_put_((test_ids[:-1], test_ids[1:]),
                      torch.ones(len(test_ids) - 1, dtype=torch.float64), accumulate=True)
    p = counts / counts.sum(1, keepdim=True)
    return float(-torch.log(p[train_ids[:-1], train_ids[1:]]).mean())


@wrong("bigram_loss", "natural log")
def bigram_in_bits(train_ids, test_ids, vocab_size):
    counts = torch.ones(vocab_size, vocab_size, dtype=torch.float64)
    counts.index_put_((train_ids[:-1], train_ids[1:]),
                      torch.ones(len(train_ids) - 1, dtype=torch.float64), accumulate=True)
    p = counts / counts.sum(1, keepdim=True)
    return float(-torch.log2(p[test_ids[:-1], test_ids[1:]]).mean())


@wrong("bigram_loss", "unigram table")
def bigram_unigram(train_ids, test_ids, vocab_size):
    u = torch.bincount(train_ids, minlength=vocab_size).double() + 1
    return float(-torch.log(u[test_ids] / u.sum()).mean())


@right("fraction_along_ones")
def fraction_along_ones(h):
    d = h.shape[-1]
    return (h.mean(-1) ** 2 * d) / (h * h).sum(-1)


@right("fraction_along_ones")
def fraction_along_ones_by_projection(h):
    ones = torch.ones(h.shape[-1], dtype=h.dtype) / h.shape[-1] ** 0.5
    along = (h @ ones)[..., None] * ones
    return along.pow(2).sum(-1) / h.pow(2).sum(-1)


@wrong("fraction_along_ones", "by d: the projection onto 1")
def along_without_d(h):
    return h.sum(-1) ** 2 / (h * h).sum(-1)


@wrong("fraction_along_ones", "square it")
def along_cos(h):
    return h.sum(-1).abs() / (h.norm(dim=-1) * h.shape[-1] ** 0.5)


@wrong("fraction_along_ones", "orthogonal to 1")
def along_orthogonal(h):
    c = h - h.mean(-1, keepdim=True)
    return (c * c).sum(-1) / (h * h).sum(-1)


@wrong("fraction_along_ones", "square the sum")
def along_rms(h):
    return (h * h).mean(-1) / (h * h).sum(-1)


@right("peak_ratio")
def peak_ratio(h):
    a = h.abs()
    return a.max(dim=-1).values / a.median(dim=-1).values


@right("peak_ratio")
def peak_ratio_by_sorting(h):
    a = h.abs().sort(dim=-1).values
    return a[..., -1] / a[..., (h.shape[-1] - 1) // 2]


@right("peak_ratio")
def peak_ratio_by_quantile(h):
    a = h.abs()
    return a.amax(-1) / torch.quantile(a, 0.5, dim=-1)


@wrong("peak_ratio", "not the mean")
def peak_mean(h):
    return h.abs().max(-1).values / h.abs().mean(-1)


@wrong("peak_ratio", "take absolute values first")
def peak_signed(h):
    return h.max(-1).values / h.median(-1).values


@wrong("peak_ratio", "take absolute values first")
def peak_signed_median(h):
    return h.abs().max(-1).values / h.median(-1).values


@wrong("peak_ratio", "take absolute values first")
def peak_signed_max(h):
    return h.max(-1).values / h.abs().median(-1).values


@wrong("peak_ratio", "not the RMS")
def peak_over_rms(h):
    return h.abs().max(-1).values / h.pow(2).mean(-1).sqrt()


@wrong("peak_ratio", "not over the first axis")
def peak_first_axis(h):
    return h.abs().max(0).values / h.abs().median(0).values


@wrong("peak_ratio", "not of the whole input")
def peak_whole_median(h):
    return h.abs().max(-1).values / h.abs().median()


# ================================================ mistakes the teacher's probes found
# (issue 60, item 7): each got only "differs from the reference"; now each is named.
@wrong("layer_norm_jacobian", "epsilon is missing from z")
def jacobian_eps_left_out_of_z(x, gamma, eps):
    d = len(x)
    c = x - x.mean()
    s = torch.sqrt((c * c).mean() + eps)
    z = c / torch.sqrt((c * c).mean())
    P = torch.eye(d, dtype=x.dtype) - torch.ones(d, d, dtype=x.dtype) / d
    return gamma[:, None] * (P - torch.outer(z, z) / d) / s


@wrong("layer_norm_jacobian", "epsilon is missing from the factor 1 / s")
def jacobian_eps_only_in_z(x, gamma, eps):
    d = len(x)
    c = x - x.mean()
    z = c / torch.sqrt((c * c).mean() + eps)
    P = torch.eye(d, dtype=x.dtype) - torch.ones(d, d, dtype=x.dtype) / d
    return gamma[:, None] * (P - torch.outer(z, z) / d) / torch.sqrt((c * c).mean())


@wrong("layer_norm_backward", r"grad_gamma is summed over the first axis only")
def layer_norm_backward_gamma_first_axis(x, gamma, eps, grad_out):
    c = x - x.mean(-1, keepdim=True)
    s = torch.sqrt((c * c).mean(-1, keepdim=True) + eps)
    z = c / s
    gz = grad_out * gamma
    gx = (gz - gz.mean(-1, keepdim=True) - z * (gz * z).mean(-1, keepdim=True)) / s
    rows = tuple(range(x.dim() - 1))
    return gx, (grad_out * z).sum(0), grad_out.sum(rows)


@wrong("layer_norm_backward", r"grad_gamma and grad_beta are summed over the first axis")
def layer_norm_backward_first_axis(x, gamma, eps, grad_out):
    c = x - x.mean(-1, keepdim=True)
    s = torch.sqrt((c * c).mean(-1, keepdim=True) + eps)
    z = c / s
    gz = grad_out * gamma
    gx = (gz - gz.mean(-1, keepdim=True) - z * (gz * z).mean(-1, keepdim=True)) / s
    return gx, (grad_out * z).sum(dim=0), grad_out.sum(dim=0)


@wrong("projection_main_effect", "two slips")
def projection_main_effect_normal_ddof0(cells, level=0.95):
    from scipy import stats
    a, b, c, e = (np.asarray(cells[k], dtype=float) for k in
                  ("layernorm", "no_projection", "layernorm_released_scale",
                   "no_projection_released"))
    d = ((a - b) + (c - e)) / 2
    half = stats.norm.ppf(0.5 + level / 2) * d.std() / math.sqrt(len(d))
    return d.mean(), d.mean() - half, d.mean() + half


@wrong("projection_main_effect", r"not the normal quantile \(on")
def projection_main_effect_normal_quantile(cells, level=0.95):
    from scipy import stats
    a, b, c, e = (np.asarray(cells[k], dtype=float) for k in
                  ("layernorm", "no_projection", "layernorm_released_scale",
                   "no_projection_released"))
    d = ((a - b) + (c - e)) / 2
    half = stats.norm.ppf(0.5 + level / 2) * d.std(ddof=1) / math.sqrt(len(d))
    return d.mean(), d.mean() - half, d.mean() + half


@wrong("running_mean", "positions counted from 0")
def running_mean_from_zero(v):
    m = torch.arange(v.shape[-2], dtype=v.dtype).clamp(min=1)
    return v.cumsum(dim=-2) / m[:, None]


@wrong("running_mean", "positions counted from 0")
def running_mean_from_zero_unclamped(v):
    m = torch.arange(v.shape[-2], dtype=v.dtype)
    return v.cumsum(dim=-2) / m[:, None]


@wrong("sample_covariance", "you centred each row")
def covariance_rows_centred(samples):
    centred = samples - samples.mean(dim=1, keepdim=True)
    return centred.T @ centred / (samples.shape[0] - 1)


@wrong("masked_attention", "a masked logit of 0 still gets weight")
def masked_with_zeros(scores, causal):
    if causal:
        T = scores.shape[-1]
        scores = scores * torch.ones(T, T, dtype=scores.dtype).tril()
    return scores.softmax(dim=-1)


@wrong("masked_attention", "adding 0 or 1 to the logits")
def masked_adding_ones(scores, causal):
    if causal:
        T = scores.shape[-1]
        scores = scores + torch.ones(T, T, dtype=scores.dtype).tril()
    return scores.softmax(dim=-1)


@wrong("masked_attention", "after the softmax")
def masked_after_softmax(scores, causal):
    a = scores.softmax(dim=-1)
    if causal:
        T = scores.shape[-1]
        a = a * torch.ones(T, T, dtype=scores.dtype).tril()
    return a


@wrong("dyt", "gamma multiplies the tanh from outside")
def dyt_gamma_inside(x, alpha, gamma, beta):
    return torch.tanh(alpha * gamma * x) + beta


@wrong("qk_norm_scores", "not to RMS 1")
def qk_unit_length_scaled(q, k, eps):
    qn = q / torch.sqrt(q.pow(2).sum(-1, keepdim=True) + eps)
    kn = k / torch.sqrt(k.pow(2).sum(-1, keepdim=True) + eps)
    return qn @ kn.transpose(-1, -2) / math.sqrt(q.shape[-1])


@wrong("qk_norm_scores", "not to RMS 1")
def qk_unit_length_normalize(q, k, eps):
    qn = torch.nn.functional.normalize(q, dim=-1)
    kn = torch.nn.functional.normalize(k, dim=-1)
    return qn @ kn.transpose(-1, -2) / math.sqrt(q.shape[-1])


@wrong("qk_norm_scores", "cosine similarity")
def qk_cosine_with_eps(q, k, eps):
    qn = q / torch.sqrt(q.pow(2).sum(-1, keepdim=True) + eps)
    kn = k / torch.sqrt(k.pow(2).sum(-1, keepdim=True) + eps)
    return qn @ kn.transpose(-1, -2)


@wrong("qk_logit_bound", "not the sum")
def qk_bound_sum_over_channels(g_q, g_k):
    return math.sqrt(g_q.shape[-1]) * (g_q * g_k).abs().sum(-1)


@wrong("qk_logit_bound", "not the norm")
def qk_bound_product_norm(g_q, g_k):
    return math.sqrt(g_q.shape[-1]) * torch.linalg.vector_norm(g_q * g_k, dim=-1)


@wrong("fraction_along_ones", "unsquared")
def along_mean_not_squared(h):
    return h.shape[-1] * h.mean(-1) / h.pow(2).sum(-1)


@wrong("fraction_along_ones", "not the length")
def along_over_length(h):
    return h.shape[-1] * h.mean(-1).pow(2) / h.norm(dim=-1)
