"""Chapter 5's per-head models retrained with the recipe that learns
(lncourse.evidence.norms.retrained), and attention's contribution in the stored models
(lncourse.evidence.norms.context_use): numbers recompute from the stored weights, and the claims
fail on contrary numbers."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch

from lncourse.evidence.norms import context_use as C
from lncourse.evidence.norms import retrained as R
from lncourse.evidence.norms import retrained_models as M
from lncourse.evidence.norms import trained
from lncourse.results import RESULTS_DIR
from lncourse.tolerance import TOKEN_LOSS_ATOL

from .test_trained import _assert_in_band

STORED = RESULTS_DIR / "norms" / "retrained_heads_cpu.json"
WIDE = RESULTS_DIR / "norms" / "retrained_heads_wide_cpu.json"
# the wide run's models measured again: one in every run of the tests (QK-norm, whose
# count is the lens's point; 6 s), the other eleven in the slow run
WIDE_FAST = [("QK-norm", 0)]
WIDE_SLOW = [(v, i) for v in trained.VARIANTS for i in range(3) if (v, i) not in WIDE_FAST]
CONTEXT = RESULTS_DIR / "norms" / "context_use.json"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = tmp_path_factory.mktemp("results")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(R, "RESULTS_DIR", folder)
        path = R.main(["--preset", "tiny", "--quiet", "--allow-dirty"])
    return json.loads(path.read_text()), torch.load(path.with_suffix(".pt"),
                                                     weights_only=True)


def _recomputes(result, weights, exact_counts: bool = True, which=None):
    """Each variant's first model (``which``: (variant, seed index) pairs instead)
    measured again from the stored weights, and the report."""
    cfg = M.HeadsRecipeConfig.from_dict(result["config"])
    contexts = torch.tensor(result["contexts"])
    which = which or [(variant, 0) for variant in result["models"]]
    for variant, index in which:
        run = result["models"][variant][index]
        model = M.load_model(result, weights, variant, run["seed"])
        again = R.measure(model, cfg, run["seed"])
        assert again["test_loss"] == pytest.approx(run["test_loss"], abs=1e-5)
        # float32 per-token losses: the policy's tolerance for them (lncourse.tolerance;
        # the perturbed pass moved one of the wide run's by 3.3e-5); the page's means are
        # guarded by the ledger
        np.testing.assert_allclose(again["positions"]["model"], run["positions"]["model"],
                                   atol=TOKEN_LOSS_ATOL, rtol=0)
        if "residual" in run:
            _assert_residual(again["residual"], run["residual"])
        if exact_counts:
            assert trained.head_counts(model, contexts) == run["trained"]
        else:   # another CPU's kernels: each count within the band float32 allows
            _assert_in_band(model, contexts, run["trained"], f"{variant}, trained")
    assert R.report(result) == result["report"]


def test_tiny_run_recomputes(tiny):
    _recomputes(*tiny)
    assert set(tiny[0]["models"]) == set(trained.VARIANTS)


def test_residual_parts_tell_a_saturated_dyt_from_a_working_norm():
    """A constant vector of 20 per coordinate added to the last block's output, about
    700 times the token part. After LayerNorm (or RMSNorm) the token part shrinks
    in proportion, as a linear map of h / |h| would shrink it; after DyT it all but
    vanishes (|alpha h| = 10, tanh' about 1e-8): every position leaves alike."""
    cfg = M.PRESETS["tiny"]()
    contexts = torch.randint(0, 20, (3, 32), generator=torch.Generator().manual_seed(0))
    signs = torch.sign(torch.randn(cfg.d_model, generator=torch.Generator().manual_seed(1)))
    for variant in ("DyT", "Pre-LN", "RMSNorm"):
        model = M.build(cfg, 20, variant, 0)
        plain = M.residual_parts(model, contexts)
        # the decomposition: constant and token parts are orthogonal over the tokens
        with torch.no_grad():
            _, _, cache = model(contexts, return_cache=True)
        h = cache[f"blocks.{cfg.n_layers - 1}.resid_post"].double()
        assert plain["constant_rms"] ** 2 + plain["token_rms"] ** 2 == pytest.approx(
            float(h.pow(2).mean()), rel=1e-9)
        with torch.no_grad():
            model.blocks[-1].mlp[-1].bias += 20 * signs
        pushed = M.residual_parts(model, contexts)
        linear = pushed["token_rms"] / pushed["constant_rms"]
        kept = pushed["out_token_rms"] / plain["out_token_rms"]
        assert linear < 2e-3
        assert pushed["token_rms"] == pytest.approx(plain["token_rms"], rel=1e-4)
        if variant == "DyT":
            assert plain["saturated"] < 0.01 and pushed["saturated"] == 1.0
            assert kept < 0.01 * linear
        else:
            assert plain["saturated"] is None is pushed["saturated"]
            assert 0.3 * linear < kept < 3 * linear


def test_residual_claims_hold_and_fail_on_contrary_numbers():
    """The statements on why DyT stays at the unigram level, on made-up parts like the
    wide_cpu sweeps' (a saturated DyT, a Pre-LN that keeps its tokens apart); moving one
    seed's number across a threshold fails exactly its statement."""
    dyt = {"constant_rms": 31.6, "token_rms": 0.13, "out_token_rms": 1.8e-7,
           "saturated": 1.0}
    ln = {"constant_rms": 0.32, "token_rms": 0.56, "out_token_rms": 1.09,
          "saturated": None}
    result = {"models": {"DyT": [{"residual": dict(dyt)} for _ in range(3)],
                         "Pre-LN": [{"residual": dict(ln)} for _ in range(3)],
                         "RMSNorm": [{}]}}      # not measured: left out
    holds = R.residual_claims(result)
    assert holds == {"DyT saturates": True, "DyT's constant dominates": True,
                     "DyT predicts alike everywhere": True,
                     "Pre-LN keeps the tokens apart": True}
    for variant, key, value, statement in [
            ("DyT", "saturated", 0.98, "DyT saturates"),
            ("DyT", "constant_rms", 1.2, "DyT's constant dominates"),
            ("DyT", "out_token_rms", 2e-3, "DyT predicts alike everywhere"),
            ("Pre-LN", "out_token_rms", 0.05, "Pre-LN keeps the tokens apart")]:
        contrary = copy.deepcopy(result)
        contrary["models"][variant][2]["residual"][key] = value
        assert R.residual_claims(contrary) == {**holds, statement: False}, statement


def test_claims_fail_on_a_model_at_the_bigram_level(tiny):
    result, _ = tiny
    good = copy.deepcopy(result)
    bigram = good["references"]["bigram"]
    for runs in good["models"].values():
        for r in runs:
            r["test_loss"] = bigram - 0.5
            r["positions"]["model"] = (np.asarray(r["positions"]["bigram"]) - 0.5).tolist()
    assert all(R.claims(good).values())
    flat = copy.deepcopy(good)
    for runs in flat["models"].values():
        for r in runs:
            r["test_loss"] = bigram - 0.02
            r["positions"]["model"] = r["positions"]["bigram"]
    assert not any(R.claims(flat).values())


@pytest.mark.replay
def test_stored_run_recomputes_from_its_weights():
    """The test loss is a float32 mean over 4 x 16 x 256 tokens after 4 layers: another
    CPU's summation order moves it by a few 1e-7 relative, so 1e-5 nats holds anywhere and
    an edit in the reported third decimal fails. Each head's count is a discrete hull
    decision per key: it must lie in the band float32 rounding allows (DyT's tanh packs
    keys against its square's edges, so about half its counts have a band wider than 0)."""
    if not STORED.exists():
        pytest.skip("the cpu run is not stored yet")
    result = json.loads(STORED.read_text())
    _recomputes(result, torch.load(STORED.with_suffix(".pt"), weights_only=True),
                exact_counts=False)


def test_stored_dyt_run_is_a_null_result_and_the_claims_bite():
    """What chapter 5's replication page says of the DyT run trained with the recipe: at
    the unigram level (within 0.05 nats of it), far above the bigram, using no context;
    each statement fails on a model that learned."""
    if not STORED.exists():
        pytest.skip("the cpu run is not stored yet")
    result = json.loads(STORED.read_text())
    refs = result["references"]
    assert R.claims(result) == {"DyT learned": False, "DyT below bigram": False,
                                "DyT uses context": False}
    assert all(abs(r["test_loss"] - refs["unigram"]) < 0.05
               for r in result["models"]["DyT"])
    learned = copy.deepcopy(result)
    for r in learned["models"]["DyT"]:
        r["test_loss"] = refs["bigram"] - 0.4
        r["positions"]["model"] = (np.asarray(r["positions"]["bigram"]) - 0.4).tolist()
    assert all(R.claims(learned).values())
    assert not any(abs(r["test_loss"] - refs["unigram"]) < 0.05
                   for r in learned["models"]["DyT"])


def test_context_use_recomputes_and_judges():
    if not CONTEXT.exists():
        pytest.skip("context_use is not stored yet")
    result = json.loads(CONTEXT.read_text())
    heads = json.loads((RESULTS_DIR / "norms" / "trained_heads.json").read_text())
    hcfg = trained.HeadsConfig(**{k: tuple(v) if isinstance(v, list) else v
                                  for k, v in heads["config"].items() if k != "vocab_size"})
    tok, train_ids, test_ids = trained.token_streams(hcfg)
    row = result["trained_heads"]["DyT"][0]
    again = C.measure_model(trained.load_model(heads, "DyT", row["seed"]), train_ids,
                            test_ids, hcfg.block_size, tok.vocab_size, row["seed"],
                            hcfg.block_size // 2)
    np.testing.assert_allclose(again["late"]["gain"], row["late"]["gain"], atol=1e-4)
    assert C.verdicts(result) == result["verdicts"]
    # an edited loss moves the verdict: DyT at the unigram level "learned" is refused
    edited = copy.deepcopy(result)
    for r in edited["trained_heads"]["DyT"]:
        r["test_loss"] = result["references"]["bigram"] - 0.4
        r["late"]["gain"] = [0.3, 0.2, 0.4]
    v = C.verdicts(edited)["trained_heads/DyT"]
    assert v["learned"] and v["uses_context"]
    assert not result["verdicts"]["trained_heads/DyT"]["learned"]


def test_context_use_claims_hold_and_fail_on_contrary_numbers():
    if not CONTEXT.exists():
        pytest.skip("context_use is not stored yet")
    result = json.loads(CONTEXT.read_text())
    claims = C.claims(result)
    assert all(claims.values()), claims
    edited = copy.deepcopy(result)
    edited["periln"]["Peri-LN"][-1]["late"]["gain"] = [0.3, 0.25, 0.35]   # lr 0.3 learned
    edited["trained_heads"]["QK-norm"][0]["test_loss"] = 2.1
    edited["trained_heads"]["QK-norm"][1]["test_loss"] = 2.1
    edited["trained_heads"]["QK-norm"][2]["test_loss"] = 2.1
    edited["trained_heads"]["DyT"][0]["test_loss"] = 2.5
    edited["logits"]["Pre-LN"][-1]["below_bigram"] = [0.1, 0.05, 0.15]
    edited["logits"]["QK-norm"][6]["late"]["gain"] = [0.1, 0.05, 0.15]
    assert not any(C.claims(edited).values()), C.claims(edited)


@pytest.mark.replay
def test_stored_wide_run_recomputes_from_its_weights():
    """One of the wide run's twelve models measured again from the stored weights, in
    the tolerances of the cpu run's test above; the report from the stored numbers."""
    result = json.loads(WIDE.read_text())
    _recomputes(result, torch.load(WIDE.with_suffix(".pt"), weights_only=True),
                exact_counts=False, which=WIDE_FAST)


@pytest.mark.slow
@pytest.mark.replay
def test_stored_wide_run_other_models_recompute():
    result = json.loads(WIDE.read_text())
    _recomputes(result, torch.load(WIDE.with_suffix(".pt"), weights_only=True),
                exact_counts=False, which=WIDE_SLOW)


def test_stored_wide_run_statements():
    """What the four norms trained with the recipe at d = 32 show: Pre-LN, RMSNorm and
    QK-norm learned (0.3 nats below the bigram table on every seed) and use their
    context; DyT did neither, and the reason holds on every seed (its residual stream's
    constant saturates the final DyT). Each statement fails on contrary numbers in the
    tests above."""
    result = json.loads(WIDE.read_text())
    learned = {"Pre-LN", "RMSNorm", "QK-norm"}
    assert R.claims(result) == {f"{v} {what}": v in learned for v in trained.VARIANTS
                                for what in ("learned", "below bigram", "uses context")}
    assert R.residual_claims(result) == {
        **{f"{v} keeps the tokens apart": True for v in learned},
        "DyT saturates": True, "DyT's constant dominates": True,
        "DyT predicts alike everywhere": True}


DYT = RESULTS_DIR / "norms" / "retrained_heads_dyt_cpu.json"


def _assert_residual(again: dict, stored: dict) -> None:
    """float64 sums of float32 activations; the saturated share counts decisions."""
    for key, value in stored.items():
        if value is None:                                       # not a DyT model
            assert again[key] is None
        elif key == "saturated":
            assert again[key] == pytest.approx(value, abs=1e-3)
        else:
            assert again[key] == pytest.approx(value, rel=1e-4, abs=1e-9)


@pytest.mark.replay
def test_stored_dyt_recipes_residual_recomputes_from_the_weights():
    """In every run of the tests, what reaches DyT-LLaMA seed 0's final norm, from its
    weights (a model with the embedding scalar, no biases and no beta loads and runs);
    the whole measurement of all six models is the slow test below."""
    result = json.loads(DYT.read_text())
    weights = torch.load(DYT.with_suffix(".pt"), weights_only=True)
    run = result["models"]["DyT-LLaMA"][0]
    model = M.load_model(result, weights, "DyT-LLaMA", run["seed"])
    _assert_residual(M.residual_parts(model, torch.tensor(result["contexts"])),
                     run["residual"])


@pytest.mark.slow
@pytest.mark.replay
def test_stored_dyt_recipes_recompute_from_their_weights():
    result = json.loads(DYT.read_text())
    _recomputes(result, torch.load(DYT.with_suffix(".pt"), weights_only=True),
                exact_counts=False,
                which=[(v, i) for v in M.DYT_RECIPES for i in range(3)])


def test_the_dyt_recipes_differ_from_the_wide_runs_dyt_by_what_the_page_says():
    """The page reads DyT-scaled against the wide run's DyT as one change, the scalar on
    the embeddings: the two runs share every setting but the variants, and the
    variants differ by exactly the switches the page names."""
    dyt, wide = (json.loads(p.read_text()) for p in (DYT, WIDE))
    assert {k: v for k, v in dyt["config"].items() if k != "variants"} == \
        {k: v for k, v in wide["config"].items() if k != "variants"}
    assert dyt["variants"]["DyT-scaled"] == {**wide["variants"]["DyT"], "emb_scale": 50.0}
    assert dyt["variants"]["DyT-LLaMA"] == {**dyt["variants"]["DyT-scaled"],
                                            "bias": False, "dyt_beta": False}
    assert dyt["references"] == wide["references"]


def test_stored_dyt_recipes_statements():
    """What the page says of DyT's two recipes: the scalar alone lifts the course's DyT
    below the bigram table on every seed (where the wide run's DyT, without it, sat
    within 0.01 nats of the unigram table), and it uses its context, but not 0.3 nats
    below on every seed; the whole LLaMA recipe did neither, and its stream's constant
    grew past 100 on every seed. Most keys stay unselectable in both. The claims
    themselves fail on contrary numbers in the tests above."""
    result, wide = (json.loads(p.read_text()) for p in (DYT, WIDE))
    refs = result["references"]
    assert R.claims(result) == {
        "DyT-scaled learned": False, "DyT-scaled below bigram": True,
        "DyT-scaled uses context": True, "DyT-LLaMA learned": False,
        "DyT-LLaMA below bigram": False, "DyT-LLaMA uses context": False}
    assert all(r["test_loss"] < refs["bigram"] for r in result["models"]["DyT-scaled"])
    assert all(abs(r["test_loss"] - refs["unigram"]) < 0.01 for r in wide["models"]["DyT"])
    assert all(r["residual"]["constant_rms"] > 100 for r in result["models"]["DyT-LLaMA"])
    rep = R.report(result)
    assert all(rep[v]["across_seeds"]["unselectable_trained"][1] > 90 for v in M.DYT_RECIPES)


DYT_LONG = RESULTS_DIR / "norms" / "retrained_heads_dyt_long_cpu.json"


@pytest.mark.slow
@pytest.mark.replay
def test_stored_long_dyt_run_recomputes_from_its_weights():
    result = json.loads(DYT_LONG.read_text())
    _recomputes(result, torch.load(DYT_LONG.with_suffix(".pt"), weights_only=True),
                exact_counts=False, which=[("DyT-scaled", i) for i in range(3)])


def test_stored_long_dyt_run_statements():
    """DyT-scaled for 4,000 steps: the same sweep (its records are those of the
    2,000-step run, whose settings it shares but the steps, warm-up and evaluation
    interval), and it learned: every seed 0.3 nats below the bigram table, using its
    context, most keys still unselectable."""
    long, short = (json.loads(p.read_text()) for p in (DYT_LONG, DYT))
    moved = {"steps", "warmup", "eval_every", "variants"}
    assert {k: v for k, v in long["config"].items() if k not in moved} == \
        {k: v for k, v in short["config"].items() if k not in moved}
    assert long["sweep"]["DyT-scaled"] == short["sweep"]["DyT-scaled"]
    assert long["variants"] == {"DyT-scaled": short["variants"]["DyT-scaled"]}
    assert R.claims(long) == {"DyT-scaled learned": True, "DyT-scaled below bigram": True,
                              "DyT-scaled uses context": True}
    assert R.report(long)["DyT-scaled"]["across_seeds"]["unselectable_trained"][1] > 90


DYT_LR = RESULTS_DIR / "norms" / "retrained_heads_dyt_llama_lr_cpu.json"
DYT_HIGH = RESULTS_DIR / "norms" / "retrained_heads_dyt_scaled_high_lr_cpu.json"
# each recipe at the other's rate: (file, recipe, its rate, the index of that rate in
# dyt_cpu's sweep)
SWAPPED = {"llama_low": (DYT_LR, "DyT-LLaMA", 1e-2, 1),
           "scaled_high": (DYT_HIGH, "DyT-scaled", 3e-2, 2)}


@pytest.mark.slow
@pytest.mark.replay
@pytest.mark.parametrize("run", SWAPPED)
def test_stored_swapped_rate_runs_recompute_from_their_weights(run):
    path, recipe, _, _ = SWAPPED[run]
    result = json.loads(path.read_text())
    _recomputes(result, torch.load(path.with_suffix(".pt"), weights_only=True),
                exact_counts=False, which=[(recipe, i) for i in range(3)])


@pytest.mark.parametrize("run", SWAPPED)
def test_swapped_rate_runs_differ_from_the_first_run_by_the_rate(run):
    """The page reads each of these runs against ``dyt_cpu``'s run of the same recipe
    as one change, the rate: every setting is shared but the sweep's rates and the
    variants; the recipe is the same; its one-rate sweep repeats that run's 200 steps at
    that rate with the same history; and the rate is the one that run's sweep chose for
    the other recipe (1e-2 for DyT-scaled, 3e-2 for DyT-LLaMA)."""
    path, recipe, lr, index = SWAPPED[run]
    swapped, dyt = (json.loads(p.read_text()) for p in (path, DYT))
    moved = {"sweep_lrs", "variants"}
    assert {k: v for k, v in swapped["config"].items() if k not in moved} == \
        {k: v for k, v in dyt["config"].items() if k not in moved}
    assert swapped["variants"] == {recipe: dyt["variants"][recipe]}
    assert swapped["sweep"][recipe][0]["history"] == \
        dyt["sweep"][recipe][index]["history"]
    assert swapped["chosen_lr"] == {recipe: lr}
    other, = set(M.DYT_RECIPES) - {recipe}
    assert dyt["chosen_lr"][other] == lr != dyt["chosen_lr"][recipe]
    # the tables' losses, recomputed by each run: float64 sums, equal to the last bits
    assert swapped["references"] == pytest.approx(dyt["references"], rel=1e-14)


def _swapped_statements(low: dict, high: dict, dyt: dict) -> None:
    """What the page says of the two recipes at the two rates (the tests below)."""
    refs = dyt["references"]
    # DyT-LLaMA at 1e-2: below the bigram table on every seed, using its context, its
    # constant under 100 (over 100 on every seed at 3e-2); one seed clears 0.3 nats
    # and the other two miss by less than 0.01 (a bound chosen after the data); level
    # with DyT-scaled at the same rate: the paired interval holds 0, within 0.25 nats
    assert R.claims(low) == {"DyT-LLaMA learned": False, "DyT-LLaMA below bigram": True,
                             "DyT-LLaMA uses context": True}
    below = [s["below_bigram"] for s in R.report(low)["DyT-LLaMA"]["seeds"]]
    assert sum(b >= 0.3 for b in below) == 1 and min(below) > 0.29, below
    assert all(r["residual"]["constant_rms"] < 100 for r in low["models"]["DyT-LLaMA"])
    _, lo, hi = R.paired_loss_difference(low, "DyT-LLaMA", dyt, "DyT-scaled")
    assert lo < 0 < hi and -0.25 < lo and hi < 0.25, (lo, hi)
    # DyT-scaled at 3e-2 stalls as DyT-LLaMA did there: every seed within 0.03 nats of
    # the bigram table (a bound chosen after the data), no gain at late positions (the
    # interval holds 0), the constant over 100 on every seed; the claims all False
    assert R.claims(high) == {"DyT-scaled learned": False,
                              "DyT-scaled below bigram": False,
                              "DyT-scaled uses context": False}
    runs = high["models"]["DyT-scaled"]
    assert all(abs(r["test_loss"] - refs["bigram"]) < 0.03 for r in runs)
    _, lo, hi = R.report(high)["DyT-scaled"]["across_seeds"]["late_gain"]
    assert lo < 0 < hi, (lo, hi)
    assert all(r["residual"]["constant_rms"] > 100 for r in runs)
    # at 3e-2, DyT-LLaMA minus DyT-scaled: worse on two seeds, not resolved
    _, lo, hi = R.paired_loss_difference(dyt, "DyT-LLaMA", high, "DyT-scaled")
    assert lo < 0 < hi, (lo, hi)


def test_stored_swapped_rate_statements():
    """Stated before each run (the closing note of stop 46): for DyT-LLaMA at 1e-2,
    every seed 0.3 nats below the bigram table would say the rate stalled the recipe,
    every seed at or above it that dropping the biases and beta did; for DyT-scaled at
    3e-2, a stall like DyT-LLaMA's there (no seed clearly below the table, the constant
    over 100) would say the rate stalls DyT with either recipe. What they show is
    :func:`_swapped_statements`; each part fails on contrary numbers (the next test)."""
    low, high, dyt = (json.loads(p.read_text()) for p in (DYT_LR, DYT_HIGH, DYT))
    _swapped_statements(low, high, dyt)


@pytest.mark.parametrize("edit", ["stalled", "worse", "constant", "learned at 3e-2",
                                  "context at 3e-2", "calm at 3e-2"])
def test_the_swapped_rate_statements_fail_on_contrary_numbers(edit):
    low, high, dyt = (json.loads(p.read_text()) for p in (DYT_LR, DYT_HIGH, DYT))
    runs, hot = low["models"]["DyT-LLaMA"], high["models"]["DyT-scaled"]
    if edit == "stalled":                       # seed 1 back at the bigram level
        runs[1]["test_loss"] = low["references"]["bigram"] + 0.01
    elif edit == "worse":                       # every seed 0.2 nats behind DyT-scaled
        for r, s in zip(runs, dyt["models"]["DyT-scaled"]):
            r["test_loss"] = s["test_loss"] + 0.2
    elif edit == "constant":
        runs[0]["residual"]["constant_rms"] = 143.0
    elif edit == "learned at 3e-2":             # seed 0 ends 0.1 below the table
        hot[0]["test_loss"] = high["references"]["bigram"] - 0.1
    elif edit == "context at 3e-2":             # every seed gains 0.1 late
        for r in hot:
            r["positions"]["model"] = [[x - 0.1 for x in row]
                                       for row in r["positions"]["model"]]
    else:
        hot[2]["residual"]["constant_rms"] = 60.0
    with pytest.raises(AssertionError):
        _swapped_statements(low, high, dyt)


def test_a_paired_difference_needs_the_same_seeds():
    """Runs whose seeds differ (or come in another order) are refused, not paired."""
    low, dyt = (json.loads(p.read_text()) for p in (DYT_LR, DYT))
    dyt["models"]["DyT-scaled"].reverse()
    with pytest.raises(ValueError, match="same seeds"):
        R.paired_loss_difference(low, "DyT-LLaMA", dyt, "DyT-scaled")
