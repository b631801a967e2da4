"""Each claim of lncourse.evidence.norms.claims on contrary numbers: one plausible edit
of the stored input (a deepcopy; a comment says which world it stands for) must turn
the claim it targets False, where the stored input makes it hold."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from lncourse.evidence.norms import claims as C
from lncourse.norms.hidden import chance_abs_cos
from lncourse.results import load_result


def _verdict(verdicts: dict[str, bool], words: str) -> bool:
    """The verdict of the one claim whose sentence contains ``words``."""
    keys = [k for k in verdicts if words in k]
    assert len(keys) == 1, (words, keys)
    return verdicts[keys[0]]


def _ids(cases) -> list[str]:
    """ASCII test ids from the cases' words."""
    return ["-".join("".join(c for c in w if c.isascii() and c.isalnum() or c == " ")
                     .split()) for w, _ in cases]


def _check(compute, stored: dict, words: str, edit) -> None:
    assert _verdict(compute(stored), words), f"holds on the stored numbers: {words}"
    edited = copy.deepcopy(stored)
    edit(edited)
    assert not _verdict(compute(edited), words), f"fails on contrary numbers: {words}"


@pytest.fixture(scope="module")
def real():
    return load_result("norms/real_paper")


def _smol(d: dict) -> dict:
    return d["models"]["smollm2"]["summary"]


def _set(d: dict, key: str, stat: str, values) -> None:
    _smol(d)[key][stat] = [float(v) for v in values]


def _random_above(d):
    # h no nearer ⟂ 1 than ⟂ a random direction: |cos(h, 1)| above the random level
    _set(d, "abs_cos_ones", "high", np.array(_smol(d)["abs_cos_random"]["mean"]) + 0.01)


def _above_chance(d):
    # h leans on 1: every mean |cos(h, 1)| 1.5 times the isotropic chance level
    n = len(_smol(d)["abs_cos_ones"]["mean"])
    _set(d, "abs_cos_ones", "mean", [1.5 * chance_abs_cos(d["models"]["smollm2"]["d"])] * n)


def _along_ones(d):
    # 1% of ||h||² along 1 at every norm
    _set(d, "cos2_ones", "mean", [0.01] * len(_smol(d)["cos2_ones"]["mean"]))


def _shrinking(d):
    # a stream that shrinks with depth: the norms in reverse order
    _set(d, "norm", "mean", _smol(d)["norm"]["mean"][::-1])


def _token0_modest(d):
    # token 0's largest entry only 5 times the other tokens' largest
    rest = max(_smol(d)["massive_rest"]["mean"])
    _set(d, "massive_token0", "mean", [5 * rest] * len(_smol(d)["massive_rest"]["mean"]))


def _minilm_bent(d):
    # MiniLM bends as much as SmolLM2 and more: its slope ratio 0.5 at every norm
    sat = d["models"]["minilm"]["summary"]["saturation"]
    sat["mean"] = [0.5] * len(sat["mean"])


def _bend_not_token0(d):
    # the strongest bend stays without token 0: the ratio there 0.5
    s = _smol(d)
    i = int(np.argmin(s["saturation"]["mean"]))
    s["saturation_rest"]["mean"][i] = 0.5


def _no_bend_left(d):
    # without token 0 the map is straight: every interval reaches above 1
    _set(d, "saturation_rest", "high", [1.1] * len(_smol(d)["saturation_rest"]["high"]))


def _smol_bends_up(d):
    # SmolLM2's ratios mirrored above 1 (median 2 - m): as far from 1, bending up
    sat = _smol(d)["saturation"]
    sat["mean"] = [2 - x for x in sat["mean"]]


REAL_CASES = [
    ("closer to ⟂ 1 than to ⟂ a random", _random_above),
    ("below the isotropic chance level", _above_chance),
    ("along 1 is below 0.1%", _along_ones),
    ("longer at its last norm", _shrinking),
    ("by more than 10 times", _token0_modest),
    ("MiniLM's is nearer 1", _minilm_bent),
    ("is below 1 (an S-shape)", _smol_bends_up),
    ("strongest bend is token 0's", _bend_not_token0),
    ("a milder bend remains", _no_bend_left),
]


