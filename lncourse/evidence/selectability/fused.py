"""Many GPTs of chapter 2 as one batched model (the fast path of the Table 1 trainer).

M models of one architecture (:class:`lncourse.transformer.GPT`, pre-LN, causal, with
positional embeddings, tied unembedding) that differ only in their weights and in
whether the norm in front of attention divides by the norm ("layernorm") or not
("no_scaling") are stacked: every weight gets a leading model axis, every matrix product
becomes a batched one, and attention runs in :mod:`lncourse.evidence.selectability.kernel`
without (T, T) tensors, reading q, k, v where the QKV projection wrote them. :func:`fused_losses` returns each model's mean next-token loss;
their sum has, for each model, exactly the gradient of its own loss (the models share
no weight), so one optimiser step on the stack is one step of each model alone. The
tests hold a stack equal to the models trained one by one with :func:`lncourse.lm.train_lm`.

Dimension names: M models, B batch, T positions, d ``d_model``, H heads, dh = d / H,
V vocabulary, L layers.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from lncourse.evidence.selectability.kernel import kernel_applies, qkv_attention
from lncourse.transformer import GPT

__all__ = ["stack_models", "unstack", "scaling_flags", "fused_losses", "NUMERICS"]

# The version of the numbers this path computes. Bump it with any change that alters them
# (an operation's order, the kernel's exponential): a checkpoint of another version is
# refused, so that no history mixes two trainers. 1: issue 22's first kernel; 2: the
# qkv-layout kernel, folded LayerNorm affine, degree-5 exponential.
NUMERICS = 2


def _check_stackable(models: list[GPT]) -> None:
    if not models:
        raise ValueError("give at least one model")
    base = {k: v for k, v in vars(models[0].cfg).items() if k != "norm_attn"}
    for m in models:
        cfg = m.cfg
        if {k: v for k, v in vars(cfg).items() if k != "norm_attn"} != base:
            raise ValueError("the models differ in more than the norm before attention")
        if not (cfg.pos_emb and cfg.causal and cfg.placement == "pre" and cfg.final_norm
                and cfg.norm == "layernorm" and cfg.bias
                and (cfg.norm_attn or cfg.norm) in ("layernorm", "no_scaling")):
            raise ValueError("the fused path covers pre-LN causal GPTs with positional "
                             "embeddings and full LayerNorm, with 'layernorm' or "
                             f"'no_scaling' before attention; got {cfg}")


def stack_models(models: list[GPT]) -> dict[str, Tensor]:
    """The models' parameters (``named_parameters``: the tied unembedding once), each
    stacked along a new leading model axis: {name: (M, ...)} leaf tensors."""
    _check_stackable(models)
    return {name: torch.stack([dict(m.named_parameters())[name].detach() for m in models])
            .clone().requires_grad_(True) for name, _ in models[0].named_parameters()}


def unstack(params: dict[str, Tensor], i: int) -> dict[str, Tensor]:
    """Model ``i``'s state dict (with the tied ``W_U.weight``), for ``GPT.load_state_dict``."""
    state = {name: p[i].detach().clone() for name, p in params.items()}
    state["W_U.weight"] = state["W_E.weight"]
    return state


def scaling_flags(models: list[GPT]) -> Tensor:
    """Bool (M,): whether each model's norm before attention divides by the norm."""
    return torch.tensor([(m.cfg.norm_attn or m.cfg.norm) == "layernorm" for m in models])


class _Standardise(torch.autograd.Function):
    """The affine-free part of LayerNorm, (x - mean) / sqrt(var + eps) along the last
    axis of x (M, R, d), with its gradient in closed form, r (g - mean g - x^ mean(g x^)):
    a third of the passes over (M, R, d) that autograd takes. ``scale`` bool (M,): which
    models divide by the norm (None: all); the others only subtract the mean."""

    @staticmethod
    def forward(ctx, x, scale, eps):
        y = x - x.mean(-1, keepdim=True)
        r = torch.rsqrt((y * y).mean(-1, keepdim=True).add_(eps))
        if scale is not None:
            r = torch.where(scale.view(-1, 1, 1), r, torch.ones((), dtype=r.dtype))
        y.mul_(r)
        ctx.save_for_backward(y, r)
        ctx.scale = scale
        return y

    @staticmethod
    def backward(ctx, g):
        xhat, r = ctx.saved_tensors
        b = (g * xhat).mean(-1, keepdim=True)
        if ctx.scale is not None:
            b = torch.where(ctx.scale.view(-1, 1, 1), b, torch.zeros((), dtype=b.dtype))
        gx = g - g.mean(-1, keepdim=True)
        return gx.sub_(xhat * b).mul_(r), None, None


