"""The position probe of Chi et al. (2023), Figure 2 (chapter 4).

A frozen random NoPE transformer reads random input vectors (no token embeddings, so
nothing but the architecture can carry position). After k = 0..K blocks, the final
LayerNorm's output feeds a two-layer ReLU probe that predicts each token's position; one
probe per k, trained side by side on the same examples. The mean absolute error (MAE) of
the predicted position, on held-out sequences, measures how much position the first k
layers carry. Stored run (the paper's model, sized to a CPU)::

    python -m lncourse.evidence.nope.probe --preset paper

Differences from the paper, forced by the CPU (the frozen 12-layer model at L = 512 costs
about 0.75 s per sequence on one core): the paper feeds 5,000 steps x 32 fresh sequences;
we pass ``train_seqs`` sequences through the frozen model once, keep
``positions_per_seq`` random positions of each, and train the probes on those features
(held-out sequences measure the error). Shapes: N sequences, T positions, d ``d_model``,
K + 1 probes (one per depth k = 0..K), P positions kept per sequence.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from lncourse.modes import scaled
from lncourse.nope.variance import check_sizes, random_nope_model
from lncourse.progress import progress as progress_bar
from lncourse.results import RESULTS_DIR, command_line, run_arguments, run_started, store_run
from lncourse.rng import check_seed

__all__ = ["ProbeConfig", "sequence_inputs", "probe_features", "train_probes",
           "probe_positions", "middle_baseline", "data_curve", "run", "summarize", "PRESETS", "main"]

TRACE_STEPS = 3   # per-layer probe losses of the first steps are kept (the tests replay them)


@dataclass(frozen=True)
class ProbeConfig:
    """The frozen random model, the probe data and the probe's training."""

    d_model: int = 768
    n_heads: int = 12
    n_layers: int = 12           # K: probes read after 0..K blocks
    seq_len: int = 512           # the paper's L
    sigma: float = 0.02
    train_seqs: int = 160        # sequences whose features train the probes
    eval_seqs: int = 32          # held-out sequences for the reported error
    positions_per_seq: int = 64  # random positions kept per sequence (T: all)
    seqs_per_step: int = 4       # a step trains on all kept positions of this many sequences
    hidden: int = 128
    steps: int = 1500
    lr: float = 1e-3             # the paper's Adam learning rate
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)           # causal models (the paper: 5 seeds)
    bidirectional_seeds: tuple[int, ...] = (0, 1)      # controls without the causal mask

    def __post_init__(self):
        check_sizes(self.d_model, self.n_heads, self.seq_len, self.sigma)
        for name in ("n_layers", "train_seqs", "eval_seqs", "positions_per_seq",
                     "seqs_per_step", "hidden", "steps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.positions_per_seq > self.seq_len or self.seqs_per_step > self.train_seqs:
            raise ValueError("positions_per_seq must be <= seq_len and seqs_per_step <= "
                             "train_seqs")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"lr must be a finite positive number, got {self.lr!r}")
        for s in self.seeds + self.bidirectional_seeds:
            check_seed(s, "a seed")

    @classmethod
    def paper(cls) -> "ProbeConfig":
        """The paper's model (d = 768, 12 layers, L = 512, 5 seeds), the probe trained on
        160 sequences (64 positions each) for 1,500 steps, 5 causal and 2 bidirectional
        models: about 190 s each on one otherwise idle core (the stored run)."""
        return cls()

    @classmethod
    def quick(cls) -> "ProbeConfig":
        """The paper's regime (d = 768, σ = 0.02, 12 heads) at a small size: 3 layers,
        L = 32, 256 training sequences, one seed of each kind."""
        return cls(n_layers=3, seq_len=32, train_seqs=256, eval_seqs=32, positions_per_seq=32,
                   seqs_per_step=8, hidden=32, steps=300, lr=3e-3, seeds=(0,),
                   bidirectional_seeds=(0,))

    def scaled(self, scale: float) -> "ProbeConfig":
        """Sequences, steps and seeds multiplied by ``scale`` (each at least what the
        probe needs to run), see :mod:`lncourse.modes`; the model is unchanged."""
        return dataclasses.replace(
            self, train_seqs=scaled(self.train_seqs, scale, self.seqs_per_step),
            eval_seqs=scaled(self.eval_seqs, scale, 2), steps=scaled(self.steps, scale, 2),
            seeds=self.seeds[:scaled(len(self.seeds), scale)],
            bidirectional_seeds=self.bidirectional_seeds[
                :scaled(len(self.bidirectional_seeds), scale)])