@pytest.mark.parametrize("words, edit", REAL_CASES, ids=_ids(REAL_CASES))
def test_each_real_paper_claim_fails_on_contrary_numbers(real, words, edit):
    _check(C.claims, real, words, edit)


@pytest.fixture(scope="module")
def heads():
    return load_result("norms/trained_heads")


def _counts(d: dict, variant: str, stage: str, value: float, layer: int | None = None):
    """Set every seed's share of unselectable keys (per layer, head, context) to value."""
    for run in d["models"][variant]:
        arr = np.array(run[stage], dtype=float)
        if layer is None:
            arr[...] = value
        else:
            arr[layer] = value
        run[stage] = arr.tolist()


def _qk_like_rmsnorm(d):
    # QK-norm trains to RMSNorm's counts, seed by seed
    for qk, rms in zip(d["models"]["QK-norm"], d["models"]["RMSNorm"]):
        qk["trained"] = copy.deepcopy(rms["trained"])


def _swap_init(d):
    # at initialisation QK-norm and RMSNorm trade counts
    for qk, rms in zip(d["models"]["QK-norm"], d["models"]["RMSNorm"]):
        qk["init"], rms["init"] = rms["init"], qk["init"]


def _qk_untrained(d):
    # training leaves QK-norm's counts where they started
    for run in d["models"]["QK-norm"]:
        run["trained"] = copy.deepcopy(run["init"])


def _dyt_loss_like_pre_ln(d):
    # DyT trains as well as Pre-LN: its final test losses are Pre-LN's
    for dyt, pre in zip(d["models"]["DyT"], d["models"]["Pre-LN"]):
        dyt["history"]["test_loss"][-1] = pre["history"]["test_loss"][-1]


HEADS_CASES = [
    ("after training, QK-norm's interval", _qk_like_rmsnorm),
    # every QK-norm key selectable after training
    ("its mean is above 0", lambda d: _counts(d, "QK-norm", "trained", 0.0)),
    # DyT leaves only 30% of keys unselectable
    ("more than half the keys", lambda d: _counts(d, "DyT", "trained", 0.3)),
    ("at initialisation too", _swap_init),
    # one layer of QK-norm as unselective as the other norms
    ("at every layer", lambda d: _counts(d, "QK-norm", "trained", 0.95, layer=0)),
    ("training lowers QK-norm's share", _qk_untrained),
    ("more than 0.5 nats", _dyt_loss_like_pre_ln),
]


@pytest.mark.parametrize("words, edit", HEADS_CASES, ids=_ids(HEADS_CASES))
def test_each_heads_claim_fails_on_contrary_numbers(heads, words, edit):
    _check(C.heads_claims, heads, words, edit)


@pytest.fixture(scope="module")
def logits():
    return load_result("norms/logits")


def _runs(d: dict, variant: str, lr_index: int) -> list[dict]:
    return sorted((r for r in d["models"][variant] if r["lr_index"] == lr_index),
                  key=lambda r: r["seed"])


def _top(d: dict) -> tuple[int, int]:
    n = len(d["config"]["lrs"])
    return n - 2, n - 1


def _one_diverged(d):
    # one Pre-LN model diverged at the top lr: its final test loss is missing
    _runs(d, "Pre-LN", _top(d)[1])[0]["test_loss"] = None


def _pre_ln_logits_tamed(d):
    # Pre-LN's logits at the two top lrs grow no further than QK-norm's
    for i in _top(d):
        for pre, qk in zip(_runs(d, "Pre-LN", i), _runs(d, "QK-norm", i)):
            pre["final_max_logit"] = list(qk["final_max_logit"])


def _qk_logit_500(d):
    # one QK-norm model's logits reach 500 at the top lr
    run = _runs(d, "QK-norm", _top(d)[1])[0]
    run["final_max_logit"] = [500.0] * len(run["final_max_logit"])


def _swap_variants(d):
    # the two variants' runs exchanged: QK-norm is the sensitive one
    d["models"]["Pre-LN"], d["models"]["QK-norm"] = (d["models"]["QK-norm"],
                                                     d["models"]["Pre-LN"])


