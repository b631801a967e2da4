"""The all-positions probe of :mod:`lncourse.evidence.nope.stream_run` on a device:
its fast path and the budgeted run on a lent GPU (chapter 4, issue 35 item 5).

**The fast path** (:func:`train_fast`). Why the run's own ``--device cuda`` ran at
about 10 sequences a second: its probes and Adam stayed on the CPU, so every batch's
features (13 depths x 4,096 positions x 768 numbers) were copied to the host, each
sequence's inputs were drawn on the host one at a time, and the held-out features were
computed once more in float32. Here the frozen model's weights are cast once to the
forward pass's precision, the LayerNorms are PyTorch's fused kernel (the model's own
:class:`~lncourse.layernorm.FactorizedLayerNorm` takes about ten), the features of every
depth are written into one buffer on the device, the probes and Adam live there too, and
nothing returns to the host during training but the first three losses.

Two input sources (``inputs``):

* ``"stream"``: the stored run's protocol exactly. Sequence i of model s has its own
  random stream (:func:`lncourse.evidence.nope.features.sequence_vectors`),
  ``seqs_per_batch`` of them per forward pass, and each batch feeds its share of the
  updates with minibatches of ``update_positions`` positions drawn from the batch's own
  stream. On a CPU in float32 this is :func:`lncourse.evidence.nope.stream_run.train_model`
  up to the rounding of a differently ordered forward pass (a test holds them together).
* ``"device"``: the paper's budget, Appendix B: every update reads a fresh batch of
  sequences drawn on the device from the batch's own generator (so a resumed model
  draws what an uninterrupted one would), every position of the batch labelled.

Held-out sequences are always the host streams' (``held_out_start`` on), so both
sources are measured on the same sequences. With ``train_eval`` > 0, that many training
sequences are read again after training (stream inputs only), to measure over-fitting:
the error on sequences the probes trained on against held-out ones, both through the
training precision. Shapes: K + 1 depths, B sequences, T positions, d ``d_model``.

**The budgeted run** (:func:`run`). Two phases, each a list of models run in
:func:`lncourse.evidence.nope.stream_run.order`:

* ``stored``: the stored run's size and protocol (1,600 training sequences of the host
  streams, 8 per forward pass, 5,000 updates of 512 positions; 200 held-out ones), with
  the training sequences read again after training, so the error on what the probes
  trained on can be set against the held-out error (over-fitting, measured);
* ``paper``: the paper's budget (Appendix B): 5,000 Adam updates, each on a fresh batch
  of 32 random sequences drawn on the device, every position labelled: 160,000
  sequences per model, measured on the stored run's 200 held-out sequences.

    PYTHONPATH=. python3 -m lncourse.evidence.nope.stream_device --device cuda \\
        --budget-s 420 --out "$OUT"

stops cleanly before the budget: a model that would not finish is not started (its time
is estimated from the last model of its phase), and one caught by the budget saves its
checkpoint and stops. Finished models and checkpoints live in ``--ck`` (run the same
command again on the same machine to resume); after every model the whole record is
written to ``--out``: ``stream_gpu.json`` (every number, the device, torch, each model's
wall time and sequences per second, and the git blob ids of the code that ran) and the
held-out predictions in at most six ``preds_<i>.npz`` of under 15 MiB each.
:func:`lncourse.evidence.nope.stream_read.store_device` stores that folder in
``results/nope/``. It imports torch, numpy and the standard library only (what the lent
machines have).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import datetime
import hashlib
import io
import json
import math
import os
import platform
import subprocess
import sys
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from lncourse.evidence.nope.features import feature_batches, sequence_vectors
from lncourse.evidence.nope.probe import stream_seed
from lncourse.evidence.nope.stream_run import (DTYPES, BatchSchedule, Probes, StreamConfig,
                                               errors, order, predict, probe_losses,
                                               save_atomic)
from lncourse.nope.variance import random_nope_model
from lncourse.rng import check_seed

__all__ = ["FastConfig", "FrozenNoPE", "OutOfTime", "train_fast", "host_inputs",
           "sequence_errors", "PHASES", "CODE", "blob_id", "pack", "forward_check",
           "profile_updates", "run", "main"]

INPUTS = ("stream", "device")


@dataclass(frozen=True)
class FastConfig(BatchSchedule):
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
        self.check_run(positive=("checkpoint_every",))
        if self.inputs not in INPUTS:
            raise ValueError(f"inputs must be one of {INPUTS}, got {self.inputs!r}")
        if self.inputs == "stream" and self.held_out_start < self.train_seqs:
            raise ValueError("held-out streams must not be training streams: "
                             "held_out_start must be >= train_seqs")
        if not 0 <= self.train_keep <= self.train_eval <= self.train_seqs or (
                self.train_eval and self.inputs != "stream"):
            raise ValueError("need 0 <= train_keep <= train_eval <= train_seqs, and "
                             "train_eval only with stream inputs")

    @property
    def every_position(self) -> bool:
        return self.update_positions == self.seqs_per_batch * self.seq_len

    def train_indices(self) -> list[int]:
        """The training sequences read again after training, spread evenly."""
        step = self.train_seqs // max(self.train_eval, 1)
        return [i * step for i in range(self.train_eval)]

    def stream(self) -> StreamConfig:
        """The same run as :class:`lncourse.evidence.nope.stream_run.StreamConfig` (stream inputs)."""
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


# The budgeted run on a lent GPU: phases of models, a wall budget, a folder to bring back.

PHASES = {
    "stored": lambda: FastConfig(train_eval=1600, train_keep=40),
    "paper": lambda: FastConfig(train_seqs=160_000, seqs_per_batch=32,
                                update_positions=32 * 512, inputs="device",
                                checkpoint_every=500),
    # the same two at a size a CPU runs in seconds (the tests' and a dry run's)
    "tiny_stored": lambda: FastConfig(**TINY, train_seqs=32, seqs_per_batch=4, updates=40,
                                      update_positions=32, held_out_start=32,
                                      train_eval=16, train_keep=4, checkpoint_every=3),
    "tiny_paper": lambda: FastConfig(**TINY, train_seqs=40, seqs_per_batch=4, updates=10,
                                     update_positions=4 * 16, inputs="device",
                                     held_out_start=32, checkpoint_every=3),
}
TINY = dict(d_model=32, n_heads=4, n_layers=2, seq_len=16, eval_seqs=4, hidden=8,
            lr=3e-3, seeds=(0, 1), bidirectional_seeds=(0,))
# the code that runs: its git blob ids go into the record, so the importer can name
# the commit (the device's copy of the tree has no .git)
CODE = ["lncourse/evidence/nope/stream_device.py", "lncourse/evidence/nope/stream_run.py",
        "lncourse/evidence/nope/features.py", "lncourse/evidence/nope/probe.py",
        "lncourse/nope/variance.py", "lncourse/transformer.py", "lncourse/attention.py",
        "lncourse/layernorm.py", "lncourse/rng.py"]
ROOT = Path(__file__).resolve().parents[3]
FILE_LIMIT = 15 * 2**20
MAX_FILES = 6
ARRAYS = ("pred_", "seqerr_")   # a model's arrays: predictions, per-sequence errors


def blob_id(path: Path) -> str:
    """The id git gives the file's contents (``git hash-object``)."""
    data = Path(path).read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


