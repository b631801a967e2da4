"""Every number chapter 4 reports from its stored files, recomputed and compared with its
ledger (results/nope/reported.json; lncourse.nope.ledger): editing a stored value that a
reported number depends on, or the ledger, fails
test_every_reported_number_matches_the_ledger. The ablation's errors are also recomputed
from their stored predictions (test_stream.py)."""

from __future__ import annotations

import copy

import pytest

from lncourse import claims as C
from lncourse.nope import ledger as L
from lncourse.results import RESULTS_DIR

LEDGER = RESULTS_DIR / "nope" / "reported.json"


@pytest.fixture(scope="module")
def runs():
    return L.load_runs()


def test_every_reported_number_matches_the_ledger(runs):
    differences = C.compare(L.reported(**runs), C.load_ledger(LEDGER))
    assert not differences, ("chapter 4's numbers differ from results/nope/reported.json "
                             "(a stored file or the ledger was changed; if a new run is "
                             "meant, rewrite it: python -m lncourse.nope.ledger):\n  "
                             + "\n  ".join(differences[:20]))


def _edit(runs, what):
    runs = copy.deepcopy(runs)
    if what == "deepest probe error":               # the edit
        runs["probe"]["results"]["causal"][2]["mae"][-1] = 40.0
    elif what == "bidirectional depth 6":
        runs["probe"]["results"]["bidirectional"][1]["mae"][6] += 0.5
    elif what == "ablation cell":
        runs["ablation"]["runs"][1]["mae"]["quarter_sequences"][1] += 0.5
    elif what == "ablation baseline":
        runs["ablation"]["baseline"] = 100.0
    elif what == "speed-up":
        runs["features"]["speedup_per_cpu_hour"]["new_all_positions_bfloat16"] = 20.0
    elif what == "bfloat16 error":
        runs["features"]["bfloat16_relative_feature_error_per_depth"][-1] = 0.02
    return runs


@pytest.mark.parametrize("what", ["deepest probe error", "bidirectional depth 6",
                                  "ablation cell", "ablation baseline", "speed-up",
                                  "bfloat16 error"])
def test_an_edited_stored_number_fails_the_ledger(runs, what):
    assert C.compare(L.reported(**_edit(runs, what)), C.load_ledger(LEDGER)), what