def _swap_top_losses(d):
    # at the two top lrs QK-norm's losses are Pre-LN's and the other way round
    for i in _top(d):
        for pre, qk in zip(_runs(d, "Pre-LN", i), _runs(d, "QK-norm", i)):
            pre["test_loss"], qk["test_loss"] = qk["test_loss"], pre["test_loss"]


def _other_worst_seed(d):
    # at the third-highest lr QK-norm's worst seed is another one than Pre-LN's
    mid = len(d["config"]["lrs"]) - 3
    pre = max(_runs(d, "Pre-LN", mid), key=lambda r: r["test_loss"])["seed"]
    other = next(r for r in _runs(d, "QK-norm", mid) if r["seed"] != pre)
    other["test_loss"] = max(r["test_loss"] for r in _runs(d, "QK-norm", mid)) + 0.5


def _pre_ln_logit_150(d):
    # at the third-highest lr one Pre-LN model's logits reach 150
    run = _runs(d, "Pre-LN", len(d["config"]["lrs"]) - 3)[0]
    run["final_max_logit"] = [150.0] * len(run["final_max_logit"])


def _qk_worse_at_001(d):
    # at lr 0.01 every QK-norm model is 0.5 nats worse
    i = d["config"]["lrs"].index(0.01)
    for run in _runs(d, "QK-norm", i):
        run["test_loss"] += 0.5


def _qk_diverged_at_001(d):
    # at lr 0.01 one QK-norm model diverged: no paired interval there
    i = d["config"]["lrs"].index(0.01)
    _runs(d, "QK-norm", i)[0]["test_loss"] = None


LOGITS_CASES = [
    ("no model diverged", _one_diverged),
    ("more than 100 times every QK-norm", _pre_ln_logits_tamed),
    ("every QK-norm model's largest attention logit is below 100", _qk_logit_500),
    ("LR sensitivity is lower", _swap_variants),
    ("QK-norm's test loss is lower than Pre-LN's", _swap_top_losses),
    ("the same seed has the highest test loss", _other_worst_seed),
    ("every largest logit there is below 100", _pre_ln_logit_150),
    ("has an interval that contains 0", _qk_worse_at_001),
    ("up to 0.03 the paired difference", _qk_diverged_at_001),
]


@pytest.mark.parametrize("words, edit", LOGITS_CASES, ids=_ids(LOGITS_CASES))
def test_each_logits_claim_fails_on_contrary_numbers(logits, words, edit):
    _check(C.logits_claims, logits, words, edit)


@pytest.fixture(scope="module")
def periln():
    """The Peri-LN summary and the streams at initialisation the claims read."""
    from lncourse.evidence.norms import periln as P
    from lncourse.evidence.norms import periln_report as R

    peri, logits_result, weights = R.load()
    pre = P.pre_ln_streams(logits_result, weights)
    return {"summary": P.summary(peri, logits_result, pre),
            "initial": P.initial_streams(peri)}


def _periln_claims(d: dict) -> dict[str, bool]:
    return C.periln_claims(d["summary"], d["initial"])


def _row(d: dict, lr: float | None = None, index: int | None = None) -> dict:
    rows = d["summary"]["per_lr"]
    return rows[index] if lr is None else next(r for r in rows if r["lr"] == lr)


def _bound_exceeded(d):
    # one Peri-LN sublayer adds 1% more than its output norm's bound
    d["summary"]["bound_ratio_max"] = 1.01


def _peri_stream_grows(d):
    # at the top lr Peri-LN's stream is a fiftieth of Pre-LN's, not under a hundredth
    r = _row(d, index=-1)
    r["Peri-LN"]["last_norm"][0] = r["Pre-LN"]["last_norm"][0] / 50


def _peri_logit_5000(d):
    # at the top lr the smallest of Peri-LN's largest logits is 5,000
    _row(d, index=-1)["Peri-LN"]["max_logit"][0] = 5000.0


