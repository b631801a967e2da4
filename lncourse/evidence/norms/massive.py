"""A slice of SmolLM2's residual stream for exercise 5.7: the massive activation.

SmolLM2-135M (:mod:`lncourse.smollm2`) reads the first ``tokens`` tokens of the plays'
first passage (:func:`lncourse.text.passages`). We keep what a few of its RMSNorms read,
``h`` of shape (norms, T, d) for every token, and the gains γ of all 61 norms, so that a
student can measure the massive activation {cite}`sun2024massive` with no 93 MB model
installed: before the norm, after its scaling x / rms(x), and after its gain.

The summary (what the lesson glues) is computed here from those arrays, per stored norm:
the channel of token 0's largest |entry|, its peak ratio (largest |entry| over the
median |entry| of the same token) before the norm, after the scaling and after the
gain, the median peak ratio of the other tokens, the scaled spike's value beside √d, and
the gain on that channel beside the median |γ|; and over all 61 norms, which give that
channel a gain below ``off`` times their median |γ| (the gain switches it off).

``python -m lncourse.evidence.norms.massive`` writes ``results/norms/massive.json`` and
``results/norms/massive_arrays.npz`` (seconds of CPU). ``tests/norms/test_massive.py``
recomputes the summary from the arrays, and (slow) the arrays from the model.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from lncourse.results import RESULTS_DIR, command_line, run_arguments, run_started, store_run
from lncourse.text import passages

__all__ = ["MassiveConfig", "PRESETS", "norm_names", "measure", "summarize", "claims", "main"]

MODULE = "lncourse.evidence.norms.massive"


@dataclass(frozen=True)
class MassiveConfig:
    chars: int = 400          # characters of the plays' first passage read
    tokens: int = 24          # tokens kept (no token is added at the start)
    norms: tuple[str, ...] = ("L4.attn", "L4.mlp", "L16.attn", "L16.mlp")
    off: float = 0.01         # a gain below off x median |gamma| switches a channel off

    @classmethod
    def lesson(cls) -> "MassiveConfig":
        return cls()

    @classmethod
    def from_dict(cls, d: dict) -> "MassiveConfig":
        return cls(**{**d, "norms": tuple(d["norms"])})


PRESETS = {"lesson": MassiveConfig.lesson}


def norm_names(n_layers: int) -> list[str]:
    """SmolLM2's RMSNorms in forward order: ``Lk.attn``, ``Lk.mlp`` per layer, ``final``
    (as :func:`lncourse.evidence.norms.real.smollm2_norm_inputs` names them)."""
    return [f"L{i}.{k}" for i in range(n_layers) for k in ("attn", "mlp")] + ["final"]


def _inputs_and_gains(model, cache: dict) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    out = {}
    for i, layer in enumerate(model.layers):
        out[f"L{i}.attn"] = (cache[f"layers.{i}.resid_pre"][0], layer.attn_norm)
        out[f"L{i}.mlp"] = (cache[f"layers.{i}.resid_mid"][0], layer.mlp_norm)
    out["final"] = (cache["final_in"][0], model.final_norm)
    return out


def measure(cfg: MassiveConfig) -> tuple[dict, dict[str, np.ndarray]]:
    """Run SmolLM2 on the text: (what the JSON keeps, the arrays). Arrays: ``h`` (norms,
    T, d) what each of ``cfg.norms`` reads, ``gains`` (61, d) every norm's γ, float32."""
    from lncourse.smollm2 import EPS, load_smollm2, smollm2_tokenizer

    model = load_smollm2()
    text = passages(1, cfg.chars)[0]
    ids = model.tokenize(text)[:, :cfg.tokens]
    if ids.shape[1] < cfg.tokens:
        raise ValueError(f"the passage has only {ids.shape[1]} tokens, {cfg.tokens} asked")
    with torch.no_grad():
        _, cache = model(ids, return_cache=True)
        per = _inputs_and_gains(model, cache)
        names = norm_names(len(model.layers))
        unknown = set(cfg.norms) - set(names)
        if unknown:
            raise ValueError(f"no norm named {sorted(unknown)}; the names are {names[:3]}...")
        arrays = {"h": torch.stack([per[n][0] for n in cfg.norms]).numpy().copy(),
                  "gains": torch.stack([per[n][1] for n in names]).numpy().copy()}
    tok = smollm2_tokenizer()
    out = {"text": tok.decode(ids[0].tolist()), "token_ids": ids[0].tolist(),
           "tokens": [tok.decode([i]) for i in ids[0].tolist()], "eps": EPS,
           "d": int(arrays["h"].shape[-1]), "gain_names": names,
           "shapes": {k: list(v.shape) for k, v in arrays.items()}}
    return out, arrays


