"""Every stored result (results/**/*.json) must still come out of today's code: a test
recomputes a prefix of each majority run (the first training steps, the first evaluation)
and compares. And results/README.md lists every stored file with the command that writes
it. The numbers chapter 3 reports are guarded in tests/majority/test_ledger.py."""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np
import pytest

from lncourse.results import RESULTS_DIR
from stored_results_plugin import representative

# not training histories: the benchmark and chapter 3's ledger
MAJORITY = sorted(p for p in (RESULTS_DIR / "majority").glob("*.json")
                  if p.stem not in ("throughput", "reported"))


def _load(path):
    result = json.loads(path.read_text())
    for key in ("command", "git_commit", "device", "torch", "wall_seconds"):
        assert key in result["provenance"], f"{path.name}: provenance lacks {key}"
    return result


def test_readme_lists_every_stored_result():
    readme = (RESULTS_DIR / "README.md").read_text()
    listed = {name for name in re.findall(r"`([\w/.-]+\.json)`", readme)
              if not name.startswith("results/checkpoints/")}   # where a run resumes from
    stored = {str(p.relative_to(RESULTS_DIR)) for p in RESULTS_DIR.glob("*/*.json")
              if p.parent.name != "checkpoints"}      # a resumable run's bookkeeping
    assert stored <= listed, f"not in results/README.md: {sorted(stored - listed)}"
    assert listed <= stored, f"listed but missing: {sorted(listed - stored)}"


@pytest.mark.replay
@pytest.mark.parametrize("path", representative(MAJORITY, {"grid_b500", "three_d"}, why=(
    "every run trains through the same loop: the smallest batch and the 3-D task are "
    "kept; the other four runs are about 17 s of CPU natively and more in the perturbed "
    "pass, and chapter 3's ledger test guards their reported numbers")))
def test_stored_majority_run_replays(path):
    """The first seed's models, retrained for the first steps, give the stored losses."""
    from lncourse.majority.config import MajorityConfig
    from lncourse.majority.train import TRACE_STEPS, train

    stored = _load(path)
    config = MajorityConfig.from_dict(stored["config"])
    # a run still going is stored as far as it got (describe() labels it INCOMPLETE)
    assert 0 <= stored["step"][-1] <= config.steps
    seed = config.seeds[0]
    prefix = dataclasses.replace(config, seeds=(seed,), steps=TRACE_STEPS, eval_every=TRACE_STEPS)
    replay = train(prefix, show_progress=False)
    cols = [m for m, s in enumerate(stored["seed"]) if s == seed]
    assert [stored["variant"][m] for m in cols] == replay["variant"]
    assert [stored["lr"][m] for m in cols] == replay["lr"]
    # the losses of the first steps (as many as the stored run has taken)
    n = len(stored["trace"]["train_loss"])
    assert n == min(TRACE_STEPS, stored["step"][-1])
    if n:
        got = np.asarray(replay["trace"]["train_loss"])[:n]
        want = np.asarray(stored["trace"]["train_loss"])[:, cols]
        np.testing.assert_allclose(got, want, rtol=2e-4)
    for key in ("train_loss", "test_acc", "query_angle"):             # the step-0 evaluation
        np.testing.assert_allclose(replay[key][0], np.asarray(stored[key][0])[cols], rtol=2e-4)


@pytest.mark.replay
@pytest.mark.skipif(not (RESULTS_DIR / "majority" / "throughput.json").exists(),
                    reason="no stored benchmark")
def test_stored_benchmark_losses_replay():
    """The benchmark's fused losses for the first seed come out of today's code (its
    timings cannot be replayed; its claim that the methods agree can)."""
    from lncourse.evidence.majority.bench import compare

    stored = _load(RESULTS_DIR / "majority" / "throughput.json")
    out = compare(n_seeds=1, variants=tuple(stored["variants"]),
                  batch_size=stored["batch_size"], steps=stored["steps"], rounds=1,
                  methods=("fused",))
    n_seeds = stored["n_seeds"]
    first_seed = stored["last_loss"]["fused"][::n_seeds]
    np.testing.assert_allclose(out["last_loss"]["fused"], first_seed, rtol=2e-4)
    assert max(stored["max_loss_diff_to_fused"].values()) < 1e-4


# chapter 3's stored runs (the paper run is paper_snapshots.json; they are committed, so
# a missing one fails rather than skips); that its conclusions hold for them, and every
# number it reports, is tested in tests/majority/test_ledger.py
CHAPTER3 = ("paper_snapshots", "grid_b500", "grid_b6000", "three_d")


