"""Table 1 at the paper's training length, with seeds (chapter 2).

Three seeds x two models (full LayerNorm; no scaling before attention), the paper's
Table 1 architecture and context (d = 8, 4 layers, 4 heads, contexts of 1,024, batch 16),
trained together by :func:`lncourse.evidence.selectability.train.train_fused` to step 34,000
(the released code's Table 2 checkpoint; it measures Table 1 at step 50,000, which
:mod:`lncourse.evidence.selectability.seeds_continue` trains on to), with the weights kept at the steps of
:attr:`SeedsConfig.snapshot_steps`. Stored run (resumes from its checkpoint when run
again; ``--export-partial`` stores what a checkpoint holds so far, labelled by its step)::

    python -m lncourse.evidence.selectability.seeds --preset table1 --quiet
    python -m lncourse.evidence.selectability.seeds --preset table1 --export-partial

The measurements on the stored weights are in :mod:`lncourse.evidence.selectability.seeds_measure`.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from lncourse.checkpoint import load_checkpoint
from lncourse.results import (RESULTS_DIR, git_commit, command_line, run_arguments, run_started,
                      store_run)
from lncourse.selectability.lm import VARIANTS, KeysLMConfig, build_model, tokenized
from lncourse.evidence.selectability.seeds_measure import result_of
from lncourse.evidence.selectability.train import train_fused

__all__ = ["SeedsConfig", "PRESETS", "models_of", "train", "main"]

# The weights are kept at these steps: densely early, where the fractions move fast.
_SNAPSHOTS = (0, 100, 200, 400, 700, 1000, 1500) + tuple(range(2000, 34001, 2000))


@dataclass(frozen=True)
class SeedsConfig:
    """The runs: the model, data and optimiser of ``lm`` (its ``seed`` unused), one pair
    of models per seed in ``seeds``; measured on ``contexts`` held-out contexts each."""

    lm: KeysLMConfig = KeysLMConfig(steps=34_000)
    seeds: tuple[int, ...] = (0, 10, 20)
    snapshot_steps: tuple[int, ...] = _SNAPSHOTS
    contexts: int = 100              # held-out contexts measured at n = block_size

    def __post_init__(self):
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds must be distinct and at least one, got {self.seeds}")
        if any(s % self.lm.eval_every for s in self.snapshot_steps):
            raise ValueError("snapshot steps must be evaluation steps (multiples of "
                             f"eval_every = {self.lm.eval_every})")

    @classmethod
    def table1(cls) -> "SeedsConfig":
        return cls()

    @classmethod
    def quick(cls) -> "SeedsConfig":
        """A tiny run for the tests: contexts of 64, 2 layers, 2 seeds, 20 steps."""
        lm = KeysLMConfig(text_chars=200_000, block_size=64, batch_size=2, steps=20,
                          lr=1e-2, eval_every=10, eval_batches=1, n_layers=2,
                          sweep=(16, 64))
        return cls(lm=lm, seeds=(0, 10), snapshot_steps=(0, 10, 20), contexts=3)

    @classmethod
    def from_dict(cls, d: dict) -> "SeedsConfig":
        lm = KeysLMConfig(**{k: tuple(v) if isinstance(v, list) else v
                             for k, v in d["lm"].items()})
        return cls(lm=lm, **{k: tuple(v) if isinstance(v, list) else v
                             for k, v in d.items() if k not in ("lm", "steps")})


PRESETS = {"table1": SeedsConfig.table1, "quick": SeedsConfig.quick}


def models_of(cfg: SeedsConfig, vocab_size: int) -> tuple[list, list[int], list[str]]:
    """The freshly initialised models, in the order seed by seed, variant by variant;
    their seeds; their labels (keys of :data:`lncourse.selectability.lm.VARIANTS`)."""
    models, seeds, labels = [], [], []
    for seed in cfg.seeds:
        for label, norm in VARIANTS.items():
            models.append(build_model(dataclasses.replace(cfg.lm, seed=seed), vocab_size,
                                      norm))
            seeds.append(seed)
            labels.append(label)
    return models, seeds, labels


def train(cfg: SeedsConfig, checkpoint: Path | None, progress: bool = True
          ) -> tuple[dict, dict]:
    """Train (or resume) the runs of ``cfg``; returns :func:`train_fused`'s result and
    its timing."""
    tok, train_ids, test_ids = tokenized(cfg.lm)
    models, seeds, _ = models_of(cfg, tok.vocab_size)
    timing: dict = {}
    lm = cfg.lm
    out = train_fused(models, seeds, train_ids, test_ids, steps=lm.steps,
                      batch_size=lm.batch_size, block_size=lm.block_size, lr=lm.lr,
                      eval_every=lm.eval_every, eval_batches=lm.eval_batches,
                      snapshot_steps=cfg.snapshot_steps, checkpoint_path=checkpoint,
                      progress=progress, timing=timing)
    return out, timing


def checkpoint_state(cfg: SeedsConfig, checkpoint: Path) -> dict:
    """What a checkpoint of ``cfg`` holds: histories, snapshots, weights, step, seconds."""
    state = load_checkpoint(checkpoint, kind="lm_fused")
    if state is None:
        raise FileNotFoundError(f"no checkpoint at {checkpoint}")
    if state["config"]["seeds"] != [s for s in cfg.seeds for _ in VARIANTS] or \
            state["config"]["steps"] != cfg.lm.steps or \
            state["config"]["snapshot_steps"] != list(cfg.snapshot_steps):
        raise ValueError(f"{checkpoint} holds another run")
    return state


def main(argv: list[str] | None = None) -> Path | None:
    """Train (resuming) the runs of a preset, or export what its checkpoint holds."""
    parser = run_arguments("lncourse.evidence.selectability.seeds", "Train chapter 2's Table 1 "
                           "models (3 seeds x 2 variants) together; store the result.",
                           PRESETS)
    parser.add_argument("--export-partial", action="store_true",
                        help="do not train: store what the checkpoint holds so far")
    parser.add_argument("--contexts", type=int, default=None, help="held-out contexts "
                        "measured at the last step (default: the preset's)")
    parser.add_argument("--curve-contexts", type=int, default=4,
                        help="held-out contexts measured at every snapshot step")
    parser.add_argument("--cache", type=Path, default=None,
                        help="a directory of measurements to reuse and add to (an export "
                        "reads what --warm processes measured)")
    parser.add_argument("--warm", type=str, default=None, metavar="M,M,...",
                        help="do not store: measure these models (indices) of the "
                        "checkpoint into --cache, beside other processes")
    args = parser.parse_args(argv)
    cfg = PRESETS[args.preset]()
    ckpt = RESULTS_DIR / "checkpoints" / f"selectability_seeds_{args.preset}.ckpt"
    out = RESULTS_DIR / "selectability" / f"seeds_{args.preset}.json"
    if args.warm is not None:
        if args.cache is None:
            parser.error("--warm needs --cache")
        state = checkpoint_state(cfg, ckpt)
        models = [int(m) for m in args.warm.split(",")]
        result_of(cfg, state, args.contexts, args.curve_contexts, args.cache, models)
        return None
    if args.export_partial:
        started = json.loads(Path(str(ckpt) + ".start.json").read_text())
        state = checkpoint_state(cfg, ckpt)
        seconds = state["elapsed"]
    else:
        started = run_started(ckpt, command_line("lncourse.evidence.selectability.seeds", argv))
        train(cfg, ckpt, progress=not args.quiet)
        state = checkpoint_state(cfg, ckpt)
        seconds = state["elapsed"]
    payload = result_of(cfg, state, args.contexts, args.curve_contexts, args.cache)
    # provenance names the commit the training started from; the measurement's own
    payload["measured_at_commit"] = git_commit()
    return store_run(out, payload, args.device, seconds, started,
                     None if not args.export_partial else "training on one thread; "
                     + ("the finished checkpoint, exported" if state["step"] == cfg.lm.steps
                        else "partial export"))


if __name__ == "__main__":
    main()
