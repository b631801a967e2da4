"""Chapter 1's measurement of LayerNorm's projection in trained models
(results/geometry/projection_paper.json; lncourse.evidence.geometry.projection) comes out
of today's code: the first and the last passage are recomputed from the models. Every
number the pages quote from it equals the ledger (results/geometry/reported.json), an
edit of a stored value fails that comparison, and each claim holds on the stored run and
fails on contrary numbers."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch

from lncourse.evidence import claims as C
from lncourse.evidence.geometry import ledger as L
from lncourse.evidence.geometry import projection as P
from lncourse.results import RESULTS_DIR, today_command

LEDGER = RESULTS_DIR / "geometry" / "reported.json"


@pytest.fixture(scope="module")
def run():
    return L.load_run()


def test_without_projection_is_layernorm_on_a_centred_input():
    torch.manual_seed(0)
    norm = torch.nn.LayerNorm(16, eps=1e-12).double()
    with torch.no_grad():
        norm.weight.normal_()
        norm.bias.normal_()
        x = torch.randn(5, 16, dtype=torch.float64)
        centred = x - x.mean(-1, keepdim=True)
        torch.testing.assert_close(P.without_projection(norm, centred), norm(centred))
        assert float(P.output_change(norm, centred).max()) < 1e-12
        shifted = x + 3.0                                   # along 1: far from LayerNorm
        assert float(P.share_along_ones(shifted).min()) > 0.5
        assert float(P.output_change(norm, shifted).min()) > 0.1
    p = torch.softmax(torch.randn(3, 4, 4), -1)
    assert torch.equal(P.row_tv(p, p), torch.zeros(3, 4))
    assert torch.allclose(P.row_tv(p, torch.roll(p, 1, -1)),
                          P.row_tv(torch.roll(p, 1, -1), p))


def test_stored_run_is_the_paper_preset(run):
    stored, arrays = run
    assert stored["config"] == dataclasses.asdict(P.ProjectionConfig.paper())
    assert today_command(stored["provenance"]["command"]).startswith(
        "python -m lncourse.evidence.geometry.projection --preset paper")
    for name, shape in stored["shapes"].items():
        assert list(arrays[name].shape) == shape, name


def test_first_and_last_passage_recompute(run):
    stored, arrays = run
    cfg = P.ProjectionConfig(**stored["config"])
    keep = [0, cfg.n_passages - 1]
    got = P.measure(cfg, only=keep)
    for row, p in enumerate(keep):
        mini, smol = got["minilm"][row], got["smollm2"][row]
        assert mini["names"] == stored["minilm"]["names"]
        assert mini["attn_names"] == stored["minilm"]["attn_names"]
        assert smol["names"] == stored["smollm2"]["names"]
        # MiniLM runs in float64: its values move by ~1e-12 between CPUs, and the stored
        # per-token arrays are rounded to float32 (a relative 6e-8), so 1e-6 relative
        # beside 1e-9 absolute (a TV distance or share near 0)
        for key in ("share", "change", "final_change"):
            np.testing.assert_allclose(mini[key], arrays[f"minilm_{key}"][p], rtol=1e-6,
                                       atol=1e-9, err_msg=f"minilm {key}")
        for key in ("tv_mean", "tv_max", "tv_random_mean"):
            np.testing.assert_allclose(mini[key], stored["minilm"][key][p], rtol=1e-6,
                                       atol=1e-9, err_msg=f"minilm {key}")
        np.testing.assert_allclose(mini["pooled_cos"], stored["minilm"]["pooled_cos"][p],
                                   rtol=1e-9, err_msg="minilm pooled cosine")
        # SmolLM2 is the dequantised model in float32, as chapter 5 reads it: a share
        # near 0 keeps only the absolute precision of its terms (tests/norms/test_real.py)
        np.testing.assert_allclose(smol["share"], arrays["smollm2_share"][p], rtol=2e-3,
                                   atol=1e-5, err_msg="smollm2 share")


def test_every_reported_number_matches_the_ledger(run):
    differences = C.compare(L.reported(*run), C.load_ledger(LEDGER))
    assert not differences, ("the numbers chapter 1 quotes differ from results/geometry/"
                             "reported.json (a stored file or the ledger was changed; if a "
                             "new run is meant, rewrite it: python -m "
                             "lncourse.evidence.geometry.ledger):\n  "
                             + "\n  ".join(differences[:20]))


@pytest.mark.parametrize("what", ["minilm share", "smollm2 share", "tv", "pooled cosine"])
def test_an_edited_stored_number_fails_the_ledger(run, what):
    stored, arrays = copy.deepcopy(run[0]), {k: v.copy() for k, v in run[1].items()}
    if what == "minilm share":
        arrays["minilm_share"][3, 4, 5] = 0.2
    elif what == "smollm2 share":
        arrays["smollm2_share"][0, 0, 0] = 0.3
    elif what == "tv":
        stored["minilm"]["tv_mean"][2][1][0] += 0.1
    else:
        stored["minilm"]["pooled_cos"][0] = 0.5
    assert C.compare(L.reported(stored, arrays), C.load_ledger(LEDGER))


def test_the_claims_hold_on_the_stored_run(run):
    failed = C.check_claims(L.claims(L.reported(*run)))
    assert not failed, failed


def _numbers(run, edit):
    numbers = copy.deepcopy(L.reported(*run))
    edit(numbers)
    return {c.key: c.holds for c in L.claims(numbers)}


@pytest.mark.parametrize("key, edit", [
    ("projection_removes_little",
     lambda n: n["smollm2"].update(removed_max_pct=12.0)),            # a large share
    ("projection_removes_little",
     lambda n: n["minilm"]["share"].update(median=0.06)),             # above chance
    ("attention_moves",
     lambda n: n["minilm"]["attention"].update(largest_mean=0.01)),   # rows barely move
    ("attention_moves",
     lambda n: n["minilm"]["attention"].update(largest_ratio=1.1)),   # like noise
    ("not_rmsnorm_at_inference",
     lambda n: n["minilm"]["swapped"]["final_change"].update(median=0.02)),
    ("not_rmsnorm_at_inference",
     lambda n: n["minilm"]["swapped"].update(pooled_cos_mean=0.999)),
])
def test_each_claim_fails_on_contrary_numbers(run, key, edit):
    verdicts = _numbers(run, edit)
    assert verdicts[key] is False
    assert all(v for k, v in verdicts.items() if k != key)