PRESETS = {"quick": ProbeConfig.quick, "paper": ProbeConfig.paper}


def stream_seed(*parts: int) -> int:
    """A 32-bit seed for the stream named by ``parts`` (no two names share a stream)."""
    return int(np.random.SeedSequence(list(parts)).generate_state(1)[0])


def sequence_inputs(cfg: ProbeConfig, seed: int, index: int) -> tuple[Tensor, Tensor]:
    """Sequence ``index`` of a run: inputs (T, d) ~ N(0, σ²) and its kept positions (P,).

    Each sequence has its own stream, so any one can be recomputed alone.
    """
    gen = torch.Generator().manual_seed(stream_seed(seed, index, 1))
    x = torch.randn(cfg.seq_len, cfg.d_model, generator=gen) * cfg.sigma
    keep = torch.randperm(cfg.seq_len, generator=gen)[:cfg.positions_per_seq].sort().values
    return x, keep


@torch.no_grad()
def probe_features(model, cfg: ProbeConfig, seed: int, indices, n_layers: int | None = None,
                   batch: int = 16) -> tuple[Tensor, Tensor]:
    """Features of the sequences ``indices``: (K + 1, len(indices) * P, d) and positions.

    Feature k is the final LayerNorm of the residual stream after k blocks, at the kept
    positions; ``n_layers`` (default all) limits K. ``batch`` sequences go through the
    model together (the result does not depend on it).
    """
    K = len(model.blocks) if n_layers is None else n_layers
    device = next(model.parameters()).device
    feats, targets = [], []
    indices = [int(i) for i in indices]
    for b0 in range(0, len(indices), batch):
        xs, keeps = zip(*(sequence_inputs(cfg, seed, i) for i in indices[b0:b0 + batch]))
        x = torch.stack(xs).to(device)                            # (B, T, d)
        keep = torch.stack(keeps).to(device)                      # (B, P)
        rows = torch.arange(len(xs), device=device)[:, None]

        def kept(z: Tensor) -> Tensor:                            # (B, T, d) -> (B * P, d)
            return model.ln_final(z)[rows, keep].flatten(0, 1)

        h = [kept(x)]
        for block in model.blocks[:K]:
            x = block(x)
            h.append(kept(x))
        feats.append(torch.stack(h).cpu())                        # (K + 1, B * P, d)
        targets.append(keep.flatten().cpu())
    return torch.cat(feats, 1), torch.cat(targets)


class _Probes(nn.Module):
    """One two-layer ReLU probe per depth, trained side by side: (K, N, d) -> (K, N).

    Probe k is initialised from its own stream, so any subset of probes can be rebuilt.
    """

    def __init__(self, n_probes: int, d_model: int, hidden: int, seed: int):
        super().__init__()
        W1 = [torch.randn(d_model, hidden, generator=torch.Generator().manual_seed(
            stream_seed(seed, k, 2))) / math.sqrt(d_model) for k in range(n_probes)]
        self.W1 = nn.Parameter(torch.stack(W1))
        self.b1 = nn.Parameter(torch.zeros(n_probes, 1, hidden))
        self.W2 = nn.Parameter(torch.zeros(n_probes, hidden, 1))
        self.b2 = nn.Parameter(torch.full((n_probes, 1, 1), 0.5))

    def forward(self, h: Tensor) -> Tensor:
        return (torch.relu(h @ self.W1 + self.b1) @ self.W2 + self.b2)[..., 0]


