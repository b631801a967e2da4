"""Every number chapter 2 reports from its stored files, recomputed and compared with its
ledger (results/selectability/reported.json; lncourse.selectability.ledger): editing a
stored value that a reported number depends on, or the ledger, fails
test_every_reported_number_matches_the_ledger. The measurements themselves are
recomputed from the stored weights by test_lm.py and test_seeds.py."""

from __future__ import annotations

import copy

import pytest

from lncourse import claims as C
from lncourse.results import RESULTS_DIR
from lncourse.selectability import ledger as L
from lncourse.selectability.report import FULL, NO_SCALING

LEDGER = RESULTS_DIR / "selectability" / "reported.json"


@pytest.fixture(scope="module")
def runs():
    return L.load_runs()


def test_every_reported_number_matches_the_ledger(runs):
    differences = C.compare(L.reported(**runs), C.load_ledger(LEDGER))
    assert not differences, ("chapter 2's numbers differ from results/selectability/"
                             "reported.json (a stored file or the ledger was changed; if a "
                             "new run is meant, rewrite it: python -m "
                             "lncourse.selectability.ledger):\n  "
                             + "\n  ".join(differences[:20]))


def _edit(runs, what):
    runs = copy.deepcopy(runs)
    if what == "lm_paper cell at n = 1,024":          # the edit, a later context
        runs["stored"]["models"][NO_SCALING]["sweep"]["after"][2][5][-1] = 0.0
    elif what == "lm_paper smaller n":
        runs["stored"]["models"][FULL]["sweep"]["before"][1][3][0] += 0.25
    elif what == "lm_paper proxy":
        runs["stored"]["proxy"]["7"][2][0] += 0.1
    elif what == "lm_paper tracked fraction":
        runs["stored"]["models"][NO_SCALING]["history"]["measure"][1]["after"][0] = 0.9
    elif what == "lm_quick_bpe final loss":
        runs["stored_bpe"]["models"][FULL]["history"]["test_loss"][-1] += 0.01
    elif what == "lm_quick_bpe gamma":
        runs["stored_bpe"]["models"][FULL]["sweep"]["min_abs_gamma"][1] = 0.0
    elif what == "seeds middle layer":
        runs["seeds"]["final"]["after"][1][2][0] = 0.5
    elif what == "seeds curve":
        runs["seeds"]["curve"]["0"]["before"][0][1][0] += 0.1
    elif what == "wall time":
        runs["seeds"]["provenance"]["wall_seconds"] *= 2
    return runs


EDITS = ["lm_paper cell at n = 1,024", "lm_paper smaller n", "lm_paper proxy",
         "lm_paper tracked fraction", "lm_quick_bpe final loss", "lm_quick_bpe gamma",
         "seeds middle layer", "seeds curve", "wall time"]


@pytest.mark.parametrize("what", EDITS)
def test_an_edited_stored_number_fails_the_ledger(runs, what):
    """The guard bites: an edit of one stored value the chapter reports (cells no weight
    test recomputes among them: a later context, a middle layer) is a difference."""
    assert C.compare(L.reported(**_edit(runs, what)), C.load_ledger(LEDGER)), what