def pack(arrays: dict[str, np.ndarray], limit: int = FILE_LIMIT) -> list[list[str]]:
    """Names of ``arrays`` in groups whose compressed sizes add to under ``limit`` each
    (first fit, in order)."""
    groups, sizes = [], []
    for name, a in arrays.items():
        size = len(zlib.compress(_npy(a), 6)) + 200
        if size > limit:
            raise ValueError(f"{name} alone compresses to {size} bytes, over {limit}")
        fit = next((i for i, s in enumerate(sizes) if s + size <= limit), None)
        if fit is None:
            groups.append([])
            sizes.append(0)
            fit = len(groups) - 1
        groups[fit].append(name)
        sizes[fit] += size
    return groups


def _write(out: Path, record: dict, done: dict) -> None:
    """The record and the predictions of every finished model, under ``out``."""
    arrays = {f"{ph}__{m['kind']}_{m['seed']}__{k}": np.asarray(
        m[k], np.int16 if k.startswith("pred_") else np.float32)
        for ph, models in done.items() for m in models for k in m if k.startswith(ARRAYS)}
    groups = pack(arrays)
    if len(groups) > MAX_FILES:
        raise ValueError(f"predictions need {len(groups)} files, more than {MAX_FILES}")
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("preds_*.npz"):
        old.unlink()
    files = {}
    for i, names in enumerate(groups):
        np.savez_compressed(out / f"preds_{i}.npz", **{n: arrays[n] for n in names})
        files.update({n: f"preds_{i}.npz" for n in names})
    record["predictions"] = files
    for ph, models in done.items():
        record["phases"][ph]["models"] = [
            {k: v for k, v in m.items() if not k.startswith(ARRAYS)} for m in models]
    tmp = out / "stream_gpu.json.tmp"
    tmp.write_text(json.dumps(record, indent=1))
    os.replace(tmp, out / "stream_gpu.json")


