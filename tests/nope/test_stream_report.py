"""What chapter 4 reads from the all-positions probe run (lncourse.evidence.nope.stream_report):
the correlation of an answer with the position, the cross-fitted recalibration, and the
chapter's sentences, each shown to fail on contrary numbers."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from lncourse.evidence.nope import stream_report as R
from lncourse.evidence.nope.stream import errors
from lncourse.results import RESULTS_DIR, load_result

T = 64


def _pos(n):
    return np.tile(np.arange(T), n)


def test_correlation_reads_the_position_whatever_its_scale():
    p = np.stack([_pos(3), 3 * _pos(3) + 7, T - 1 - _pos(3), np.full(3 * T, 5)])
    r = R.correlation(p, T)
    assert r == pytest.approx([1.0, 1.0, -1.0, 0.0])
    sd = np.arange(T).std()
    assert R.spread(p, T) == pytest.approx([sd, 3 * sd, sd, 0.0])
    with pytest.raises(ValueError, match="depths"):
        R.correlation(p[:, :-1], T)
    with pytest.raises(ValueError, match="finite"):
        R.correlation(np.where(p == 5, np.nan, p), T)


def test_recalibration_undoes_a_bad_scale_and_is_cross_fitted():
    pos = _pos(4)
    scaled = np.stack([3 * pos + 200])                 # the position, badly scaled
    assert errors(scaled, T)[0] > 2 * T
    assert R.recalibrated(scaled, T)[0] == pytest.approx(0, abs=1e-9)
    # sequences 0 and 2 read the position, 1 and 3 read it backwards: a map fitted to
    # the scored half would find no slope (error ~T/4); fitted to the other half it
    # turns each half's answers the wrong way round (error ~T/2)
    flip = np.where(np.repeat(np.arange(4), T) % 2 == 0, pos, T - 1 - pos)[None]
    assert R.recalibrated(flip, T)[0] == pytest.approx(T / 2, abs=0.5)
    const = np.full((1, 4 * T), 3)
    assert R.recalibrated(const, T)[0] == pytest.approx(T / 4, abs=0.5)
    with pytest.raises(ValueError, match="two"):
        R.recalibrated(const[:, :T], T)


def _stored(noise=8.0, bi_reads=False, causal_reads=True, scale=1.0):
    """3 causal models whose probes read the position from depth 1 on (with noise), 2
    bidirectional ones that read nothing; depth 0 reads nothing."""
    rng = np.random.default_rng(0)
    n, K1 = 6, 4
    results, preds = {"causal": [], "bidirectional": []}, {}
    for kind, seeds in (("causal", (0, 1, 2)), ("bidirectional", (0, 1))):
        reads = causal_reads if kind == "causal" else bi_reads
        for s in seeds:
            r = {"seed": s}
            for probe in R.PROBES:
                p = rng.integers(0, T, (K1, n * T)).astype(float)
                if reads:
                    p[1:] = T / 2 + scale * (_pos(n) - T / 2 + rng.normal(0, noise,
                                                                          (K1 - 1, n * T)))
                p = np.clip(np.round(p), 0, T - 1).astype(np.int16)
                preds[f"{kind}_{s}_{probe}"] = p
                r[f"mae_{probe}"] = errors(p, T)
                r[f"mae_{probe}_bfloat16"] = [e + 0.1 for e in r[f"mae_{probe}"]]
            results[kind].append(r)
    stored = {"config": {"seq_len": T, "train_seqs": 64, "updates": 500},
              "results": results, "baseline": T / 4}
    ablation = {"config": {"depths": [0, 3], "train_seqs": 8, "updates": 100},
                "runs": [{"seed": s, "mae": {"base": [T / 3, T / 3 + s]}} for s in range(3)]}
    return stored, preds, ablation


def _holds(stored, preds, ablation):
    return {c.key: c.holds for c in R.claims(stored, R.readings(stored, preds), ablation)}


def test_the_sentences_hold_where_the_probe_reads_the_position():
    got = _holds(*_stored())
    for key in ("stream_reads_position", "stream_control_reads_nothing",
                "stream_recalibrated_below", "stream_more_data", "stream_bfloat16",
                "stream_too_wide",
                "stream_classifier_below_baseline"):
        assert got[key] is True, key


def test_each_sentence_fails_on_contrary_numbers():
    got = _holds(*_stored(causal_reads=False))
    assert got["stream_reads_position"] is False
    assert got["stream_recalibrated_below"] is False
    assert got["stream_more_data"] is False
    assert got["stream_classifier_reproduces_figure2"] is False
    assert _holds(*_stored(bi_reads=True))["stream_control_reads_nothing"] is False
    assert _holds(*_stored(scale=0.6))["stream_too_wide"] is False   # shrunk answers
    stored, preds, abl = _stored()
    s2 = copy.deepcopy(stored)
    s2["results"]["bidirectional"][1]["mae_regression_bfloat16"][2] += 3
    assert _holds(s2, preds, abl)["stream_bfloat16"] is False
    p2 = dict(preds)                                  # depth 0 reads the position too
    for s in (0, 1, 2):
        p2[f"causal_{s}_classifier"] = p2[f"causal_{s}_classifier"].copy()
        p2[f"causal_{s}_classifier"][0] = _pos(6)
    assert _holds(stored, p2, abl)["stream_reads_position"] is False


def test_too_few_models_say_so():
    stored, preds, abl = _stored()
    stored["results"] = {"causal": stored["results"]["causal"][:1], "bidirectional": []}
    got = R.claims(stored, R.readings(stored, preds), abl)
    assert [c.holds for c in got if c.key == "stream_reads"] == [None]


def test_readings_of_other_models_are_refused():
    stored, preds, abl = _stored()
    reads = R.readings(stored, preds)
    reads["causal"]["classifier"]["seeds"] = [0, 2, 1]
    with pytest.raises(ValueError, match="models"):
        R.claims(stored, reads, abl)


STREAM = RESULTS_DIR / "nope" / "stream_paper.json"


@pytest.mark.skipif(not STREAM.exists(), reason="no stored stream run")
def test_stored_readings_recompute_from_the_predictions():
    """The stored readings (correlation, spread, recalibrated error per model, probe and
    depth) are those of the stored predictions, of the stored run's version (edit a
    prediction or a reading and this fails)."""
    stored = load_result("nope/stream_paper")
    got = R.readings(stored, R.load_predictions(stored))
    kept = R.load_readings(stored)
    assert got.keys() == kept.keys()
    for kind in got:
        for probe in R.PROBES:
            assert got[kind][probe]["seeds"] == kept[kind][probe]["seeds"]
            for q in R.MEASURES:
                assert np.array(kept[kind][probe][q]) == pytest.approx(
                    np.array(got[kind][probe][q]), abs=1e-12), (kind, probe, q)
    other = {**stored, "provenance": {**stored["provenance"], "written": "another day"}}
    with pytest.raises(ValueError, match="another stored run"):
        R.load_readings(other)


def test_depth_trend_of_the_stored_readings_is_the_exploratory_sentence():
    """Issue 35 item 6, from the stored readings of the 5 causal models: the classifier's
    recalibrated error falls 8.4 [7.4, 9.4] positions from depth 1 to 12 and its
    correlation rises 0.16 [0.15, 0.18]; the sentence says it is exploratory."""
    from lncourse.summary import paired_interval

    stored = load_result("nope/stream_paper")
    reads = R.load_readings(stored)
    t = R.depth_trend(stored, reads)
    recal = np.array(reads["causal"]["classifier"]["recal"])
    corr = np.array(reads["causal"]["classifier"]["corr"])
    assert t["recal_drop"] == pytest.approx(paired_interval(recal[:, 1] - recal[:, 12]))
    assert t["corr_rise"] == pytest.approx(paired_interval(corr[:, 12] - corr[:, 1]))
    assert [round(v, 1) for v in t["recal_drop"]] == [8.4, 7.4, 9.4]
    assert [round(v, 2) for v in t["corr_rise"]] == [0.16, 0.15, 0.18]
    c = R.trend_claim(stored, reads)
    assert c.holds is True and c.text.startswith("Exploratory")
    assert "8.4 [7.4, 9.4]" in c.text and "+0.16 [+0.15, +0.18]" in c.text


def test_depth_trend_fails_on_contrary_readings():
    """Readings whose recalibrated error rises with depth, or whose correlation falls:
    the sentence does not hold."""
    stored = load_result("nope/stream_paper")
    reads = copy.deepcopy(R.load_readings(stored))
    for row in reads["causal"]["classifier"]["recal"]:
        row[12] = row[1] + 3.0                       # deeper is worse
    assert R.trend_claim(stored, reads).holds is False
    reads = copy.deepcopy(R.load_readings(stored))
    for row in reads["causal"]["classifier"]["corr"]:
        row[12] = row[1] - 0.05
    assert R.trend_claim(stored, reads).holds is False


def test_the_lessons_slice_is_the_stored_predictions():
    """Chapter 4's lesson reads nope/stream_paper_lesson (3 MB, published for Colab) in
    place of the 34 MB of predictions: it must be exactly their classifier answers at the
    lesson's depths, for every finished model of the stored run's version, and describe
    the run as the chapter's prose does (200 held-out sequences of 512 positions)."""
    stored = load_result("nope/stream_paper")
    lesson = load_result(R.LESSON)
    assert lesson["source_written"] == stored["provenance"]["written"]
    assert lesson["config"]["depths"] == list(R.LESSON_DEPTHS)
    assert (lesson["config"]["eval_seqs"], lesson["config"]["seq_len"]) == (200, 512)
    got, want = R.load_predictions(lesson), R.lesson_answers(stored, R.load_predictions(stored))
    assert got.keys() == want.keys() and len(got) == 7     # 5 causal and 2 bidirectional
    for key in want:
        assert got[key].dtype == np.int16 and np.array_equal(got[key], want[key]), key
    edited = dict(got)
    edited["causal_0_classifier"] = got["causal_0_classifier"].copy()
    edited["causal_0_classifier"][2, 0] += 1
    assert not np.array_equal(edited["causal_0_classifier"], want["causal_0_classifier"])
