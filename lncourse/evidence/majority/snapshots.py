"""The majority models' parameters at the steps chapter 3 reports (chapter 3's evidence).

A curve of test accuracy is only a list of numbers; to check it, a test needs the model
behind each reported number. :class:`SnapshotRecorder`, passed to the trainer as its
``on_evaluation`` (:func:`lncourse.majority.train.train`; the stored runs' command line
:mod:`lncourse.evidence.majority.runs` does), keeps inside a run's history
(``history["snapshots"]``) every model's parameters

* at the steps the chapter reports: :data:`REPORTED_STEPS` (1,000 and 5,000) and the last;
* for each threshold of :data:`THRESHOLDS` (steps to 80% and 90%), at the first evaluation
  where that model's test accuracy reaches it *and* at the evaluation before, so that a test
  can recompute both sides of the crossing (the first is at or above, the one before below).

Stored compactly: ``snapshots[str(step)] = {"models": [m, ...], "params": {name: base64 of
float32 little-endian (len(models), *shape)}}``. For the paper run (80 models x 584 floats)
each full snapshot is about 250 kB of text. Recording only reads the parameters, so a run
with snapshots computes bit for bit what it computed without them.
"""

from __future__ import annotations

import base64

import numpy as np
import torch
from torch import Tensor

__all__ = ["REPORTED_STEPS", "THRESHOLDS", "encode", "decode", "SnapshotRecorder",
           "snapshot_params", "snapshot_steps"]

REPORTED_STEPS = (1000, 5000)     # and the run's last step
THRESHOLDS = (0.8, 0.9)           # steps to 80% and 90% (chapter 3's tables)


def encode(t: Tensor) -> str:
    """A tensor as base64 of its float32 little-endian bytes."""
    return base64.b64encode(t.detach().cpu().to(torch.float32).numpy().astype("<f4")
                            .tobytes()).decode("ascii")


def decode(text: str, shape: tuple[int, ...]) -> Tensor:
    """The inverse of :func:`encode`, reshaped to ``shape``."""
    a = np.frombuffer(base64.b64decode(text), dtype="<f4")
    if a.size != int(np.prod(shape)):
        raise ValueError(f"a snapshot of {a.size} floats cannot have shape {tuple(shape)}")
    return torch.from_numpy(a.copy()).reshape(shape)


def snapshot_steps(history: dict) -> list[int]:
    """The steps at which ``history`` holds parameters, ascending."""
    return sorted(int(s) for s in history.get("snapshots", {}))


def snapshot_params(history: dict, step: int, shapes: dict[str, tuple[int, ...]]
                    ) -> tuple[list[int], dict[str, Tensor]]:
    """(model indices, stacked parameters) stored at ``step``; ``shapes`` gives each
    parameter's shape for one model (e.g. from :func:`lncourse.majority.task.stack_params`)."""
    entry = history["snapshots"][str(step)]
    n = len(entry["models"])
    return entry["models"], {k: decode(v, (n, *shapes[k])) for k, v in entry["params"].items()}


class SnapshotRecorder:
    """The trainer's ``on_evaluation``: ``train(config, on_evaluation=SnapshotRecorder())``
    returns (and checkpoints) the history with its ``snapshots``.

    Called first at the evaluation training starts from (step 0, or a resumed run's last
    saved one, whose weights it must remember: the evaluation before a crossing), then
    after each evaluation is in ``history``, where it adds that evaluation's snapshots.
    ``params`` are the trainer's live (M, ...) tensors; they are only read. A run is
    known by its history: the first call with a history the recorder has not seen is
    where that run's training starts, so a recorder reused for a new run starts afresh
    wherever the new run resumes. A resumed run must have recorded from its start: a
    history past step 0 without ``snapshots`` (a checkpoint the plain trainer wrote)
    is refused, since its earlier snapshots are lost."""

    def __init__(self):
        self.history: dict | None = None
        self.last_step: int | None = None
        self.prev: dict[str, Tensor] = {}

    def __call__(self, step: int, params: dict[str, Tensor], history: dict) -> None:
        if history is not self.history:                  # where this run's training starts
            if step > 0 and "snapshots" not in history:
                raise ValueError(
                    f"this run resumes at step {step} from a checkpoint written without "
                    "snapshots (by train() without this recorder): the snapshots before "
                    "it are lost; start the run afresh, without the checkpoint")
            history.setdefault("snapshots", {})
            self.history = history
        else:
            self._at_evaluation(step, params, history)
        self.last_step = step
        self._remember(params)

    def _remember(self, params: dict[str, Tensor]) -> None:
        self.prev = {k: p.detach().to("cpu", torch.float32).clone() for k, p in params.items()}

    @staticmethod
    def _add(history: dict, step: int, params: dict[str, Tensor], models: set[int]) -> None:
        if not models:
            return
        shapes = {k: tuple(p.shape[1:]) for k, p in params.items()}
        entry = history["snapshots"].get(str(step))
        if entry is not None:                     # merge with what that step already holds
            old = entry["models"]
            models = models - set(old)
            if not models:
                return
            _, stored = snapshot_params(history, step, shapes)
            rows = {m: {k: stored[k][i] for k in stored} for i, m in enumerate(old)}
        else:
            rows = {}
        for m in models:
            rows[m] = {k: p[m].detach().cpu() for k, p in params.items()}
        order = sorted(rows)
        history["snapshots"][str(step)] = {
            "models": order,
            "params": {k: encode(torch.stack([rows[m][k] for m in order])) for k in shapes}}

    def _at_evaluation(self, step: int, params: dict[str, Tensor], history: dict) -> None:
        if history["step"][-1] != step:
            raise ValueError(f"the recorder is called at step {step} but the history's last "
                             f"evaluation is at step {history['step'][-1]}: call it after "
                             "the evaluation is recorded")
        acc = np.asarray(history["test_acc"], dtype=float)   # its last row: this step
        n_models = acc.shape[1]
        now: set[int] = set()
        before: set[int] = set()
        if step in REPORTED_STEPS or step == history["config"]["steps"]:
            now = set(range(n_models))
        for threshold in THRESHOLDS:
            first = (acc[-1] >= threshold) & ~(acc[:-1] >= threshold).any(axis=0)
            crossed = set(np.flatnonzero(first).tolist())
            now |= crossed
            before |= crossed
        self._add(history, step, params, now)
        self._add(history, self.last_step, self.prev, before)
