"""The stored majority runs' parameter snapshots (lncourse.evidence.majority.snapshots,
recorded by the runs' command line lncourse.evidence.majority.runs through the trainer's
on_evaluation): they hold the models behind the reported numbers, so that a test can
recompute those numbers; and recording them changes nothing the trainer computes."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from lncourse.evidence.majority import runs as RUNS, snapshots as S
from lncourse.majority import task as majority, train as T
from lncourse.majority.config import MajorityConfig

SMALL = MajorityConfig(n_samples=1500, seq_len=20, n_classes=6, min_margin=2, d_model=4,
                       batch_size=128, steps=24, eval_every=4, seeds=(11, 123),
                       variants=("layernorm", "no_projection_released"))


def test_encode_round_trips_float32_and_checks_the_shape():
    t = torch.randn(3, 4, 5)
    assert torch.equal(S.decode(S.encode(t), (3, 4, 5)), t)
    with pytest.raises(ValueError, match="cannot have shape"):
        S.decode(S.encode(t), (3, 4, 4))


@pytest.fixture(scope="module")
def run():
    """SMALL trained with thresholds that its models cross (its accuracies are low), and
    step 8 reported."""
    plain = T.train(SMALL, show_progress=False)
    acc = np.asarray(plain["test_acc"])
    # thresholds each crossed by some model at some evaluation after the first
    thresholds = (float(np.quantile(acc[1:], 0.3)), float(np.quantile(acc[1:], 0.7)))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(S, "THRESHOLDS", thresholds)
        mp.setattr(S, "REPORTED_STEPS", (8,))
        history = RUNS.record(SMALL, show_progress=False)
    return plain, history, thresholds


def test_snapshots_do_not_change_what_is_trained(run):
    plain, history, _ = run
    for key in ("train_loss", "test_acc", "query_angle", "trace", "final_params"):
        assert history[key] == plain[key], key
    # the trainer records nothing itself: the snapshots are its caller's
    assert "snapshots" not in plain and S.snapshot_steps(history)
    assert list(history) == [*(k for k in plain if k != "final_params" and k != "seconds"),
                             "snapshots", "final_params", "seconds"]   # a stored file's order


def test_snapshots_hold_the_reported_steps_and_both_sides_of_each_crossing(run):
    _, history, thresholds = run
    acc, steps = np.asarray(history["test_acc"]), history["step"]
    n_models = acc.shape[1]
    stored = {s: set(history["snapshots"][str(s)]["models"]) for s in S.snapshot_steps(history)}
    assert stored[8] == stored[SMALL.steps] == set(range(n_models))
    crossings = 0
    for threshold in thresholds:
        for m in range(n_models):
            reached = np.flatnonzero(acc[:, m] >= threshold)
            if len(reached) and reached[0] > 0:
                i = reached[0]
                assert m in stored[steps[i]] and m in stored[steps[i - 1]], (threshold, m)
                crossings += 1
    assert crossings >= 2


def test_snapshot_parameters_give_the_stored_accuracies(run):
    """Evaluating the stored parameters gives the curve's value at that step: the
    snapshot is of the right model at the right step (not the one before or after)."""
    _, history, _ = run
    data = T.training_tensors(SMALL, torch.device("cpu"))
    init = majority.stack_params([T.initial_model("layernorm", 11, SMALL)])
    shapes = {k: tuple(v.shape[1:]) for k, v in init.items()}
    acc = np.asarray(history["test_acc"])
    for step in S.snapshot_steps(history):
        models, params = S.snapshot_params(history, step, shapes)
        variants = tuple(history["variant"][m] for m in models)
        got, _ = T._evaluate(params, variants, data)
        want = acc[history["step"].index(step), models]
        np.testing.assert_allclose(got.numpy(), want, atol=1e-6)
        # and they differ from the neighbouring evaluation's (else the test could not tell)
        i = history["step"].index(step)
        if 0 < i:
            assert not np.allclose(acc[i - 1, models], want)


def test_an_interrupted_run_keeps_its_snapshots(tmp_path, run):
    """Interrupted after any evaluation and resumed, the run stores the same snapshots:
    among those resumes, one just before a crossing, whose evaluation before is the one
    the resumed recorder started from (it must remember its weights)."""
    _, history, thresholds = run
    steps = history["step"]
    acc = np.asarray(history["test_acc"])
    crossing_steps = {steps[i] for t in thresholds for m in range(acc.shape[1])
                      for i in np.flatnonzero(acc[:, m] >= t)[:1] if i > 0}
    assert crossing_steps - {steps[1]}, "no crossing right after a resume's step"
    for saved in steps[:-1]:
        path = tmp_path / f"run{saved}.ckpt"

        def crash(step):
            if step == saved + 1:
                raise KeyboardInterrupt

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(S, "THRESHOLDS", thresholds)
            mp.setattr(S, "REPORTED_STEPS", (8,))
            with pytest.raises(KeyboardInterrupt):
                RUNS.record(SMALL, checkpoint_path=path, show_progress=False, _on_step=crash)
            resumed = RUNS.record(SMALL, checkpoint_path=path, show_progress=False)
        assert resumed["snapshots"] == history["snapshots"], saved
        assert resumed["test_acc"] == history["test_acc"], saved


class _Stop(Exception):
    pass


def _stop_at(n):
    def on_step(step):
        if step == n:
            raise _Stop
    return on_step


def test_a_recorder_reused_for_a_resumed_run_starts_where_it_resumes(tmp_path, run):
    """A run is known by its history: a recorder that saw a shorter run first (its last
    step 4, before the resumed run's 12) still takes the resumed run's first call for
    where training starts, and stores the uninterrupted run's snapshots. Counting steps
    instead took step 12 for an evaluation and stored the other run's weights there."""
    _, history, thresholds = run
    path = tmp_path / "run.ckpt"
    other = dataclasses.replace(SMALL, steps=4, seeds=(5, 6))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(S, "THRESHOLDS", thresholds)
        mp.setattr(S, "REPORTED_STEPS", (8,))
        with pytest.raises(_Stop):
            RUNS.record(SMALL, checkpoint_path=path, show_progress=False,
                        _on_step=_stop_at(13))
        recorder = S.SnapshotRecorder()
        T.train(other, show_progress=False, on_evaluation=recorder)
        resumed = T.train(SMALL, checkpoint_path=path, show_progress=False,
                          on_evaluation=recorder)
    assert resumed["step"] == history["step"]
    assert resumed["snapshots"] == history["snapshots"]


def test_a_checkpoint_written_without_snapshots_is_refused(tmp_path):
    """A run the plain trainer began and checkpointed has no snapshots before its resume
    point: recording it from there would store a run missing its earlier snapshots, so
    the recorder stops with a clear error."""
    path = tmp_path / "plain.ckpt"
    with pytest.raises(_Stop):
        T.train(SMALL, checkpoint_path=path, show_progress=False, _on_step=_stop_at(13))
    with pytest.raises(ValueError, match="written without snapshots"):
        RUNS.record(SMALL, checkpoint_path=path, show_progress=False)


def test_data_seed_presets_are_the_paper_settings_on_other_data():
    paper = MajorityConfig.paper()
    for k in (1, 2):
        c = MajorityConfig.other_data(k)
        assert c.data_seed == k and c.seeds == paper.seeds[:5]
        assert c.variants == ("layernorm", "no_projection_released")
        assert dataclasses.replace(c, data_seed=0, seeds=paper.seeds,
                                   variants=paper.variants) == paper
    assert RUNS.PRESETS["data_seed2"]() == MajorityConfig.other_data(2)