def train_probes(train: tuple[Tensor, Tensor], cfg: ProbeConfig, seed: int,
                 steps: int | None = None) -> tuple[_Probes, list[list[float]]]:
    """Adam on the absolute error of m / T, summed over probes (each probe learns alone).

    train: features (K + 1, N * P, d) and positions (N * P,), sequence-major. Each step
    uses all kept positions of ``cfg.seqs_per_step`` sequences drawn without replacement
    within an epoch. Returns the probes and the per-probe losses of the first steps.
    """
    feats, pos = train
    K1, NP, d = feats.shape
    P = cfg.positions_per_seq
    n_seq = NP // P
    probes = _Probes(K1, d, cfg.hidden, seed)
    opt = torch.optim.Adam(probes.parameters(), lr=cfg.lr)
    gen = torch.Generator().manual_seed(stream_seed(seed, 3))
    order, trace = torch.empty(0, dtype=torch.long), []
    for step in range(cfg.steps if steps is None else steps):
        if len(order) < cfg.seqs_per_step:
            order = torch.randperm(n_seq, generator=gen)
        seqs, order = order[:cfg.seqs_per_step], order[cfg.seqs_per_step:]
        idx = (seqs[:, None] * P + torch.arange(P)).flatten()          # (seqs_per_step * P,)
        err = (probes(feats[:, idx]) - pos[idx] / cfg.seq_len).abs().mean(-1)   # (K + 1,)
        opt.zero_grad(set_to_none=True)
        err.sum().backward()
        opt.step()
        if step < TRACE_STEPS:
            trace.append(err.tolist())
    return probes, trace


@torch.no_grad()
def _mae(probes: _Probes, data: tuple[Tensor, Tensor], seq_len: int) -> list[float]:
    feats, pos = data
    pred = (probes(feats) * seq_len).round().clamp(0, seq_len - 1)      # (K + 1, N * P)
    return (pred - pos).abs().double().mean(-1).tolist()


def probe_positions(cfg: ProbeConfig, seed: int, causal: bool = True,
                    device: torch.device | str = "cpu", progress: bool = False) -> dict:
    """Train the probes on one frozen random model; return ``layers``, ``mae`` (held-out,
    per depth), ``baseline`` (always guess the middle: about T/4) and ``trace``."""
    feats, pos = _all_features(cfg, seed, causal, device, progress)
    split = cfg.train_seqs * cfg.positions_per_seq
    probes, trace = train_probes((feats[:, :split], pos[:split]), cfg, seed)
    return {"layers": list(range(cfg.n_layers + 1)),
            "mae": _mae(probes, (feats[:, split:], pos[split:]), cfg.seq_len),
            "baseline": middle_baseline(cfg.seq_len), "trace": trace}


def middle_baseline(seq_len: int) -> float:
    """MAE of always guessing the middle position: about T / 4 (128 at T = 512)."""
    middle = (seq_len - 1) / 2
    return float((torch.arange(seq_len, dtype=torch.float64) - middle).abs().mean())


def _all_features(cfg: ProbeConfig, seed: int, causal: bool, device, progress: bool):
    """The frozen model of ``seed`` and the features of all its training sequences, then
    its held-out ones: (K + 1, (train + eval) * P, d) and positions."""
    check_seed(seed)
    model = random_nope_model(cfg.d_model, cfg.n_heads, cfg.n_layers, cfg.seq_len,
                              cfg.sigma, causal, seed, device)
    indices = list(range(cfg.train_seqs + cfg.eval_seqs))
    chunks = [indices[i:i + 16] for i in range(0, len(indices), 16)]
    parts = [probe_features(model, cfg, seed, c) for c in
             progress_bar(chunks, desc="features", disable=not progress)]
    return torch.cat([p[0] for p in parts], 1), torch.cat([p[1] for p in parts])


