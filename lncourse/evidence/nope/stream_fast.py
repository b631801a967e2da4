"""The all-positions probe of :mod:`lncourse.evidence.nope.stream`, fast on a GPU (chapter 4).

Why the stream's own ``--device cuda`` ran at about 10 sequences a second: its probes
and Adam stayed on the CPU, so every batch's features (13 depths x 4,096 positions x
768 numbers) were copied to the host, each sequence's inputs were drawn on the host one
at a time, and the held-out features were computed once more in float32. Here the
frozen model's weights are cast once to the forward pass's precision, the LayerNorms are
PyTorch's fused kernel (the model's own :class:`~lncourse.layernorm.FactorizedLayerNorm`
takes about ten), the features of every depth are written into one buffer on the
device, the probes and Adam live there too, and nothing returns to the host during
training but the first three losses.

Two input sources (``inputs``):

* ``"stream"``: the stored run's protocol exactly. Sequence i of model s has its own
  random stream (:func:`lncourse.evidence.nope.features.sequence_vectors`), ``seqs_per_batch``
  of them per forward pass, and each batch feeds its share of the updates with
  minibatches of ``update_positions`` positions drawn from the batch's own stream. On a
  CPU in float32 this is the stream's :func:`lncourse.evidence.nope.stream.train_model` up to
  the rounding of a differently ordered forward pass (a test holds them together).
* ``"device"``: the paper's budget, Appendix B: every update reads a fresh batch of
  sequences drawn on the device from the batch's own generator (so a resumed model
  draws what an uninterrupted one would), every position of the batch labelled.

Held-out sequences are always the host streams' (``held_out_start`` on), so both
sources are measured on the same sequences. With ``train_eval`` > 0, that many training
sequences are read again after training (stream inputs only), to measure over-fitting:
the error on sequences the probes trained on against held-out ones, both through the
training precision. Shapes: K + 1 depths, B sequences, T positions, d ``d_model``.
"""

from __future__ import annotations

import copy
import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from lncourse.evidence.nope.features import sequence_vectors
from lncourse.evidence.nope.probe import stream_seed
from lncourse.evidence.nope.stream import DTYPES, Probes, StreamConfig, probe_losses, errors, predict
from lncourse.nope.variance import check_sizes, random_nope_model
from lncourse.rng import check_seed

__all__ = ["FastConfig", "FrozenNoPE", "OutOfTime", "train_fast", "host_inputs",
           "sequence_errors"]

INPUTS = ("stream", "device")


