"""Chapter 3's stored runs' command line (lncourse.evidence.majority.runs): it trains with
the course's trainer, records the parameter snapshots as its caller, and stores the
result with its provenance; and today's trainer and recorder give the stored snapshots."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from lncourse.evidence.majority import snapshots as S
from lncourse.evidence.majority.runs import main, record
from lncourse.majority import task as majority
from lncourse.majority.config import MajorityConfig
from lncourse.majority.train import initial_model, train
from lncourse.results import RESULTS_DIR

def test_command_line_writes_a_result_with_provenance(tmp_path, monkeypatch):
    from lncourse import results

    monkeypatch.setattr(results, "git_commit", lambda: "c" * 40)   # as from a clean clone
    out, ckpt = tmp_path / "r.json", tmp_path / "r.ckpt"
    main(["--preset", "three_d", "--steps", "3", "--out", str(out), "--checkpoint", str(ckpt),
          "--quiet"])
    h = json.loads(out.read_text())
    assert h["step"][-1] == 3 and h["config"]["d_model"] == 3 and h["config"]["steps"] == 3
    assert sorted(set(h["variant"])) == ["layernorm", "no_projection", "no_projection_released"]
    p = h["provenance"]
    assert p["command"].startswith("python -m lncourse.evidence.majority.runs --preset three_d")
    assert p["torch"] == torch.__version__ and p["device"].startswith("cpu")
    assert len(p["git_commit"]) >= 40 and p["wall_seconds"] >= 0
    assert ckpt.exists()
    # the file holds what the trainer computed and, from this command, the snapshots
    again = record(dataclasses.replace(MajorityConfig.three_d(), steps=3), show_progress=False)
    for key in ("step", "train_loss", "test_acc", "query_angle", "trace", "final_params",
                "snapshots"):
        assert h[key] == again[key], key
    assert S.snapshot_steps(h) == [3]                     # the last step: every model
    with pytest.raises(ValueError, match="was started by"):  # same checkpoint, other command
        main(["--preset", "three_d", "--steps", "4", "--out", str(out), "--checkpoint",
              str(ckpt), "--quiet"])
    # a run stored as far as it got: the history of its checkpoint, the first start's
    # command and commit, and no claim about threads it did not see
    partial = tmp_path / "partial.json"
    main(["--preset", "three_d", "--steps", "3", "--out", str(partial), "--checkpoint",
          str(ckpt), "--export-partial"])
    q = json.loads(partial.read_text())
    assert q["step"] == h["step"] and q["test_acc"] == h["test_acc"]
    assert q["snapshots"] == h["snapshots"]          # the checkpoint holds them too
    assert q["provenance"]["command"] == p["command"]
    assert q["provenance"]["device"].endswith("(partial export; threads not recorded)")




def test_record_keeps_its_recorder():
    with pytest.raises(TypeError, match="its own on_evaluation"):
        record(MajorityConfig.three_d(), on_evaluation=print)


def test_a_run_started_under_the_trainers_name_resumes_here(tmp_path, monkeypatch):
    """A checkpoint started as `python -m lncourse.majority.train` (before the command
    left the trainer, issue 59) resumes under this command and keeps its first command."""
    from lncourse import results

    monkeypatch.setattr(results, "git_commit", lambda: "c" * 40)
    ckpt, out = tmp_path / "r.ckpt", tmp_path / "r.json"
    args = ["--preset", "three_d", "--steps", "2", "--out", str(out), "--checkpoint",
            str(ckpt), "--quiet"]
    then = "python -m lncourse.majority.train " + " ".join(args)
    results.run_started(ckpt, then)
    record(dataclasses.replace(MajorityConfig.three_d(), steps=2), checkpoint_path=ckpt,
           show_progress=False)
    main(args)
    assert json.loads(out.read_text())["provenance"]["command"] == then


STORED = RESULTS_DIR / "majority" / "data_seed1.json"
REPLAY_STEPS = 1000      # the first reported step, where every model is stored
TOLERANCE = 1e-3         # parameters and accuracies (the test's docstring says why)


@pytest.mark.slow
def test_todays_trainer_and_recorder_give_the_stored_snapshots():
    """The stored run's first model (LayerNorm, seed 11, data seed 1), trained again to step
    1,000 by today's trainer with today's recorder as its on_evaluation, gives its stored
    curve and the parameters stored at every snapshot step up to there, and none else:
    the trainer and its caller together still compute what the stored file holds (about
    a minute of one CPU thread). On the CPU that wrote the file (an AMD EPYC, one thread)
    they agree bit for bit; under the perturbed numerics (scripts/perturbed.sh) the
    parameters moved by 2.9e-5 and the accuracies by 8.0e-6: 1,000 steps of Adam amplify
    another CPU's last bits. The tolerance, 1e-3, is 35 times that and a hundredth of
    what a weight moves between two evaluations (0.10: a snapshot of the evaluation
    before, in place of its own, fails)."""
    stored = json.loads(STORED.read_text())
    config = MajorityConfig.from_dict(stored["config"])
    variant, seed, lr = config.models[0]
    one = dataclasses.replace(config, seeds=(seed,), variants=(variant,), steps=REPLAY_STEPS)
    assert one.models == [(variant, seed, lr)]
    replay = record(one, show_progress=False)
    n = len(replay["step"])
    assert replay["step"] == stored["step"][:n] and replay["step"][-1] == REPLAY_STEPS
    np.testing.assert_allclose(replay["test_acc"], np.asarray(stored["test_acc"])[:n, :1],
                               rtol=0, atol=TOLERANCE)
    shapes = {k: tuple(v.shape[1:]) for k, v in majority.stack_params(
        [initial_model(variant, seed, config)]).items()}
    had = [s for s in S.snapshot_steps(stored) if s <= REPLAY_STEPS
           and 0 in stored["snapshots"][str(s)]["models"]]
    assert S.snapshot_steps(replay) == had and REPLAY_STEPS in had
    for step in had:
        models, want = S.snapshot_params(stored, step, shapes)
        _, got = S.snapshot_params(replay, step, shapes)
        i = models.index(0)
        for k in shapes:
            np.testing.assert_allclose(got[k][0].numpy(), want[k][i].numpy(), rtol=0,
                                       atol=TOLERANCE, err_msg=f"{k} at step {step}")