def _peak(h: torch.Tensor) -> torch.Tensor:
    """Per token, the largest |entry| over the median |entry| (torch's median: the lower
    middle value for an even width). (..., d) -> (...)."""
    a = h.abs()
    return a.amax(-1) / a.median(-1).values


def summarize(cfg: MassiveConfig, stored: dict, arrays: dict[str, np.ndarray]) -> dict:
    """What the lesson quotes, from the stored arrays (float64 arithmetic)."""
    h = torch.from_numpy(arrays["h"]).double()
    gains = torch.from_numpy(arrays["gains"]).double()
    names, d = stored["gain_names"], h.shape[-1]
    per = {}
    for k, name in enumerate(cfg.norms):
        x, g = h[k], gains[names.index(name)]
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + stored["eps"])
        c = int(x[0].abs().argmax())
        before, scaled, gained = _peak(x), _peak(y), _peak(y * g)
        per[name] = {"channel": c, "ratio_before": float(before[0]),
                     "ratio_scaled": float(scaled[0]), "ratio_gained": float(gained[0]),
                     "rest_before": float(before[1:].median()),
                     "rest_gained": float(gained[1:].median()),
                     "spike_scaled": float(y[0, c]), "sqrt_d": d ** 0.5,
                     "gain_at_channel": float(g[c]),
                     "gain_median_abs": float(g.abs().median())}
    channels = {v["channel"] for v in per.values()}
    if len(channels) != 1:
        raise ValueError(f"token 0's largest entry moves between channels {channels}")
    c = channels.pop()
    rel = (gains[:, c].abs() / gains.abs().median(-1).values).tolist()
    off = {kind: [int(n[1:].split(".")[0]) for n, r in zip(names, rel)
                  if n.endswith(f".{kind}") and r < cfg.off] for kind in ("attn", "mlp")}
    return {"channel": c, "norms": per, "gain_relative": rel, "switched_off": off}


def claims(summary: dict, cfg: MassiveConfig) -> dict[str, bool]:
    """The sentences chapter 5's lesson states about the slice, each tested on the
    stored summary (``tests/norms/test_massive.py``)."""
    per = summary["norms"]
    attn = [v for n, v in per.items() if n.endswith(".attn")]
    mlp_off = [v for n, v in per.items() if n.endswith(".mlp")
               and int(n[1:].split(".")[0]) in summary["switched_off"]["mlp"]]
    return {
        "token 0's peak ratio is over ten times the other tokens' median, at every "
        "stored norm": all(v["ratio_before"] > 10 * v["rest_before"] for v in per.values()),
        "the scaling leaves token 0's peak ratio as it was (to 1e-6)":
            all(abs(v["ratio_scaled"] / v["ratio_before"] - 1) < 1e-6 for v in per.values()),
        "after the scaling token 0's spike is within 5% of √d":
            all(abs(abs(v["spike_scaled"]) / v["sqrt_d"] - 1) < 0.05 for v in per.values()),
        "some MLP norms switch the spike's channel off, and no attention norm does":
            bool(summary["switched_off"]["mlp"]) and not summary["switched_off"]["attn"],
        "a stored MLP norm that switches it off brings token 0's ratio within 1.5 times "
        "the other tokens' median after the same gain": bool(mlp_off) and all(
            v["ratio_gained"] < 1.5 * v["rest_gained"] for v in mlp_off),
        "every stored attention norm keeps token 0's ratio after the gain over twice the "
        "other tokens' median before it": all(v["ratio_gained"] > 2 * v["rest_before"]
                                              for v in attn),
        "the stored norms are those named": list(per) == list(cfg.norms),
    }


def main(argv: list[str] | None = None) -> Path:
    """``python -m lncourse.evidence.norms.massive``: measure SmolLM2's slice, store it."""
    args = run_arguments(MODULE, "A slice of SmolLM2's residual stream and its norms' gains "
                         "for chapter 5's exercise on massive activations, stored with "
                         "provenance.", PRESETS)
    args.set_defaults(preset="lesson")
    args = args.parse_args(argv)
    cfg = PRESETS[args.preset]()
    started = run_started(RESULTS_DIR / "checkpoints" / f"norms_massive_{args.preset}",
                          command_line(MODULE, argv))
    t0 = time.perf_counter()
    out, arrays = measure(cfg)
    path = RESULTS_DIR / "norms" / "massive.json"
    arrays_file = f"{path.stem}_arrays.npz"
    payload = {"config": dataclasses.asdict(cfg), **out, "arrays": arrays_file,
               "summary": summarize(cfg, out, arrays)}
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path.parent / arrays_file, **arrays)
    return store_run(path, payload, args.device, time.perf_counter() - t0, started)


if __name__ == "__main__":
    main()
