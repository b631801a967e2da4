"""Every number chapter 5 reports from its stored file, recomputed and compared with its
ledger (results/norms/reported.json; lncourse.evidence.norms.ledger): editing a stored value that a
reported number depends on, or the ledger, fails
test_every_reported_number_matches_the_ledger. The per-passage values themselves are
recomputed from the models by test_real.py, the per-head counts and test losses from the
stored weights by test_trained.py."""

from __future__ import annotations

import copy

import pytest

from lncourse.evidence import claims as C
from lncourse.evidence.norms import ledger as L
from lncourse.results import RESULTS_DIR, load_result

LEDGER = RESULTS_DIR / "norms" / "reported.json"


@pytest.fixture(scope="module")
def stored():
    return load_result(L.SOURCE)


@pytest.fixture(scope="module")
def heads():
    return load_result(L.HEADS)


@pytest.fixture(scope="module")
def vlens():
    return load_result(L.VLENS)


@pytest.fixture(scope="module")
def logits():
    return load_result(L.LOGITS)


@pytest.fixture(scope="module")
def extra():
    """The Peri-LN report and the majority arms' intervals the review section reads, and
    the majority runs and the logit-growth weights the page's quoted numbers read."""
    from lncourse.evidence.norms import periln_report
    return {"periln": periln_report.reported(*periln_report.load()),
            "arms": L.arms_from_ledger(), "context": load_result(L.CONTEXT),
            "retrained": load_result(L.RETRAINED), "majority": L.load_majority(),
            "logits_weights": L.load_logits_weights(),
            **{key: load_result(path) for key, path in L.RECIPE_RUNS.items()}}


def test_every_reported_number_matches_the_ledger(stored, heads, vlens, logits, extra):
    differences = C.compare(L.reported(stored, heads, vlens, logits, **extra),
                            C.load_ledger(LEDGER))
    assert not differences, ("chapter 5's numbers differ from results/norms/reported.json "
                             "(the stored file or the ledger was changed; if a new run is "
                             "meant, rewrite it: python -m lncourse.evidence.norms.ledger):\n  "
                             + "\n  ".join(differences[:20]))


def _edit(stored, what):
    stored = copy.deepcopy(stored)
    smol = stored["models"]["smollm2"]
    if what == "a middle passage":
        smol["per_passage"]["abs_cos_ones"][13][20] *= 1.5
    elif what == "a summary mean":
        stored["models"]["minilm"]["summary"]["saturation"]["mean"][5] = 0.5
    elif what == "an interval":
        smol["summary"]["norm"]["high"][40] += 1.0
    elif what == "the width":
        smol["d"] = 512
    return stored


@pytest.mark.parametrize("what", ["a middle passage", "a summary mean", "an interval",
                                  "the width"])
def test_an_edited_stored_number_fails_the_ledger(stored, heads, vlens, logits, extra, what):
    assert C.compare(L.reported(_edit(stored, what), heads, vlens, logits, **extra),
                     C.load_ledger(LEDGER)), what


def _edit_heads(heads, what):
    heads = copy.deepcopy(heads)
    if what == "a count":
        heads["models"]["DyT"][0]["trained"][1][2][7] += 1 / 256
    elif what == "a stored mean":
        heads["summary"]["QK-norm"]["trained"]["overall"][0] += 0.01
    elif what == "a test loss":
        heads["models"]["RMSNorm"][2]["history"]["test_loss"][-1] -= 0.05
    return heads


@pytest.mark.parametrize("what", ["a count", "a stored mean", "a test loss"])
def test_an_edited_per_head_number_fails_the_ledger(stored, heads, vlens, logits, extra, what):
    assert C.compare(L.reported(stored, _edit_heads(heads, what), vlens, logits, **extra),
                     C.load_ledger(LEDGER)), what


