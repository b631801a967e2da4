"""The position probe with every position, trained online (chapter 4, Chi et al. Fig. 2).

Features of 1,600 sequences x 512 positions x 13 depths x 768 dims would take 33 GB in
float32, so nothing is kept: batches of fresh training sequences stream through the
frozen model (:func:`lncourse.evidence.nope.features.feature_batches`, all depths in one pass),
and each batch feeds a share of the probes' updates (minibatches of positions drawn from
that batch) before it is dropped. Two probes per depth learn side by side from the same
minibatches: the paper's (Appendix B: a two-layer ReLU classifier over the T positions,
Adam at lr 1e-3, 5,000 updates) and the chapter's regression probe (the same network
with one output, the absolute error of m / T). Held-out sequences (their own random
streams) measure both; their predictions are stored so a test can recompute the errors.

    python -m lncourse.evidence.nope.stream_run --preset paper

The same run on a GPU, fast, and the paper's budget: :mod:`lncourse.evidence.nope.stream_device`;
what the stored runs read: :mod:`lncourse.evidence.nope.stream_read`.

Shapes: K + 1 depths, n positions of a minibatch, d ``d_model``, h ``hidden``, T ``seq_len``.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from lncourse.nope.variance import check_sizes, random_nope_model
from lncourse.evidence.nope.features import feature_batches
from lncourse.evidence.nope.probe import stream_seed, middle_baseline
from lncourse.progress import progress as progress_bar
from lncourse.results import RESULTS_DIR, command_line, run_arguments, run_started, store_run
from lncourse.rng import check_seed

__all__ = ["BatchSchedule", "StreamConfig", "Probes", "train_model", "PRESETS", "save_atomic", "main"]

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


class BatchSchedule:
    """How a run's updates are shared among its training batches; for a config with
    ``train_seqs``, ``seqs_per_batch`` and ``updates`` (this module's and the fast
    path's in :mod:`lncourse.evidence.nope.stream_device`)."""

    @property
    def n_batches(self) -> int:
        return self.train_seqs // self.seqs_per_batch

    def updates_in(self, batch: int) -> int:
        """Updates fed by training batch ``batch`` (the 5,000 spread evenly)."""
        U, B = self.updates, self.n_batches
        return (batch + 1) * U // B - batch * U // B

    def check_run(self, positive: tuple[str, ...] = ()) -> None:
        """Refuse sizes, a schedule, a dtype, a rate or seeds the run cannot use;
        ``positive`` names further fields that must be positive integers."""
        check_sizes(self.d_model, self.n_heads, self.seq_len, self.sigma)
        for name in ("n_layers", "train_seqs", "eval_seqs", "seqs_per_batch", "updates",
                     "update_positions", "hidden", *positive):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if self.train_seqs % self.seqs_per_batch:
            raise ValueError("train_seqs must be a multiple of seqs_per_batch")
        if self.update_positions > self.seqs_per_batch * self.seq_len:
            raise ValueError("update_positions must be <= seqs_per_batch * seq_len")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {self.dtype!r}")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"lr must be a finite positive number, got {self.lr!r}")
        for s in self.seeds + self.bidirectional_seeds:
            check_seed(s, "a seed")


@dataclass(frozen=True)
class StreamConfig(BatchSchedule):
    d_model: int = 768
    n_heads: int = 12
    n_layers: int = 12
    seq_len: int = 512
    sigma: float = 0.02
    train_seqs: int = 1600       # fresh training sequences, every position used
    eval_seqs: int = 200         # held-out sequences (every position)
    seqs_per_batch: int = 8      # sequences per forward pass (and per share of updates)
    updates: int = 5000          # the paper's 5,000 Adam updates
    update_positions: int = 512  # positions per update, drawn from the current batch
    hidden: int = 128
    lr: float = 1e-3
    dtype: str = "bfloat16"      # the frozen model's forward pass on training sequences
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    bidirectional_seeds: tuple[int, ...] = (0, 1)

    def __post_init__(self):
        self.check_run()


PRESETS = {
    "paper": StreamConfig,
    "quick": lambda: StreamConfig(n_layers=3, seq_len=32, train_seqs=256, eval_seqs=32,
                                  updates=300, update_positions=64, hidden=32, seeds=(0, 1),
                                  bidirectional_seeds=(0,), dtype="float32"),
}


class Probes(nn.Module):
    """Per depth, a two-layer ReLU network: (K + 1, n, d) -> (K + 1, n, out)."""

    def __init__(self, n_probes: int, d_model: int, hidden: int, out: int, seed: int, tag: int):
        super().__init__()
        gen = torch.Generator().manual_seed(stream_seed(seed, tag, 5))
        self.W1 = nn.Parameter(torch.randn(n_probes, d_model, hidden, generator=gen)
                               / math.sqrt(d_model))
        self.b1 = nn.Parameter(torch.zeros(n_probes, 1, hidden))
        self.W2 = nn.Parameter(torch.randn(n_probes, hidden, out, generator=gen)
                               / math.sqrt(hidden) * (out > 1))
        self.b2 = nn.Parameter(torch.full((n_probes, 1, out), 0.5 if out == 1 else 0.0))

    def forward(self, h: Tensor) -> Tensor:
        return torch.relu(h @ self.W1 + self.b1) @ self.W2 + self.b2


def probe_losses(cls: Probes, reg: Probes, h: Tensor, pos: Tensor, T: int) -> tuple[Tensor, Tensor]:
    """Per-depth cross-entropy of the classifier and L1 error of m / T of the regression."""
    logits = cls(h)                                                   # (K + 1, n, T)
    ce = nn.functional.cross_entropy(logits.flatten(0, 1), pos.repeat(len(h)),
                                     reduction="none").view(len(h), -1).mean(-1)
    l1 = (reg(h)[..., 0] - pos / T).abs().mean(-1)
    return ce, l1


@torch.no_grad()
def predict(cls: Probes, reg: Probes, h: Tensor, T: int) -> tuple[Tensor, Tensor]:
    """Predicted positions (K + 1, n) of both probes: the classifier's argmax and the
    regression's rounded m."""
    return (cls(h).argmax(-1),
            (reg(h)[..., 0] * T).round().clamp(0, T - 1).long())


def train_model(cfg: StreamConfig, seed: int, causal: bool, state: dict | None = None,
                on_checkpoint=None, every: int = 10, progress: bool = False) -> dict:
    """Train both probes of one frozen model online and predict its held-out positions.

    ``state`` (from ``on_checkpoint(state)``, called every ``every`` batches) resumes an
    interrupted model exactly: minibatches are drawn from per-batch random streams.
    Returns ``pred_classifier`` and ``pred_regression`` (K + 1, eval_seqs * T) int16 and
    ``mae_classifier`` and ``mae_regression`` (per depth), from float32 held-out features;
    with ``cfg.dtype`` bfloat16 also ``pred_*_bfloat16`` and ``mae_*_bfloat16`` from
    bfloat16 held-out features (what the lower precision moves); ``first_losses``
    (per-depth losses of the first 3 updates) and ``seconds``.
    """
    check_seed(seed)
    T, K1 = cfg.seq_len, cfg.n_layers + 1
    model = random_nope_model(cfg.d_model, cfg.n_heads, cfg.n_layers, T, cfg.sigma, causal, seed)
    cls = Probes(K1, cfg.d_model, cfg.hidden, T, seed, 0)
    reg = Probes(K1, cfg.d_model, cfg.hidden, 1, seed, 1)
    opt = torch.optim.Adam([*cls.parameters(), *reg.parameters()], lr=cfg.lr)
    start, seconds, first = 0, 0.0, []
    if state is not None:
        cls.load_state_dict(state["cls"]), reg.load_state_dict(state["reg"])
        opt.load_state_dict(state["opt"])
        start, seconds, first = state["batch"], state["seconds"], state["first_losses"]
    t0 = time.perf_counter()
    B, dtype = cfg.seqs_per_batch, DTYPES[cfg.dtype]
    batches = range(start, cfg.n_batches)
    for j in progress_bar(batches, desc=f"seed {seed}", disable=not progress):
        (h, pos), = feature_batches(model, seed, range(j * B, (j + 1) * B), cfg.sigma,
                                    batch=B, dtype=dtype)
        gen = torch.Generator().manual_seed(stream_seed(seed, j, 6))
        for _ in range(cfg.updates_in(j)):
            idx = torch.randint(len(pos), (cfg.update_positions,), generator=gen)
            ce, l1 = probe_losses(cls, reg, h[:, idx], pos[idx], T)
            opt.zero_grad(set_to_none=True)
            (ce.sum() + l1.sum()).backward()
            opt.step()
            if len(first) < 3:
                first.append([ce.tolist(), l1.tolist()])
        if on_checkpoint is not None and ((j + 1) % every == 0 or j + 1 == cfg.n_batches):
            on_checkpoint(copy.deepcopy({"cls": cls.state_dict(), "reg": reg.state_dict(),
                           "opt": opt.state_dict(), "batch": j + 1, "first_losses": first,
                           "seconds": seconds + time.perf_counter() - t0}))
    held = range(cfg.train_seqs, cfg.train_seqs + cfg.eval_seqs)
    out = {"first_losses": first}
    # held-out features in float32 (the reported errors); with a lower training
    # precision, also in that precision, to measure what it moves
    for tag, dt in (("", torch.float32),) + ((("_" + cfg.dtype, dtype),)
                                            if dtype != torch.float32 else ()):
        preds = [predict(cls, reg, h, T) for h, _ in
                 feature_batches(model, seed, held, cfg.sigma, batch=B, dtype=dt)]
        for i, probe in enumerate(("classifier", "regression")):
            p = torch.cat([q[i] for q in preds], 1).to(torch.int16)
            out[f"pred_{probe}{tag}"], out[f"mae_{probe}{tag}"] = p, errors(p, T)
    return {**out, "seconds": seconds + time.perf_counter() - t0}


def errors(pred: Tensor | np.ndarray, seq_len: int) -> list[float]:
    """Mean absolute error per depth of held-out predictions (K + 1, N * T), the targets
    being 0 ... T - 1 for each sequence in turn."""
    p = np.asarray(pred, dtype=np.int64)
    if p.ndim != 2 or p.shape[1] % seq_len:
        raise ValueError(f"predictions must be (depths, N * {seq_len}), got {p.shape}")
    target = np.tile(np.arange(seq_len), p.shape[1] // seq_len)
    return np.abs(p - target).mean(1).tolist()


def save_atomic(obj, path: Path) -> None:
    """``torch.save`` to a file beside ``path``, then rename it there: a run stopped
    mid-write (a killed session) leaves the previous checkpoint whole."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        torch.save(obj, tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _paths(preset: str) -> tuple[Path, Path, Path]:
    ck = RESULTS_DIR / "checkpoints" / f"nope_stream_{preset}"
    return RESULTS_DIR / "nope" / f"stream_{preset}.json", RESULTS_DIR / "nope" / \
        f"stream_{preset}_predictions.npz", ck


def store(cfg: StreamConfig, done: dict, preset: str, device: str, started: dict) -> Path:
    """Write the JSON (per-depth errors, config, provenance) and the npz of predictions of
    the finished models; a run not yet finished is labelled INCOMPLETE."""
    out, npz, _ = _paths(preset)
    arrays, results = {}, {"causal": [], "bidirectional": []}
    for kind in results:
        for r in done[kind]:
            for key in (k for k in r if k.startswith("pred_")):
                arrays[f"{kind}_{r['seed']}_{key[5:]}"] = np.asarray(r[key], np.int16)
            results[kind].append({k: v for k, v in r.items() if not k.startswith("pred_")})
    npz.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(npz, **arrays)
    n_done = sum(len(v) for v in results.values())
    n_all = len(cfg.seeds) + len(cfg.bidirectional_seeds)
    payload = {"config": dataclasses.asdict(cfg), "results": results,
               "complete": n_done == n_all, "models_done": n_done, "models_planned": n_all,
               "baseline": middle_baseline(cfg.seq_len), "predictions": npz.name}
    wall = sum(r["seconds"] for v in results.values() for r in v)
    return store_run(out, payload, device, wall, started)


def order(cfg: StreamConfig) -> list[tuple[str, int]]:
    """The order models run in: two causal, one bidirectional, then the rest, so that a
    run stopped early already has a spread over seeds and a control."""
    c = [("causal", s) for s in cfg.seeds]
    b = [("bidirectional", s) for s in cfg.bidirectional_seeds]
    return c[:2] + b[:1] + c[2:] + b[1:]


def main(argv: list[str] | None = None) -> Path:
    """Run (resuming model by model and within a model); store after each model, so an
    unfinished run is stored as far as it got (``complete`` false: INCOMPLETE)."""
    args = run_arguments("lncourse.evidence.nope.stream_run", "The all-positions position probe of "
                         "chapter 4, stored with its predictions.", PRESETS).parse_args(argv)
    cfg = PRESETS[args.preset]()
    _, _, ck = _paths(args.preset)
    ck.mkdir(parents=True, exist_ok=True)
    done_file = ck / "done.pt"
    started = run_started(done_file, command_line("lncourse.evidence.nope.stream_run", argv))
    config = dataclasses.asdict(cfg)
    done = {"causal": [], "bidirectional": []}
    if done_file.exists():
        saved = torch.load(done_file, weights_only=False)
        if saved["config"] != config:
            raise ValueError(f"{done_file} holds another configuration; delete {ck} to restart")
        done = saved["done"]
    for kind, seed in order(cfg):
        if seed in [r["seed"] for r in done[kind]]:
            continue
        part = ck / f"{kind}_{seed}.pt"
        state = torch.load(part, weights_only=False) if part.exists() else None
        r = train_model(cfg, seed, kind == "causal", state,
                        lambda s, p=part: save_atomic(s, p), progress=not args.quiet)
        done[kind].append({"seed": seed, **r})
        save_atomic({"config": config, "done": done}, done_file)
        part.unlink(missing_ok=True)
        store(cfg, done, args.preset, args.device, started)
    return store(cfg, done, args.preset, args.device, started)


if __name__ == "__main__":
    main()
