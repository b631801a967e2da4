"""Per-head selectability in trained models under four norms (chapter 5, issue 17 §2).

Chapter 2's language model (d = 8, 4 layers, 4 heads, so dh = 2) is trained on the plays
with four normalisations, on the same data, seeds and batches:

* ``Pre-LN``: LayerNorm in front of every sublayer (chapter 2's model);
* ``RMSNorm``: the same without the projection (S without P);
* ``QK-norm``: Pre-LN, plus an RMSNorm with a learned gain on each head's queries and
  keys (every key of a head on an ellipse: the lens predicts 0% unselectable);
* ``DyT``: γ·tanh(αx) + β in place of every norm (a box, not a sphere: the lens predicts
  unselectable keys come back).

On held-out contexts of T tokens, each head's T keys (as attention uses them, dh = 2)
are counted exactly (:func:`lncourse.norms.heads.unselectable_fraction_2d`): the share
that are not strict vertices of their hull, per layer, head and context, at
initialisation and after training. The stored run keeps every count and every model's
weights, so a test recomputes the counts from the weights::

    python -m lncourse.evidence.norms.trained --preset paper

Shapes: contexts (S, T); keys per head (T, 2); counts [layer][head][context].
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from lncourse.lm import train_lm
from lncourse.norms.heads import mean_interval, unselectable_fraction_2d
from lncourse.results import (RESULTS_DIR, command_line, decode_state, encode_state,
                              run_arguments, run_started, store_run)
from lncourse.rng import generator, seeded
from lncourse.text import char_streams, sample_batch
from lncourse.transformer import GPT, TransformerConfig

__all__ = ["VARIANTS", "HeadsConfig", "PRESETS", "build", "head_counts", "summarize",
           "load_model", "with_qk_eps", "run", "main"]

# label -> the TransformerConfig switches that make the variant
VARIANTS = {"Pre-LN": {"norm": "layernorm"},
            "RMSNorm": {"norm": "no_projection"},
            "QK-norm": {"norm": "layernorm", "qk_norm": True},
            "DyT": {"norm": "dyt"}}


@dataclass(frozen=True)
class HeadsConfig:
    """The models (chapter 2's), their training and what is measured."""

    d_model: int = 8
    n_heads: int = 4
    n_layers: int = 4
    block_size: int = 256        # training context = the n measured
    batch_size: int = 16
    steps: int = 2000
    lr: float = 3e-3
    eval_batches: int = 4
    text_chars: int | None = None
    contexts: int = 16           # held-out contexts measured per model
    seeds: tuple[int, ...] = (0, 1, 2)


def _paper() -> HeadsConfig:
    """Contexts of 256 characters (the trainer's affordable length on the CPU), batch 16,
    2,000 AdamW steps, 3 seeds, 16 held-out contexts."""
    return HeadsConfig()


def _tiny() -> HeadsConfig:
    return HeadsConfig(block_size=32, batch_size=4, steps=4, eval_batches=1,
                       text_chars=200_000, contexts=3, seeds=(0, 1))


PRESETS = {"paper": _paper, "tiny": _tiny}


def token_streams(cfg: HeadsConfig):
    return char_streams(cfg.text_chars)     # shared: read, never changed


def build(cfg: HeadsConfig, vocab_size: int, variant: str, seed: int) -> GPT:
    """A freshly initialised model of ``variant`` (seeded: every variant draws the same
    weights for the parts they share)."""
    with seeded(seed):
        return GPT(TransformerConfig(vocab_size, d_model=cfg.d_model, n_heads=cfg.n_heads,
                                     n_layers=cfg.n_layers, block_size=cfg.block_size,
                                     **VARIANTS[variant]))


@torch.no_grad()
def head_counts(model: GPT, contexts: torch.Tensor) -> list:
    """Unselectable fraction of each head's keys over a whole context: [layer][head][s]
    (the model runs where its parameters are; the keys are counted on the CPU)."""
    model.eval()
    _, _, cache = model(contexts.to(next(model.parameters()).device), return_cache=True)
    out = []
    for layer in range(len(model.blocks)):
        k = cache[f"blocks.{layer}.k"]                                     # (S, H, T, dh)
        if k.shape[-1] != 2:
            raise ValueError(f"per-head counting needs dh = 2, got {k.shape[-1]}")
        out.append([[unselectable_fraction_2d(k[s, h]) for s in range(k.shape[0])]
                    for h in range(k.shape[1])])
    return out


def with_qk_eps(model: GPT, eps: float) -> GPT:
    """A copy of a QK-norm model whose query and key norms use ``eps`` (0: every head's
    keys exactly on its ellipse, up to rounding); the cause of the keys QK-norm leaves
    unselectable is measured by counting again with eps = 0."""
    if not hasattr(model.blocks[0].attn, "k_norm"):
        raise ValueError("the model has no QK-norm")
    if not (isinstance(eps, float) and eps >= 0):
        raise ValueError(f"eps must be a float >= 0, got {eps!r}")
    out = copy.deepcopy(model)
    for block in out.blocks:
        block.attn.k_norm.eps = block.attn.q_norm.eps = eps
    return out


def summarize(models: dict) -> dict:
    """Per variant and stage: per-layer means with a t interval over seeds (each seed's
    value is its mean over heads and contexts), and the overall mean."""
    out = {}
    for variant, runs in models.items():
        out[variant] = {}
        for stage in ("init", "trained"):
            per_seed = np.array([[np.mean(layer) for layer in r[stage]] for r in runs])
            layers = [mean_interval(per_seed[:, l]) for l in range(per_seed.shape[1])]
            out[variant][stage] = {"layers": [list(x) for x in layers],
                                   "overall": list(mean_interval(per_seed.mean(1)))}
    return out


def load_model(result: dict, variant: str, seed: int) -> GPT:
    cfg = HeadsConfig(**{k: tuple(v) if isinstance(v, list) else v
                         for k, v in result["config"].items() if k != "vocab_size"})
    model = build(cfg, result["config"]["vocab_size"], variant, seed)
    run = next(r for r in result["models"][variant] if r["seed"] == seed)
    model.load_state_dict(decode_state(run["weights"]))
    return model.eval()


def _contexts(cfg: HeadsConfig, test_ids: torch.Tensor) -> torch.Tensor:
    x, _ = sample_batch(test_ids, cfg.contexts, cfg.block_size, generator(12345))
    return x


def run(cfg: HeadsConfig, device: str = "cpu", progress: bool = True,
        checkpoints: Path | None = None) -> dict:
    """Train every variant and seed of ``cfg`` and count every head's keys, at
    initialisation and after training: the payload of the stored file (without its
    provenance), plus ``seconds`` of training. With ``checkpoints``, a folder, each model
    resumes from its own checkpoint there."""
    tok, train_ids, test_ids = token_streams(cfg)
    contexts = _contexts(cfg, test_ids)
    models, wall = {}, 0.0
    for variant in VARIANTS:
        models[variant] = []
        for seed in cfg.seeds:
            model = build(cfg, tok.vocab_size, variant, seed)
            init = head_counts(model, contexts)
            timing: dict = {}
            history = train_lm(model, train_ids, test_ids, steps=cfg.steps,
                               batch_size=cfg.batch_size, block_size=cfg.block_size,
                               lr=cfg.lr, eval_every=max(cfg.steps // 10, 1),
                               eval_batches=cfg.eval_batches, seed=seed, device=device,
                               checkpoint_path=(checkpoints / f"{variant}_{seed}.ckpt"
                                                if checkpoints else None),
                               progress=progress, timing=timing)
            model.cpu()
            wall += timing.get("seconds", 0.0)
            models[variant].append({"seed": seed, "init": init,
                                    "trained": head_counts(model, contexts),
                                    "history": history,
                                    "weights": encode_state(model.state_dict())})
    return {"config": {**dataclasses.asdict(cfg), "vocab_size": tok.vocab_size},
            "variants": VARIANTS, "contexts": contexts.tolist(), "models": models,
            "summary": summarize(models), "seconds": wall}


def main(argv: list[str] | None = None) -> Path:
    """Train every variant and seed (each resumable from its checkpoint), measure, store."""
    args = run_arguments("lncourse.evidence.norms.trained", "Per-head selectability of chapter 2's "
                         "model under Pre-LN, RMSNorm, QK-norm and DyT.", PRESETS
                         ).parse_args(argv)
    cfg = PRESETS[args.preset]()
    name = "trained_heads" if args.preset == "paper" else f"trained_heads_{args.preset}"
    ck_dir = RESULTS_DIR / "checkpoints" / f"norms_{name}"
    started = run_started(ck_dir / "run", command_line("lncourse.evidence.norms.trained", argv))
    (ck_dir / "run").touch()
    payload = run(cfg, args.device, not args.quiet, ck_dir)
    wall = payload.pop("seconds")
    return store_run(RESULTS_DIR / "norms" / f"{name}.json", payload, args.device, wall,
                     started)


if __name__ == "__main__":
    main()