def _edit_vlens(vlens, what):
    vlens = copy.deepcopy(vlens)
    if what == "a curve":                     # QK-norm's variance at the last position
        vlens["curves"]["qk_norm"][7]["attn"][-1] *= 1.05
    elif what == "an energy":
        vlens["curves"]["layernorm"][3]["energy"][-1] += 0.01
    elif what == "a block output":            # DyT's, which the share at m = 1 reads
        vlens["curves"]["dyt"][0]["resid"][0] *= 0.5
    elif what == "the width":
        vlens["config"]["d_model"] = 384
    return vlens


@pytest.mark.parametrize("what", ["a curve", "an energy", "a block output", "the width"])
def test_an_edited_v_lens_number_fails_the_ledger(stored, heads, vlens, logits, extra, what):
    assert C.compare(L.reported(stored, heads, _edit_vlens(vlens, what), logits, **extra),
                     C.load_ledger(LEDGER)), what


def _edit_logits(logits, what):
    logits = copy.deepcopy(logits)
    if what == "a test loss":                # QK-norm at the highest lr, last seed
        logits["models"]["QK-norm"][-1]["test_loss"] -= 0.02
    elif what == "a largest logit":          # Pre-LN at the highest lr, first seed
        logits["models"]["Pre-LN"][-3]["final_max_logit"][1] *= 0.9
    elif what == "a stored mean":
        logits["summary"]["Pre-LN"]["sensitivity"][0] += 0.01
    elif what == "the learning rates":
        logits["config"]["lrs"][-1] = 1.0
    return logits


@pytest.mark.parametrize("what", ["a test loss", "a largest logit", "a stored mean",
                                  "the learning rates"])
def test_an_edited_logit_growth_number_fails_the_ledger(stored, heads, vlens, logits, extra, what):
    assert C.compare(L.reported(stored, heads, vlens, _edit_logits(logits, what), **extra),
                     C.load_ledger(LEDGER)), what


# ------------------------------------------------------------ the review (norms.review)
from lncourse.evidence.norms import review as R  # noqa: E402


def test_an_edited_arms_interval_or_periln_loss_fails_the_ledger(stored, heads, vlens, logits,
                                                                 extra):
    arms = copy.deepcopy(extra["arms"])
    arms["arms"]["no_projection"]["vs_layernorm_90"][2] -= 1.0
    assert C.compare(L.reported(stored, heads, vlens, logits, **(extra | {"arms": arms})),
                     C.load_ledger(LEDGER))
    peri = copy.deepcopy(extra["periln"])
    peri["summary"]["per_lr"][-1]["Peri-LN"]["test_loss"][0] -= 0.4   # past the bar
    assert C.compare(L.reported(stored, heads, vlens, logits, **(extra | {"periln": peri})),
                     C.load_ledger(LEDGER))


def test_reference_losses_by_hand():
    """Counts by hand: train 0 1 0 1 (vocab 2): bigram counts +1 give p(1|0) = 3/4,
    p(0|1) = 2/3; unigram (2+1)/(4+2) = 1/2 each."""
    import math

    import torch
    refs = R.reference_losses(torch.tensor([0, 1, 0, 1]), torch.tensor([0, 1, 0]), 2)
    assert math.isclose(refs["bigram"], -(math.log(3 / 4) + math.log(2 / 3)) / 2)
    assert math.isclose(refs["unigram"], math.log(2))
    with pytest.raises(ValueError, match="outside"):
        R.reference_losses(torch.tensor([0, 1, 2]), torch.tensor([0, 1]), 2)