def _control_logits_tamed(d):
    # at the top lr the control's logits stay at half Pre-LN's smallest
    r = _row(d, index=-1)
    low = r["Pre-LN"]["max_logit"][0]
    r["Peri-LN-0.02"]["max_logit"] = [low / 4, low / 2]


def _third_lr_logits_close(d):
    # at the third-highest lr Peri-LN's smallest logit is 5 times Pre-LN's largest
    r = _row(d, index=-3)
    r["Peri-LN"]["max_logit"][0] = 5 * r["Pre-LN"]["max_logit"][1]


def _peri_best_loss_lower(d):
    # Peri-LN's best mean loss 0.01 below Pre-LN's best
    rows = d["summary"]["per_lr"]
    best = min(rows, key=lambda r: r["Pre-LN"]["test_loss"][0])
    best["Peri-LN"]["test_loss"][0] = best["Pre-LN"]["test_loss"][0] - 0.01


def _control_worse_at_top(d):
    # at the top lr the control is 0.1 nats worse than Pre-LN
    _row(d, index=-1)["Peri-LN-0.02"]["minus_pre_ln"] = [0.1, 0.05, 0.15]


def _peri_unresolved_low(d):
    # at lr 0.001 Peri-LN is not resolved from Pre-LN
    _row(d, lr=0.001)["Peri-LN"]["minus_pre_ln"] = [0.0, -0.01, 0.01]


def _control_worse_low(d):
    # at lr 0.001 the control is resolved worse than Pre-LN
    _row(d, lr=0.001)["Peri-LN-0.02"]["minus_pre_ln"] = [0.05, 0.03, 0.07]


def _grid_from_003(d):
    # a grid that starts at 0.03: no learning rate up to 0.01 to support the claim
    d["summary"]["per_lr"] = [r for r in d["summary"]["per_lr"] if r["lr"] > 0.01]


def _control_diverged_low(d):
    # at lr 0.001 a control seed diverged: no paired interval
    _row(d, lr=0.001)["Peri-LN-0.02"]["minus_pre_ln"] = None


def _peri_more_sensitive(d):
    # Peri-LN is more sensitive to the lr than Pre-LN
    d["summary"]["sensitivity_minus_pre_ln"]["Peri-LN"] = [0.1, 0.05, 0.15]


def _share(variant: str, share: float):
    def edit(d):
        x = d["initial"][variant]
        x[0] = share * x[1]
    return edit


PERILN_CASES = [
    ("sublayer adds more than its output norm's bound", _bound_exceeded),
    ("more than 100 times that of either Peri-LN", _peri_stream_grows),
    ("is above 10,000", _peri_logit_5000),
    ("largest logit is above Pre-LN's smallest", _control_logits_tamed),
    ("more than 10 times every Pre-LN", _third_lr_logits_close),
    ("best mean test loss over the grid", _peri_best_loss_lower),
    ("both Peri-LN variants have a lower test loss", _control_worse_at_top),
    ("1 has a higher test loss than Pre-LN", _peri_unresolved_low),
    ("the control with γ_out = 0.02 has a paired", _control_worse_low),
    ("up to 0.01, Peri-LN with", _grid_from_003),
    ("up to 0.01, the control", _grid_from_003),
    ("interval from Pre-LN that contains 0", _control_diverged_low),
    ("less sensitive to the learning rate", _peri_more_sensitive),
    # the embedding already 0.3 of the stream after Peri-LN's first sublayer
    ("under a tenth of the stream", _share("Peri-LN", 0.3)),
    # the embedding only 0.3 of Pre-LN's stream after its first sublayer
    ("over half of it in Pre-LN", _share("Pre-LN", 0.3)),
    # the control's embedding only 0.3 of its stream after the first sublayer
    ("in Pre-LN and with γ_out = 0.02", _share("Peri-LN-0.02", 0.3)),
]


@pytest.mark.replay         # the summary reads the Pre-LN streams from stored weights
@pytest.mark.parametrize("words, edit", PERILN_CASES, ids=_ids(PERILN_CASES))
def test_each_periln_claim_fails_on_contrary_numbers(periln, words, edit):
    _check(_periln_claims, periln, words, edit)


