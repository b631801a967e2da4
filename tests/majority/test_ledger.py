"""Every number chapter 3 reports, recomputed from the stored runs and compared with its
ledger (results/majority/reported.json, see lncourse.evidence.claims and lncourse.evidence.majority.ledger);
every claim of its verdict holds; and the stored parameter snapshots give the stored
curves (lncourse.evidence.majority.snapshots).

What each test guards:
- test_every_reported_number_matches_the_ledger: every number the chapter prints or states
  (per model: accuracy at 1,000, 5,000 and the last step, final loss, steps to 80% and
  90%; every table cell; the effects and their intervals; the grid; the 3-d table; each
  claim's text). An edit of a stored curve that any of them depends on, or of the
  ledger, fails it.
- test_chapter3_conclusions_hold_for_the_stored_runs: each claim holds; the tests named
  ..._fails_on_contrary_... (and tests/test_stored_results.py's, for the claims that
  rest on the paper run's accuracy curves) edit the run or table a claim reads into a
  contrary world and require the claim to fail there: the grid runs, the query angles,
  the uniformity table (the ledger's), the 3-d run, the runs on other data.
- test_stored_snapshots_give_the_stored_accuracies (CI: the first model of each variant)
  and test_every_stored_snapshot_gives_the_stored_accuracies (slow: every model): the
  models behind the curve. Their stored parameters, evaluated again, give each reported
  accuracy and each crossing of 80% and 90%; an edit of one of those numbers in the
  curve, even with the ledger rewritten to match, fails them.
"""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch

from lncourse.evidence import claims as C
from lncourse.evidence.majority import snapshots as S
from lncourse.majority import task as majority
from lncourse.evidence.majority import ledger as L
from lncourse.majority.config import MajorityConfig
from stored_results_plugin import representative
from lncourse.results import RESULTS_DIR

LEDGER = RESULTS_DIR / "majority" / "reported.json"


@pytest.fixture(scope="module")
def runs():
    return L.load_runs()


@pytest.fixture(scope="module")
def recomputed(runs):
    return L.reported(**runs)


def test_every_reported_number_matches_the_ledger(recomputed):
    differences = C.compare(recomputed, C.load_ledger(LEDGER))
    assert not differences, ("chapter 3's numbers differ from results/majority/reported.json "
                             "(a stored run or the ledger was changed; if a new run is meant, "
                             "rewrite it: python -m lncourse.evidence.majority.ledger):\n  "
                             + "\n  ".join(differences[:20]))


def test_chapter3_conclusions_hold_for_the_stored_runs(runs, recomputed):
    """Every statement of chapter 3's conclusion is supported by the stored results; a
    statement may wait only for a run that is still going."""
    verdict = [v for k, v in C.flatten(recomputed["claims"]).items() if k.endswith("/holds")]
    assert len(L.grid_cells(runs["paper"], runs["grids"])) == 6
    assert False not in verdict, C.check_claims(list(recomputed["claims"].values()))
    pending = [k for k, c in recomputed["claims"].items() if c.holds is None]
    assert set(pending) <= {"data_seed", "grid_b500", "grid_b6000"}, pending


@pytest.mark.parametrize("edit", ["acc_at_1000", "final_loss", "late_curve", "grid"])
def test_an_edited_stored_number_changes_the_reported_numbers(runs, recomputed, edit):
    """The ledger's guard bites: the issue's edit (one LayerNorm model's accuracy at step
    1,000 set to 0.40) and edits like it change some reported number (recomputed here
    without the slow uniformity table, which they do not touch)."""
    paper, grids = copy.deepcopy(runs["paper"]), copy.deepcopy(runs["grids"])
    m = paper["variant"].index("layernorm")
    if edit == "acc_at_1000":
        paper["test_acc"][paper["step"].index(1000)][m] = 0.40
    elif edit == "final_loss":
        paper["train_loss"][-1][m] *= 1.5
    elif edit == "late_curve":      # a value no table shows, but steps to 90% reads
        i = next(i for i, a in enumerate(np.asarray(paper["test_acc"])[:, m]) if a >= 0.9)
        paper["test_acc"][i - 3][m] = 0.95
    else:
        grids[500]["test_acc"][1][0] = 0.99      # a grid model at 90% from its step 200
    cheap = {"paper": {"per_model": L._per_model(paper), **L._tables(paper)},
             "grid": L._grid(paper, grids)}
    ledger = C.load_ledger(LEDGER)
    before = C.compare({"paper": {"per_model": L._per_model(runs["paper"]),
                                  **L._tables(runs["paper"])},
                        "grid": L._grid(runs["paper"], runs["grids"])},
                       {k: v for k, v in ledger.items() if k.split("/")[0] in ("paper", "grid")})
    after = C.compare(cheap, {k: v for k, v in ledger.items()
                              if k.split("/")[0] in ("paper", "grid")})
    missing = {line for line in before}            # the uniformity entries, not recomputed
    assert set(after) - missing, f"editing {edit} changed no reported number"


