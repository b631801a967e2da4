"""The seeded Table 1 runs of chapter 2: export, measurement from the stored weights,
claims, and the stored result (its final losses and n = 1,024 cells recomputed)."""

import base64
import copy
import json

import numpy as np
import pytest
import torch

from lncourse.lm import evaluate_lm
from lncourse.results import RESULTS_DIR, load_result, today_command
from lncourse.selectability.experiments import prefix_fractions
from lncourse.selectability.lm import layer_vectors, tokenized
from lncourse.evidence.selectability.fused import scaling_flags, stack_models
from lncourse.evidence.selectability.kernel import portable_build as portable_pass
from lncourse.evidence.selectability.seeds import SeedsConfig, checkpoint_state, train
from lncourse.evidence.selectability.train import fused_evaluate
from lncourse.evidence.selectability.seeds_measure import (claims, curve, layer_rows, measure,
                                                  models_at, result_of)


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    cfg = SeedsConfig.quick()
    ck = tmp_path_factory.mktemp("seeds") / "q.ckpt"
    out, _ = train(cfg, ck, progress=False)
    result = json.loads(json.dumps(result_of(cfg, checkpoint_state(cfg, ck))))
    return cfg, out, result, ck


def test_an_export_from_warmed_measurements_is_the_same(quick, tmp_path, monkeypatch):
    """Two processes warm the cache with half of the models each; the export then measures
    nothing and stores what a plain export stores (a cache keyed by the weights alone
    would hand a variant the other's cells at step 0)."""
    from lncourse.evidence.selectability import seeds_measure as S

    cfg, _, result, ck = quick
    state = checkpoint_state(cfg, ck)
    cache = tmp_path / "cache"
    S.result_of(cfg, state, cache=cache, warm_models=[0, 2])
    S.result_of(cfg, state, cache=cache, warm_models=[1, 3])
    # 4 models x 3 snapshots (the final cells at step 20 are its curve's: same contexts);
    # at step 0 a seed's two variants share their weights, not their cells
    assert len(list(cache.iterdir())) == 4 * 3

    def no_measuring(*a, **k):
        raise AssertionError("measured again")

    monkeypatch.setattr(S, "measure", no_measuring)
    again = json.loads(json.dumps(S.result_of(cfg, state, cache=cache)))
    assert again == result
    monkeypatch.undo()
    other = json.loads(json.dumps(result))          # other weights must not hit the cache
    for w in other["weights"]["20"]:
        name = sorted(w)[0]                         # one tensor's bytes reversed
        w[name] = base64.b64encode(base64.b64decode(w[name])[::-1]).decode()
    with pytest.raises(AssertionError, match="measured again"):
        monkeypatch.setattr(S, "measure", no_measuring)
        S.measure_cached(other, 20, torch.tensor(result["contexts"]), cache, [0])


def test_stored_weights_are_the_trained_ones(quick):
    cfg, out, result, _ = quick
    assert result["snapshot_steps_done"] == [0, 10, 20] and result["steps_done"] == 20
    for m, model in enumerate(models_at(result)):
        for name, p in model.named_parameters():
            assert torch.equal(p.detach(), out["params"][name][m]), name
    # the measured cells are those of the stored weights
    contexts = torch.tensor(result["contexts"])
    again = measure(models_at(result, 10), contexts[:4])
    assert again == result["curve"]["10"]


def test_rows_curve_and_claims(quick):
    _, _, result, _ = quick
    rows = layer_rows(result)
    for key, layers in rows.items():
        assert len(layers) == 2 and all(lo <= mean <= hi for mean, lo, hi in layers), key
    full = np.asarray(result["final"]["after"])[0::2]
    assert rows["full LayerNorm", "after"][0][0] == pytest.approx(100 * full[:, 0].mean())
    steps, vals = curve(result, "no scaling before attention")
    assert steps == [0, 10, 20] and vals.shape == (3, 2)
    got = {c.key: c for c in claims(result)}
    assert got["full_ln_zero"].holds is True
    broken = json.loads(json.dumps(result))
    broken["final"]["after"][0][1][0] = 0.5         # a full-LayerNorm cell made nonzero
    assert {c.key: c for c in claims(broken)}["full_ln_zero"].holds is False