def test_levels_and_the_learning_claims(heads, logits, extra):
    refs = {"bigram": 2.51, "unigram": 3.32}
    assert R.level(2.20, refs) == "below the bigram"
    assert R.level(2.30, refs) == "bigram level"        # 0.21 below: short of the bar
    assert R.level(2.49, refs) == "bigram level"
    assert R.level(3.33, refs) == "unigram level"
    assert R.level(2.90, refs) == "between"
    from lncourse.evidence.norms import logits as lg
    summary = lg.summarize(logits["models"], lg.LogitsConfig.from_dict(logits["config"]))
    real = R.char_references()
    assert all(R.learning_claims(heads, summary, extra["periln"]["summary"], real).values())
    # contrary numbers: a trained-heads model that learned, Peri-LN below the bigram
    learned = copy.deepcopy(heads)
    for r in learned["models"]["QK-norm"]:
        r["history"]["test_loss"][-1] = 2.2
    peri = copy.deepcopy(extra["periln"]["summary"])
    peri["per_lr"][-1]["Peri-LN"]["test_loss"][0] = 2.2
    c = R.learning_claims(learned, summary, peri, real)
    assert not c["no trained-heads model ends 0.3 nats or more below the bigram table"]
    assert not c["at the two highest learning rates both Peri-LN variants end at the "
                 "bigram level"]


def test_the_corrected_interval_and_its_claims():
    """The Bonferroni interval for 5 arms over 10 seeds widens the 95% t half-width by
    t(0.995, 9) / t(0.975, 9) = 3.250 / 2.262; a claim turns when the corrected interval
    excludes 0."""
    mean, low, high = R.corrected_interval((-14.0, -25.2856, -2.7144), 10, 5)
    assert abs(low + 30.213) < 1e-2 and abs(high - 2.213) < 1e-2
    summary = {"ran": {"seeds": list(range(10))},
               "arms": {"no_projection": {"vs_layernorm_90": [-14.0, -25.3, -2.7]},
                        "ngpt": {"vs_layernorm_90": [19.0, -1.1, 39.1]},
                        **{a: {"vs_layernorm_90": [0.0, -10.0, 10.0]}
                           for a in ("rmsnorm", "qk_norm", "dyt")}}}
    assert all(R.arms_corrected(summary)["claims"].values())
    summary["arms"]["no_projection"]["vs_layernorm_90"] = [-30.0, -41.0, -19.0]
    assert not R.arms_corrected(summary)["claims"][
        "corrected for the arms compared at once, no arm's interval excludes 0"]


def test_the_context_claims_hold_and_turn(stored, heads, vlens, logits, extra):
    """Each claim on which stored models use their context holds on the stored gains and
    turns False on contrary ones; an edited gain fails the ledger."""
    context = extra["context"]
    assert all(R.context_claims(context).values())
    learned = copy.deepcopy(context)                 # a trained-heads seed that learned
    learned["trained_heads"]["QK-norm"][0]["late"]["gain"] = [0.3, 0.2, 0.4]
    assert not R.context_claims(learned)["no trained-heads variant uses its context on "
                                         "every seed, and no seed gains 0.05 nats over "
                                         "the bigram table at late positions"]
    stalled = copy.deepcopy(context)                 # QK-norm at lr 0.1 not using it
    for r in stalled["logits"]["QK-norm"]:
        if r["lr"] == 0.1:
            r["late"]["gain"] = [0.01, -0.01, 0.03]
    assert not R.context_claims(stalled)["every QK-norm seed uses its context at the "
                                         "second-highest rate, where no Pre-LN seed does"]
    assert C.compare(L.reported(stored, heads, vlens, logits, **(extra | {"context": learned})),
                     C.load_ledger(LEDGER))


def _only(diff: list[str], part: str) -> bool:
    """The edit shows in the review's ``part`` and nowhere else but the page's quoted
    numbers (``page/``, which read the same run)."""
    return (any(part in d for d in diff)
            and all(part in d or d.startswith("page/") for d in diff))


