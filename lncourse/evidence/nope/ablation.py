"""What each choice of the position probe does to its error (chapter 4, the ablation).

On the paper's frozen random model (d = 768, 12 heads, 12 layers, L = 512, σ = 0.02),
the features of ``train_seqs + eval_seqs`` sequences at depths 0, 6 and 12 are computed
once per seed (every position, before and after the final LayerNorm, float32;
:mod:`lncourse.evidence.nope.features`), and one probe per row of :data:`ROWS` is trained on them
with Adam at lr 1e-3. Every row differs from the ``base`` row (the paper's classifier on
every position of every training sequence, read after the final LayerNorm) in one
choice. Held-out predictions are stored, so a test recomputes the table.

    python -m lncourse.evidence.nope.ablation --preset cpu

Shapes: D depths, n positions, d ``d_model``, T ``seq_len``.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from lncourse.summary import paired_interval
from lncourse.nope.variance import random_nope_model
from lncourse.evidence.nope.features import all_features
from lncourse.evidence.nope.probe import stream_seed, middle_baseline
from lncourse.evidence.nope.stream_run import Probes, errors
from lncourse.results import RESULTS_DIR, command_line, run_arguments, run_started, store_run

__all__ = ["AblationConfig", "ROWS", "ablate_seed", "features", "fit_row", "table", "PRESETS",
           "main"]

# row -> (probe form, read, positions per sequence (None: all), share of sequences)
ROWS = {
    "base": ("classifier", "ln_final", None, 1.0),
    "regression": ("regression", "ln_final", None, 1.0),
    "variance_feature": ("variance", "resid", None, 1.0),
    "64_positions": ("classifier", "ln_final", 64, 1.0),
    "quarter_sequences": ("classifier", "ln_final", None, 0.25),
    "before_final_ln": ("classifier", "resid", None, 1.0),
}


@dataclass(frozen=True)
class AblationConfig:
    d_model: int = 768
    n_heads: int = 12
    n_layers: int = 12
    seq_len: int = 512
    sigma: float = 0.02
    depths: tuple[int, ...] = (0, 6, 12)
    train_seqs: int = 32         # sized to the shared 2-core CPU of this session
    eval_seqs: int = 8
    updates: int = 400
    update_positions: int = 512
    hidden: int = 128
    lr: float = 1e-3
    seeds: tuple[int, ...] = (0, 1, 2)

    def __post_init__(self):
        if self.train_seqs % 4 or not all(0 <= k <= self.n_layers for k in self.depths):
            raise ValueError("train_seqs must be a multiple of 4 and depths in [0, n_layers]")


PRESETS = {"cpu": AblationConfig,
           "quick": lambda: AblationConfig(n_layers=2, seq_len=32, depths=(0, 1, 2),
                                           train_seqs=16, eval_seqs=4, updates=50,
                                           update_positions=64, hidden=16, seeds=(0, 1))}


def _inputs(form: str, h: torch.Tensor) -> torch.Tensor:
    """What a probe of ``form`` reads from features (D, n, d): the vectors, or the log of
    each vector's variance (D, n, 1) for the variance probe."""
    return h.var(-1, keepdim=True).log() if form == "variance" else h


def fit_row(cfg: AblationConfig, seed: int, row: str, train: dict):
    """Train one row's probes (one per depth) on the training features: (probes, mu, sd),
    the trained :class:`~lncourse.evidence.nope.stream_run.Probes` and the per-depth standardisation
    of their inputs (a probe reads ``(inputs - mu) / sd``)."""
    form, read, per_seq, share = ROWS[row]
    T = cfg.seq_len
    h, pos = _inputs(form, train[read]), train["pos"]
    n_seq = int(cfg.train_seqs * share)
    gen = torch.Generator().manual_seed(stream_seed(seed, 7, list(ROWS).index(row)))
    keep = torch.arange(n_seq * T).view(n_seq, T)
    if per_seq is not None:   # a fixed random subset of positions of each sequence
        keep = torch.stack([torch.randperm(T, generator=gen)[:per_seq] for _ in range(n_seq)]) \
            + torch.arange(n_seq)[:, None] * T
    keep = keep.flatten()
    h, pos = h[:, keep], pos[keep]
    mu, sd = h.mean(1, keepdim=True), h.std(1, keepdim=True) + 1e-12   # per depth, per input
    out = T if form != "regression" else 1
    probes = Probes(len(cfg.depths), h.shape[-1], cfg.hidden, out, seed, 10 + list(ROWS).index(row))
    opt = torch.optim.Adam(probes.parameters(), lr=cfg.lr)
    for _ in range(cfg.updates):
        idx = torch.randint(len(pos), (cfg.update_positions,), generator=gen)
        y = probes((h[:, idx] - mu) / sd)
        if form == "regression":
            loss = (y[..., 0] - pos[idx] / T).abs().mean(-1)
        else:
            loss = torch.nn.functional.cross_entropy(
                y.flatten(0, 1), pos[idx].repeat(len(h)), reduction="none").view(len(h), -1).mean(-1)
        opt.zero_grad(set_to_none=True)
        loss.sum().backward()
        opt.step()
    return probes, mu, sd