@pytest.fixture(scope="module")
def vlens():
    return load_result("norms/vlens")


def _curves(arm: str, key: str, factor: float = 1.0, power: float = 0.0,
            first: bool = False):
    """Every group's ``key`` curve of ``arm`` times factor · m^power (m = 1, 2, ...),
    or only its value at m = 1 times factor when first."""
    def edit(d):
        for g in d["curves"][arm]:
            v = np.asarray(g[key], dtype=float)
            if first:
                v[0] *= factor
            else:
                v = v * factor * np.arange(1, v.size + 1) ** power
            g[key] = v.tolist()
    return edit


def _rms_slope_only(d):
    # RMSNorm's attention decays 0.01 slower than LayerNorm's, rescaled per group so
    # that its mean ratio to the lens over m >= M_MIN stays what it was
    from lncourse.norms.vlens import M_MIN, VConfig, predicted

    pred = np.asarray(predicted("rmsnorm", VConfig.from_dict(d["config"]))["attn"])
    for g in d["curves"]["rmsnorm"]:
        old = np.asarray(g["attn"], dtype=float)
        new = old * np.arange(1, old.size + 1) ** 0.01
        tail = slice(M_MIN - 1, None)
        new *= np.mean(old[tail] / pred[tail]) / np.mean(new[tail] / pred[tail])
        g["attn"] = new.tolist()


VLENS_CASES = [
    # QK-norm's attention variance 5% above the lens at every position
    ("its interval inside [0.98, 1.02]", _curves("qk_norm", "attn", factor=1.05)),
    # LayerNorm's attention variance 4% below the lens at every position
    ("variance within 2%", _curves("layernorm", "attn", factor=0.96)),
    # QK-norm's attention variance 5% lower: nearer Lemma 3's curve
    ("QK-norm's variance by more than 10%", _curves("qk_norm", "attn", factor=0.95)),
    # LayerNorm's attention variance 4% higher: 7% above Lemma 3's curve
    ("of LayerNorm's by less than 5%", _curves("layernorm", "attn", factor=1.04)),
    # QK-norm's attention decays 0.1 faster in log-log
    ("QK-norm's log-log slope", _curves("qk_norm", "attn", power=-0.1)),
    # LayerNorm's attention decays 0.05 slower in log-log
    ("-0.9, LayerNorm's", _curves("layernorm", "attn", power=0.05)),
    # DyT's attention decays 0.05 slower in log-log
    ("and DyT's below -0.95", _curves("dyt", "attn", power=0.05)),
    ("RMSNorm's slope", _rms_slope_only),
    # RMSNorm's attention variance 1% above LayerNorm's
    ("and ratio equal LayerNorm's", _curves("rmsnorm", "attn", factor=1.01)),
    # DyT's attention at m = 1 ten times larger
    ("less than a tenth of LayerNorm's share", _curves("dyt", "attn", 10.0, first=True)),
    # DyT's block output decays as m^-0.01
    ("DyT's block output has no trend", _curves("dyt", "resid", power=-0.01)),
    # LayerNorm's block output grows as m^0.02 (its slope about +0.004)
    ("LayerNorm's falls", _curves("layernorm", "resid", power=0.02)),
    # after LayerNorm's final norm the variance decays as m^-0.01
    ("after the final LayerNorm or RMSNorm", _curves("layernorm", "out", power=-0.01)),
    # after RMSNorm's final norm the variance grows as m^0.01
    ("(|slope| below 0.002)", _curves("rmsnorm", "out", power=0.01)),
]


@pytest.mark.parametrize("words, edit", VLENS_CASES, ids=_ids(VLENS_CASES))
def test_each_vlens_claim_fails_on_contrary_numbers(vlens, words, edit):
    _check(C.vlens_claims, vlens, words, edit)


@pytest.fixture(scope="module")
def arms():
    """The summary of the stored reduced run of the majority arms the claims read."""
    from lncourse.evidence.norms import majority_report as R
    from lncourse.evidence.norms.majority_run import ArmsConfig, test_data

    stored = load_result(R.RUNS["reduced"])
    return R.summary(stored, test_data(ArmsConfig.from_dict(stored["config"])))