def _norm_linear(x: Tensor, w: Tensor, b: Tensor, scale: Tensor | None, W: Tensor,
                 c: Tensor | None, transposed: bool = False) -> Tensor:
    """LayerNorm of x (M, R, d) with per-model affine w, b (M, d) (``scale`` as in
    :class:`_Standardise`), then the linear map W (M, out, d), c (M, out) or None: the
    affine is folded into the map, W diag(w) and W b + c, so no pass over (M, R, d)
    applies it. ``transposed``: return (M, out, R), and c must be None."""
    xhat = _Standardise.apply(x, scale, 1e-5)
    bias = torch.bmm(W, b[..., None])                                       # (M, out, 1)
    if transposed:
        return torch.baddbmm(bias, W * w[:, None, :], xhat.transpose(1, 2))
    return _linear(xhat, W * w[:, None, :], bias[..., 0] if c is None else bias[..., 0] + c)


def _linear(x: Tensor, w: Tensor, b: Tensor) -> Tensor:
    """x (M, R, in) @ w^T (M, out, in) + b (M, out) -> (M, R, out)."""
    return torch.baddbmm(b[:, None], x, w.transpose(1, 2))


def _attention(x: Tensor, p: dict[str, Tensor], pre: str, scale: Tensor, B: int, T: int,
               H: int, use_kernel: bool) -> Tensor:
    """ln1, then causal multi-head attention of x (M, B T, d) -> (M, B T, d)."""
    M, _, d = x.shape
    w = torch.cat([p[f"{pre}attn.W_{n}.weight"] for n in "QKV"], 1)          # (M, 3d, d)
    b = torch.cat([p[f"{pre}attn.W_{n}.bias"] for n in "QKV"], 1)            # (M, 3d)
    qkv = _norm_linear(x, p[pre + "ln1.weight"], p[pre + "ln1.bias"], scale, w, b)
    z = qkv_attention(qkv.view(M * B, T, 3, H, d // H), use_kernel)        # (M B, T, H, dh)
    return _linear(z.reshape(M, B * T, d), p[f"{pre}attn.W_O.weight"],
                   p[f"{pre}attn.W_O.bias"])


def fused_losses(params: dict[str, Tensor], scale: Tensor, idx: Tensor, targets: Tensor,
                 n_heads: int, use_kernel: bool | None = None) -> Tensor:
    """Each model's mean next-token cross-entropy: idx, targets (M, B, T) -> (M,).

    ``params`` from :func:`stack_models`; ``scale`` from :func:`scaling_flags`;
    ``use_kernel``: the compiled attention (default: where available, on a CPU).
    """
    M, B, T = idx.shape
    if targets.shape != idx.shape:
        raise ValueError(f"targets {tuple(targets.shape)} and idx {tuple(idx.shape)} differ")
    d = params["W_E.weight"].shape[-1]
    if use_kernel is None:
        use_kernel = kernel_applies(params["W_E.weight"][..., :d // n_heads])
    W_E = params["W_E.weight"]                                               # (M, V, d)
    rows = torch.arange(M, device=idx.device).view(M, 1, 1)
    x = W_E[rows, idx] + params["W_pos.weight"][:, None, :T]                # (M, B, T, d)
    x = x.reshape(M, B * T, -1)
    n_layers = 1 + max(int(k.split(".")[1]) for k in params if k.startswith("blocks."))
    for i in range(n_layers):
        pre = f"blocks.{i}."
        x = x + _attention(x, params, pre, scale, B, T, n_heads, use_kernel)
        h = F.gelu(_norm_linear(x, params[pre + "ln2.weight"], params[pre + "ln2.bias"], None,
                                params[pre + "mlp.0.weight"], params[pre + "mlp.0.bias"]))
        x = x + _linear(h, params[pre + "mlp.2.weight"], params[pre + "mlp.2.bias"])
    # the logits as (M, V, B T): the log-softmax over V is then vectorised along B T
    logits = _norm_linear(x, params["ln_final.weight"], params["ln_final.bias"], None,
                          W_E, None, transposed=True)
    return F.cross_entropy(logits, targets.reshape(M, B * T), reduction="none").mean(1)
