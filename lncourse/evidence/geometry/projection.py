"""Does LayerNorm's projection matter in trained models? Measured on the two real models
the course ships (chapter 1; issue 62, item 12).

Gupta et al. argue that the vectors a trained model's LayerNorm receives already lie
nearly orthogonal to the all-ones vector 1, so that the projection removes little and
LayerNorm acts as RMSNorm at inference. On the same Shakespeare passages as chapter 5
(:func:`lncourse.text.passages`), for every norm input h (one token's vector):

- the share of h along 1, |mean(h)| √d / ‖h‖ = |cos(h, 1)|; its square is the fraction of
  ‖h‖² the projection removes. MiniLM's 13 LayerNorms and SmolLM2's 61 RMSNorms (which
  have no projection: there it says what one would have removed);
- MiniLM only: how much each LayerNorm's output changes when the projection is dropped,
  ‖RMS(h) − LN(h)‖ / ‖LN(h)‖, where RMS(h) = γ ⊙ h / √(mean(h²) + ε) + β keeps the
  LayerNorm's own γ, β and ε;
- MiniLM only: for the six LayerNorms whose output an attention layer reads
  (:meth:`lncourse.minilm.MiniLM.attn_norm`), how far that layer's attention rows move
  when it reads the no-projection output instead: the total-variation distance
  ½ Σ_n |p_mn − p'_mn| of each query's row, per head, its mean and largest over the
  real (unpadded) queries. Only that norm is swapped; everything upstream is the model's.

MiniLM runs in float64. SmolLM2 is the dequantised GGUF in float32 (as chapter 5 reads
it); its share is computed in float64 from those activations. The per-token values are
stored, rounded to float32, in ``projection_<preset>_tokens.npz`` beside the JSON
(``tokens`` names it; :func:`lncourse.results.load_arrays`), so the ledger's quantiles
are exactly those of the stored values; the attention distances are in the JSON.

``python -m lncourse.evidence.geometry.projection --preset paper`` writes
``results/geometry/projection_paper.json`` (about a minute of CPU, most of it SmolLM2),
resuming from ``results/checkpoints/geometry_projection_<preset>.pt`` passage by passage.
``tests/geometry/test_projection.py`` recomputes passages.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from lncourse.attention import self_attention
from lncourse.layernorm import abs_cos_ones
from lncourse.results import RESULTS_DIR, command_line, run_arguments, run_started, store_run
from lncourse.text import passages

__all__ = ["ProjectionConfig", "PRESETS", "share_along_ones", "without_projection",
           "output_change", "row_tv", "NoProjection", "swapped", "minilm_passage", "smollm2_passage", "measure",
           "main"]

MODULE = "lncourse.evidence.geometry.projection"


@dataclass(frozen=True)
class ProjectionConfig:
    n_passages: int = 16     # passages, evenly spaced through the plays
    chars: int = 1200        # characters read per passage (enough for `tokens` tokens)
    tokens: int = 128        # tokens kept per passage (MiniLM: [CLS] and [SEP] included)

    @classmethod
    def quick(cls) -> "ProjectionConfig":
        return cls(n_passages=2, tokens=32)

    @classmethod
    def paper(cls) -> "ProjectionConfig":
        return cls()


PRESETS = {"quick": ProjectionConfig.quick, "paper": ProjectionConfig.paper}


def share_along_ones(h: Tensor) -> Tensor:
    """|mean(h_t)| √d / ‖h_t‖ = |cos(h_t, 1)| per token, in float64: (T, d) -> (T,)."""
    return abs_cos_ones(h.double())


def without_projection(norm: nn.LayerNorm, h: Tensor) -> Tensor:
    """The LayerNorm ``norm`` with its projection dropped: γ ⊙ h / √(mean(h²) + ε) + β,
    its own γ, β and ε (an RMSNorm with LayerNorm's affine map). (..., d) -> (..., d)."""
    scaled = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + norm.eps)
    return scaled * norm.weight + norm.bias


def output_change(norm: nn.LayerNorm, h: Tensor) -> Tensor:
    """‖RMS(h_t) − LN(h_t)‖ / ‖LN(h_t)‖ per token: (T, d) -> (T,)."""
    y = norm(h)
    return (without_projection(norm, h) - y).norm(dim=-1) / y.norm(dim=-1)


def row_tv(p: Tensor, q: Tensor) -> Tensor:
    """Total-variation distance ½ Σ_n |p_mn − q_mn| between attention rows:
    (..., T, T) -> (..., T)."""
    return 0.5 * (p - q).abs().sum(-1)