def _arm(arm: str, key: str, value):
    def edit(d):
        d["arms"][arm][key] = value
    return edit


def _ngpt_same_lr(lrs: tuple[str, ...]):
    """nGPT not resolved from LayerNorm at the shared lrs ``lrs``."""
    def edit(d):
        for lr in lrs:
            d["arms"]["ngpt"]["vs_layernorm_90_same_lr"][lr] = [0.0, -10.0, 10.0]
    return edit


def _dyt_faster(d):
    # at its own lr DyT reaches 90% measurably sooner than LayerNorm
    d["verdict"]["dyt"]["tuned"] = "faster"


ARMS_CASES = [
    ("no arm reaches 90% measurably", _dyt_faster),
    # nGPT's rule picks 0.1, below the top of the grid
    ("chosen lr is the top of the grid", _arm("ngpt", "best_lr", 0.1)),
    # nGPT reaches 80% later than LayerNorm at its own lr, not resolved
    ("reaches 80% sooner", _arm("ngpt", "vs_layernorm_80", [1.0, -1.0, 3.0])),
    # at the top shared lr nGPT is not resolved from LayerNorm: faster nowhere
    ("resolved faster at one lr", _ngpt_same_lr(("0.3",))),
    # at the two lowest shared lrs nGPT is not resolved: slower nowhere
    ("and slower at another", _ngpt_same_lr(("0.01", "0.03"))),
    # DyT's queries also lean on 1: its mean angle 50 degrees
    ("only LayerNorm's mean query angle", _arm("dyt", "mean_query_angle", 50.0)),
    # LayerNorm's queries at 70 degrees from 1, like the others'
    ("is below 60 degrees", _arm("layernorm", "mean_query_angle", 70.0)),
    # DyT's attention 0.08 (TV) from uniform
    ("within 0.05 (TV) of uniform", _arm("dyt", "mean_attention_tv", 0.08)),
]


@pytest.mark.parametrize("words, edit", ARMS_CASES, ids=_ids(ARMS_CASES))
def test_each_arms_claim_fails_on_contrary_numbers(arms, words, edit):
    _check(C.arms_claims, arms, words, edit)


@pytest.fixture(scope="module")
def arms_batch():
    """The summary of the stored run of the majority arms at the paper's batch."""
    from lncourse.evidence.norms import majority_report as R
    from lncourse.evidence.norms.majority_run import ArmsConfig, test_data

    stored = load_result(R.RUNS["paper_batch"])
    return R.summary(stored, test_data(ArmsConfig.from_dict(stored["config"])))


def _dyt_one_short(d):
    # one DyT seed never reaches 90% at its chosen lr
    d["arms"]["dyt"]["reached_90"] -= 1


def _tuned(arm: str, value: str):
    def edit(d):
        d["verdict"][arm]["tuned"] = value
    return edit


def _ngpt_fastest_chosen(d):
    # the divergence clause rules nothing out: nGPT's fastest lr is its chosen one
    d["arms"]["ngpt"]["fastest_lr"] = d["arms"]["ngpt"]["best_lr"]


ARMS_BATCH_CASES = [
    ("in every seed at its chosen lr", _dyt_one_short),
    # the projection-free arm is not resolved from LayerNorm
    ("the projection-free arm reaches 90% sooner", _tuned("no_projection", "not resolved")),
    # DyT is resolved slower than LayerNorm at its own lr
    ("and no other arm is resolved", _tuned("dyt", "slower")),
    ("ruled out by the divergence clause", _ngpt_fastest_chosen),
    # at its fastest lr nGPT is resolved faster than LayerNorm
    ("at that lr too it is not resolved",
     _arm("ngpt", "vs_layernorm_90_fastest_lr", [-50.0, -80.0, -20.0])),
]


@pytest.mark.parametrize("words, edit", ARMS_BATCH_CASES, ids=_ids(ARMS_BATCH_CASES))
def test_each_arms_batch_claim_fails_on_contrary_numbers(arms_batch, words, edit):
    _check(C.arms_batch_claims, arms_batch, words, edit)