# the seeded runs' exports; a continuation's (seeds_<preset>_<steps>.json, another format)
# is replayed by tests/selectability/test_continuation.py
STORED = sorted(p for p in (RESULTS_DIR / "selectability").glob("seeds_*.json")
                if not p.stem.split("_")[-1].isdigit())
CELLS = (("resid_pre", "before"), ("ln1", "after"))


# A test loss is a float32 forward pass (the course's C kernel for attention, its exp a
# polynomial of relative error 2.3e-7) and a float32 mean of cross-entropies over
# eval_batches x batch_size x 1,024 tokens: another CPU, or the kernel's portable build,
# rounds it differently by a few dozen float32 ulps (6e-8 each) at most. Measured against
# the stored value (written on an AMD EPYC): 2.6e-8 relative with AVX-512, 7.7e-8 with
# PyTorch held to AVX2, 3.3e-7 in the perturbed pass (scalar kernels, MKL's reproducible
# path, 3 threads: another split of the mean). So 1e-5 relative: 30 times the largest
# measured (TESTING.md, "Margins"), and still failing on an edit in the fourth decimal
# of a loss (4.5e-5 relative at 2.2), far below the 2 decimals chapter 2 prints.
LOSS_RTOL = 1e-5


@pytest.mark.replay
@pytest.mark.parametrize("path", STORED, ids=[p.stem for p in STORED])
def test_stored_seeds_recompute_from_their_weights(path):
    """Per stored model: the test loss at its last stored step and one n = T cell of the
    first context, recomputed from the stored weights; the models take the four cells
    (layer 1 and the last layer, before and after the norm) in turn, so every kind is
    checked; the claims hold. (Four cells per model made this the slowest test of the
    command: 18 s.) The losses come from the fused evaluator, all six models in one pass
    (1.9 s against 14.7 s one model at a time), and must equal the stored ones to
    LOSS_RTOL (above); the first model's is recomputed by the plain model's evaluate_lm as
    well, so the fused path cannot agree with the stored numbers by sharing a mistake with
    them. A cell is a count of keys that are not vertices of their hull, decided by
    :func:`lncourse.selectability.exact.selectability_batch` with its certificates; it
    must equal the stored one exactly (it did on both kernel paths above; a key whose
    decision another CPU flips would fail it, and would have to be shown undecided as
    tests/norms/test_trained.py does for 2-D heads)."""
    result = load_result(path)
    cfg = SeedsConfig.from_dict(result["config"])
    assert today_command(result["provenance"]["command"]).startswith(
        "python -m lncourse.evidence.selectability.seeds")
    _, _, test_ids = tokenized(cfg.lm)
    last = result["snapshot_steps_done"][-1]
    at = result["step"].index(last)
    contexts = torch.tensor(result["contexts"][:1])
    models = models_at(result)
    # The second pass (scripts/perturbed.sh: the kernel's portable build, 12 times
    # slower, made this 69 s there against 7 s) asks whether LOSS_RTOL holds on
    # another CPU's arithmetic; the first pass, on this CPU's own paths, checks every
    # stored loss against an edit. So the second recomputes the losses of the first seed's
    # two models (one per variant: both attention paths) and skips the plain evaluator's
    # cross-check of the fused code, which no CPU changes.
    n = 2 if portable_pass() else len(models)
    losses = fused_evaluate(stack_models(models[:n]), scaling_flags(models[:n]),
                            cfg.lm.n_heads, test_ids, result["seeds"][:n],
                            batches=cfg.lm.eval_batches, batch_size=cfg.lm.batch_size,
                            block_size=cfg.lm.block_size, offset=1)
    assert losses == pytest.approx([h["test_loss"][at] for h in result["histories"][:n]],
                                   rel=LOSS_RTOL)
    if not portable_pass():
        plain = evaluate_lm(models[0], test_ids, batches=cfg.lm.eval_batches,
                            batch_size=cfg.lm.batch_size, block_size=cfg.lm.block_size,
                            seed=result["seeds"][0] + 1, device="cpu")
        assert plain == pytest.approx(losses[0], rel=1e-5)
    for m, model in enumerate(models):
        vec = layer_vectors(model, contexts)
        (key, q), layer = CELLS[m % len(CELLS)], (0, cfg.lm.n_layers - 1)[m // 2 % 2]
        got = prefix_fractions(vec[key][layer], [cfg.lm.block_size])[0, 0]
        assert got == result["final"][q][m][layer][0], (m, q, layer)
    assert all(c.holds for c in claims(result)), [c.text for c in claims(result)
                                                  if not c.holds]


@pytest.mark.slow
@pytest.mark.parametrize("path", STORED, ids=[p.stem for p in STORED])
def test_stored_seeds_every_cell_recomputes(path):
    """Every measured cell of the seeded runs from the stored weights: the last step's,
    every layer and context (the fast test above does the first and last layer), and
    the curve's at every stored step (slow: 3,121 s of wall time for seeds_table1's 24
    stored steps, about 35 minutes of CPU, at load 2 to 6 on the shared 2-core machine;
    the ledger, tests/selectability/test_ledger.py, guards these cells in the fast
    suite)."""
    result = load_result(path)
    contexts = torch.tensor(result["contexts"])
    assert measure(models_at(result), contexts[:result["measured_contexts"]]) == \
        result["final"]
    for step, cells in result["curve"].items():
        assert measure(models_at(result, int(step)),
                       contexts[:result["curve_contexts"]]) == cells, step


def test_the_plateau_claim_states_what_the_steps_after_its_prediction_show():
    """The prediction set at the step-6,000 export (within 3 points of step 1,000's value
    from there on) failed at the step-14,000 export; the claim says so, and turns False if
    the later steps had stayed in the band or the earlier ones had left it."""
    from lncourse.evidence.selectability import seeds_measure as M

    path = RESULTS_DIR / "selectability" / "seeds_table1.json"
    stored = json.loads(path.read_text())

    def plateau(result):
        return next(c for c in M.claims(result) if c.key == "plateau")
    assert plateau(stored).holds and "fails" in plateau(stored).text
    flat = json.loads(path.read_text())          # every later step as step 6,000
    for s in flat["curve"]:
        if int(s) > M.PLATEAU_SET_AT:
            flat["curve"][s] = flat["curve"][str(M.PLATEAU_SET_AT)]
    assert plateau(flat).holds is False
    early = json.loads(path.read_text())         # the band already broken at step 4,000
    early["curve"]["4000"] = early["curve"][str(early["snapshot_steps_done"][-1])]
    assert plateau(early).holds is False


def test_the_settled_claim_reads_the_last_steps_change(quick, monkeypatch):
    from lncourse.evidence.selectability import seeds_measure as S

    _, _, result, _ = quick
    monkeypatch.setattr(S, "SETTLE_SINCE", 10)
    flat = json.loads(json.dumps(result))
    flat["curve"]["20"] = copy.deepcopy(flat["curve"]["10"])
    got = {c.key: c for c in claims(flat)}["settled"]
    assert got.holds is True and "+0.0 points" in got.text
    moved = json.loads(json.dumps(flat))
    for m, label in enumerate(moved["labels"]):
        if label == "no scaling before attention":
            moved["curve"]["20"]["after"][m] = [[min(1.0, v + 0.05) for v in layer]
                                                for layer in moved["curve"]["10"]["after"][m]]
    assert {c.key: c for c in claims(moved)}["settled"].holds is False
    short = json.loads(json.dumps(flat))
    short["steps_done"] = 15                        # an unfinished run states no verdict
    assert "settled" not in {c.key for c in claims(short)}