@dataclass(frozen=True)
class FastConfig:
    d_model: int = 768
    n_heads: int = 12
    n_layers: int = 12
    seq_len: int = 512
    sigma: float = 0.02
    train_seqs: int = 1600       # training sequences, in batches of seqs_per_batch
    eval_seqs: int = 200         # held-out sequences (host streams)
    seqs_per_batch: int = 8
    updates: int = 5000
    update_positions: int = 512  # = seqs_per_batch * seq_len: every position, no draw
    hidden: int = 128
    lr: float = 1e-3
    dtype: str = "bfloat16"      # the frozen model's forward pass in training
    inputs: str = "stream"
    held_out_start: int = 1600   # index of the first held-out host stream
    train_eval: int = 0          # training sequences read again after training
    train_keep: int = 0          # ... of which the first train_keep keep predictions
    checkpoint_every: int = 50   # batches between checkpoints
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    bidirectional_seeds: tuple[int, ...] = (0, 1)

    def __post_init__(self):
        check_sizes(self.d_model, self.n_heads, self.seq_len, self.sigma)
        for name in ("n_layers", "train_seqs", "eval_seqs", "seqs_per_batch", "updates",
                     "update_positions", "hidden", "checkpoint_every"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if self.train_seqs % self.seqs_per_batch:
            raise ValueError("train_seqs must be a multiple of seqs_per_batch")
        if self.update_positions > self.seqs_per_batch * self.seq_len:
            raise ValueError("update_positions must be <= seqs_per_batch * seq_len")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {self.dtype!r}")
        if self.inputs not in INPUTS:
            raise ValueError(f"inputs must be one of {INPUTS}, got {self.inputs!r}")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"lr must be a finite positive number, got {self.lr!r}")
        if self.inputs == "stream" and self.held_out_start < self.train_seqs:
            raise ValueError("held-out streams must not be training streams: "
                             "held_out_start must be >= train_seqs")
        if not 0 <= self.train_keep <= self.train_eval <= self.train_seqs or (
                self.train_eval and self.inputs != "stream"):
            raise ValueError("need 0 <= train_keep <= train_eval <= train_seqs, and "
                             "train_eval only with stream inputs")
        for s in self.seeds + self.bidirectional_seeds:
            check_seed(s, "a seed")

    @property
    def n_batches(self) -> int:
        return self.train_seqs // self.seqs_per_batch

    def updates_in(self, batch: int) -> int:
        U, B = self.updates, self.n_batches
        return (batch + 1) * U // B - batch * U // B

    @property
    def every_position(self) -> bool:
        return self.update_positions == self.seqs_per_batch * self.seq_len

    def train_indices(self) -> list[int]:
        """The training sequences read again after training, spread evenly."""
        step = self.train_seqs // max(self.train_eval, 1)
        return [i * step for i in range(self.train_eval)]

    def stream(self) -> StreamConfig:
        """The same run as :class:`lncourse.evidence.nope.stream.StreamConfig` (stream inputs)."""
        return StreamConfig(**{k: getattr(self, k) for k in StreamConfig.__dataclass_fields__})