def test_ledger_compare_reports_what_differs():
    ledger = C.flatten({"a": {"b": 1.0, "c": "x"}, "k": C.Claim("k", "text 1", True, {"v": 2})})
    assert C.compare({"a": {"b": 1.0, "c": "x"}, "k": C.Claim("k", "text 1", True, {"v": 2})},
                     ledger) == []
    assert C.compare({"a": {"b": 1.0 + 1e-12, "c": "x"},
                      "k": C.Claim("k", "text 1", True, {"v": 2})}, ledger) == []
    diff = C.compare({"a": {"b": 1.001, "c": "y"}, "k": C.Claim("k", "text 2", False, {})},
                     ledger)
    assert {d.split(":")[0] for d in diff} == {"a/b", "a/c", "k/text", "k/holds", "k/values/v"}
    assert C.compare({"a": {"b": np.float32(1.0), "c": "x"},
                      "k": C.Claim("k", "text 1", True, {"v": np.int64(2)})}, ledger) == []
    assert "True" not in C.markdown([C.Claim("k", "t", True)])
    assert "Not supported" in C.markdown([C.Claim("k", "t", False)])


SNAPSHOT_RUNS = sorted(p for p in (RESULTS_DIR / "majority").glob("*.json")
                       if '"snapshots"' in p.read_text())
# the paper run's file holds snapshots: without this, a change of its layout could turn
# the weight checks below into skips
assert any(p.stem == "paper_snapshots" for p in SNAPSHOT_RUNS), SNAPSHOT_RUNS


def _first_of_each_variant(run: dict) -> set[int]:
    """CI's deterministic subset: the first model (seed) of each variant."""
    return {run["variant"].index(v) for v in dict.fromkeys(run["variant"])}


FLIPS = 32    # argmax decisions a last-bit difference may flip per model and step


def check_snapshots(path, subset=None) -> int:
    """Evaluates the stored parameters of the models in ``subset`` (all when None) on the
    run's test set and checks them against the stored curve: at every snapshot step the
    accuracy to 1e-6; every model in the subset stored at the reported steps; each
    stored crossing of 80% and 90% a snapshot step whose parameters reach the threshold,
    the evaluation before one whose parameters do not. Returns the number of model
    evaluations."""
    from lncourse.majority.train import training_tensors, _evaluate, initial_model

    run = json.loads(path.read_text())
    config = MajorityConfig.from_dict(run["config"])
    data = training_tensors(config, torch.device("cpu"))
    one = majority.stack_params([initial_model(config.variants[0], config.seeds[0], config)])
    shapes = {k: tuple(v.shape[1:]) for k, v in one.items()}
    acc, steps = np.asarray(run["test_acc"]), run["step"]
    tokens = float(data["test_counts"].sum())     # every test token, one decision each
    subset = set(range(acc.shape[1])) if subset is None else set(subset)
    recomputed = {}
    for step in S.snapshot_steps(run):
        models, params = S.snapshot_params(run, step, shapes)
        rows = [i for i, m in enumerate(models) if m in subset]
        if not rows:
            continue
        picked = {k: v[rows] for k, v in params.items()}
        chosen = [models[i] for i in rows]
        got, _ = _evaluate(picked, tuple(run["variant"][m] for m in chosen), data)
        # Per-token accuracy is a count of argmax decisions over every test token (1,000,200
        # of them). A token whose two largest logits agree to the last float32 bits can flip
        # on another CPU: 2 tokens between two AMD EPYCs (issue 32: 0.7784196 against
        # 0.7784175), 9 between the stored run's EPYC and an AVX-512 Xeon. FLIPS allows a
        # few times the most seen, 1/tokens each, and nothing more, so an edited accuracy
        # (any change of 1e-4 and up) still fails. (Counting each model's near-tied tokens
        # from its logits would make this exact; not done yet.)
        np.testing.assert_allclose(got.numpy(), acc[steps.index(step), chosen],
                                   rtol=0, atol=FLIPS / tokens + 1e-9,
                                   err_msg=f"{path.name}, step {step}")
        recomputed.update({(step, m): float(a) for m, a in zip(chosen, got)})
    for step in S.REPORTED_STEPS + (config.steps,):
        if step <= steps[-1]:
            assert all((step, m) in recomputed for m in subset), step
    for threshold in S.THRESHOLDS:
        for m in sorted(subset):
            reached = np.flatnonzero(acc[:, m] >= threshold)
            if len(reached):
                i = reached[0]
                assert recomputed[(steps[i], m)] >= threshold, (threshold, m)
                assert recomputed[(steps[i - 1], m)] < threshold, (threshold, m)
    return len(recomputed)