@pytest.mark.parametrize("key, variants, shift", [
    # had the projection sped learning up, the no-projection variants would trail
    ("projection_no_speedup", ("no_projection", "no_projection_released"), -0.1),
    # had the released variant kept up with LayerNorm
    ("released_slower", ("no_projection_released",), +0.3),
    # had the projection been free: the no-projection variants a little worse
    ("projection_costs_speed", ("no_projection", "no_projection_released"), -0.03),
    # had LayerNorm at the released scale kept up with the released variant
    ("released_scale_layernorm_slower", ("layernorm_released_scale",), +0.05),
    # had our step-1,000 accuracy been the paper's
    ("step_1000_above_paper", ("layernorm", "no_projection_released"), -0.04),
    # had our curves been 0.1 above the paper's at every reference step
    ("reproduces_paper", ("layernorm", "no_projection_released"), +0.1),
    # had the released scale learned as fast as the paper's (both of its variants)
    ("scale_drives_speed", ("layernorm_released_scale", "no_projection_released"), +0.13),
    # had the projection sped learning up at √d alone: the no-projection model trails
    ("projection_at_each_scale", ("no_projection",), -0.1),
    # had it sped learning up at 1/√d alone: the released variant trails
    ("projection_at_each_scale", ("no_projection_released",), -0.1),
    # had the projection cost half the scale's effect: a cost, but not a negligible one
    ("negligible_margin", ("no_projection", "no_projection_released"), +0.05),
    # had the projection cost nothing: within the margin, but no cost to call small
    ("negligible_margin", ("no_projection", "no_projection_released"), -0.012),
    # had x/σ(x−μ) learned 0.05 slower than √d·x/‖x‖
    ("other_reading_same", ("no_projection_sigma",), -0.05),
    # had a learned gain closed the whole gap to LayerNorm
    ("interventions_partial", ("no_projection_released_gain",), +0.06),
    # had W_V × 8 at initialisation gained nothing
    ("interventions_partial", ("no_projection_released_value_scaled",), -0.05),
])
def test_chapter3_conclusions_fail_on_contrary_evidence(key, variants, shift, monkeypatch):
    """The claims are computed, not asserted: shift some variants' accuracy curves and the
    statement that rests on them stops holding."""
    from lncourse.evidence.majority import claims as MC

    monkeypatch.setattr(MC, "_uniformity_claim", lambda paper, stats=None: MC.Claim("uniformity", "", True))
    paper, grid_b500, grid_b6000, three_d = (_load(RESULTS_DIR / "majority" / f"{n}.json")
                                             for n in CHAPTER3)
    acc = np.asarray(paper["test_acc"])
    cols = [m for m, v in enumerate(paper["variant"]) if v in variants]
    acc[1:, cols] = np.clip(acc[1:, cols] + shift, 0.0, 1.0)
    before = {c.key: c.holds for c in MC.claims(paper, {500: grid_b500, 6000: grid_b6000}, three_d)}
    assert before[key] is True
    paper["test_acc"] = acc.tolist()
    after = {c.key: c.holds for c in MC.claims(paper, {500: grid_b500, 6000: grid_b6000}, three_d)}
    assert after[key] is False


def test_the_replication_claim_states_its_worst_gap_unrounded():
    """"to within X" is the largest gap from the paper's reference accuracies rounded up
    at the third decimal, a bound never narrower than measured: at two decimals it read
    0.04 for a gap of 0.0427 (issue 62, item 9)."""
    import re as _re

    from lncourse.majority import stats as ST
    from lncourse.evidence.majority import claims as MC

    paper, grid_b500, grid_b6000, three_d = (_load(RESULTS_DIR / "majority" / f"{n}.json")
                                             for n in CHAPTER3)
    claim = next(c for c in MC.claims(paper, {500: grid_b500, 6000: grid_b6000}, three_d)
                 if c.key == "reproduces_paper")
    gaps = []
    for variant in ("layernorm", "no_projection_released"):     # the paper's two curves
        refs = ST.PAPER["test_acc"][variant]
        c = ST.history_arrays(paper, variant)
        gaps += [abs(ST.value_at(c["step"], c["test_acc"], s).mean() - ref)
                 for s, ref in refs.items() if s in c["step"]]
    stated = float(_re.search(r"to within (\d\.\d+)", claim.text).group(1))
    assert max(gaps) <= stated < max(gaps) + 1e-3, (stated, max(gaps))
    assert claim.values["worst_gap"] == max(gaps) and claim.values["bound"] == stated
