"""What chapter 4 reads from its all-positions probe runs
(lncourse.evidence.nope.stream_read): from the stored CPU run, the correlation of an
answer with the position, the cross-fitted recalibration, the lesson's slice and the
chapter's sentences, each shown to fail on contrary numbers; a device run stored from its
folder, its readings and the chapter's sentences on it (issue 35 item 5)."""

from __future__ import annotations

import copy
import json
import subprocess

import numpy as np
import pytest
from scipy import stats

from lncourse.evidence import claims as C
from lncourse.evidence.nope import stream_device as dev, stream_read as R
from lncourse.evidence.nope.stream_run import errors
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


# a device run, stored from its folder, and the chapter's sentences on it

STORED_GPU = RESULTS_DIR / "nope" / "stream_gpu.json"
STORED_CPU = RESULTS_DIR / "nope" / "stream_overfit_cpu.json"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A device record of the tiny phases, written on the CPU."""
    tmp = tmp_path_factory.mktemp("device")
    dev.run(["tiny_stored", "tiny_paper"], tmp / "out", tmp / "ck")
    return tmp / "out"


def _store(folder, tmp_path, monkeypatch, name="stream_gpu"):
    monkeypatch.setattr(R, "RESULTS_DIR", tmp_path)
    return json.loads(R.store_device(folder, name).read_text())


def test_import_stores_the_devices_provenance_and_readings_that_recompute(
        folder, tmp_path, monkeypatch):
    got = _store(folder, tmp_path, monkeypatch)
    rec = json.loads((folder / "stream_gpu.json").read_text())
    p = got["provenance"]
    assert p["device"] == rec["provenance"]["device"] and p["torch"] == rec["provenance"]["torch"]
    assert p["command"].startswith("python -m lncourse.evidence.nope.stream_device")
    assert p["checked_errors"] == 2 * (3 * 4 + 3 * 1)    # stored: 4 per probe; paper: 1
    with np.load(tmp_path / "nope" / got["predictions"]) as f:
        arrays = {k: f[k] for k in f.files}
    again = R.device_readings(got, arrays, load_result("nope/stream_paper"))
    assert json.loads(json.dumps(again)) == got["readings"]
    assert got["readings"]["baseline_middle"] == 4.0            # T = 16: T / 4
    assert got["readings"]["baseline_uniform"] == pytest.approx((16 ** 2 - 1) / 48)


def test_one_command_stores_the_readings_or_a_device_run(folder, tmp_path, monkeypatch):
    """`python -m lncourse.evidence.nope.stream_read` stores the stored run's readings
    (with --lesson, the lesson's slice); given a device run's folder, it stores that
    (with --name, under that name), recording the command; the two are not mixed."""
    monkeypatch.setattr(R, "RESULTS_DIR", tmp_path)
    got = json.loads(R.main([str(folder), "--name", "run_a"]).read_text())
    assert got["provenance"]["imported"]["command"] == (
        f"python -m lncourse.evidence.nope.stream_read {folder} --name run_a")
    assert (tmp_path / "nope" / "run_a_predictions.npz").exists()
    calls = []
    monkeypatch.setattr(R, "store_readings", lambda lesson, argv: calls.append(
        ("readings", lesson)))
    monkeypatch.setattr(R, "store_device", lambda f, name, argv: calls.append(
        ("device", str(f), name)))
    R.main([])
    R.main(["--lesson"])
    R.main([str(folder)])
    assert calls == [("readings", False), ("readings", True),
                     ("device", str(folder), "stream_gpu")]
    for wrong in (["--lesson", str(folder)], ["--name", "x"]):
        with pytest.raises(SystemExit):
            R.main(wrong)
    assert len(calls) == 3


def test_import_refuses_an_error_that_is_not_its_predictions(folder, tmp_path, monkeypatch):
    for key, delta in (("mae_classifier", 0.25), ("mae_regression_train", 0.01),
                       ("mae_classifier_bfloat16", 0.01)):
        bad = tmp_path / key
        subprocess.run(["cp", "-r", str(folder), str(bad)], check=True)
        rec = json.loads((bad / "stream_gpu.json").read_text())
        rec["phases"]["tiny_stored"]["models"][1][key][1] += delta
        (bad / "stream_gpu.json").write_text(json.dumps(rec))
        with pytest.raises(ValueError, match="is not the error"):
            _store(bad, tmp_path / "r", monkeypatch)


def test_find_commit_names_the_commit_with_those_blobs():
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=dev.ROOT, capture_output=True,
                          text=True).stdout.strip()
    tree = subprocess.run(["git", "ls-tree", "HEAD", "--", *dev.CODE], cwd=dev.ROOT,
                          capture_output=True, text=True).stdout.splitlines()
    code = {line.split("\t")[1]: line.split()[2] for line in tree}
    found = R.find_commit(code)
    assert subprocess.run(["git", "merge-base", "--is-ancestor", found, head],
                          cwd=dev.ROOT).returncode == 0
    assert R.find_commit({**code, dev.CODE[0]: "0" * 40}).startswith("unknown")


def test_welch_gap_is_scipys_welch_interval():
    rng = np.random.default_rng(1)
    a, b = rng.normal(5, 2, 200), rng.normal(4, 1, 1600)
    d, lo, hi = R.welch_gap(a, b)
    ci = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    assert d == pytest.approx(a.mean() - b.mean())
    assert (lo, hi) == pytest.approx((ci.low, ci.high))


def test_a_later_session_adds_its_models(tmp_path, monkeypatch):
    """Import one model, run the rest with --have, import again: the same readings as one
    run imported at once."""
    dev.run(["tiny_paper"], tmp_path / "a", tmp_path / "cka", models=["causal:0"])
    first = _store(tmp_path / "a", tmp_path / "r1", monkeypatch)
    assert first["readings"]["phases"]["tiny_paper"]["causal_models"] == [0]
    dev.run(["tiny_paper"], tmp_path / "b", tmp_path / "ckb",
            have=tmp_path / "r1" / "nope" / "stream_gpu.json")
    both = _store(tmp_path / "b", tmp_path / "r1", monkeypatch)
    dev.run(["tiny_paper"], tmp_path / "c", tmp_path / "ckc")
    once = _store(tmp_path / "c", tmp_path / "r2", monkeypatch)
    for r in (both, once):                      # timings differ from run to run
        assert len(r["readings"]["phases"]["tiny_paper"].pop("seqs_per_s")) == 3
    assert both["readings"] == once["readings"] and len(both["provenance"]["runs"]) == 1
    with pytest.raises(ValueError, match="in both"):
        _store(tmp_path / "c", tmp_path / "r1", monkeypatch)


def _claims(stored):
    return {c.key: c.holds for c in R.device_claims(stored)}


def _with(stored, arrays, edit):
    s = copy.deepcopy(stored)
    for m in s["phases"]["tiny_stored"]["models"] + s["phases"]["tiny_paper"]["models"]:
        edit(m)
    s["phases"]["stored"] = s["phases"].pop("tiny_stored")
    s["phases"]["paper"] = s["phases"].pop("tiny_paper")
    arrays = {k.replace("tiny_", "", 1): v for k, v in arrays.items()}
    s["readings"] = R.device_readings(s, arrays)
    return s


def test_the_sentences_follow_the_numbers(folder, tmp_path, monkeypatch):
    """Each of the device run's sentences (device_claims) holds on numbers that support it and fails on
    contrary ones: memorised training sequences (a large gap) against none; fast and
    slow; an error that falls with depth below guessing the middle against one that
    does not."""
    stored = _store(folder, tmp_path, monkeypatch)
    with np.load(tmp_path / "nope" / stored["predictions"]) as f:
        arrays = {k: f[k] for k in f.files}

    def memorised(m):
        for p in R.PROBES:
            if f"mae_{p}_train" in m:
                m[f"mae_{p}_train"] = [0.5 * v for v in m[f"mae_{p}_bfloat16"]]
        m["seqs_per_s"] = 1500.0

    def figure2(m):
        for p in R.PROBES:
            m[f"mae_{p}"] = [4.0] + [3.5 - 0.5 * k - 0.01 * m["seed"] for k in range(1, 3)]
        m["seqs_per_s"] = 900.0

    yes, no = _claims(_with(stored, arrays, memorised)), _claims(_with(stored, arrays, figure2))
    # training answers that are the position half the time and a uniform guess the
    # other half are about twice too wide (correlation about 1/2, full spread); answers
    # that are the positions exactly are not too wide
    rng = np.random.default_rng(0)

    def train_answers(make):
        return {k: (make(v.shape) if k.endswith("_train") and k.split("__")[-1]
                    .startswith("pred_") else v) for k, v in arrays.items()}

    pos = lambda shape: np.tile(np.arange(16), shape[1] // 16)[None].repeat(shape[0], 0)
    half = rng.random(arrays[next(k for k in arrays if k.endswith("pred_classifier_train"))]
                      .shape) < 0.5
    mixed = lambda shape: np.where(half, pos(shape), rng.integers(0, 16, shape))
    wide = _claims(_with(stored, train_answers(mixed), memorised))
    assert wide["stored_size_wide_on_training_too"] is True
    exact = _claims(_with(stored, train_answers(pos), memorised))
    assert exact["stored_size_wide_on_training_too"] is False
    assert yes["stored_size_overfits"] is True and no["stored_size_overfits"] is False
    assert yes["stream_gpu_throughput"] is True and no["stream_gpu_throughput"] is False
    assert no["paper_budget_classifier_falls_with_depth"] is True
    assert no["paper_budget_classifier_below_baseline"] is True
    assert yes["paper_budget_classifier_reproduces_figure2"] is False
    assert R.device_claims(None)[0].holds is None


def test_the_page_says_why_the_paper_budget_needs_a_gpu():
    """Before the GPU run is stored: 160,000 sequences at the stored benchmark's
    bfloat16 rate (6.67 CPU-s for 8 sequences) is about 37 CPU-hours per model."""
    b = load_result("nope/features_benchmark")["paths"]["new_all_positions_bfloat16"]
    want = 160_000 * b["cpu_s"] / (b["positions"] / 512) / 3600
    c = R.device_claims(None)[0]
    assert c.values["cpu_hours_per_model"] == pytest.approx(want)
    assert 30 < want < 45 and f"about {want:.0f} CPU-hours" in c.text


@pytest.mark.skipif(not STORED_GPU.exists(), reason="the GPU run is not stored yet")
def test_stored_gpu_run_recomputes():
    """Every error of every import (the first session's and each later one's, merged)
    is that of the stored predictions, and the stored readings are those they give
    (edit an error, a prediction or a reading and this fails)."""
    stored = load_result("nope/stream_gpu")
    with np.load(RESULTS_DIR / "nope" / stored["predictions"]) as f:
        arrays = {k: f[k] for k in f.files}
    p = stored["provenance"]
    assert R.check(stored, arrays) == p["checked_errors"] + sum(
        r["checked_errors"] for r in p["runs"])
    assert p["device"].startswith("cuda: NVIDIA H100")
    again = R.device_readings(stored, arrays, load_result("nope/stream_paper"))
    # at the precision the page prints them (lncourse.tolerance): recomputed by numpy
    # from the stored predictions, they move in their last bits with numpy's SIMD path
    assert C.compare(again, C.flatten(stored["readings"])) == []
    got = {c.key: c for c in R.device_claims(stored)}
    # what the page states of the first GPU run (4 causal models at the stored size)
    assert got["rerun_matches_stored"].holds and got["stored_size_overfits"].holds
    assert got["stored_size_wide_on_training_too"].holds
    assert got["stored_size_overfitting_small"].holds is False


@pytest.mark.skipif(not STORED_CPU.exists(), reason="the CPU over-fitting run is not stored")
def test_stored_cpu_overfitting_run_recomputes():
    stored = load_result("nope/stream_overfit_cpu")
    with np.load(RESULTS_DIR / "nope" / stored["predictions"]) as f:
        arrays = {k: f[k] for k in f.files}
    assert R.check(stored, arrays) == stored["provenance"]["checked_errors"]
    again = R.device_readings(stored, arrays, load_result("nope/stream_paper"))
    # at the precision the page prints them (lncourse.tolerance): recomputed by numpy
    # from the stored predictions, they move in their last bits with numpy's SIMD path
    assert C.compare(again, C.flatten(stored["readings"])) == []
    assert {c.key for c in R.device_claims(stored, "the CPU")} >= {"stored_size_overfits"}


def test_the_shape_claim_reads_the_paper_budget_model_depth_by_depth():
    """The stored paper-budget model's error rises with depth after depth 1 (the claim
    holds and says so); a profile falling with depth, Figure 2's shape, turns it False,
    and so does one where only the classifier rises."""
    stored = load_result(R.GPU)
    claim = R.shape_claim(stored)
    assert claim.holds is True and "does not have Figure 2's shape" in claim.text
    assert claim.values["classifier"]["lowest_depth"] == 1
    assert claim.values["classifier"]["slope_1_to_K"] > 0.5
    falling = copy.deepcopy(stored)
    for probe in ("classifier", "regression"):
        rows = falling["readings"]["phases"]["paper"][probe]["mae"]
        for k, row in enumerate(rows):
            row[0] = 150.0 - 5.0 * k
    assert R.shape_claim(falling).holds is False
    mixed = copy.deepcopy(stored)
    for k, row in enumerate(mixed["readings"]["phases"]["paper"]["regression"]["mae"]):
        row[0] = 150.0 - 5.0 * k
    assert R.shape_claim(mixed).holds is False


def test_recency_reads_training_errors_in_training_order(tmp_path, monkeypatch):
    """On the stored rerun the training error falls from the first quarter of the stream
    to the last and is lowest on the last batch, the first quarter near the held-out
    error; on made-up errors that fall with the sequence's index the quarters follow
    them, and a flat stream gives equal quarters."""
    stored = load_result(R.GPU)
    got = R.recency(stored)["classifier"]
    q = got["train_by_quarter"]
    assert q == sorted(q, reverse=True) and got["train_last_batch"] < q[-1]
    assert abs(q[0] - got["held_out"]) < 10 < got["held_out"] - q[-1]
    fake = {"predictions": "fake.npz", "config": {"stored": {"seqs_per_batch": 2,
                                                            "seeds": [0]}}}
    (tmp_path / "nope").mkdir()
    seq = np.arange(8, dtype=float)[::-1]             # sequence i errs 7 - i
    arrays = {}
    for probe in ("classifier", "regression"):
        arrays[f"stored__causal_0__seqerr_{probe}_train"] = np.tile(seq, (3, 1))
        arrays[f"stored__causal_0__seqerr_{probe}_held"] = np.full((3, 4), 9.0)
    np.savez(tmp_path / "nope" / "fake.npz", **arrays)
    monkeypatch.setattr(R, "RESULTS_DIR", tmp_path)
    made = R.recency(fake)["regression"]
    assert made["train_by_quarter"] == [6.5, 4.5, 2.5, 0.5]
    assert made["train_last_batch"] == 0.5 and made["held_out"] == 9.0