@pytest.mark.parametrize("what", ["final", "sweep"])
def test_an_edited_retrained_loss_fails_the_ledger(stored, heads, vlens, logits, extra, what):
    """The DyT run trained with the recipe: an edit of its final or a sweep run's test
    loss in the reported decimals fails (and only the review part and the page's quoted
    numbers differ)."""
    run = copy.deepcopy(extra["retrained"])
    if what == "final":
        run["models"]["DyT"][0]["test_loss"] += 0.01
    else:
        run["sweep"]["DyT"][0]["history"]["test_loss"][-1] += 0.01
    diff = C.compare(L.reported(stored, heads, vlens, logits, **(extra | {"retrained": run})),
                     C.load_ledger(LEDGER))
    assert _only(diff, "retrained"), diff[:5]


@pytest.mark.parametrize("what", ["loss", "unselectable", "residual"])
def test_an_edited_wide_run_number_fails_the_ledger(stored, heads, vlens, logits, extra,
                                                    what):
    """The four norms trained with the recipe at d = 32: an edit of a seed's test loss
    or unselectable share in the reported decimals, or of DyT's saturated share, fails
    (and only the wide run's part of the review differs)."""
    run = copy.deepcopy(extra["retrained_wide"])
    seed = run["models"]["QK-norm"][1]
    if what == "loss":
        seed["test_loss"] += 0.01
    elif what == "unselectable":
        seed["trained"][0][0][0] = 1.0 - seed["trained"][0][0][0]
    else:
        run["models"]["DyT"][2]["residual"]["saturated"] -= 0.02
    diff = C.compare(L.reported(stored, heads, vlens, logits,
                                **(extra | {"retrained_wide": run})), C.load_ledger(LEDGER))
    assert _only(diff, "retrained_wide"), diff[:5]


@pytest.mark.parametrize("what", ["loss", "gain", "saturated", "long", "rate",
                                  "high"])
def test_an_edited_dyt_recipe_number_fails_the_ledger(stored, heads, vlens, logits, extra,
                                                      what):
    """DyT's two recipes of the released LLaMA code at d = 32: an edit of a seed's test
    loss or late gain in the reported decimals, or of a saturated share, fails (and
    only that run's part of the review differs); so does an edited loss of the run
    twice as long, and of each recipe's run at the other's rate."""
    key = {"long": "retrained_dyt_long", "rate": "retrained_dyt_lr",
           "high": "retrained_dyt_high"}.get(what, "retrained_dyt")
    run = copy.deepcopy(extra[key])
    if what in ("long", "rate", "high"):
        run["models"][next(iter(run["models"]))][2]["test_loss"] -= 0.01
        diff = C.compare(L.reported(stored, heads, vlens, logits, **(extra | {key: run})),
                         C.load_ledger(LEDGER))
        assert _only(diff, f"/{key}/"), diff[:5]
        return
    seed = run["models"]["DyT-LLaMA"][1]
    if what == "loss":
        seed["test_loss"] += 0.01
    elif what == "gain":
        seed["positions"]["model"] = [[x + 0.02 for x in row]
                                      for row in seed["positions"]["model"]]
    else:
        run["models"]["DyT-scaled"][0]["residual"]["saturated"] += 0.02
    diff = C.compare(L.reported(stored, heads, vlens, logits,
                                **(extra | {"retrained_dyt": run})), C.load_ledger(LEDGER))
    assert _only(diff, "/retrained_dyt/"), diff[:5]


def test_a_run_the_ledger_does_not_read_is_an_error(stored, heads, vlens, logits, extra):
    """A misspelt run (a new run passed under a key RECIPE_RUNS lacks) is refused, not
    dropped with the whole review."""
    runs = {k: v for k, v in extra.items() if k in L.RECIPE_RUNS}
    runs["retrained_dyt_misspelt"] = runs.pop("retrained_dyt_high")
    with pytest.raises(TypeError, match="retrained_dyt_misspelt"):
        L.reported(stored, heads, vlens, logits, **(extra | runs))


