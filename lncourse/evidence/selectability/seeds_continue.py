"""Table 1 at the released code's checkpoint: the no-scaling models on to step 50,000.

The released ``unselectable/layer_norm_unselectable_layer.py`` measures Table 1 (no
scaling before attention) on ``gpt2_no_scale/checkpoint-50000`` and Table 2 (full
LayerNorm) on ``gpt2_scale/checkpoint-34000``. The seeded run of
:mod:`lncourse.evidence.selectability.seeds` stopped both at 34,000. This module takes its
finished checkpoint, keeps the three no-scaling models (weights, AdamW moments, data
generators, histories and snapshots) and trains them on to 50,000 steps with the same
constant learning rate and the same windows, so the continuation is the run the seeded
command would have made with 50,000 steps (the optimiser has no schedule). The
full-LayerNorm models stay at 34,000, as in the released code. Resumes from its own
checkpoint (saved atomically at every evaluation, every 100 steps), on the CPU or a GPU
(``--device cuda``; ``--ids`` reads the token streams that ``--write-ids`` wrote, for a
machine without the plays' package)::

    python -m lncourse.evidence.selectability.seeds_continue --preset table1 --quiet
    python -m lncourse.evidence.selectability.seeds_continue --preset table1 --export

The export (once the run is finished) measures the three models at steps 34,000 and
50,000 on the seeded run's 100 held-out contexts and stores
``results/selectability/seeds_table1_50000.json``; the comparison of Table 1 there with
the paper (and with step 34,000, paired by seed) is still to be written as claims.

Shapes: stacked parameters (M, ...), M models.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import torch

from lncourse.checkpoint import load_checkpoint, save_checkpoint
from lncourse.results import (RESULTS_DIR, git_commit, command_line, load_result,
                              run_arguments, run_started, store_run)
from lncourse.selectability.lm import VARIANTS, build_model, tokenized
from lncourse.evidence.selectability.seeds import SeedsConfig, checkpoint_state
from lncourse.evidence.selectability.train import train_fused

__all__ = ["ContinueConfig", "PRESETS", "LABEL", "continuation_state", "train", "export",
           "main"]

LABEL = "no scaling before attention"


@dataclass(frozen=True)
class ContinueConfig:
    """The source run (a :class:`SeedsConfig`, finished), the variant carried on, the
    step to reach and the extra snapshot steps kept on the way."""

    source: SeedsConfig = SeedsConfig.table1()
    label: str = LABEL
    steps: int = 50_000
    extra_snapshots: tuple[int, ...] = tuple(range(36_000, 50_001, 2_000))

    def __post_init__(self):
        if self.label not in VARIANTS:
            raise ValueError(f"label must be one of {sorted(VARIANTS)}, got {self.label!r}")
        if self.steps <= self.source.lm.steps:
            raise ValueError(f"steps ({self.steps}) must exceed the source run's "
                             f"{self.source.lm.steps}")
        bad = [s for s in self.extra_snapshots
               if s <= self.source.lm.steps or s > self.steps
               or s % self.source.lm.eval_every]
        if bad:
            raise ValueError(f"extra snapshots must be evaluation steps after the source "
                             f"run's end and not past {self.steps}: {bad}")

    @property
    def lm(self):
        return dataclasses.replace(self.source.lm, steps=self.steps)

    @property
    def snapshot_steps(self) -> tuple[int, ...]:
        return tuple(sorted(set(self.source.snapshot_steps) | set(self.extra_snapshots)))

    @classmethod
    def table1(cls) -> "ContinueConfig":
        return cls()

    @classmethod
    def quick(cls) -> "ContinueConfig":
        """The tests' size: the quick seeded run (20 steps) carried on to 40."""
        return cls(source=SeedsConfig.quick(), steps=40, extra_snapshots=(30, 40))


PRESETS = {"table1": ContinueConfig.table1, "quick": ContinueConfig.quick}


def _kept(cfg: ContinueConfig) -> list[int]:
    """Indices, in the source run's order (seed by seed, variant by variant), of the
    models carried on."""
    labels = [label for _ in cfg.source.seeds for label in VARIANTS]
    return [m for m, label in enumerate(labels) if label == cfg.label]


