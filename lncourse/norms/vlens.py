"""The V lens under today's norms: 1/m variance shrinkage at initialisation (chapter 5).

Chapter 4 measures, in a random NoPE layer at Chi et al.'s settings (d = 768, 12 heads,
L = 512, weights and inputs N(0, σ²) with σ = 0.02), that causal attention's output has
variance d²σ⁴/m at position m, times the softmax's energy m·E[Σ a²] (which tends to
exp(τ²) for logits of variance τ²) and LayerNorm's ε gain. The lens predicts, for each
norm in front of the attention, with nothing fitted:

* ``layernorm`` and ``rmsnorm``: the same curve (random inputs have mean about 0, so the
  projection changes nothing; both scale to unit variance);
* ``qk_norm``: the same values, but each head's q and k have RMS 1, so a scaled logit has
  variance τ² = 1 whatever σ is: the softmax is less uniform and the variance is larger
  by exp(1) / exp(d²σ⁴) at large m (still 1/m in shape);
* ``dyt``: γ·tanh(αx) + β with γ = 1, β = 0 is about αx for inputs of size σ, so nothing
  rescales them: the values shrink by α²σ² against LayerNorm's, and the attention output
  is d²α²σ⁶/m (the logits are tiny: uniform attention).

The run measures, for one random one-layer Pre-norm GPT per arm (same seed, so the same
weights wherever the arms share them, and the same inputs), across samples and averaged
over dimensions, at every position: the attention output's variance, the residual
stream's variance at the end of the block (input + attention + MLP) and the final norm's
output's variance; and the softmax's energy m·Σ a² averaged over samples and heads.
The samples are split into ``groups`` equal groups; every group gives its own curves,
and an interval is Student's t over groups. Every group's curves are stored, so each
reported number recomputes from the file and any group recomputes from the seed::

    python -m lncourse.norms.vlens --preset paper      # about 5 minutes on one core

Shapes: inputs (B, T, d); a curve (T,); attention weights (B, H, T, T).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from lncourse.nope.lemmas import eps_gain, logits_energy, softmax_energy
from lncourse.nope.variance import check_sizes, loglog_slope
from lncourse.progress import progress as progress_bar
from lncourse.results import RESULTS_DIR, command_line, run_arguments, run_started, store_run
from lncourse.rng import check_seed, generator, seeded
from lncourse.summary import paired_interval
from lncourse.transformer import GPT, TransformerConfig

__all__ = ["ARMS", "CURVES", "dyt_signal_ratio", "VConfig", "PRESETS", "build", "measure", "predicted",
           "sphere_energy", "summarize", "main"]

# arm -> the TransformerConfig switches that make it (chapter 5's trained variants)
ARMS = {"layernorm": {"norm": "layernorm"},
        "rmsnorm": {"norm": "no_projection"},
        "qk_norm": {"norm": "layernorm", "qk_norm": True},
        "dyt": {"norm": "dyt"}}
CURVES = ("attn", "resid", "out", "energy")   # what each group stores per arm
M_MIN = 10                                    # slopes and ratios over m >= M_MIN


@dataclass(frozen=True)
class VConfig:
    """The random models, the samples and their groups."""

    d_model: int = 768
    n_heads: int = 12
    seq_len: int = 512
    sigma: float = 0.02
    samples: int = 512
    groups: int = 16
    batch: int = 8
    seed: int = 0
    arms: tuple[str, ...] = tuple(ARMS)

    @classmethod
    def from_dict(cls, d: dict) -> "VConfig":
        """The configuration a stored run records (JSON turns ``arms`` into a list)."""
        return cls(**{k: tuple(v) if k == "arms" else v for k, v in d.items()})

    def __post_init__(self):
        check_sizes(self.d_model, self.n_heads, self.seq_len, self.sigma)
        check_seed(self.seed, offset=1)
        for name in ("samples", "groups", "batch"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if self.samples % self.groups or self.samples // self.groups < 2:
            raise ValueError(f"samples ({self.samples}) must split into {self.groups} "
                             "groups of at least 2")
        if self.groups < 2:
            raise ValueError("an interval over groups needs at least 2 groups")
        if self.seq_len <= M_MIN:
            raise ValueError(f"seq_len must exceed {M_MIN} (slopes are fitted over "
                             f"m >= {M_MIN})")
        unknown = set(self.arms) - set(ARMS)
        if unknown or not self.arms:
            raise ValueError(f"arms must be among {sorted(ARMS)}, got {self.arms!r}")


PRESETS = {
    "paper": VConfig,                                   # chapter 4's settings
    "fast": lambda: VConfig(d_model=384, n_heads=6, seq_len=256, samples=32, groups=4),
    "tiny": lambda: VConfig(d_model=64, n_heads=2, seq_len=32, samples=12, groups=3,
                            batch=4),
}


def build(arm: str, cfg: VConfig) -> GPT:
    """The frozen random one-layer NoPE model of ``arm`` (weights N(0, σ²) from
    ``cfg.seed``: every arm draws the same linear weights; its norms start at γ = 1,
    β = 0, DyT at α = 0.5)."""
    if arm not in ARMS:
        raise ValueError(f"unknown arm {arm!r}; choose from {sorted(ARMS)}")
    with seeded(cfg.seed):
        model = GPT(TransformerConfig(vocab_size=2, d_model=cfg.d_model,
                                      n_heads=cfg.n_heads, n_layers=1,
                                      block_size=cfg.seq_len, pos_emb=False,
                                      init_std=cfg.sigma, **ARMS[arm]))
    for p in model.parameters():
        p.requires_grad_(False)
    return model.eval()


class _Sums:
    """Float64 running sums for a variance across samples, averaged over dimensions."""

    def __init__(self):
        self.n, self.s1, self.s2 = 0, 0.0, 0.0

    def add(self, x: torch.Tensor) -> None:                  # x: (B, T, d)
        x = x.double()
        self.s1 = self.s1 + x.sum(0)
        self.s2 = self.s2 + (x * x).sum(0)
        self.n += x.shape[0]

    def curve(self) -> list[float]:
        mean = self.s1 / self.n
        var = (self.s2 - self.n * mean * mean) / (self.n - 1)
        return var.clamp_min(0.0).mean(-1).tolist()


@torch.no_grad()
def measure(arm: str, cfg: VConfig, only_group: int | None = None,
            progress: bool = False) -> list[dict | None]:
    """Per group, the curves of :data:`CURVES` for ``arm`` ((T,) lists): ``attn`` the
    attention output's variance, ``resid`` the block output's, ``out`` the final norm's
    output's, ``energy`` m·Σ_n a_mn² averaged over the group's samples and the heads.
    The inputs come from ``cfg.seed + 1`` in order (group g holds samples g·k ... with
    k = samples / groups), the same for every arm. ``only_group`` measures that group
    alone (None for the others); the inputs before it are drawn and skipped."""
    model = build(arm, cfg)
    k, T, d = cfg.samples // cfg.groups, cfg.seq_len, cfg.d_model
    if only_group is not None and not 0 <= only_group < cfg.groups:
        raise ValueError(f"only_group must be in [0, {cfg.groups}), got {only_group!r}")
    gen = generator(cfg.seed + 1)
    m = torch.arange(1, T + 1, dtype=torch.float64)
    out: list[dict | None] = [None] * cfg.groups
    groups = range(cfg.groups)
    for g in progress_bar(groups, desc=arm, disable=not progress):
        sums = {name: _Sums() for name in CURVES[:3]}
        energy = torch.zeros(T, dtype=torch.float64)
        done = 0
        while done < k:
            n = min(cfg.batch, k - done)
            x = torch.randn(n, T, d, generator=gen) * cfg.sigma
            done += n
            if only_group is not None and g != only_group:
                continue
            final, cache = model.forward_embeddings(x, return_cache=True)
            sums["attn"].add(cache["blocks.0.attn_out"])
            sums["resid"].add(cache["blocks.0.resid_post"])
            sums["out"].add(final)
            a = cache["blocks.0.attn_weights"].double()          # (B, H, T, T)
            energy += (a * a).sum(-1).mean(1).sum(0)              # (T,)
        if only_group is not None and g != only_group:
            continue
        out[g] = {**{name: s.curve() for name, s in sums.items()},
                  "energy": (m * energy / k).tolist()}
    return out


def predicted(arm: str, cfg: VConfig) -> dict:
    """The lens's curves for ``arm``, with nothing fitted (see the module's docstring).

    The norm's output has per-entry variance ``s_in`` (LayerNorm and RMSNorm: the ε gain
    σ²/(σ² + ε); DyT: α²σ²); q and k then have variance dσ²·s_in, and a scaled logit
    τ² = (dσ²·s_in)² (QK-norm: 1). Returns, each (T,) over m = 1 ... T:

    * ``lemma3``: chapter 4's curve, dσ²·(dσ²·s_in)·E(m)/m with the softmax's energy
      E(m) = m·E[Σ a²] for Gaussian logits of variance τ² (QK-norm: for its logits
      √dh·cos, :func:`sphere_energy`);
    * ``attn``: the same plus the floor dσ²·σ²·s_in·τ², the part of the output that
      does not average away: the softmax tilts the average of the keys' inputs towards
      the query's direction, and the values read that tilt (for large m the average of
      x̂ under weights exp(u·x̂) is s_in·u, with |u|² s_in = τ²). The floor equals the
      1/m term at m ≈ d·E/τ²;
    * ``tau2`` and ``s_in``.
    """
    if arm not in ARMS:
        raise ValueError(f"unknown arm {arm!r}; choose from {sorted(ARMS)}")
    return {k: v.copy() if isinstance(v, np.ndarray) else v
            for k, v in _lens(arm, cfg).items()}


@functools.lru_cache(maxsize=32)
def _lens(arm: str, cfg: VConfig) -> dict:
    """:func:`predicted`, computed once per arm and configuration (its Monte Carlo
    energies take seconds)."""
    d, s, T = cfg.d_model, cfg.sigma, cfg.seq_len
    if arm == "dyt":
        s_in = (TransformerConfig(vocab_size=2).dyt_alpha * s) ** 2   # tanh(αx) ≈ αx
    else:
        s_in = eps_gain(s)
    tau2 = 1.0 if arm == "qk_norm" else (d * s ** 2 * s_in) ** 2
    m = np.arange(1, T + 1, dtype=np.float64)
    if arm == "qk_norm":
        energy = sphere_energy(d // cfg.n_heads, T).double().numpy()
    else:
        energy = softmax_energy(tau2, T).double().numpy()
    lemma3 = d * s ** 2 * (d * s ** 2 * s_in) * energy / m
    floor = d * s ** 2 * s ** 2 * s_in * tau2
    return {"lemma3": lemma3, "attn": lemma3 + floor, "tau2": float(tau2),
            "s_in": float(s_in), "crossover": float(d * energy[-1] / tau2)}


def sphere_energy(dh: int, seq_len: int, n_draws: int = 4000, seed: int = 0
                  ) -> torch.Tensor:
    """m·E[Σ a²] (T,) for QK-norm's logits: a query and keys of RMS 1 in dh dimensions
    give l = √dh·cos(q, k), of variance 1 but bounded by √dh (lighter tails than
    N(0, 1), so a smaller energy than exp(1)). For a key direction drawn uniformly,
    cos = z/√(z² + c) with z ~ N(0, 1) and c ~ χ²(dh - 1) independent."""
    if isinstance(dh, bool) or not isinstance(dh, int) or dh < 2:
        raise ValueError(f"dh must be an integer >= 2, got {dh!r}")
    check_sizes(2, 1, seq_len, 1.0)
    rng = np.random.default_rng(check_seed(seed))
    z = rng.standard_normal((n_draws, seq_len))
    c = rng.chisquare(dh - 1, (n_draws, seq_len))
    return logits_energy(torch.from_numpy(math.sqrt(dh) * z / np.sqrt(z * z + c)))


def _mean_ci(x) -> list[float]:
    """Mean and 95% Student-t interval over groups: [mean, low, high]."""
    return list(paired_interval(x))


def summarize(stored: dict) -> dict[str, dict[str, list[float]]]:
    """Per arm, each as [mean, low, high] over groups: the log-log slopes (m >= 10) of
    the attention output, the block output and the final norm's output; the attention
    variance measured over predicted, mean over m >= 10 (``attn_ratio`` against the
    lens with its floor, ``lemma3_ratio`` against chapter 4's curve) and at the last
    position (``last_ratio``, with the floor); the softmax's energy at the last
    position; the attention output's share of the block output's variance at the first
    and the last position."""
    cfg = VConfig.from_dict(stored["config"])
    out = {}
    for arm in cfg.arms:
        groups = stored["curves"][arm]
        lens = predicted(arm, cfg)
        pred, lemma3 = lens["attn"][M_MIN - 1:], lens["lemma3"][M_MIN - 1:]
        per = {"attn_slope": [], "resid_slope": [], "out_slope": [], "attn_ratio": [],
               "lemma3_ratio": [], "last_ratio": [], "energy_last": [], "share_first": [],
               "share_last": []}
        for g in groups:
            attn, resid = np.asarray(g["attn"]), np.asarray(g["resid"])
            per["attn_slope"].append(loglog_slope(attn, M_MIN))
            per["resid_slope"].append(loglog_slope(resid, M_MIN))
            per["out_slope"].append(loglog_slope(g["out"], M_MIN))
            per["attn_ratio"].append(float(np.mean(attn[M_MIN - 1:] / pred)))
            per["lemma3_ratio"].append(float(np.mean(attn[M_MIN - 1:] / lemma3)))
            per["last_ratio"].append(float(attn[-1] / lens["attn"][-1]))
            per["energy_last"].append(g["energy"][-1])
            per["share_first"].append(float(attn[0] / resid[0]))
            per["share_last"].append(float(attn[-1] / resid[-1]))
        out[arm] = {k: _mean_ci(v) for k, v in per.items()}
    return out


def _path(preset: str) -> tuple[Path, Path]:
    name = "vlens" if preset == "paper" else f"vlens_{preset}"
    return RESULTS_DIR / "norms" / f"{name}.json", RESULTS_DIR / "checkpoints" / f"{name}"


def main(argv: list[str] | None = None) -> Path:
    """Measure every arm of the preset and store the curves with their provenance."""
    args = run_arguments("lncourse.norms.vlens", "The V lens under today's norms: "
                         "variance against position in random NoPE layers (chapter 5).",
                         PRESETS).parse_args(argv)
    if args.device != "cpu":
        raise ValueError("this run is CPU-only (it takes minutes); --device cpu")
    cfg = PRESETS[args.preset]()
    out, ck = _path(args.preset)
    started = run_started(ck, command_line("lncourse.norms.vlens", argv))
    t0 = time.perf_counter()
    curves = {arm: measure(arm, cfg, progress=not args.quiet) for arm in cfg.arms}
    seconds = time.perf_counter() - t0
    payload = {"config": dataclasses.asdict(cfg), "m_min": M_MIN, "curves": curves}
    payload["summary"] = summarize(payload)
    return store_run(out, payload, "cpu", seconds, started)


def dyt_signal_ratio(vlens_result: dict) -> dict[str, float]:
    """How much weaker DyT's position signal is than LayerNorm's at m = 1, from the
    stored V-lens curves (``results/norms/vlens.json``): in absolute variance (the
    attention output's, mean over groups) and relative to the block output (the
    attention output's share of the block output's variance)."""
    def mean_at_1(arm: str, key: str) -> float:
        return float(np.mean([g[key][0] for g in vlens_result["curves"][arm]]))
    attn = {a: mean_at_1(a, "attn") for a in ("layernorm", "dyt")}
    share = {a: attn[a] / mean_at_1(a, "resid") for a in ("layernorm", "dyt")}
    return {"absolute": attn["layernorm"] / attn["dyt"],
            "relative": share["layernorm"] / share["dyt"]}


if __name__ == "__main__":
    main()