def test_periln_learning_by_the_course_bar(extra):
    """Peri-LN with its output gain at 1 never clears the bar on the stored run, Pre-LN
    barely learned at the low rates, and where Pre-LN learned most Peri-LN is worse; each
    claim fails on contrary numbers: one Peri-LN seed 0.3 nats below the table, Pre-LN
    learning at the lowest rate, Peri-LN level with Pre-LN at the best rate."""
    from lncourse.lm import LEARNED_MARGIN, learned

    refs = R.char_references()
    models, summary = extra["periln"]["models"], extra["periln"]["summary"]
    got = R.periln_learning(models, summary, refs)
    assert all(got["claims"].values()), got["claims"]
    assert got["peri_ln_best_below"] < LEARNED_MARGIN
    assert not learned(refs["bigram"] - got["peri_ln_best_below"], refs["bigram"])
    never, low, best = got["claims"]
    one = copy.deepcopy(models)
    one["Peri-LN"][0]["test_loss"] = refs["bigram"] - 0.31
    assert not R.periln_learning(one, summary, refs)["claims"][never]
    fast = copy.deepcopy(summary)
    fast["per_lr"][0]["Pre-LN"]["test_loss"][0] = refs["bigram"] - 0.31
    assert not R.periln_learning(models, fast, refs)["claims"][low]
    level = copy.deepcopy(summary)
    at = [r["lr"] for r in level["per_lr"]].index(got["pre_ln_best_lr"])
    level["per_lr"][at]["Peri-LN"]["minus_pre_ln"] = [0.0, -0.1, 0.1]
    assert not R.periln_learning(models, level, refs)["claims"][best]


def test_the_learned_bar_refuses_a_non_finite_loss():
    from lncourse.lm import learned

    assert learned(2.19, 2.5) and not learned(2.21, 2.5)
    with pytest.raises(ValueError, match="finite"):
        learned(float("nan"), 2.5)


# ------------------------------------------- the numbers the page quotes (norms.quoted)
PAGE = LEDGER.parents[2] / "book" / "05_norms_replication.md"


def test_every_number_the_page_quotes_is_a_ledger_entry():
    """Each {ledger} role of the replication page names an entry of a ledger (the build
    fails on an unknown one too; this says so in the unit tests, in a second)."""
    import re

    roles = re.findall(r"\{ledger\}`([^`]*)`", PAGE.read_text(encoding="utf-8"))
    assert len(roles) > 200
    for spec in roles:
        C.quote(spec)


@pytest.mark.parametrize("what", ["a diverged step", "a QK-norm gain", "a Peri-LN logit"])
def test_an_edited_number_only_the_page_quotes_fails_the_ledger(stored, heads, vlens, logits,
                                                                extra, what):
    """Numbers the page quotes beyond the review: the step at which a seed of the
    nGPT-style arm diverged (the majority run at the paper's batch), the largest ratio of
    a QK-norm logit to its sphere's bound (read from the stored weights' gains), a
    Peri-LN model's largest logit; each edit shows in page/."""
    if what == "a diverged step":
        run = copy.deepcopy(extra["majority"]["paper_batch"])
        i = next(i for i, (a, lr, d) in enumerate(zip(run["arm"], run["lr"], run["diverged_at"]))
                 if a == "ngpt" and lr == 0.3 and d is not None)
        run["diverged_at"][i] += 5
        extra = extra | {"majority": extra["majority"] | {"paper_batch": run}}
    elif what == "a QK-norm gain":             # every QK-norm model's query gains x 0.9
        extra = extra | {"logits_weights": {
            k: ({n: t * 0.9 if n.endswith("q_norm.weight") else t for n, t in w.items()}
                if k.startswith("QK-norm/") else w)
            for k, w in extra["logits_weights"].items()}}
    else:
        peri = copy.deepcopy(extra["periln"])
        peri["summary"]["per_lr"][-1]["Peri-LN"]["max_logit"][1] *= 1.01
        extra = extra | {"periln": peri}
    diff = C.compare(L.reported(stored, heads, vlens, logits, **extra), C.load_ledger(LEDGER))
    assert any(d.startswith("page/") for d in diff), diff[:5]