@pytest.mark.recompute      # the accuracies, from the stored parameters
@pytest.mark.skipif(not SNAPSHOT_RUNS, reason="no stored run with parameter snapshots yet")
@pytest.mark.parametrize("path", representative(SNAPSHOT_RUNS, {"paper_snapshots"}, why=(
    "the paper's run is kept; the two data-seed runs take the same path and are 4 s of "
    "CPU, and the ledger test guards their reported numbers")))
def test_stored_snapshots_give_the_stored_accuracies(path):
    """CI's subset (about 10 s): the first model of each variant, at every step where its
    parameters are stored. Every variant's reported figures (accuracy at 1,000, 5,000 and
    the last step, steps to 80% and 90%) are recomputed for that model from its
    parameters; the slow test below does every model."""
    run = json.loads(path.read_text())
    assert check_snapshots(path, _first_of_each_variant(run)) >= 3 * len(set(run["variant"]))


@pytest.mark.slow
@pytest.mark.skipif(not SNAPSHOT_RUNS, reason="no stored run with parameter snapshots yet")
@pytest.mark.parametrize("path", SNAPSHOT_RUNS, ids=lambda p: p.stem)
def test_every_stored_snapshot_gives_the_stored_accuracies(path):
    """Every model at every stored step (the paper run: about 500 evaluations, 1-2 min)."""
    check_snapshots(path)


def test_data_seed_claim_pending_then_computed_and_can_fail(runs):
    """Pending without both other datasets or before step 5,000; with them, it holds when
    the released variant is slower on every dataset, and not when it is not on one."""
    from lncourse.evidence.majority.claims import data_seed_claim

    paper = runs["paper"]
    assert data_seed_claim(paper, {}).holds is None
    short = copy.deepcopy(paper)
    short["step"] = short["step"][:11]
    assert data_seed_claim(paper, {1: short, 2: paper}).holds is None
    same = data_seed_claim(paper, {1: paper, 2: paper})     # three copies of one dataset
    assert same.holds is True and "data seed 2" in same.text
    flipped = copy.deepcopy(paper)
    acc = np.asarray(flipped["test_acc"])
    cols = [m for m, v in enumerate(flipped["variant"]) if v == "no_projection_released"]
    acc[1:, cols] = np.clip(acc[1:, cols] + 0.3, 0, 1)
    flipped["test_acc"] = acc.tolist()
    assert data_seed_claim(paper, {1: paper, 2: flipped}).holds is False