def continuation_state(cfg: ContinueConfig, source: dict) -> dict:
    """The checkpoint :func:`train_fused` resumes from, cut out of the finished source
    checkpoint ``source``: the kept models' weights, AdamW moments, histories and
    snapshots; the data generators as they were (the kept models read their seed's
    windows, which the dropped models shared); ``elapsed`` 0 (this run's own time)."""
    if source["step"] != cfg.source.lm.steps:
        raise ValueError(f"the source run is at step {source['step']}, not its last step "
                         f"{cfg.source.lm.steps}: finish it first")
    keep = _kept(cfg)
    M = len(source["config"]["seeds"])

    def cut(t):
        return t[keep].clone() if isinstance(t, torch.Tensor) and t.dim() and \
            t.shape[0] == M else t

    opt = source["optimizer"]
    optimizer = {"state": {k: {n: cut(v) for n, v in st.items()}
                           for k, st in opt["state"].items()},
                 "param_groups": opt["param_groups"]}
    config = {**source["config"], "steps": cfg.steps,
              "seeds": [source["config"]["seeds"][m] for m in keep],
              "models": [source["config"]["models"][m] for m in keep],
              "snapshot_steps": list(cfg.snapshot_steps)}
    return {"config": config, "params": {k: cut(p) for k, p in source["params"].items()},
            "optimizer": optimizer, "generators": source["generators"],
            "histories": [source["histories"][m] for m in keep],
            "snapshots": {k: {n: cut(p) for n, p in v.items()}
                          for k, v in source["snapshots"].items()},
            "step": source["step"], "elapsed": 0.0,
            "source_elapsed": source["elapsed"]}


def paths(preset: str) -> tuple[Path, Path]:
    """The source checkpoint and this run's."""
    ck = RESULTS_DIR / "checkpoints"
    return (ck / f"selectability_seeds_{preset}.ckpt",
            ck / f"selectability_seeds_{preset}_{PRESETS[preset]().steps}.ckpt")


def streams(cfg: ContinueConfig, ids: Path | None = None) -> tuple[int, torch.Tensor,
                                                                   torch.Tensor]:
    """The vocabulary size and the training and test streams: tokenized here, or read
    from ``ids`` (written by ``--write-ids``, for a machine without the plays' package);
    the trainer's data fingerprint refuses streams that differ from the run's."""
    if ids is None:
        tok, train_ids, test_ids = tokenized(cfg.lm)
        return tok.vocab_size, train_ids, test_ids
    d = torch.load(ids, weights_only=True)
    return int(d["vocab_size"]), d["train"].long(), d["test"].long()


def train(cfg: ContinueConfig, source_ckpt: Path, ckpt: Path, progress: bool = True,
          device: str = "cpu", ids: Path | None = None) -> tuple[dict, dict]:
    """Carry the kept models of ``source_ckpt`` on to ``cfg.steps`` (resuming from
    ``ckpt`` when it exists, else writing it from the source first), on ``device``."""
    if load_checkpoint(ckpt, kind="lm_fused") is None:
        save_checkpoint(ckpt, continuation_state(cfg, checkpoint_state(cfg.source,
                                                                        source_ckpt)),
                        kind="lm_fused")
    vocab_size, train_ids, test_ids = streams(cfg, ids)
    keep = _kept(cfg)
    seeds = [seed for seed in cfg.source.seeds for _ in VARIANTS]
    models = [build_model(dataclasses.replace(cfg.lm, seed=seeds[m]), vocab_size,
                          VARIANTS[cfg.label]).to(device) for m in keep]
    timing: dict = {}
    lm = cfg.lm
    out = train_fused(models, [seeds[m] for m in keep], train_ids, test_ids,
                      steps=lm.steps, batch_size=lm.batch_size, block_size=lm.block_size,
                      lr=lm.lr, eval_every=lm.eval_every, eval_batches=lm.eval_batches,
                      snapshot_steps=cfg.snapshot_steps, checkpoint_path=ckpt,
                      progress=progress, timing=timing)
    return out, timing


def export(cfg: ContinueConfig, state: dict, contexts: int | None = None,
           start_cells: dict | None = None) -> dict:
    """What a checkpoint of the continuation holds, measured: per model its loss history
    and, at the source run's last step and at the checkpoint's step, the fraction per
    layer and held-out context at n = T (``measure``: before and after the LayerNorm),
    on the contexts the seeded run's export measured (``contexts`` of them, default the
    source's).

    ``start_cells`` ({"before", "after"}: [kept model][layer][context]) are the seeded
    export's cells of the kept models at the source's last step: the same weights on the
    same contexts, so they are taken instead of measured again (half the export's time),
    after the first context of every model is measured again and found equal (else
    ValueError: they are not this run's)."""
    from lncourse.selectability.lm import held_out_contexts
    from lncourse.evidence.selectability.seeds_measure import measure
    vocab_size, _, test_ids = streams(cfg)
    n = cfg.source.contexts if contexts is None else contexts
    ctx = held_out_contexts(test_ids, dataclasses.replace(
        cfg.lm, contexts=n, track_contexts=min(cfg.lm.track_contexts, n)))
    seeds = [seed for seed in cfg.source.seeds for _ in VARIANTS]
    kept = [seeds[m] for m in _kept(cfg)]
    start = cfg.source.lm.steps
    weights = {start: state["snapshots"][str(start)], state["step"]: state["params"]}
    out = {"config": {"source": dataclasses.asdict(cfg.source), "label": cfg.label,
                      "steps": cfg.steps, "lm": dataclasses.asdict(cfg.lm)},
           "seeds": kept, "label": cfg.label, "steps_done": state["step"],
           "step": state["histories"][0]["step"], "histories": state["histories"],
           "measured_contexts": n, "fractions": {}}
    for step, params in weights.items():
        if step == start and start_cells is not None:
            out["fractions"][str(step)] = _checked_start(cfg, params, kept, vocab_size,
                                                         ctx, start_cells)
            continue
        out["fractions"][str(step)] = measure(_models(cfg, params, kept, vocab_size), ctx)
    return out


