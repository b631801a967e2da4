"""The cheap probe features, the all-positions probe, the ablation and their stored results
(chapter 4)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from lncourse.nope import variance as nope
from lncourse.evidence.nope import ablation as nope_ablation
from lncourse.evidence.nope import features as nope_features, probe as nope_probe
from lncourse.evidence.nope import claims as nope_claims, stream_run as nope_stream
from lncourse.results import RESULTS_DIR

TINY = dict(d_model=32, n_heads=4, n_layers=2, seq_len=16, sigma=0.02)


def _model(causal=True, seed=3):
    return nope.random_nope_model(32, 4, 2, 16, 0.02, causal, seed)


def test_features_match_the_old_path_at_its_positions():
    """Every depth, every kept position: the same numbers as probe_features (a depth
    shifted by one block, or the residual read instead of the final LN, would differ)."""
    model = _model()
    cfg = nope_probe.ProbeConfig(**TINY, train_seqs=4, eval_seqs=2, positions_per_seq=5,
                                 seqs_per_step=2, hidden=4, steps=2, seeds=(3,),
                                 bidirectional_seeds=(3,))
    old, pos = nope_probe.probe_features(model, cfg, 3, range(5))
    new, pos_new = nope_features.all_features(model, 3, range(5), 0.02, batch=2)
    new = new.view(3, 5, 16, -1)[:, torch.arange(5)[:, None], pos.view(5, -1)].flatten(1, 2)
    assert torch.equal(new, old)
    assert torch.equal(pos_new, torch.arange(16).repeat(5))


def test_features_subset_read_and_batching():
    model = _model()
    full, _ = nope_features.all_features(model, 3, range(3), 0.02, batch=3)
    sub, _ = nope_features.all_features(model, 3, range(3), 0.02, depths=[2, 0], batch=1)
    assert torch.allclose(sub, full[[2, 0]], atol=1e-6)
    resid, _ = nope_features.all_features(model, 3, range(3), 0.02, read="resid")
    assert torch.allclose(model.ln_final(resid), full, atol=1e-5)
    assert resid[0].std() < 0.05 < full[0].std()           # the raw inputs: N(0, 0.02²)
    with pytest.raises(ValueError, match="depths"):
        nope_features.all_features(model, 3, range(2), 0.02, depths=[3])
    with pytest.raises(ValueError, match="read"):
        nope_features.all_features(model, 3, range(2), 0.02, read="ln2")


def test_errors_recomputes_mae_against_each_sequences_positions():
    T = 4
    pred = np.array([[0, 1, 2, 3, 3, 2, 1, 0]])            # one depth, two sequences
    assert nope_stream.errors(pred, T) == [pytest.approx((0 + 0 + 0 + 0 + 3 + 1 + 1 + 3) / 8)]
    with pytest.raises(ValueError):
        nope_stream.errors(pred[:, :7], T)


def _stream_cfg(**kw):
    base = dict(**TINY, train_seqs=8, eval_seqs=2, seqs_per_batch=2, updates=12,
                update_positions=8, hidden=8, lr=3e-3, dtype="float32", seeds=(0,),
                bidirectional_seeds=(0,))
    return nope_stream.StreamConfig(**{**base, **kw})


def test_stream_resumes_identically():
    cfg = _stream_cfg()
    whole = nope_stream.train_model(cfg, 0, True)
    saved = []
    nope_stream.train_model(cfg, 0, True, on_checkpoint=saved.append, every=1)
    state = saved[1]                                        # stopped after two batches
    resumed = nope_stream.train_model(cfg, 0, True, state=state)
    for key in ("pred_classifier", "pred_regression"):
        assert torch.equal(whole[key], resumed[key])
    assert sum(cfg.updates_in(j) for j in range(cfg.n_batches)) == cfg.updates


def test_stream_probes_learn_a_planted_position(monkeypatch):
    """Features with the position written into one coordinate: both probes must find it
    (a loop that trained on shuffled targets, or predicted from the wrong rows, fails)."""
    cfg = _stream_cfg(train_seqs=64, eval_seqs=4, seqs_per_batch=8, updates=400,
                      update_positions=64, hidden=16, lr=1e-2)
    T = cfg.seq_len

    def planted(model, seed, indices, sigma, depths=None, read="ln_final", batch=8,
                dtype=torch.float32):
        indices = list(indices)
        for b0 in range(0, len(indices), batch):
            n = len(indices[b0:b0 + batch])
            pos = torch.arange(T).repeat(n)
            gen = torch.Generator().manual_seed(indices[b0])
            h = torch.randn(3, n * T, cfg.d_model, generator=gen)
            h[1:, :, 0] = pos / T * 4                            # depths 1 and 2 carry it
            yield h, pos

    monkeypatch.setattr(nope_stream, "feature_batches", planted)
    r = nope_stream.train_model(cfg, 0, True)
    base = nope_probe.middle_baseline(T)
    for probe in ("classifier", "regression"):
        mae = r[f"mae_{probe}"]
        assert mae[0] > 0.8 * base and max(mae[1:]) < 0.5 * base, (probe, mae)


def test_bad_stream_config():
    with pytest.raises(ValueError, match="multiple"):
        _stream_cfg(train_seqs=7)
    with pytest.raises(ValueError, match="dtype"):
        _stream_cfg(dtype="float16")


def test_depth_slope_and_summary():
    assert nope_claims.depth_slope([99, 10, 8, 6, 4]) == pytest.approx(-2.0)
    runs = [{"seed": s, "mae_classifier": [128, 100 - s, 90 - s, 80 - s]} for s in range(3)]
    s = nope_claims.summary({"results": {"causal": runs, "bidirectional": []}})["causal"]
    assert s["slope"][0] == pytest.approx(-10.0)
    assert s["mae"][1] == pytest.approx(99.0)
    assert s["ci"][1][0] < 99 < s["ci"][1][1]


STREAM = RESULTS_DIR / "nope" / "stream_paper.json"
ABLATION = RESULTS_DIR / "nope" / "ablation_cpu.json"


@pytest.mark.skipif(not STREAM.exists(), reason="no stored stream run")
def test_stored_stream_errors_recompute_from_predictions():
    """Every stored per-depth error of every finished model is the error of its stored
    held-out predictions (edit any reported error, or a prediction, and this fails)."""
    stored = json.loads(STREAM.read_text())
    preds = np.load(STREAM.with_name(stored["predictions"]))
    T, n = stored["config"]["seq_len"], 0
    for kind, runs in stored["results"].items():
        for r in runs:
            for key in (k for k in r if k.startswith("mae_")):
                p = preds[f"{kind}_{r['seed']}_{key[4:]}"]
                assert p.shape == (stored["config"]["n_layers"] + 1,
                                   stored["config"]["eval_seqs"] * T)
                assert r[key] == pytest.approx(nope_stream.errors(p, T), abs=1e-9), (kind, key)
                n += 1
    assert n >= 2 and stored["models_done"] == sum(map(len, stored["results"].values()))


@pytest.mark.skipif(not ABLATION.exists(), reason="no stored ablation")
def test_stored_ablation_recomputes_from_predictions():
    stored = json.loads(ABLATION.read_text())
    preds = np.load(ABLATION.with_name(stored["predictions"]))
    T = stored["config"]["seq_len"]
    for r in stored["runs"]:
        for row, mae in r["mae"].items():
            assert mae == pytest.approx(nope_stream.errors(preds[f"{r['seed']}_{row}"], T),
                                        abs=1e-9), (r["seed"], row)
    assert set(stored["runs"][0]["mae"]) == set(nope_ablation.ROWS) | {"base_bfloat16"}


def test_ablation_claims_check_each_hypothesis_at_the_deepest_probe():
    rows = list(nope_ablation.ROWS) + ["base_bfloat16"]

    def run(seed, shift):
        mae = {row: [128.0, 100.0 + seed, 90.0 + seed] for row in rows}
        for row, delta in shift.items():
            mae[row] = [m + delta + 0.1 * seed for m in mae[row]]
        return {"seed": seed, "mae": mae}

    shift = {"64_positions": 10, "quarter_sequences": 0.05, "before_final_ln": -20,
             "variance_feature": 5, "regression": 3, "base_bfloat16": 0.5}
    abl = {"config": {"depths": [0, 6, 12]}, "runs": [run(s, shift) for s in range(3)]}
    got = {c.key: c.holds for c in nope_claims.ablation_claims(abl)}
    assert got == {"ablation_64_positions": True, "ablation_quarter_sequences": False,
                   "ablation_before_final_ln": True, "ablation_variance_feature": False,
                   "ablation_regression": True, "ablation_base_bfloat16": True}
    # contrary: regression within noise of the base probe, bfloat16 five positions off
    abl["runs"] = [run(s, {**shift, "regression": 0.05, "base_bfloat16": 5})
                   for s in range(3)]
    got = {c.key: c.holds for c in nope_claims.ablation_claims(abl)}
    assert got["ablation_regression"] is False and got["ablation_base_bfloat16"] is False
    one = {"config": {"depths": [0, 6, 12]}, "runs": [run(0, shift)]}
    assert all(c.holds is None for c in nope_claims.ablation_claims(one))


def test_verdict_on_the_first_stored_probe_is_a_null_result():
    """The chapter reports the first stored run (regression probe, 64 positions) as not
    reproducing Figure 2: no trend with depth, not below the baseline."""
    from lncourse.results import load_result
    got = {c.key: c for c in nope_claims.claims(load_result("nope/probe_paper"), key="mae")}
    assert got["falls_with_depth"].holds is False and got["below_baseline"].holds is False
    s = nope_claims.summary(load_result("nope/probe_paper"), key="mae")["causal"]
    assert s["mean_1_to_K"][1] < 128 < s["mean_1_to_K"][2] and s["seeds"] == 5


def test_below_baseline_claims_and_the_uniform_guess():
    L = 512
    a = np.arange(L)
    assert nope_claims.uniform_guess(L) == pytest.approx(np.abs(a[:, None] - a).mean())
    runs = [{"seed": s, "mae": {"base": [170.0, 160.0 + s], "regression": [128.0, 110.0 + s],
                                "edge": [128.0, 125.0 + 2 * s]}} for s in range(3)]
    abl = {"config": {"depths": [0, 12]}, "runs": runs, "baseline": 128.0}
    got = {c.key: c.holds for c in nope_claims.below_baseline_claims(abl)}
    assert got == {"below_base": False, "below_regression": True, "below_edge": False}


def test_a_checkpoint_interrupted_mid_write_leaves_the_previous_one(tmp_path, monkeypatch):
    from lncourse.evidence.nope import stream_run as stream

    path = tmp_path / "causal_0.pt"
    stream.save_atomic({"batch": 10}, path)
    real = torch.save

    def dies_mid_write(obj, f):
        real(obj, f)
        raise KeyboardInterrupt          # the session stops after the bytes, before the rename

    monkeypatch.setattr(stream.torch, "save", dies_mid_write)
    with pytest.raises(KeyboardInterrupt):
        stream.save_atomic({"batch": 20}, path)
    monkeypatch.undo()
    assert torch.load(path)["batch"] == 10
    assert [p.name for p in tmp_path.iterdir()] == ["causal_0.pt"]