class FrozenNoPE:
    """The frozen random NoPE model's forward pass, weights cast once to ``dtype``; the
    residual stream and the LayerNorms in float32 (as autocast runs them)."""

    def __init__(self, model, dtype: torch.dtype):
        c = lambda t: t.detach().to(dtype)                       # noqa: E731
        f = lambda t: t.detach().float()                         # noqa: E731
        self.dtype, self.causal, self.H = dtype, model.cfg.causal, model.cfg.n_heads
        self.layers = []
        for b in model.blocks:
            a = b.attn
            self.layers.append(dict(
                ln1=(f(b.ln1.weight), f(b.ln1.bias), b.ln1.eps),
                Wqkv=c(torch.cat([a.W_Q.weight, a.W_K.weight, a.W_V.weight])),
                bqkv=c(torch.cat([a.W_Q.bias, a.W_K.bias, a.W_V.bias])),
                Wo=c(a.W_O.weight), bo=c(a.W_O.bias),
                ln2=(f(b.ln2.weight), f(b.ln2.bias), b.ln2.eps),
                W1=c(b.mlp[0].weight), b1=c(b.mlp[0].bias),
                W2=c(b.mlp[2].weight), b2=c(b.mlp[2].bias)))
        ln = model.ln_final
        self.lnf = (f(ln.weight), f(ln.bias), ln.eps)

    @torch.no_grad()
    def features(self, x: Tensor) -> Tensor:
        """x (B, T, d) -> the final LayerNorm after 0 ... K blocks: (K + 1, B * T, d),
        float32 (what :func:`lncourse.evidence.nope.features.feature_batches` yields)."""
        B, T, d = x.shape
        H, dt = self.H, self.dtype
        ln = lambda z, p: F.layer_norm(z, (d,), p[0], p[1], p[2])   # noqa: E731
        out = torch.empty(len(self.layers) + 1, B * T, d, device=x.device)
        x = x.float()
        out[0] = ln(x, self.lnf).view(-1, d)
        for k, L in enumerate(self.layers, start=1):
            qkv = F.linear(ln(x, L["ln1"]).to(dt), L["Wqkv"], L["bqkv"])
            q, kk, v = qkv.view(B, T, 3, H, d // H).permute(2, 0, 3, 1, 4)
            z = F.scaled_dot_product_attention(q, kk, v, is_causal=self.causal)
            x = x + F.linear(z.transpose(1, 2).reshape(B, T, d), L["Wo"], L["bo"]).float()
            hid = F.gelu(F.linear(ln(x, L["ln2"]).to(dt), L["W1"], L["b1"]))
            x = x + F.linear(hid, L["W2"], L["b2"]).float()
            out[k] = ln(x, self.lnf).view(-1, d)
        return out


class OutOfTime(Exception):
    """The wall budget ran out inside a model; its checkpoint was saved first."""


_POOL = ThreadPoolExecutor(max_workers=8)


def host_inputs(seed: int, indices, cfg: FastConfig, device) -> Tensor:
    """The host-stream inputs (B, T, d) of sequences ``indices`` of model ``seed`` (drawn
    in threads, each from its own stream, so the result does not depend on them)."""
    xs = _POOL.map(lambda i: sequence_vectors(seed, i, cfg.seq_len, cfg.d_model, cfg.sigma),
                   [int(i) for i in indices])
    return torch.stack(list(xs)).to(device)


def _batch(cfg: FastConfig, seed: int, j: int, device) -> Tensor:
    B = cfg.seqs_per_batch
    if cfg.inputs == "stream":
        return host_inputs(seed, range(j * B, (j + 1) * B), cfg, device)
    gen = torch.Generator(device=device).manual_seed(stream_seed(seed, j, 8))
    return torch.randn(B, cfg.seq_len, cfg.d_model, generator=gen, device=device) * cfg.sigma


@torch.no_grad()
def _predict(frozen: FrozenNoPE, cls, reg, seed: int, indices, cfg: FastConfig, device):
    B, T, preds = cfg.seqs_per_batch, cfg.seq_len, []
    indices = list(indices)
    for b0 in range(0, len(indices), B):
        h = frozen.features(host_inputs(seed, indices[b0:b0 + B], cfg, device))
        preds.append([p.to(torch.int16).cpu() for p in predict(cls, reg, h, T)])
    return [torch.cat([p[i] for p in preds], 1) for i in range(2)]


def sequence_errors(pred: Tensor, seq_len: int) -> np.ndarray:
    """Per depth and sequence, the mean absolute error of predictions (K + 1, N * T):
    (K + 1, N) float32 (their mean over sequences is :func:`errors`)."""
    p = np.asarray(pred, dtype=np.float64).reshape(len(pred), -1, seq_len)
    return np.abs(p - np.arange(seq_len)).mean(-1).astype(np.float32)


def train_fast(cfg: FastConfig, seed: int, causal: bool, device="cpu", state=None,
               on_checkpoint=None, deadline: float = math.inf,
               probe_tf32: bool = False) -> dict:
    """Train both probes of one frozen model on ``device``; measure them.

    ``state`` (given to ``on_checkpoint`` every ``cfg.checkpoint_every`` batches, and
    before :class:`OutOfTime` is raised when ``time.perf_counter()`` passes ``deadline``
    at a batch's start) resumes the model exactly. ``probe_tf32`` lets the probes'
    float32 products in training round their inputs to TF32 on a GPU (10 significant
    bits; the frozen model runs in ``cfg.dtype`` either way, and every measurement after
    training in full float32); the result records it. Returns, per probe, ``pred_<probe>``
    (K + 1, eval_seqs * T) int16 from float32 held-out features, ``mae_<probe>`` and
    ``mae_<probe>_<dtype>`` (held-out features in the training precision); with
    ``train_eval``, ``mae_<probe>_train`` (training sequences, training precision) and
    ``pred_<probe>_train`` and ``mae_<probe>_train_subset`` (the first ``train_keep``
    of them); ``first_losses``,
    ``seconds`` (all), ``train_seconds`` and ``seqs_per_s`` (training sequences per
    second of training).
    """
    check_seed(seed)
    device = torch.device(device)
    T, K1, B = cfg.seq_len, cfg.n_layers + 1, cfg.seqs_per_batch
    model = random_nope_model(cfg.d_model, cfg.n_heads, cfg.n_layers, T, cfg.sigma,
                              causal, seed, device)
    frozen = FrozenNoPE(model, DTYPES[cfg.dtype])
    cls = Probes(K1, cfg.d_model, cfg.hidden, T, seed, 0).to(device)
    reg = Probes(K1, cfg.d_model, cfg.hidden, 1, seed, 1).to(device)
    opt = torch.optim.Adam([*cls.parameters(), *reg.parameters()], lr=cfg.lr)
    start, seconds, first = 0, 0.0, []
    if state is not None:
        cls.load_state_dict(state["cls"]), reg.load_state_dict(state["reg"])
        opt.load_state_dict(state["opt"])
        start, seconds, first = state["batch"], state["seconds"], state["first_losses"]
    pos_all = torch.arange(T, device=device).repeat(B)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def snapshot(j: int) -> dict:
        sync()
        return copy.deepcopy({"cls": cls.state_dict(), "reg": reg.state_dict(),
                              "opt": opt.state_dict(), "batch": j, "first_losses": first,
                              "seconds": seconds + time.perf_counter() - t0})

    t0 = time.perf_counter()
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = probe_tf32    # the probes' float32 products
    try:
        for j in range(start, cfg.n_batches):
            if time.perf_counter() > deadline:
                if on_checkpoint is not None:
                    on_checkpoint(snapshot(j))
                raise OutOfTime(f"stopped at batch {j} of {cfg.n_batches}")
            h = frozen.features(_batch(cfg, seed, j, device))
            n = cfg.updates_in(j)
            if cfg.every_position:
                draws = [None] * n
            else:
                gen = torch.Generator().manual_seed(stream_seed(seed, j, 6))
                draws = torch.randint(B * T, (n, cfg.update_positions), generator=gen)
                draws = list(draws.to(device)) if n else []
            for idx in draws:
                hh, pos = (h, pos_all) if idx is None else (h[:, idx], pos_all[idx])
                ce, l1 = probe_losses(cls, reg, hh, pos, T)
                opt.zero_grad(set_to_none=True)
                (ce.sum() + l1.sum()).backward()
                opt.step()
                if len(first) < 3:
                    first.append([ce.tolist(), l1.tolist()])
            if on_checkpoint is not None and (j + 1) % cfg.checkpoint_every == 0 \
                    and j + 1 < cfg.n_batches:
                on_checkpoint(snapshot(j + 1))
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    sync()
    train_seconds = seconds + time.perf_counter() - t0
    out = {"first_losses": first, "train_seconds": train_seconds, "probe_tf32": probe_tf32,
           "seqs_per_s": cfg.train_seqs / train_seconds}
    held = range(cfg.held_out_start, cfg.held_out_start + cfg.eval_seqs)
    f32 = FrozenNoPE(model, torch.float32)
    low = "" if cfg.dtype == "float32" else f"_{cfg.dtype}"   # the training precision
    for tag, fr in (("", f32),) + (((low, frozen),) if low else ()):
        for probe, p in zip(("classifier", "regression"),
                            _predict(fr, cls, reg, seed, held, cfg, device)):
            out[f"mae_{probe}{tag}"] = errors(p, T)
            if not tag:
                out[f"pred_{probe}"] = p
            if cfg.train_eval and tag == low:
                out[f"seqerr_{probe}_held"] = sequence_errors(p, T)
    if cfg.train_eval:
        for probe, p in zip(("classifier", "regression"), _predict(
                frozen, cls, reg, seed, cfg.train_indices(), cfg, device)):
            out[f"mae_{probe}_train"] = errors(p, T)
            out[f"seqerr_{probe}_train"] = sequence_errors(p, T)
            if cfg.train_keep:
                out[f"pred_{probe}_train"] = p[:, :cfg.train_keep * T]
                out[f"mae_{probe}_train_subset"] = errors(out[f"pred_{probe}_train"], T)
    sync()
    return {**out, "seconds": seconds + time.perf_counter() - t0}
