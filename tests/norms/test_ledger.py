"""Every number chapter 5 reports from its stored file, recomputed and compared with its
ledger (results/norms/reported.json; lncourse.norms.ledger): editing a stored value that a
reported number depends on, or the ledger, fails
test_every_reported_number_matches_the_ledger. The per-passage values themselves are
recomputed from the models by test_real.py, the per-head counts and test losses from the
stored weights by test_trained.py."""

from __future__ import annotations

import copy

import pytest

from lncourse import claims as C
from lncourse.norms import ledger as L
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


def test_every_reported_number_matches_the_ledger(stored, heads, vlens, logits):
    differences = C.compare(L.reported(stored, heads, vlens, logits), C.load_ledger(LEDGER))
    assert not differences, ("chapter 5's numbers differ from results/norms/reported.json "
                             "(the stored file or the ledger was changed; if a new run is "
                             "meant, rewrite it: python -m lncourse.norms.ledger):\n  "
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
def test_an_edited_stored_number_fails_the_ledger(stored, heads, vlens, logits, what):
    assert C.compare(L.reported(_edit(stored, what), heads, vlens, logits), C.load_ledger(LEDGER)), what


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
def test_an_edited_per_head_number_fails_the_ledger(stored, heads, vlens, logits, what):
    assert C.compare(L.reported(stored, _edit_heads(heads, what), vlens, logits),
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
def test_an_edited_v_lens_number_fails_the_ledger(stored, heads, vlens, logits, what):
    assert C.compare(L.reported(stored, heads, _edit_vlens(vlens, what), logits),
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
def test_an_edited_logit_growth_number_fails_the_ledger(stored, heads, vlens, logits, what):
    assert C.compare(L.reported(stored, heads, vlens, _edit_logits(logits, what)),
                     C.load_ledger(LEDGER)), what
