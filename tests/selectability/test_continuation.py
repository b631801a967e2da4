"""Table 1 at the released code's checkpoint, step 50,000 (lncourse.selectability.
seeds_continue): the stored export recomputes from the finished checkpoint's weights,
which the repository keeps (results/checkpoints/selectability_seeds_table1_50000.ckpt)."""

from __future__ import annotations

import dataclasses

import pytest

from lncourse.checkpoint import load_checkpoint
from lncourse.results import RESULTS_DIR, load_result
from lncourse.evidence.selectability import seeds_continue as C
from lncourse.selectability.experiments import prefix_fractions
from lncourse.evidence.selectability.fused import scaling_flags, stack_models
from lncourse.evidence.selectability.kernel import portable_build as portable_pass
from lncourse.selectability.lm import held_out_contexts, layer_vectors
from lncourse.evidence.selectability.train import fused_evaluate

EXPORT = RESULTS_DIR / "selectability" / "seeds_table1_50000.json"
CKPT = RESULTS_DIR / "checkpoints" / "selectability_seeds_table1_50000.ckpt"
CELLS = (("resid_pre", "before"), ("ln1", "after"))
# the same derivation as tests/selectability/test_seeds.py's LOSS_RTOL: a float32 mean
# over 4 batches of 16 x 1,024 tokens, whose summation order another CPU may change by a
# few 1e-7 relative; an edit in the fourth decimal of a loss fails it
LOSS_RTOL = 1e-5


@pytest.mark.replay
def test_step_50000_export_recomputes_from_the_checkpoint():
    """Each seed's test loss at step 50,000 (the fused evaluator, as the trainer computed
    it) and, per model, one n = 1,024 cell of the first held-out context (the models take
    the kinds before and after the norm and the first and last layer in turn), which must
    equal the stored count exactly, as the seeded run's cells do on both kernel paths."""
    result = load_result("selectability/seeds_table1_50000")
    cfg = C.PRESETS["table1"]()
    state = load_checkpoint(CKPT, kind="lm_fused")
    assert state["step"] == result["steps_done"] == cfg.steps
    vocab_size, _, test_ids = C.streams(cfg)
    models = C._models(cfg, state["params"], result["seeds"], vocab_size)
    # The second pass (scripts/perturbed.sh: the kernel's portable build, 12 times slower) asks
    # only whether LOSS_RTOL holds on other kernels, so it recomputes the first seed's
    # loss; the first pass checks every seed's against an edit.
    n = 1 if portable_pass() else len(models)
    losses = fused_evaluate(stack_models(models[:n]), scaling_flags(models[:n]),
                            cfg.lm.n_heads, test_ids, result["seeds"][:n],
                            batches=cfg.lm.eval_batches, batch_size=cfg.lm.batch_size,
                            block_size=cfg.lm.block_size, offset=1)
    assert losses == pytest.approx([h["test_loss"][-1] for h in result["histories"][:n]],
                                   rel=LOSS_RTOL)
    n = result["measured_contexts"]
    ctx = held_out_contexts(test_ids, dataclasses.replace(
        cfg.lm, contexts=n, track_contexts=min(cfg.lm.track_contexts, n)))[:1]
    cells = result["fractions"][str(cfg.steps)]
    for m, model in enumerate(models):
        vec = layer_vectors(model, ctx)
        (key, q), layer = CELLS[m % 2], (0, cfg.lm.n_layers - 1)[m // 2 % 2]
        got = prefix_fractions(vec[key][layer], [cfg.lm.block_size])[0, 0]
        assert got == cells[q][m][layer][0], (m, q, layer)


def _statements(result: dict, seeds: dict) -> dict[str, bool]:
    """What the replication page's section "Which checkpoint" says of the export: the
    paper's Table 1 lies in one new seed's prediction interval; the change from step
    34,000 has a mean under half a point but an interval past the ±2-point band (so the
    prediction failed on the interval's width, not on the level); every model's test loss
    fell from step 34,000 and ends at least 0.2 nats below the bigram table."""
    from lncourse.evidence.selectability import seeds_stats as S

    got = {c.key: c for c in S.continuation_claims(result)}
    t50, moved = got["table1_50000"].values, got["table1_34000_to_50000"]
    bigram = S.data_references(seeds)["bigram"]
    kept = [m for m, lab in enumerate(seeds["labels"]) if lab == C.LABEL]
    before = [seeds["histories"][m]["test_loss"][-1] for m in kept]
    after = [h["test_loss"][-1] for h in result["histories"]]
    return {"paper inside the prediction interval":
            t50["prediction"][1] <= t50["paper"] <= t50["prediction"][2],
            "the prediction failed on the interval's width": not moved.holds
            and abs(moved.values["change"][0]) < 0.5,
            "still learning, well below the bigram": all(
                b < a and b <= bigram - 0.2 for a, b in zip(before, after))}


def test_the_page_statements_hold_and_fail_on_contrary_numbers():
    import copy

    import numpy as np

    result = load_result("selectability/seeds_table1_50000")
    seeds = load_result("selectability/seeds_table1")
    assert all(_statements(result, seeds).values()), _statements(result, seeds)
    moved = copy.deepcopy(result)                   # the count 5 points higher at 50,000
    moved["fractions"]["50000"]["after"] = (
        np.asarray(moved["fractions"]["50000"]["after"]) + 0.05).tolist()
    assert not _statements(moved, seeds)["the prediction failed on the interval's width"]
    far = copy.deepcopy(result)                     # 25 points above: the paper outside
    far["fractions"]["50000"]["after"] = (
        np.asarray(far["fractions"]["50000"]["after"]) + 0.25).tolist()
    assert not _statements(far, seeds)["paper inside the prediction interval"]
    stalled = copy.deepcopy(result)                 # losses that rose after step 34,000
    for h in stalled["histories"]:
        h["test_loss"][-1] += 0.1
    assert not _statements(stalled, seeds)["still learning, well below the bigram"]


@pytest.mark.slow
def test_step_50000_every_cell_recomputes():
    """Every step-50,000 cell of the export (3 models x 4 layers x the held-out contexts,
    before and after the norm), measured again from the committed checkpoint: the export's
    own measurement, repeated (about 10 minutes of one core)."""
    from lncourse.evidence.selectability.seeds_measure import measure

    result = load_result("selectability/seeds_table1_50000")
    cfg = C.PRESETS["table1"]()
    state = load_checkpoint(CKPT, kind="lm_fused")
    vocab_size, _, test_ids = C.streams(cfg)
    n = result["measured_contexts"]
    ctx = held_out_contexts(test_ids, dataclasses.replace(
        cfg.lm, contexts=n, track_contexts=min(cfg.lm.track_contexts, n)))
    models = C._models(cfg, state["params"], result["seeds"], vocab_size)
    assert measure(models, ctx) == result["fractions"][str(cfg.steps)]
