"""The all-positions probe on a device (lncourse.evidence.nope.stream_device): its fast
path and its budgeted run (chapter 4, issue 35)."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest
import torch

from lncourse.evidence.nope import features as nope_features, stream_run as nope_stream
from lncourse.evidence.nope import stream_device as dev
from lncourse.nope import variance as nope

SMALL = dict(d_model=64, n_heads=4, n_layers=3, seq_len=32, sigma=0.02)
U_BF16 = 2.0 ** -9      # bfloat16's unit roundoff (8 significant bits)
U_F32 = 2.0 ** -24


def _cfg(**kw):
    base = dict(**SMALL, train_seqs=16, eval_seqs=4, seqs_per_batch=4, updates=30,
                update_positions=16, hidden=8, lr=3e-3, dtype="float32", held_out_start=16,
                checkpoint_every=1, seeds=(0,), bidirectional_seeds=(0,))
    return dev.FastConfig(**{**base, **kw})


def _features(dtype):
    model = nope.random_nope_model(64, 4, 3, 32, 0.02, True, 3)
    cfg = _cfg()
    x = dev.host_inputs(3, range(4), cfg, "cpu")
    ref, _ = nope_features.all_features(model, 3, range(4), 0.02, batch=4)
    return dev.FrozenNoPE(model, dtype).features(x), ref


def test_fast_forward_is_the_models_in_float32():
    """Fused LayerNorm and one QKV product reorder float32 sums only: the features stay
    within 1e-5 of the model's own (a few hundred unit roundoffs at entries up to about
    4; a skipped block, swapped heads or keys read as queries differ by order 1)."""
    got, ref = _features(torch.float32)
    assert got.shape == ref.shape == (4, 4 * 32, 64)
    assert (got - ref).abs().max() <= 1e-5 * max(1.0, ref.abs().max().item())


def test_fast_forward_in_bfloat16_is_rounding_away_from_float32():
    """Each of the 2k sublayers before depth k, and the final read, rounds its operands
    to 8 significant bits: independent relative errors of about u = 2^-9 each, so the
    relative RMS error of depth k's features grows like u sqrt(2k + 1). Held to twice
    that, and to at least a fifth of u from depth 1 on (a path that silently stayed in
    float32 fails the second)."""
    got, ref = _features(torch.bfloat16)
    for k in range(4):
        rel = ((got[k] - ref[k]).pow(2).mean().sqrt() / ref[k].pow(2).mean().sqrt()).item()
        assert rel <= 2 * U_BF16 * math.sqrt(2 * k + 1), (k, rel)
        assert k == 0 or rel >= 0.2 * U_BF16, (k, rel)


def test_fast_path_is_the_stream_run_on_the_cpu():
    """Stream inputs in float32: the same sequences, minibatches and probes as
    lncourse.evidence.nope.stream_run.train_model; only the forward pass's rounding differs, so the
    first losses agree to float32 precision and (nearly) every prediction is the same."""
    cfg = _cfg()
    a = dev.train_fast(cfg, 0, True)
    b = nope_stream.train_model(cfg.stream(), 0, True)
    assert np.allclose(a["first_losses"], b["first_losses"], rtol=1e-5, atol=1e-6)
    for probe in ("classifier", "regression"):
        same = (a[f"pred_{probe}"] == b[f"pred_{probe}"]).float().mean().item()
        assert same >= 0.99, (probe, same)
        assert np.allclose(a[f"mae_{probe}"], b[f"mae_{probe}"], atol=0.25)


@pytest.mark.parametrize("inputs", ["stream", "device"])
def test_fast_path_resumes_bit_for_bit(inputs):
    kw = dict(update_positions=4 * 32) if inputs == "device" else {}
    cfg = _cfg(inputs=inputs, dtype="bfloat16", train_eval=0 if inputs == "device" else 8,
               train_keep=0 if inputs == "device" else 2, **kw)
    whole = dev.train_fast(cfg, 0, True)
    saved = []
    dev.train_fast(cfg, 0, True, on_checkpoint=saved.append)
    assert [s["batch"] for s in saved] == [1, 2, 3]
    resumed = dev.train_fast(cfg, 0, True, state=saved[1])
    for key in whole:
        if key.startswith(("pred_", "mae_", "seqerr_")) or key == "first_losses":
            a, b = whole[key], resumed[key]
            assert torch.equal(a, b) if torch.is_tensor(a) else np.array_equal(a, b), key


def test_paper_inputs_are_fresh_and_every_position_is_labelled():
    cfg = _cfg(inputs="device", update_positions=4 * 32, updates=4, train_seqs=16)
    assert cfg.every_position and [cfg.updates_in(j) for j in range(4)] == [1, 1, 1, 1]
    xs = [dev._batch(cfg, 0, j, torch.device("cpu")) for j in range(2)]
    assert not torch.equal(xs[0], xs[1]) and torch.equal(xs[0], dev._batch(cfg, 0, 0, "cpu"))
    assert abs(xs[0].std().item() - 0.02) < 0.002
    # the first update's loss is the loss of the probes at their start over the whole
    # first batch (a run that drew positions, or read another batch, differs)
    model = nope.random_nope_model(64, 4, 3, 32, 0.02, True, 0)
    h = dev.FrozenNoPE(model, torch.float32).features(xs[0])
    cls = nope_stream.Probes(4, 64, 8, 32, 0, 0)
    reg = nope_stream.Probes(4, 64, 8, 1, 0, 1)
    ce, l1 = nope_stream.probe_losses(cls, reg, h, torch.arange(32).repeat(4), 32)
    got = dev.train_fast(cfg, 0, True)["first_losses"][0]
    assert np.allclose(got, [ce.tolist(), l1.tolist()], rtol=1e-5)


def test_bad_fast_config():
    with pytest.raises(ValueError, match="held-out"):
        _cfg(held_out_start=8)
    with pytest.raises(ValueError, match="train_eval"):
        _cfg(inputs="device", train_eval=4)
    with pytest.raises(ValueError, match="inputs"):
        _cfg(inputs="disk")


def test_out_of_time_saves_a_checkpoint_that_resumes_exactly(monkeypatch):
    cfg = _cfg(dtype="bfloat16")
    whole = dev.train_fast(cfg, 0, True)
    clock = iter(range(10**6))
    monkeypatch.setattr(dev.time, "perf_counter", lambda: float(next(clock)))
    saved = []
    with pytest.raises(dev.OutOfTime):
        dev.train_fast(cfg, 0, True, on_checkpoint=saved.append, deadline=3.5)
    monkeypatch.undo()
    assert 0 < saved[-1]["batch"] < cfg.n_batches
    again = dev.train_fast(cfg, 0, True, state=saved[-1])
    assert torch.equal(whole["pred_classifier"], again["pred_classifier"])


def test_pack_keeps_each_file_under_the_limit():
    rng = np.random.default_rng(0)
    arrays = {f"a{i}": rng.integers(0, 512, 5000).astype(np.int16) for i in range(6)}
    one = len(__import__("zlib").compress(dev._npy(arrays["a0"]), 6)) + 200
    groups = dev.pack(arrays, limit=2 * one + 100)
    assert sorted(sum(groups, [])) == sorted(arrays) and all(len(g) <= 2 for g in groups)
    with pytest.raises(ValueError, match="alone"):
        dev.pack(arrays, limit=one // 2)


def test_device_run_writes_a_record_that_recomputes_and_resumes(tmp_path, monkeypatch):
    """The tiny phases on the CPU: the record's errors are those of its predictions, the
    code's blob ids are git's, and a run split in two (one model, then the rest) writes
    the same predictions as one run."""
    whole = dev.run(["tiny_stored", "tiny_paper"], tmp_path / "a", tmp_path / "cka")
    dev.run(["tiny_stored"], tmp_path / "b", tmp_path / "ckb", models=["causal:1"])
    split = dev.run(["tiny_stored", "tiny_paper"], tmp_path / "b", tmp_path / "ckb")
    rec = json.loads((tmp_path / "a" / "stream_gpu.json").read_text())
    assert rec["provenance"]["stopped"] == "finished" and set(rec["phases"]) == {
        "tiny_stored", "tiny_paper"}
    T = rec["phases"]["tiny_stored"]["config"]["seq_len"]
    n = 0
    for name, file in rec["predictions"].items():
        ph, model, key = name.split("__")
        kind, seed = model.split("_")
        a = np.load(tmp_path / "a" / file)[name]
        b = np.load(tmp_path / "b" / split["predictions"][name])[name]
        assert np.array_equal(a, b), name
        m = next(m for m in rec["phases"][ph]["models"]
                 if (m["kind"], m["seed"]) == (kind, int(seed)))
        if key.startswith("pred_"):
            mae = "mae_" + key[5:] + ("_subset" if key.endswith("_train") else "")
            assert m[mae] == pytest.approx(nope_stream.errors(a, T), abs=1e-12)
        else:       # per-sequence errors: their mean is the stored error
            probe, which = key[7:].split("_")
            mae = f"mae_{probe}_" + ("train" if which == "train" else "bfloat16")
            assert m[mae] == pytest.approx(a.mean(1), abs=1e-5)
        n += 1
    assert n == 3 * 8 + 3 * 2   # stored: held-out, training, two per-sequence; paper: held-out
    assert len(whole["phases"]["tiny_stored"]["models"]) == 3
    blob = subprocess.run(["git", "hash-object", "lncourse/evidence/nope/stream_device.py"],
                          cwd=dev.ROOT, capture_output=True, text=True).stdout.strip()
    assert rec["provenance"]["code"]["lncourse/evidence/nope/stream_device.py"] == blob


def test_device_run_does_not_start_a_model_it_cannot_finish(tmp_path, monkeypatch):
    dev.run(["tiny_paper"], tmp_path / "o", tmp_path / "ck", models=["causal:0"])
    done = torch.load(tmp_path / "ck" / "done.pt", weights_only=False)
    done["tiny_paper"]["models"][0]["train_seconds"] = 1e6      # as if slow
    torch.save(done, tmp_path / "ck" / "done.pt")
    rec = dev.run(["tiny_paper"], tmp_path / "o", tmp_path / "ck", budget_s=100,
                  reserve_s=1)
    assert rec["provenance"]["stopped"].startswith("budget: tiny_paper causal:1 not started")
    assert len(rec["phases"]["tiny_paper"]["models"]) == 1


def test_device_run_skips_the_models_an_imported_record_has(tmp_path):
    dev.run(["tiny_paper"], tmp_path / "a", tmp_path / "cka", models=["causal:0"])
    rec = dev.run(["tiny_paper"], tmp_path / "b", tmp_path / "ckb",
                  have=tmp_path / "a" / "stream_gpu.json")
    got = [(m["kind"], m["seed"]) for m in rec["phases"]["tiny_paper"]["models"]]
    assert got == [("causal", 1), ("bidirectional", 0)]


def test_training_sequences_read_again_show_memorised_positions():
    """Sixteen training sequences, many updates at a high rate: the classifier learns
    them by heart, so the error on the training sequences read again falls far below
    the held-out error (a run that read held-out sequences as training ones shows no
    gap; one that read other training streams, a small one)."""
    cfg = _cfg(train_seqs=8, updates=800, lr=1e-2, hidden=64, train_eval=8,
               update_positions=64, dtype="float32")
    r = dev.train_fast(cfg, 0, True)
    assert cfg.train_indices() == list(range(8))
    held, train = np.array(r["mae_classifier"]), np.array(r["mae_classifier_train"])
    assert (train < 0.6 * held).all(), (train, held)
    assert np.allclose(r["seqerr_classifier_train"].mean(1), train, atol=1e-5)
    assert np.allclose(r["seqerr_classifier_held"].mean(1), held, atol=1e-5)


def test_profile_and_tf32_are_recorded(tmp_path):
    """--profile records the busiest operations of a short run; --probe-tf32 is recorded
    per model (on a CPU it changes nothing: the same predictions)."""
    rec = dev.run(["tiny_paper"], tmp_path / "o", tmp_path / "ck", models=["causal:0"],
                  probe_tf32=True, profile=True)
    prof = rec["provenance"]["profile"]
    assert prof["phase"] == "tiny_paper" and len(prof["ops"]) > 3
    assert all(ms >= 0 for _, _, ms in prof["ops"])
    m = rec["phases"]["tiny_paper"]["models"][0]
    assert m["probe_tf32"] is True
    plain = dev.train_fast(dev.PHASES["tiny_paper"](), 0, True)
    got = np.load(tmp_path / "o" / rec["predictions"]["tiny_paper__causal_0__pred_classifier"])
    assert np.array_equal(got["tiny_paper__causal_0__pred_classifier"],
                          plain["pred_classifier"].numpy())


def test_tf32_is_on_in_training_only(monkeypatch):
    """The flag is set while the probes train and restored before the float32 held-out
    measurement (a CPU build ignores the real flag, so a stand-in records it)."""
    import types

    flag = types.SimpleNamespace(allow_tf32=False)
    monkeypatch.setattr(dev.torch.backends.cuda, "matmul", flag)
    seen, losses, predict = [], dev.probe_losses, dev.predict
    monkeypatch.setattr(dev, "probe_losses", lambda *a: seen.append(("train", flag.allow_tf32))
                        or losses(*a))
    monkeypatch.setattr(dev, "predict", lambda *a: seen.append(("eval", flag.allow_tf32))
                        or predict(*a))
    dev.train_fast(dev.PHASES["tiny_paper"](), 0, True, probe_tf32=True)
    assert {v for k, v in seen if k == "train"} == {True}
    assert {v for k, v in seen if k == "eval"} == {False} and flag.allow_tf32 is False


# What a lent machine's Python has: the standard library, torch with what it imports,
# numpy, and the course's tree (the device copies the working tree).
DEVICE_MODULES = {"torch", "torchgen", "numpy", "lncourse", "typing_extensions", "sympy",
                  "mpmath", "networkx", "jinja2", "markupsafe", "filelock", "fsspec",
                  "setuptools", "pkg_resources", "_distutils_hack", "nvidia", "triton"}
_BLOCKED_IMPORT = """
import importlib.abc, sys
ALLOWED = set(sys.argv[1].split(","))
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        top = name.split(".")[0]
        if top in ALLOWED or top in sys.stdlib_module_names or top.startswith("_"):
            return None
        raise ModuleNotFoundError(f"not on a lent machine: {name}", name=name)
sys.meta_path.insert(0, Block())
__import__(sys.argv[2])
"""


def _imports_on_a_lent_machine(module: str, allowed=DEVICE_MODULES):
    return subprocess.run([sys.executable, "-c", _BLOCKED_IMPORT, ",".join(sorted(allowed)),
                           module], capture_output=True, text=True, timeout=300)


def test_device_module_imports_with_torch_and_numpy_alone():
    """The module's docstring promises a lent machine needs torch and numpy only: it
    imports with every other package blocked (tqdm among them, which lncourse.progress
    imports only when a bar is made); the check fails where one more is needed."""
    done = _imports_on_a_lent_machine("lncourse.evidence.nope.stream_device")
    assert done.returncode == 0, done.stderr[-2000:]
    # the check bites: the same import without numpy among the allowed fails
    done = _imports_on_a_lent_machine("lncourse.evidence.nope.stream_device",
                                      DEVICE_MODULES - {"numpy"})
    assert done.returncode != 0 and "not on a lent machine: numpy" in done.stderr
