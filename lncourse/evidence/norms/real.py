"""Chapter 5's measurements on two real models: what their norms read and what they do.

SmolLM2-135M (Pre-RMSNorm, :mod:`lncourse.smollm2`) and all-MiniLM-L6-v2 (Post-LN,
:mod:`lncourse.minilm`) read the same Shakespeare passages (evenly spaced through the
plays, so the set is fixed). For every norm of each model, in the order the forward pass
meets them, we take the vectors it reads in each passage and compute the statistics of
:mod:`lncourse.norms.hidden`, one value per passage; the chapter reports their mean over
passages with a t confidence interval across passages (passages are independent; the
tokens of one passage are not).

``python -m lncourse.evidence.norms.real --preset paper`` writes ``results/norms/real_paper.json``
(minutes on one CPU thread). ``tests/norms/test_real.py`` recomputes some passages.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from lncourse.norms.hidden import STATS, passage_stats
from lncourse.results import RESULTS_DIR, command_line, run_arguments, run_started, store_run
from lncourse.text import passages

__all__ = ["RealConfig", "PRESETS", "passages", "smollm2_norm_inputs", "minilm_norm_inputs",
           "measure", "summarize", "main"]


@dataclass(frozen=True)
class RealConfig:
    n_passages: int = 32     # passages, evenly spaced through the plays
    chars: int = 1200        # characters read per passage (enough for `tokens` tokens)
    tokens: int = 128        # tokens kept per passage (MiniLM: [CLS] and [SEP] included)
    n_directions: int = 64   # random directions for the |cos(h, u)| baseline

    @classmethod
    def quick(cls) -> "RealConfig":
        return cls(n_passages=4, tokens=64)

    @classmethod
    def paper(cls) -> "RealConfig":
        return cls()


PRESETS = {"quick": RealConfig.quick, "paper": RealConfig.paper}


def smollm2_norm_inputs(model, text: str, tokens: int) -> tuple[list[str], torch.Tensor]:
    """The names of SmolLM2's 61 RMSNorms in forward order and what each reads in one
    passage: (names, (61, T, 576)). ``Lk.attn`` is layer k's first norm, ``Lk.mlp`` its
    second, ``final`` the one before the unembedding."""
    ids = model.tokenize(text)[:, :tokens]
    if ids.shape[1] < tokens:
        raise ValueError(f"the passage has only {ids.shape[1]} tokens, {tokens} asked")
    with torch.no_grad():
        _, cache = model(ids, return_cache=True)
    names, hs = [], []
    for i in range(len(model.layers)):
        names += [f"L{i}.attn", f"L{i}.mlp"]
        hs += [cache[f"layers.{i}.resid_pre"][0], cache[f"layers.{i}.resid_mid"][0]]
    return names + ["final"], torch.stack(hs + [cache["final_in"][0]])


def minilm_norm_inputs(model, text: str, tokens: int) -> tuple[list[str], torch.Tensor]:
    """MiniLM's 13 LayerNorms in forward order and what each reads in one passage:
    ``embed`` (the embeddings' LayerNorm), then per layer ``Lk.attn`` (after the attention
    sublayer's residual sum) and ``Lk.mlp`` (after the MLP's): (names, (13, T, 384))."""
    ids, mask = model.tokenize([text], max_length=tokens)
    if ids.shape[1] < tokens:
        raise ValueError(f"the passage has only {ids.shape[1]} tokens, {tokens} asked")
    with torch.no_grad():
        _, cache = model(ids, mask, return_cache=True)
    names, hs = ["embed"], [cache["embed"][0]]
    for i in range(len(model.layers)):
        names += [f"L{i}.attn", f"L{i}.mlp"]
        hs += [cache[f"layers.{i}.resid_mid"][0], cache[f"layers.{i}.ln_out_in"][0]]
    return names, torch.stack(hs)


def measure(cfg: RealConfig, only: range | None = None, progress: bool = False) -> dict:
    """Per model: the norms' names and, per statistic, a (passages, norms) list of lists.
    ``only``: measure just these passages (the tests recompute a few)."""
    from lncourse.minilm import load_minilm
    from lncourse.smollm2 import load_smollm2

    texts = passages(cfg.n_passages, cfg.chars)
    keep = list(only if only is not None else range(cfg.n_passages))
    out = {}
    for model_name, load, inputs in [("smollm2", load_smollm2, smollm2_norm_inputs),
                                     ("minilm", load_minilm, minilm_norm_inputs)]:
        model = load()
        per = {s: [] for s in STATS}
        for p in keep:
            names, hs = inputs(model, texts[p], cfg.tokens)
            rows = [passage_stats(h, cfg.n_directions) for h in hs]
            for s in STATS:
                per[s].append([r[s] for r in rows])
            if progress:
                print(f"{model_name}: passage {p + 1}/{cfg.n_passages}", flush=True)
        out[model_name] = {"names": names, "d": int(hs.shape[-1]), "passages": keep,
                           "per_passage": per}
    return out


def summarize(per_passage: list[list[float]], level: float = 0.95) -> dict[str, list[float]]:
    """(passages, norms) -> per norm: the mean over passages and a t interval across them."""
    from scipy import stats

    a = np.asarray(per_passage, dtype=np.float64)
    n = a.shape[0]
    mean = a.mean(0)
    half = (stats.t.ppf(0.5 + level / 2, n - 1) * a.std(0, ddof=1) / math.sqrt(n)
            if n > 1 else np.full_like(mean, np.nan))
    return {"mean": mean.tolist(), "low": (mean - half).tolist(), "high": (mean + half).tolist()}


def main(argv: list[str] | None = None) -> Path:
    """``python -m lncourse.evidence.norms.real --preset paper``: measure both models, store."""
    args = run_arguments("lncourse.evidence.norms.real", "Chapter 5's measurements of the norms of "
                         "SmolLM2-135M and MiniLM, stored with provenance.", PRESETS
                         ).parse_args(argv)
    cfg = PRESETS[args.preset]()
    started = run_started(RESULTS_DIR / "checkpoints" / f"norms_real_{args.preset}",
                          command_line("lncourse.evidence.norms.real", argv))
    t0 = time.perf_counter()
    models = measure(cfg, progress=not args.quiet)
    for m in models.values():
        m["summary"] = {s: summarize(m["per_passage"][s]) for s in STATS}
    payload = {"config": dataclasses.asdict(cfg), "models": models}
    return store_run(RESULTS_DIR / "norms" / f"real_{args.preset}.json", payload, args.device,
                     time.perf_counter() - t0, started)


if __name__ == "__main__":
    main()
