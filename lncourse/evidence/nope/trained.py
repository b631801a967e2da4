"""Does the 1/m shrinkage survive training? The stored run of chapter 4 (Chi et al. §5).

Chi et al. measure a pretrained NoPE model (their Figures 6 and 7): layer 0 keeps the
shrinking variance and near-uniform attention of initialisation, higher layers leave it.
This run trains the largest NoPE character model the 2-core CPU affords and measures,
for **every layer**, before and after training:

* the variance across text windows of the attention output at each position m, and the
  slope of log variance against log m (about -1 at initialisation: Theorem 1's 1/m);
* how uniform the causal attention is: the entropy of each query's weights over its m
  keys divided by log m (1 for uniform attention), averaged over heads, windows and
  positions 2..T.

The windows are split into ``groups`` equal groups; each group gives its own variance
curve and slope, and the slope's 95% interval is Student's t over the groups. What is
stored: the loss history, every group's curve (so every slope recomputes from the file),
and the trained weights (so every curve recomputes from the file; the initial weights
come from the seed)::

    python -m lncourse.evidence.nope.trained --preset paper     # d 256, 4 layers, L 256, 3,000 steps

Resumable: ``train_lm`` checkpoints at every evaluation, and an interrupted run resumes
with the same history. Shapes: windows (B, T); a curve (T,); groups of curves (G, T).
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import numpy as np
import torch

from lncourse.lm import train_lm
from lncourse.nope.lm import NoPELMConfig
from lncourse.nope.variance import Moments
from lncourse.results import (RESULTS_DIR, command_line, run_arguments, run_started,
                              store_run)
from lncourse.rng import generator, seeded
from lncourse.summary import paired_interval
from lncourse.text import CharTokenizer, load_shakespeare, sample_batch, split_ids
from lncourse.transformer import GPT, TransformerConfig

__all__ = ["PRESETS", "GROUPS", "build", "profiles", "slopes", "summary", "bigram_loss",
           "main"]

GROUPS = 16          # groups of windows: one variance curve and one slope each


def paper_config() -> NoPELMConfig:
    """The paper preset: d 256, 8 heads, 4 layers, L 256, 3,000 steps of batch 32 and 512
    windows (Chi et al. average 500 samples), measured in 16 groups of 32."""
    return dataclasses.replace(NoPELMConfig.paper(), windows=512)


def _tiny() -> NoPELMConfig:
    """For tests: d 32, 2 layers, L 32, 6 steps, 64 windows."""
    return NoPELMConfig(d_model=32, n_heads=4, n_layers=2, block_size=32, steps=6,
                        batch_size=8, windows=64, eval_batches=1)


PRESETS = {"paper": paper_config, "tiny": _tiny}


def plays_data() -> tuple[CharTokenizer, torch.Tensor, torch.Tensor]:
    text = load_shakespeare()
    tok = CharTokenizer.from_text(text)
    train_ids, test_ids = split_ids(tok.encode(text))
    return tok, train_ids, test_ids


def build(cfg: NoPELMConfig, vocab_size: int) -> GPT:
    """The NoPE model of ``cfg`` at initialisation (seeded: the same weights every time)."""
    with seeded(cfg.seed):
        return GPT(TransformerConfig(vocab_size=vocab_size, d_model=cfg.d_model,
                                     n_heads=cfg.n_heads, n_layers=cfg.n_layers,
                                     block_size=cfg.block_size, pos_emb=False))


@torch.no_grad()
def profiles(model: GPT, ids: torch.Tensor, cfg: NoPELMConfig, groups: int = GROUPS,
             only_group: int | None = None, batch_size: int = 32) -> dict:
    """Every layer's variance curves per group of windows and its attention uniformity.

    The windows are those of :func:`lncourse.nope.lm.trained_lm_variance` (seed
    ``cfg.seed``), drawn in order; group g holds windows g*k .. (g+1)*k - 1, with
    k = ``cfg.windows // groups``. Returns ``variance`` [layer][group] -> (T,) lists and
    ``uniformity`` [layer][group] -> float (None for a group not measured). ``only_group``
    measures that group alone (the windows before it are drawn and skipped), which is
    how a test recomputes one group cheaply.
    """
    if cfg.windows % groups or cfg.windows // groups < 2:
        raise ValueError(f"windows ({cfg.windows}) must split into {groups} groups of >= 2")
    k, T = cfg.windows // groups, cfg.block_size
    model.eval()
    gen = generator(cfg.seed)
    n_layers = len(model.blocks)
    variance = [[None] * groups for _ in range(n_layers)]
    uniformity = [[None] * groups for _ in range(n_layers)]
    logm = torch.log(torch.arange(1, T + 1, dtype=torch.float64))
    for g in range(groups):
        moms = [Moments() for _ in range(n_layers)]
        ent = np.zeros(n_layers)
        done = 0
        while done < k:
            n = min(batch_size, k - done)
            x, _ = sample_batch(ids, n, T, gen, "cpu")
            done += n
            if only_group is not None and g != only_group:
                continue
            _, _, cache = model(x, return_cache=True)
            for layer in range(n_layers):
                moms[layer].add(cache[f"blocks.{layer}.attn_out"])
                w = cache[f"blocks.{layer}.attn_weights"].double()        # (B, H, T, T)
                h = -(w * torch.log(w.clamp_min(1e-300))).sum(-1)          # (B, H, T)
                ent[layer] += float((h[..., 1:] / logm[1:]).mean(dim=(1, 2)).sum())
        if only_group is not None and g != only_group:
            continue
        for layer in range(n_layers):
            variance[layer][g] = moms[layer].variance().mean(-1).tolist()
            uniformity[layer][g] = float(ent[layer] / k)
    return {"variance": variance, "uniformity": uniformity}


def slopes(curves) -> np.ndarray:
    """Least-squares slope of log variance against log position (1..T), per curve."""
    v = np.asarray(curves, dtype=np.float64)
    x = np.log(np.arange(1, v.shape[-1] + 1))
    y = np.log(v)
    xc = x - x.mean()
    return ((y - y.mean(-1, keepdims=True)) * xc).sum(-1) / (xc * xc).sum()


def _mean_ci(x) -> tuple[float, list[float]]:
    """The mean over groups and its 95% t interval (:func:`lncourse.summary.paired_interval`)."""
    mean, low, high = paired_interval(np.asarray(x, dtype=np.float64))
    return mean, [low, high]


def summary(measured: dict) -> list[dict]:
    """Per layer: the slope's and the uniformity's means over groups, with 95% t
    intervals (the groups are independent sets of windows)."""
    out = []
    for curves, unif in zip(measured["variance"], measured["uniformity"]):
        slope, slope_ci = _mean_ci(slopes(curves))
        u, u_ci = _mean_ci(unif)
        out.append({"slope": slope, "slope_ci": slope_ci, "uniformity": u,
                    "uniformity_ci": u_ci})
    return out


@functools.lru_cache(maxsize=1)
def bigram_loss() -> float:
    """The test cross-entropy (nats per character) of the bigram table of the training
    split (add-one smoothing): what a model that reads only the current character can
    reach, the reference for how much a trained model uses its context."""
    tok, train_ids, test_ids = plays_data()
    v = tok.vocab_size
    counts = torch.ones(v, v, dtype=torch.float64)
    counts.index_put_((train_ids[:-1], train_ids[1:]),
                      torch.ones(len(train_ids) - 1, dtype=torch.float64), accumulate=True)
    p = counts / counts.sum(1, keepdim=True)
    return float(-torch.log(p[test_ids[:-1], test_ids[1:]]).mean())


def _paths(preset: str) -> tuple[Path, Path, Path]:
    name = "trained_lm" if preset == "paper" else f"trained_lm_{preset}"
    return (RESULTS_DIR / "nope" / f"{name}.json", RESULTS_DIR / "nope" / f"{name}.pt",
            RESULTS_DIR / "checkpoints" / f"nope_{name}.ckpt")


def main(argv: list[str] | None = None) -> Path:
    """Train (resuming from the checkpoint), measure before and after, store."""
    args = run_arguments("lncourse.evidence.nope.trained", "The trained NoPE model of chapter 4: "
                         "variance slope and attention uniformity per layer, before and "
                         "after training.", PRESETS).parse_args(argv)
    cfg = PRESETS[args.preset]()
    out, weights, ck = _paths(args.preset)
    started = run_started(ck, command_line("lncourse.evidence.nope.trained", argv))
    tok, train_ids, test_ids = plays_data()
    before = profiles(build(cfg, tok.vocab_size), test_ids, cfg)
    model = build(cfg, tok.vocab_size)
    timing: dict = {}
    history = train_lm(model, train_ids, test_ids, steps=cfg.steps,
                       batch_size=cfg.batch_size, block_size=cfg.block_size, lr=cfg.lr,
                       eval_every=max(cfg.steps // 10, 1), eval_batches=cfg.eval_batches,
                       seed=cfg.seed, device=args.device, checkpoint_path=ck,
                       progress=not args.quiet, timing=timing)
    model.cpu()
    after = profiles(model, test_ids, cfg)
    weights.parent.mkdir(parents=True, exist_ok=True)
    torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, weights)
    payload = {"config": {**dataclasses.asdict(cfg), "groups": GROUPS,
                          "vocab_size": tok.vocab_size},
               "history": history, "weights": weights.name,
               "before": {**before, "layers": summary(before)},
               "after": {**after, "layers": summary(after)}}
    return store_run(out, payload, args.device, timing.get("seconds", 0.0), started)


if __name__ == "__main__":
    main()