def data_curve(cfg: ProbeConfig, seed: int, sizes, causal: bool = True,
               device: torch.device | str = "cpu") -> dict:
    """How the probe's error depends on the data it sees: for each n of ``sizes``, probes
    trained (``cfg.steps`` steps) on the first n of the ``cfg.train_seqs`` training
    sequences of one frozen model, measured on the same held-out sequences.

    Returns ``sizes``, ``mae`` [[per depth] per n] and ``baseline``. The features are
    computed once; n = ``cfg.train_seqs`` reproduces :func:`probe_positions`.
    """
    sizes = [int(n) for n in sizes]
    if not sizes or any(not cfg.seqs_per_step <= n <= cfg.train_seqs for n in sizes):
        raise ValueError(f"sizes must lie in [seqs_per_step, train_seqs] = "
                         f"[{cfg.seqs_per_step}, {cfg.train_seqs}], got {sizes}")
    feats, pos = _all_features(cfg, seed, causal, device, False)
    P, split = cfg.positions_per_seq, cfg.train_seqs * cfg.positions_per_seq
    held_out = (feats[:, split:], pos[split:])
    mae = [_mae(train_probes((feats[:, :n * P], pos[:n * P]), cfg, seed)[0], held_out,
                cfg.seq_len) for n in sizes]
    return {"sizes": sizes, "mae": mae, "baseline": middle_baseline(cfg.seq_len)}


def run(cfg: ProbeConfig, device: torch.device | str = "cpu", progress: bool = True,
        done: dict | None = None, on_done=None) -> dict:
    """Every seed of ``cfg``, causal and bidirectional: {"causal": [result per seed], ...}.

    ``done`` holds results already computed (an interrupted run); ``on_done(results)`` is
    called after each model, so a caller can save them.
    """
    results = done or {"causal": [], "bidirectional": []}
    for kind, seeds in (("causal", cfg.seeds), ("bidirectional", cfg.bidirectional_seeds)):
        for seed in seeds[len(results[kind]):]:
            t0 = time.perf_counter()
            r = probe_positions(cfg, seed, kind == "causal", device, progress)
            results[kind].append({"seed": seed, **r, "seconds": time.perf_counter() - t0})
            if on_done is not None:
                on_done(results)
    return results


def summarize(results: dict) -> dict[str, dict]:
    """Per kind (causal, bidirectional) of a :func:`run`: ``layers``, ``mae`` (mean over
    seeds, per depth), ``std`` (over seeds; None for one seed), ``seeds``, ``baseline``."""
    out = {}
    for kind, runs in results.items():
        mae = np.array([r["mae"] for r in runs])                    # (seeds, K + 1)
        out[kind] = {"layers": runs[0]["layers"], "mae": mae.mean(0).tolist(),
                     "std": mae.std(0, ddof=1).tolist() if len(runs) > 1 else None,
                     "seeds": len(runs), "baseline": runs[0]["baseline"]}
    return out


def main(argv: list[str] | None = None) -> Path:
    """``python -m lncourse.evidence.nope.probe --preset paper``: run, write the result."""
    import json
    args = run_arguments("lncourse.evidence.nope.probe", "The position probe of chapter 4, stored "
                         "with its provenance.", PRESETS).parse_args(argv)
    cfg = PRESETS[args.preset]()
    out = RESULTS_DIR / "nope" / f"probe_{args.preset}.json"
    partial = RESULTS_DIR / "checkpoints" / f"nope_probe_{args.preset}.json"
    started = run_started(partial, command_line("lncourse.evidence.nope.probe", argv))
    config = dataclasses.asdict(cfg)
    done = None
    if partial.exists():   # finished models of an interrupted run, kept as plain JSON
        saved = json.loads(partial.read_text())
        if saved["config"] != json.loads(json.dumps(config)):
            raise ValueError(f"{partial} holds another configuration; delete it to start afresh")
        done = saved["results"]

    def save(results: dict) -> None:
        partial.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text(json.dumps({"config": config, "results": results}))

    results = run(cfg, args.device, not args.quiet, done, save)
    wall = sum(r["seconds"] for rs in results.values() for r in rs)   # model time
    return store_run(out, {"config": config, "results": results}, args.device, wall, started)


if __name__ == "__main__":
    main()