class NoProjection(nn.Module):
    """A LayerNorm with its projection dropped (:func:`without_projection`), its γ, β and
    ε shared with the LayerNorm it replaces."""

    def __init__(self, norm: nn.LayerNorm):
        super().__init__()
        self.norm = norm

    def forward(self, h: Tensor) -> Tensor:
        return without_projection(self.norm, h)


def swapped(model):
    """A copy of MiniLM with every LayerNorm replaced by :class:`NoProjection`."""
    import copy

    other = copy.deepcopy(model)
    other.ln_embed = NoProjection(other.ln_embed)
    for layer in other.layers:
        layer.ln_attn, layer.ln_out = NoProjection(layer.ln_attn), NoProjection(layer.ln_out)
    return other


def _same_size_noise(d: Tensor, seed: int = 0) -> Tensor:
    """Random directions with the per-token length of ``d``: (..., T, d) -> the same."""
    g = torch.Generator().manual_seed(seed)
    r = torch.randn(d.shape, generator=g, dtype=torch.float64).to(d.dtype)
    return r / r.norm(dim=-1, keepdim=True) * d.norm(dim=-1, keepdim=True)


def minilm_passage(model, text: str, tokens: int, no_projection=None) -> dict:
    """One passage through MiniLM (float64): the names of its 13 LayerNorms, per norm and
    token the share along 1 and the output change, (13, T) each; the names of the six
    norms an attention reads and, per norm and head, the mean and the largest TV distance
    of that attention's rows over the real queries, (6, H) each (``tv_random_mean``: the
    mean when the LayerNorm's output moves instead by a random vector of the same length
    per token, the control); and, with every LayerNorm swapped at once
    (``no_projection``: :func:`swapped`, made once per model), the relative change of
    the last hidden states per token (T,) and the cosine between the two mean-pooled
    sentence embeddings (the model's use)."""
    from lncourse.minilm import N_HEADS

    ids, mask = model.tokenize([text], max_length=tokens)
    if ids.shape[1] < tokens:
        raise ValueError(f"the passage has only {ids.shape[1]} tokens, {tokens} asked")
    with torch.no_grad():
        _, cache = model(ids, mask, return_cache=True)
        norms = [("embed", model.ln_embed, cache["embed"])]
        for i, layer in enumerate(model.layers):
            norms += [(f"L{i}.attn", layer.ln_attn, cache[f"layers.{i}.resid_mid"]),
                      (f"L{i}.mlp", layer.ln_out, cache[f"layers.{i}.ln_out_in"])]
        real = mask[0]
        share = torch.stack([share_along_ones(h[0][real]) for _, _, h in norms])
        change = torch.stack([output_change(n, h[0][real]) for _, n, h in norms])
        by_module = {id(n): name for name, n, _ in norms}
        attn_names, tv_mean, tv_max, tv_random = [], [], [], []
        for i, layer in enumerate(model.layers):
            norm, h = model.attn_norm(i), cache[f"layers.{i}.attn_norm_in"]
            y, z = norm(h), without_projection(norm, h)                    # (1, T, d)
            ln, rms, noisy = (self_attention(x, layer.W_Q, layer.W_K, layer.W_V, layer.W_O,
                                             N_HEADS, key_mask=mask, pattern=True
                                             )["attn_weights"]
                              for x in (y, z, y + _same_size_noise(z - y)))
            tv = row_tv(ln, rms)[0][:, real]                               # (H, real T)
            attn_names.append(by_module[id(norm)])
            tv_mean.append(tv.mean(-1))
            tv_max.append(tv.amax(-1))
            tv_random.append(row_tv(ln, noisy)[0][:, real].mean(-1))
        if no_projection is None:
            no_projection = swapped(model)
        out, _ = model(ids, mask)
        other, _ = no_projection(ids, mask)
        end = ((other - out)[0][real].norm(dim=-1) / out[0][real].norm(dim=-1))
        pooled = [o[0][real].mean(0) for o in (out, other)]
        cos = float(torch.nn.functional.cosine_similarity(*pooled, dim=0))
    return {"names": [name for name, _, _ in norms], "share": share.numpy(),
            "change": change.numpy(), "attn_names": attn_names,
            "tv_mean": torch.stack(tv_mean).numpy(), "tv_max": torch.stack(tv_max).numpy(),
            "tv_random_mean": torch.stack(tv_random).numpy(),
            "final_change": end.numpy(), "pooled_cos": cos}