def _models(cfg: ContinueConfig, params: dict, kept: list, vocab_size: int) -> list:
    from lncourse.evidence.selectability.fused import unstack
    models = []
    for i, seed in enumerate(kept):
        model = build_model(dataclasses.replace(cfg.lm, seed=seed), vocab_size,
                            VARIANTS[cfg.label])
        model.load_state_dict(unstack({k: v.detach().cpu().float()
                                       for k, v in params.items()}, i))
        models.append(model.eval())
    return models


def _checked_start(cfg, params, kept, vocab_size, ctx, cells: dict) -> dict:
    """The seeded export's cells at the start step, once the first context of every
    kept model, measured again from ``params``, equals them exactly."""
    from lncourse.evidence.selectability.seeds_measure import measure
    again = measure(_models(cfg, params, kept, vocab_size), ctx[:1])
    for q in ("before", "after"):
        if len(cells[q]) != len(kept) or any(len(layer) != len(ctx) for m in cells[q]
                                             for layer in m):
            raise ValueError("the seeded export's cells do not have this export's shape")
        for m, model_cells in enumerate(again[q]):
            if [layer[0] for layer in cells[q][m]] != [layer[0] for layer in model_cells]:
                raise ValueError(f"the seeded export's {q} cells of model {m} at step "
                                 f"{cfg.source.lm.steps} are not those of these weights")
    return {q: cells[q] for q in ("before", "after")}


def seeded_start_cells(preset: str) -> dict | None:
    """The kept models' cells of the seeded run's export (``seeds_<preset>.json``) at its
    last step, if it is stored and finished; else None."""
    path = RESULTS_DIR / "selectability" / f"seeds_{preset}.json"
    if not path.exists():
        return None
    seeded = load_result(path)          # the project's reader: checks its provenance
    if seeded["steps_done"] != PRESETS[preset]().source.lm.steps:
        return None
    kept = [m for m, lab in enumerate(seeded["labels"]) if lab == LABEL]
    return {q: [seeded["final"][q][m] for m in kept] for q in ("before", "after")}


def main(argv: list[str] | None = None) -> Path:
    """Train (resuming) the continuation of a preset; returns its checkpoint."""
    parser = run_arguments("lncourse.evidence.selectability.seeds_continue", "Carry chapter 2's "
                           "no-scaling seeded models on to the released code's Table 1 "
                           "checkpoint (step 50,000).", PRESETS)
    parser.add_argument("--ids", type=Path, default=None, help="read the token streams "
                        "from this file (see --write-ids) instead of tokenizing the plays")
    parser.add_argument("--write-ids", type=Path, default=None, help="only write the "
                        "preset's token streams to this file, and stop")
    parser.add_argument("--export", action="store_true", help="do not train: measure the "
                        "checkpoint (which must be finished) and store the result")
    parser.add_argument("--contexts", type=int, default=None, help="held-out contexts "
                        "the export measures (default: the seeded run's)")
    args = parser.parse_args(argv)
    cfg = PRESETS[args.preset]()
    if args.write_ids is not None:
        vocab_size, train_ids, test_ids = streams(cfg)
        torch.save({"vocab_size": vocab_size, "train": train_ids.to(torch.int16),
                    "test": test_ids.to(torch.int16)}, args.write_ids)
        return args.write_ids
    source, ckpt = paths(args.preset)
    if args.export:
        state = load_checkpoint(ckpt, kind="lm_fused")
        if state is None or state["step"] != cfg.steps:
            parser.error(f"{ckpt} is not finished (step "
                         f"{None if state is None else state['step']} of {cfg.steps})")
        started = json.loads(Path(str(ckpt) + ".start.json").read_text())
        out = RESULTS_DIR / "selectability" / f"seeds_{args.preset}_{cfg.steps}.json"
        start_cells = None if args.contexts else seeded_start_cells(args.preset)
        payload = export(cfg, state, args.contexts, start_cells)
        payload["start_cells_from"] = (None if start_cells is None else
                                       f"selectability/seeds_{args.preset}.json")
        payload["measured_at_commit"] = git_commit()
        return store_run(out, payload, args.device, state["elapsed"], started,
                         "the finished continuation, exported")
    run_started(ckpt, command_line("lncourse.evidence.selectability.seeds_continue", argv))
    _, timing = train(cfg, source, ckpt, progress=not args.quiet, device=args.device,
                      ids=args.ids)
    print(json.dumps({"checkpoint": str(ckpt), "seconds": timing.get("seconds"),
                      "device": args.device}))
    return ckpt


if __name__ == "__main__":
    main()