def _device_info(device: torch.device) -> dict:
    info = {"device": device.type, "torch": torch.__version__,
            "python": platform.python_version(), "numpy": np.__version__,
            "cpu_threads": torch.get_num_threads(),
            "tf32_matmul": torch.backends.cuda.matmul.allow_tf32}
    if device.type == "cuda":
        info.update(device=f"cuda: {torch.cuda.get_device_name(device)}",
                    cuda=torch.version.cuda,
                    gpu_memory_gib=round(torch.cuda.get_device_properties(device)
                                         .total_memory / 2**30, 1))
        try:
            info["nvidia_smi"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=name,memory.total,driver_version,clocks.max.sm",
                 "--format=csv,noheader"], capture_output=True, text=True,
                timeout=20).stdout.strip()
        except (OSError, subprocess.SubprocessError) as e:
            info["nvidia_smi"] = f"not read: {e}"
    else:
        info["device"] = f"cpu: {platform.processor() or platform.machine()}"
    return info


def forward_check(device, n_seqs: int = 2) -> dict:
    """On the paper's model (seed 0, causal), the fast forward pass against the model's
    own (:func:`lncourse.evidence.nope.features.feature_batches`) on ``device``: the largest
    difference in float32, and bfloat16's relative RMS error per depth (expected about
    2^-9 sqrt(2k + 1); tests/nope/test_stream_device.py holds it at a small size)."""
    cfg = PHASES["paper"]()
    model = random_nope_model(768, 12, 12, 512, 0.02, True, 0, device)
    x = host_inputs(0, range(n_seqs), cfg, device)
    (ref, _), = feature_batches(model, 0, range(n_seqs), 0.02, batch=n_seqs)
    ref = ref.to(device)
    f32 = FrozenNoPE(model, torch.float32).features(x)
    bf = FrozenNoPE(model, torch.bfloat16).features(x)
    rel = ((bf - ref).pow(2).mean((1, 2)).sqrt() / ref.pow(2).mean((1, 2)).sqrt())
    return {"seqs": n_seqs, "float32_max_abs_diff": (f32 - ref).abs().max().item(),
            "feature_max_abs": ref.abs().max().item(),
            "bfloat16_rel_rms": [round(v, 6) for v in rel.tolist()]}