def test_distance_from_the_paper_counts_the_papers_own_error(runs):
    """Issue 35, item 11: the difference from the paper's step-1,000 figure has the error of
    two 10-seed means and of reading the plot, not our mean's alone; its interval holds
    zero when the paper's figure is moved to our mean."""
    from lncourse.majority import stats as ST
    from lncourse.evidence.majority import claims as MC

    claim = MC.paper_distance_claim(runs["paper"])
    assert claim.holds is True
    for v, x in claim.values.items():
        assert x["se_diff"] == pytest.approx(np.sqrt(2 * x["se"] ** 2 + 0.005 ** 2 / 3), rel=1e-12)
        assert x["z_diff"] < x["z"] / np.sqrt(2) + 1e-12
        low, high = x["diff_ci"][1:]
        assert low > 0 and high > low
    paper = copy.deepcopy(ST.PAPER)
    moved = {v: claim.values[v]["ours"] for v in claim.values}
    try:
        for v, ours in moved.items():
            ST.PAPER["test_acc"][v][1000] = ours - 0.01
        assert MC.paper_distance_claim(runs["paper"]).holds is False
    finally:
        ST.PAPER.clear()
        ST.PAPER.update(paper)


def test_three_d_gap_has_a_paired_interval_and_fails_on_contrary_runs(runs, monkeypatch):
    """The 3-d claim (LayerNorm below the paper's no-projection) rests on a paired t
    interval over the 5 seeds; lift LayerNorm's final accuracies above the other's and it
    stops holding."""
    from lncourse.evidence.majority import claims as MC

    monkeypatch.setattr(MC, "_uniformity_claim",
                        lambda paper, stats=None: MC.Claim("uniformity", "", True))
    three_d = copy.deepcopy(runs["three_d"])
    claim = next(c for c in MC.claims(runs["paper"], runs["grids"], three_d)
                 if c.key == "three_d")
    mean, low, high = claim.values["difference"]
    assert claim.holds is True and low < mean < high < 0
    acc = np.asarray(three_d["test_acc"])
    cols = [m for m, v in enumerate(three_d["variant"]) if v == "layernorm"]
    acc[-1, cols] += 0.25
    three_d["test_acc"] = acc.tolist()
    after = next(c for c in MC.claims(runs["paper"], runs["grids"], three_d) if c.key == "three_d")
    assert after.holds is False and after.values["difference"][0] > 0


def _grid_shift(variants, shift):
    """An edit of a grid run: its models of ``variants`` ``shift`` higher at every
    evaluation after step 0 (clipped to [0, 1])."""
    def edit(run):
        acc = np.asarray(run["test_acc"])
        cols = [m for m, v in enumerate(run["variant"]) if v in variants]
        acc[1:, cols] = np.clip(acc[1:, cols] + shift, 0.0, 1.0)
        run["test_acc"] = acc.tolist()
    return edit


def _floor_from(variants, step, floor):
    """An edit of the paper run: its models of ``variants`` at least ``floor`` accurate
    from ``step`` on (the rest of each curve kept)."""
    def edit(run):
        acc, steps = np.asarray(run["test_acc"]), np.asarray(run["step"])
        cols = [m for m, v in enumerate(run["variant"]) if v in variants]
        cells = np.ix_(steps >= step, cols)
        acc[cells] = np.maximum(acc[cells], floor)
        run["test_acc"] = acc.tolist()
    return edit


def _last_angles(variant, to):
    """An edit of the paper run: ``variant``'s query angles at the last step set to
    ``to(angles, variants, columns)``, from the run's angles (steps x models), its
    models' variants and ``variant``'s columns."""
    def edit(run):
        angles = np.asarray(run["query_angle"])
        cols = [m for m, v in enumerate(run["variant"]) if v == variant]
        angles[-1, cols] = to(angles, run["variant"], cols)
        run["query_angle"] = angles.tolist()
    return edit


def _layernorm_end(angles, variants, _):
    return angles[-1, [m for m, v in enumerate(variants) if v == "layernorm"]].mean()