def smollm2_passage(model, text: str, tokens: int) -> dict:
    """One passage through SmolLM2: the names of its 61 RMSNorms in forward order
    (``Lk.attn``, ``Lk.mlp``, ``final``) and the share along 1 of what each reads,
    (61, T)."""
    ids = model.tokenize(text)[:, :tokens]
    if ids.shape[1] < tokens:
        raise ValueError(f"the passage has only {ids.shape[1]} tokens, {tokens} asked")
    with torch.no_grad():
        _, cache = model(ids, return_cache=True)
    names, hs = [], []
    for i in range(len(model.layers)):
        names += [f"L{i}.attn", f"L{i}.mlp"]
        hs += [cache[f"layers.{i}.resid_pre"][0], cache[f"layers.{i}.resid_mid"][0]]
    names.append("final")
    hs.append(cache["final_in"][0])
    return {"names": names, "share": torch.stack([share_along_ones(h) for h in hs]).numpy()}


def _empty() -> dict:
    return {"minilm": {}, "smollm2": {}}


def measure(cfg: ProjectionConfig, only: list[int] | None = None,
            checkpoint: Path | None = None, progress: bool = False) -> dict:
    """Per model, per passage (``only``: just these; the tests recompute a few) the
    dicts of :func:`minilm_passage` and :func:`smollm2_passage`. With ``checkpoint``,
    each finished passage is saved there and a rerun skips those already saved."""
    from lncourse.minilm import load_minilm
    from lncourse.smollm2 import load_smollm2

    texts = passages(cfg.n_passages, cfg.chars)
    keep = list(only if only is not None else range(cfg.n_passages))
    done = (torch.load(checkpoint, weights_only=False)
            if checkpoint is not None and checkpoint.exists() else _empty())
    def minilm():
        model = load_minilm().double()
        swap = swapped(model)
        return lambda text: minilm_passage(model, text, cfg.tokens, swap)

    def smollm2():
        model = load_smollm2()
        return lambda text: smollm2_passage(model, text, cfg.tokens)

    for name, load in [("minilm", minilm), ("smollm2", smollm2)]:
        todo = [p for p in keep if p not in done[name]]
        if not todo:
            continue
        run = load()
        for p in todo:
            done[name][p] = run(texts[p])
            if checkpoint is not None:
                checkpoint.parent.mkdir(parents=True, exist_ok=True)
                torch.save(done, checkpoint)
            if progress:
                print(f"{name}: passage {p + 1}/{cfg.n_passages}", flush=True)
    return {m: [done[m][p] for p in keep] for m in done}


def payload(cfg: ProjectionConfig, per: dict, tokens_file: str) -> tuple[dict, dict]:
    """The stored JSON (less provenance) and the arrays of its ``.npz``."""
    mini, smol = per["minilm"], per["smollm2"]
    arrays = {"minilm_share": np.stack([r["share"] for r in mini]).astype(np.float32),
              "minilm_change": np.stack([r["change"] for r in mini]).astype(np.float32),
              "minilm_final_change": np.stack([r["final_change"] for r in mini]
                                              ).astype(np.float32),
              "smollm2_share": np.stack([r["share"] for r in smol]).astype(np.float32)}
    out = {"config": dataclasses.asdict(cfg), "tokens": tokens_file,
           "minilm": {"names": mini[0]["names"], "d": 384,
                      "attn_names": mini[0]["attn_names"],
                      "tv_mean": [r["tv_mean"].tolist() for r in mini],
                      "tv_max": [r["tv_max"].tolist() for r in mini],
                      "tv_random_mean": [r["tv_random_mean"].tolist() for r in mini],
                      "pooled_cos": [r["pooled_cos"] for r in mini]},
           "smollm2": {"names": smol[0]["names"], "d": 576},
           "shapes": {k: list(v.shape) for k, v in arrays.items()}}
    return out, arrays


def main(argv: list[str] | None = None) -> Path:
    """``python -m lncourse.evidence.geometry.projection --preset paper``: measure, store."""
    args = run_arguments(MODULE, "Chapter 1's measurement of what LayerNorm's projection "
                         "removes in MiniLM and SmolLM2, stored with provenance.", PRESETS
                         ).parse_args(argv)
    cfg = PRESETS[args.preset]()
    checkpoint = RESULTS_DIR / "checkpoints" / f"geometry_projection_{args.preset}.pt"
    started = run_started(checkpoint, command_line(MODULE, argv))
    t0 = time.perf_counter()
    per = measure(cfg, checkpoint=checkpoint, progress=not args.quiet)
    path = RESULTS_DIR / "geometry" / f"projection_{args.preset}.json"
    tokens_file = f"{path.stem}_tokens.npz"
    out, arrays = payload(cfg, per, tokens_file)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path.parent / tokens_file, **arrays)
    return store_run(path, out, args.device, time.perf_counter() - t0, started)


if __name__ == "__main__":
    main()