def _train_row(cfg: AblationConfig, seed: int, row: str, train: dict, held: dict
               ) -> dict[str, np.ndarray]:
    """Train one row's probes (one per depth); held-out predictions (D, n) of each held-out
    set the row reads (the base row also reads bfloat16 features: ``base_bfloat16``)."""
    form, read = ROWS[row][:2]
    T = cfg.seq_len
    probes, mu, sd = fit_row(cfg, seed, row, train)
    out = {}
    for name, key in ((row, read),) + ((("base_bfloat16", "ln_final_bf16"),) if row == "base" else ()):
        with torch.no_grad():
            y = probes((_inputs(form, held[key]) - mu) / sd)
            p = (y[..., 0] * T).round().clamp(0, T - 1) if form == "regression" else y.argmax(-1)
        out[name] = p.to(torch.int16).numpy()
    return out


def features(cfg: AblationConfig, seed: int, bfloat16: bool = True) -> tuple[dict, dict]:
    """The training and held-out features of the causal model of ``seed``: {"resid",
    "ln_final", "pos"} each (and "ln_final_bf16" held out, if ``bfloat16``)."""
    model = random_nope_model(cfg.d_model, cfg.n_heads, cfg.n_layers, cfg.seq_len, cfg.sigma,
                              True, seed)
    tr, ev = range(cfg.train_seqs), range(cfg.train_seqs, cfg.train_seqs + cfg.eval_seqs)
    train, held = {}, {}
    for part, idx in ((train, tr), (held, ev)):   # one forward pass; the final LN after it
        part["resid"], part["pos"] = all_features(model, seed, idx, cfg.sigma, cfg.depths, "resid")
        with torch.inference_mode():
            part["ln_final"] = model.ln_final(part["resid"])
    if bfloat16:
        held["ln_final_bf16"], _ = all_features(model, seed, ev, cfg.sigma, cfg.depths,
                                                dtype=torch.bfloat16)
    return train, held


def ablate_seed(cfg: AblationConfig, seed: int) -> dict:
    """Every row for the causal model of ``seed``: held-out predictions per row (D, n) and
    the errors per row and depth; the precision row evaluates the base probe's inputs in
    bfloat16 instead (held-out features only)."""
    t0 = time.perf_counter()
    train, held = features(cfg, seed)
    preds = {k: v for row in ROWS for k, v in _train_row(cfg, seed, row, train, held).items()}
    return {"seed": seed, "predictions": preds,
            "mae": {row: errors(p, cfg.seq_len) for row, p in preds.items()},
            "seconds": time.perf_counter() - t0}


def table(results: list[dict], rows=None) -> dict[str, list[tuple[float, float, float]]]:
    """Per row, per depth: the mean error over seeds and its 95% t interval."""
    rows = rows or list(results[0]["mae"])
    return {row: [paired_interval(np.array([r["mae"][row][i] for r in results]))
                  for i in range(len(results[0]["mae"][row]))] for row in rows}


def main(argv: list[str] | None = None) -> Path:
    """Run seed by seed (each finished seed is kept in a checkpoint and stored at once:
    the table's errors and held-out predictions, with provenance)."""
    parser = run_arguments("lncourse.evidence.nope.ablation", "The probe ablation of chapter 4.",
                           PRESETS)
    parser.add_argument("--only-seed", type=int, default=None,
                        help="compute this seed alone (runs in parallel, one per process)")
    args = parser.parse_args(argv)
    cfg = PRESETS[args.preset]()
    ck = RESULTS_DIR / "checkpoints" / f"nope_ablation_{args.preset}.pt"
    words = list(argv if argv is not None else sys.argv[1:])
    if "--only-seed" in words:                 # the run's command, without the seed option
        i = words.index("--only-seed")
        words = words[:i] + words[i + 2:]
    started = run_started(ck, command_line("lncourse.evidence.nope.ablation", [
        w for w in words if not w.startswith("--only-seed=")]))
    config = dataclasses.asdict(cfg)
    done = torch.load(ck, weights_only=False) if ck.exists() else {"config": config, "runs": []}
    if done["config"] != config:
        raise ValueError(f"{ck} holds another configuration; delete it to start afresh")
    for seed in cfg.seeds:
        if seed in [r["seed"] for r in done["runs"]]:
            continue
        one = ck.with_name(f"{ck.stem}_seed{seed}.pt")     # a seed run in its own process
        if one.exists():
            done["runs"].append(torch.load(one, weights_only=False))
        elif args.only_seed in (None, seed):
            done["runs"].append(ablate_seed(cfg, seed))
            torch.save(done["runs"][-1], one)
        else:
            continue
        done["runs"].sort(key=lambda r: cfg.seeds.index(r["seed"]))
        ck.parent.mkdir(parents=True, exist_ok=True)
        if args.only_seed is None:
            torch.save(done, ck)
            _store(cfg, done, args, started)
    return _store(cfg, done, args, started) if args.only_seed is None else ck


def _store(cfg: AblationConfig, done: dict, args, started: dict) -> Path:
    """Write the finished seeds (``complete`` says whether all have run)."""
    config = dataclasses.asdict(cfg)
    out = RESULTS_DIR / "nope" / f"ablation_{args.preset}.json"
    npz = out.with_name(out.stem + "_predictions.npz")
    npz.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(npz, **{f"{r['seed']}_{row}": p for r in done["runs"]
                                for row, p in r["predictions"].items()})
    runs = [{k: v for k, v in r.items() if k != "predictions"} for r in done["runs"]]
    payload = {"config": config, "rows": {k: list(v) for k, v in ROWS.items()}, "runs": runs,
               "complete": len(runs) == len(cfg.seeds),
               "baseline": middle_baseline(cfg.seq_len), "predictions": npz.name}
    return store_run(out, payload, args.device, sum(r["seconds"] for r in runs), started)


if __name__ == "__main__":
    main()
