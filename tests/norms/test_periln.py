"""Peri-LN in the logit-growth sweep (lncourse.evidence.norms.periln; chapter 5).

The bound Peri-LN's output norm sets on what a sublayer adds is checked on random weights
and shown tight; the stored run (results/norms/periln.json, weights in periln.pt) is
recomputed from its weights (the first seed here, every seed in the slow test), its first
record replayed from the seed, and every number the chapter reports recomputed and
compared with the ledger (results/norms/periln_reported.json), which edits must fail."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from lncourse.evidence import claims as C
from lncourse.evidence.norms import logits as LG
from lncourse.evidence.norms import periln as P
from lncourse.evidence.norms import periln_report as R
from lncourse.results import RESULTS_DIR

STORED = RESULTS_DIR / f"{R.SOURCE}.json"
LEDGER = RESULTS_DIR / f"{R.LEDGER}.json"


def _random_model(seed=0, beta=True):
    cfg = LG.PRESETS["tiny"]()
    model = P.build(cfg, 40, seed)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():          # weights far from their initial values
            p.add_(torch.randn(p.shape, generator=gen) * 0.5)
        if not beta:
            for block in model.blocks:
                block.ln1_out.bias.zero_(), block.ln2_out.bias.zero_()
    windows = torch.randint(0, 40, (3, cfg.block_size), generator=gen)
    return model, windows


def test_what_each_sublayer_adds_is_within_its_bound():
    model, windows = _random_model()
    s = P.stream(model, windows)
    bound = P.increment_bound(model)
    assert len(s["added_max"]) == len(bound) == 2 * len(model.blocks)
    assert len(s["norm"]) == 2 * len(model.blocks) + 1
    assert all(a <= b * (1 + 1e-6) for a, b in zip(s["added_max"], bound))
    assert all(a <= m for a, m in zip(s["added_mean"], s["added_max"]))


def test_the_bound_is_reached_when_gamma_is_constant_and_beta_zero():
    model, windows = _random_model(beta=False)
    with torch.no_grad():
        for block in model.blocks:
            block.ln1_out.weight.fill_(-1.7), block.ln2_out.weight.fill_(0.6)
    s = P.stream(model, windows)
    # every token's increment is γ times a vector of norm √d (less LayerNorm's eps)
    for got, bound in zip(s["added_max"], P.increment_bound(model)):
        assert got == pytest.approx(bound, rel=1e-4)
    assert P.increment_bound(model)[0] == pytest.approx(1.7 * math.sqrt(16))


def test_stream_norms_are_those_of_the_cache():
    model, windows = _random_model(1)
    with torch.no_grad():
        _, _, cache = model(windows, return_cache=True)
    s = P.stream(model, windows)
    x = cache["blocks.1.resid_mid"]
    assert s["norm"][3] == pytest.approx(float(x.norm(dim=-1).mean() / 4), rel=1e-6)
    assert s["added_max"][3] == pytest.approx(float(cache["blocks.1.mlp_out"].norm(dim=-1).max()))


def test_the_bound_needs_a_peri_ln_model():
    with pytest.raises(ValueError, match="not Peri-LN"):
        P.increment_bound(LG.build(LG.PRESETS["tiny"](), 40, "Pre-LN", 0))


@pytest.mark.parametrize("variant", list(P.VARIANTS))
def test_peri_ln_starts_from_the_pre_ln_weights_of_its_seed(variant):
    cfg = LG.PRESETS["tiny"]()
    pre = LG.build(cfg, 40, "Pre-LN", 2).state_dict()
    peri = P.build(cfg, 40, 2, variant).state_dict()
    assert set(pre) < set(peri) and all(torch.equal(pre[k], peri[k]) for k in pre)
    gains = [v for k, v in peri.items() if "_out.weight" in k]
    assert gains and all(torch.all(g == P.VARIANTS[variant]) for g in gains)
    with pytest.raises(ValueError, match="unknown variant"):
        P.build(cfg, 40, 2, "Peri")


# ---- the stored run ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def stored():
    if not STORED.exists():
        pytest.fail(f"{STORED} is missing: python -m lncourse.evidence.norms.periln --preset paper")
    return R.load()


def _recompute(stored, seeds):
    peri, logits_result, _ = stored
    weights = torch.load(STORED.with_suffix(".pt"), weights_only=True)
    probe, test_x, test_y = LG.windows_of(peri)
    bad = []
    for variant, r in ((v, r) for v, runs in peri["models"].items() for r in runs):
        if r["seed"] not in seeds:
            continue
        model = P.load_model(peri, weights, variant, r["lr_index"], r["seed"])
        got = {"test_loss": LG.test_loss(model, test_x, test_y),
               "final_max_logit": LG.max_logits(model, probe),
               "stream": P.stream(model, test_x), "bound": P.increment_bound(model)}
        tag = f"{variant} lr {r['lr']} seed {r['seed']}"
        if got["test_loss"] != pytest.approx(r["test_loss"], rel=1e-5):
            bad.append(f"{tag}: loss {got['test_loss']} vs {r['test_loss']}")
        if got["final_max_logit"] != pytest.approx(r["final_max_logit"], rel=1e-4):
            bad.append(f"{tag}: logits {got['final_max_logit']}")
        for k in ("norm", "added_max", "added_mean"):
            if got["stream"][k] != pytest.approx(r["stream"][k], rel=1e-4):
                bad.append(f"{tag}: stream {k} {got['stream'][k]} vs {r['stream'][k]}")
        if got["bound"] != pytest.approx(r["bound"], rel=1e-6):
            bad.append(f"{tag}: bound {got['bound']}")
        assert all(a <= b * (1 + 1e-4) for a, b in zip(got["stream"]["added_max"], got["bound"]))
    return bad


@pytest.mark.replay
def test_stored_first_seed_recomputes_from_its_weights(stored):
    assert not _recompute(stored, {stored[0]["config"]["seeds"][0]})


@pytest.mark.slow
def test_stored_every_seed_recomputes_from_its_weights(stored):
    assert not _recompute(stored, set(stored[0]["config"]["seeds"]))


@pytest.mark.replay
def test_stored_first_record_replays_from_the_seed(stored):
    """The lowest learning rate's first Peri-LN model, trained again to its first record,
    to the tolerances derived in tests/norms/test_logits.py (measured for Peri-LN too:
    AVX2 or a one-ulp change of the embedding moves its step-50 loss by at most 1e-8 at
    lr 1e-3, its largest logits by 9e-6; at lr 0.3 by 1.3% and 1.4 times the stored
    value)."""
    from .test_logits import assert_first_record, replay_first_record

    hist, want = replay_first_record(stored[0], "Peri-LN",
                                     lambda cfg, v, seed: P.build(cfg, v, seed, "Peri-LN"))
    assert_first_record(hist, want)


@pytest.fixture(scope="module")
def recomputed(stored):
    return R.reported(*stored)


# The ledger's numbers that another CPU can change are those recomputed from stored weights
# (the Pre-LN models' residual streams): float32 forward passes, within a few dozen
# float32 ulps, 1e-6 relative (measured against the ledger written on an AMD EPYC: at most
# 4.3e-7, with AVX-512 kernels and with AVX2). They reach the summary's t intervals, whose
# ends mean ± t s/√n keep only the absolute precision of their terms: the ledger's policy
# (lncourse.tolerance: 5e-5 absolute below 1, 5e-5 relative above) covers them.


@pytest.mark.replay
def test_every_reported_number_matches_the_ledger(recomputed):
    differences = C.compare(recomputed, C.load_ledger(LEDGER))
    assert not differences, ("the Peri-LN numbers differ from their ledger (rewrite it if a "
                             "new run is meant: python -m lncourse.evidence.norms.periln_report):\n  "
                             + "\n  ".join(differences[:20]))


@pytest.mark.replay
def test_the_claims_hold(recomputed):
    assert recomputed["claims"] and all(recomputed["claims"].values()), recomputed["claims"]


def _edit(stored, what):
    peri, logits_result, weights = copy.deepcopy(stored[0]), stored[1], stored[2]
    if what == "a test loss":                  # the highest lr, the last seed
        peri["models"]["Peri-LN"][-1]["test_loss"] -= 0.02
    elif what == "a stream norm":              # a middle depth of a middle model
        peri["models"]["Peri-LN-0.02"][7]["stream"]["norm"][2] *= 1.1
    elif what == "an increment":
        peri["models"]["Peri-LN"][4]["stream"]["added_max"][1] *= 0.9
    elif what == "a Pre-LN weight":            # the Pre-LN streams come from the weights
        weights = dict(weights)
        key = next(k for k in weights if k.startswith("Pre-LN/5/"))
        w = dict(weights[key])
        w["blocks.1.mlp.2.weight"] = w["blocks.1.mlp.2.weight"] * 2
        weights[key] = w
    return peri, logits_result, weights


@pytest.mark.parametrize("what", ["a test loss", "a stream norm", "an increment",
                                  "a Pre-LN weight"])
def test_an_edit_fails_the_ledger(stored, what):
    assert C.compare(R.reported(*_edit(stored, what)), C.load_ledger(LEDGER)), what