def profile_updates(device, phase: str = "paper", updates: int = 8, top: int = 15) -> dict:
    """The busiest operations of a short run of ``phase``'s protocol (``updates`` batches,
    one held-out batch) under torch.profiler: (name, calls, self milliseconds) by
    self time on ``device``; where the next speed-up would come from."""
    from torch.profiler import ProfilerActivity, profile

    base = PHASES[phase]()
    B = base.seqs_per_batch
    cfg = dataclasses.replace(base, train_seqs=B * updates, updates=updates, eval_seqs=B,
                              checkpoint_every=updates, train_eval=0, train_keep=0)
    device = torch.device(device)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    t0 = time.perf_counter()
    with profile(activities=acts) as prof:
        r = train_fast(cfg, 0, True, device)
    attr = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    rows = sorted(prof.key_averages(), key=lambda e: getattr(e, attr, 0), reverse=True)
    return {"phase": phase, "updates": updates, "wall_s": time.perf_counter() - t0,
            "train_seconds": r["train_seconds"], "by": attr,
            "ops": [[e.key, e.count, round(getattr(e, attr, 0) / 1e3, 2)]
                    for e in rows[:top]]}


def run(phases: list[str], out: Path, ck: Path, device: str = "cpu",
        budget_s: float = float("inf"), models: list[str] | None = None,
        overrides: dict | None = None, reserve_s: float = 20.0, argv=None,
        have: Path | None = None, probe_tf32: bool = False, profile: bool = False) -> dict:
    """Run ``phases`` model by model until done or ``budget_s`` (minus ``reserve_s`` for
    a model's measurement and the writing) has passed; returns the record written.
    ``have``: an imported record (``results/nope/stream_gpu.json``) whose models, where
    their phase's configuration is this one, are not run again."""
    t_start = time.perf_counter()
    end = t_start + budget_s - reserve_s
    device = torch.device(device)
    cfgs = {ph: PHASES[ph]() for ph in phases}
    cfgs = {ph: dataclasses.replace(c, **(overrides or {})) if c.inputs == "stream" else c
            for ph, c in cfgs.items()}
    ck.mkdir(parents=True, exist_ok=True)
    done_file = ck / "done.pt"
    saved = torch.load(done_file, weights_only=False) if done_file.exists() else {}
    for ph, cfg in cfgs.items():
        if ph in saved and saved[ph]["config"] != dataclasses.asdict(cfg):
            raise ValueError(f"{done_file} holds another {ph} configuration; delete {ck}")
    done = {ph: saved.get(ph, {"models": []})["models"] for ph in phases}
    skip = set()
    if have is not None:
        old = json.loads(Path(have).read_text())["phases"]
        skip = {(ph, m["kind"], m["seed"]) for ph, c in cfgs.items() if ph in old
                and old[ph]["config"] == json.loads(json.dumps(dataclasses.asdict(c)))
                for m in old[ph]["models"]}
    record = {"format": 1, "phases": {ph: {"config": dataclasses.asdict(c), "models": [],
                                           "planned": [f"{k}:{s}" for k, s in order(c)],
                                           "partial": None} for ph, c in cfgs.items()},
              "provenance": {**_device_info(device),
                             "command": "python -m lncourse.evidence.nope.stream_device "
                             + " ".join(sys.argv[1:] if argv is None else argv),
                             "code": {p: blob_id(ROOT / p) for p in CODE},
                             "started": datetime.datetime.now(datetime.timezone.utc)
                             .isoformat(timespec="seconds"),
                             "budget_s": budget_s if math.isfinite(budget_s) else None,
                             "stopped": "finished"}}
    if device.type == "cuda":
        record["provenance"]["forward_check"] = forward_check(device)
        print("forward check:", record["provenance"]["forward_check"], flush=True)
    if profile:
        record["provenance"]["profile"] = profile_updates(device, phases[-1])
        print("profile:", record["provenance"]["profile"], flush=True)
    for ph, cfg in cfgs.items():
        last = max([m["train_seconds"] for m in done[ph]], default=None)
        for kind, seed in order(cfg):
            name = f"{kind}:{seed}"
            if models and name not in models or (ph, kind, seed) in skip or any(
                    (m["kind"], m["seed"]) == (kind, seed) for m in done[ph]):
                continue
            left = end - time.perf_counter()
            if left <= 0 or (last is not None and 1.05 * last > left):
                record["provenance"]["stopped"] = (
                    f"budget: {ph} {name} not started ({left + reserve_s:.0f} s left, "
                    f"the last model trained for {last or 0:.0f} s)")
                return _finish(record, out, done, t_start)
            part = ck / f"{ph}_{kind}_{seed}.pt"
            state = torch.load(part, weights_only=False) if part.exists() else None

            def keep(s, p=part, ph=ph, name=name, B=cfg.seqs_per_batch):
                save_atomic(s, p)
                record["phases"][ph]["partial"] = {"model": name, "batch": s["batch"],
                                                   "seconds": round(s["seconds"], 1)}
                print(f"  {ph} {name}: batch {s['batch']}, {s['seconds']:.0f} s, "
                      f"{s['batch'] * B / max(s['seconds'], 1e-9):.0f} sequences/s "
                      "(with the checkpoints)", flush=True)
            try:
                r = train_fast(cfg, seed, kind == "causal", device, state, keep, end,
                               probe_tf32)
            except OutOfTime as e:
                record["provenance"]["stopped"] = f"budget: {ph} {name} {e}"
                return _finish(record, out, done, t_start)
            done[ph].append({"kind": kind, "seed": seed, **r})
            last = r["train_seconds"]
            record["phases"][ph]["partial"] = None
            save_atomic({p: {"config": dataclasses.asdict(cfgs[p]), "models": done[p]}
                         for p in cfgs}, done_file)
            part.unlink(missing_ok=True)
            mid = r["mae_classifier"][len(r["mae_classifier"]) // 2]
            print(f"{ph} {name}: {r['seconds']:.1f} s, {r['seqs_per_s']:.0f} training "
                  f"sequences/s; classifier error at depth {cfg.n_layers // 2}: {mid:.1f}",
                  flush=True)
            _finish(record, out, done, t_start, final=False)
    return _finish(record, out, done, t_start)


def _finish(record: dict, out: Path, done: dict, t_start: float, final: bool = True):
    record["provenance"]["wall_seconds"] = round(time.perf_counter() - t_start, 1)
    _write(out, record, done)
    if final:
        print(f"{record['provenance']['stopped']}; wrote {out} after "
              f"{record['provenance']['wall_seconds']:.0f} s", flush=True)
    return record


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m lncourse.evidence.nope.stream_device",
                                description="Chapter 4's all-positions probe on a GPU, "
                                "within a wall budget, written to a folder.")
    p.add_argument("--out", type=Path, required=True, help="folder for the record")
    p.add_argument("--budget-s", type=float, default=float("inf"))
    p.add_argument("--device", default="cuda")
    p.add_argument("--phases", default="stored,paper")
    p.add_argument("--models", default=None, help="e.g. causal:0,bidirectional:1")
    p.add_argument("--ck", type=Path, default=ROOT / "results/checkpoints/nope_stream_gpu")
    p.add_argument("--train-eval", type=int, default=None,
                   help="training sequences read again (stored phase; default 1,600)")
    p.add_argument("--train-keep", type=int, default=None)
    p.add_argument("--probe-tf32", action="store_true",
                   help="the probes' float32 products in training in TF32 (a GPU's)")
    p.add_argument("--profile", action="store_true",
                   help="first profile a few updates of the last phase")
    p.add_argument("--have", type=Path, default=None,
                   help="an imported record whose models are not run again")
    a = p.parse_args(argv)
    phases = a.phases.split(",")
    for ph in phases:
        if ph not in PHASES:
            p.error(f"unknown phase {ph!r}; choose from {sorted(PHASES)}")
    over = {k: v for k, v in (("train_eval", a.train_eval), ("train_keep", a.train_keep))
            if v is not None}
    return run(phases, a.out, a.ck, a.device, a.budget_s,
               a.models.split(",") if a.models else None, over, argv=argv, have=a.have,
               probe_tf32=a.probe_tf32, profile=a.profile)


if __name__ == "__main__":
    main()
