"""Chapter 3's stored runs: a preset trained with its parameter snapshots and written to
``results/majority/<preset>.json`` with its provenance (chapter 3's evidence).

The course's trainer (:func:`lncourse.majority.train.train`) trains; this command
records. It passes :class:`lncourse.evidence.majority.snapshots.SnapshotRecorder` as the
trainer's ``on_evaluation``, so the file holds every model's parameters at the steps the
chapter reports, and stores the history with :func:`lncourse.results.store_run`. A run
checkpoints at every evaluation and resumes from its checkpoint when started again::

    python -m lncourse.evidence.majority.runs --preset paper --device cuda
    python -m lncourse.evidence.majority.runs --preset paper --export-partial  # so far

The stored files written before this command left the trainer (issue 59) name it
``lncourse.majority.train`` or ``lncourse.majority_train``; ``lncourse.results.RENAMED``
reads them under this name, and such a checkpoint resumes here.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from lncourse.checkpoint import load_checkpoint
from lncourse.evidence.majority.snapshots import SnapshotRecorder
from lncourse.majority.config import MajorityConfig
from lncourse.majority.train import train
from lncourse.results import RESULTS_DIR, command_line, run_arguments, run_started, store_run

__all__ = ["PRESETS", "record", "main"]

MODULE = "lncourse.evidence.majority.runs"

PRESETS = {"paper": MajorityConfig.paper, "quick": MajorityConfig.quick,
           "three_d": MajorityConfig.three_d,
           "grid_b500": lambda: MajorityConfig.grid(500),
           "grid_b6000": lambda: MajorityConfig.grid(6000),
           "data_seed1": lambda: MajorityConfig.other_data(1),
           "data_seed2": lambda: MajorityConfig.other_data(2)}


def record(config: MajorityConfig, **train_kwargs) -> dict:
    """``config`` trained as a stored run is: its history with the parameter snapshots
    (``train_kwargs`` go to :func:`lncourse.majority.train.train`)."""
    if "on_evaluation" in train_kwargs:
        raise TypeError("record() passes its own on_evaluation (the snapshot recorder)")
    return train(config, on_evaluation=SnapshotRecorder(), **train_kwargs)


def _partial_history(config: MajorityConfig, checkpoint: Path) -> dict:
    """The history a checkpoint holds so far, with the weights at its last step."""
    state = load_checkpoint(checkpoint, kind="majority")
    if state is None or state.get("config") != dataclasses.asdict(config):
        raise ValueError(f"{checkpoint} holds no checkpoint of this configuration")
    history = state["history"]
    history["final_params"] = {k: p.tolist() for k, p in state["params"].items()}
    history["seconds"] = state["elapsed"]
    return history


def main(argv: list[str] | None = None) -> Path:
    """``python -m lncourse.evidence.majority.runs --preset paper``: train, write the
    result."""
    parser = run_arguments(MODULE, "Train the majority models of chapter 3 and store the "
                           "history, with parameter snapshots, and its provenance.", PRESETS)
    parser.add_argument("--out", default=None,
                        help="result file (default results/majority/<preset>.json)")
    parser.add_argument("--steps", type=int, default=None,
                        help="override the preset's step count (recorded in the config)")
    parser.add_argument("--checkpoint", default=None, help="checkpoint file (default "
                        "results/checkpoints/majority_<name>.ckpt); an existing one resumes")
    parser.add_argument("--export-partial", action="store_true",
                        help="do not train: write the history of the checkpoint so far "
                        "(a run that goes on in a later session; its last step tells)")
    args = parser.parse_args(argv)
    config = PRESETS[args.preset]()
    if args.steps is not None:
        config = dataclasses.replace(config, steps=args.steps)
    out = Path(args.out) if args.out else RESULTS_DIR / "majority" / f"{args.preset}.json"
    ckpt = Path(args.checkpoint) if args.checkpoint else \
        RESULTS_DIR / "checkpoints" / f"majority_{out.stem}.ckpt"
    command = command_line(MODULE, argv)
    if args.export_partial:
        history = _partial_history(config, ckpt)
        started = json.loads(Path(str(ckpt) + ".start.json").read_text())
    else:
        started = run_started(ckpt, command)     # the commit and command of the first start
        history = record(config, device=args.device, checkpoint_path=ckpt,
                         show_progress=not args.quiet)
    # an export did not train: the run's thread count is unknown
    return store_run(out, history, args.device, history.pop("seconds"), started,
                     "partial export; threads not recorded" if args.export_partial else None,
                     allow_dirty=args.allow_dirty)


if __name__ == "__main__":
    main()