# key, what is edited ("grid500", "grid6000", "paper"), the edit
CONTRARY_RUNS = {
    # had the released scale crossed 80% as soon as the paper's (by step 1,100), though
    # below it on average over steps 0-5,000
    "scale_steps_to_80": ("scale_drives_speed", "paper", _floor_from(
        ("layernorm_released_scale", "no_projection_released"), 1100, 0.8)),
    # had the released scale reached 90% as soon as the paper's at batch 500
    "grid_b500_scale": ("grid_b500", "grid500", _grid_shift(
        ("layernorm_released_scale", "no_projection_released"), +0.3)),
    # had the projection reached 90% significantly sooner at batch 500
    "grid_b500_projection": ("grid_b500", "grid500", _grid_shift(
        ("layernorm", "layernorm_released_scale"), +0.3)),
    # had the released scale reached 90% as soon as the paper's at batch 6000
    "grid_b6000_scale": ("grid_b6000", "grid6000", _grid_shift(
        ("layernorm_released_scale", "no_projection_released"), +0.3)),
    # had the projection reached 90% significantly sooner at batch 6000
    "grid_b6000_projection": ("grid_b6000", "grid6000", _grid_shift(
        ("layernorm", "layernorm_released_scale"), +0.3)),
    # had LayerNorm's queries turned only part of the way: to 0.6 of their start
    "queries_layernorm_partway": ("queries_align_with_layernorm", "paper", _last_angles(
        "layernorm", lambda angles, _, cols: 0.6 * angles[0, cols])),
    # had the paper's no-projection queries turned towards 1 as LayerNorm's do
    "queries_others_turn": ("queries_align_with_layernorm", "paper", _last_angles(
        "no_projection", _layernorm_end)),
}


@pytest.mark.parametrize("case", CONTRARY_RUNS)
def test_grid_and_query_claims_fail_on_contrary_runs(runs, monkeypatch, case):
    """The sensitivity grid's claims (one per batch size), the queries' claim and the
    scale's effect on the steps to 80% hold for the stored runs and stop holding when the
    run they read is edited into a contrary world (the uniformity claim, slow and not
    read here, is stubbed)."""
    from lncourse.evidence.majority import claims as MC

    monkeypatch.setattr(MC, "_uniformity_claim",
                        lambda paper, stats=None: MC.Claim("uniformity", "", True))
    key, target, edit = CONTRARY_RUNS[case]
    paper, grids = runs["paper"], dict(runs["grids"])

    def holds():
        return next(c.holds for c in MC.claims(paper, grids, runs["three_d"])
                    if c.key == key)

    assert holds() is True
    if target == "paper":
        paper = {**paper, **copy.deepcopy({k: paper[k]
                                           for k in ("test_acc", "query_angle")})}
        edit(paper)
    else:
        batch = int(target.removeprefix("grid"))
        grids[batch] = {**grids[batch], "test_acc": copy.deepcopy(grids[batch]["test_acc"])}
        edit(grids[batch])
    assert holds() is False


def _stored_uniformity():
    """The uniformity table of chapter 3's ledger: variant -> (tv start, score std
    start, tv end, score std end), as :func:`uniformity_stats` gives it."""
    cols = ("tv_start", "score_std_start", "tv_end", "score_std_end")
    numbers = C.load_ledger(LEDGER)
    variants = dict.fromkeys(k.split("/")[2] for k in numbers
                             if k.startswith("paper/uniformity/"))
    return {v: np.array([numbers[f"paper/uniformity/{v}/{c}"] for c in cols])
            for v in variants}


@pytest.mark.parametrize("variant, column, value", [
    # had the paper's no-projection model ended as far from uniform as it started
    ("no_projection", 2, 0.15),
    # had LayerNorm started almost uniform, as the released scale does
    ("layernorm", 0, 0.005),
    # had the released variant started as far from uniform as the paper's scale
    ("no_projection_released", 0, 0.15),
    # had LayerNorm at the released scale stayed uniform as it learned
    ("layernorm_released_scale", 2, 0.005),
])
def test_uniformity_claim_fails_on_contrary_stats(runs, variant, column, value):
    """The uniformity claim holds for the stored table (the ledger's, which the ledger
    test recomputes from the stored runs) and fails when one variant's distance from
    uniform attention, at the start or the end, contradicts it."""
    from lncourse.evidence.majority import claims as MC

    stats = _stored_uniformity()
    assert set(stats) == set(runs["paper"]["variant"])
    assert MC._uniformity_claim(runs["paper"], stats).holds is True
    stats[variant] = stats[variant].copy()
    stats[variant][column] = value
    assert MC._uniformity_claim(runs["paper"], stats).holds is False
