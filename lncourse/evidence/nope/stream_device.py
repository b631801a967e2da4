"""Chapter 4's Figure 2 probe on a lent GPU, within a wall budget (issue 35, item 5).

Two phases, each a list of models run in :func:`lncourse.evidence.nope.stream.order`:

* ``stored``: the stored run's size and protocol (1,600 training sequences of the host
  streams, 8 per forward pass, 5,000 updates of 512 positions; 200 held-out ones), with
  the training sequences read again after training, so the error on what the probes
  trained on can be set against the held-out error (over-fitting, measured);
* ``paper``: the paper's budget (Appendix B): 5,000 Adam updates, each on a fresh batch
  of 32 random sequences drawn on the device, every position labelled: 160,000
  sequences per model, measured on the stored run's 200 held-out sequences.

    PYTHONPATH=. python3 -m lncourse.evidence.nope.stream_device --device cuda --budget-s 420 \\
        --out "$OUT"

stops cleanly before the budget: a model that would not finish is not started (its time
is estimated from the last model of its phase), and one caught by the budget saves its
checkpoint and stops. Finished models and checkpoints live in ``--ck`` (run the same
command again on the same machine to resume); after every model the whole record is
written to ``--out``: ``stream_gpu.json`` (every number, the device, torch, each model's
wall time and sequences per second, and the git blob ids of the code that ran) and the
held-out predictions in at most six ``preds_<i>.npz`` of under 15 MiB each.
:mod:`lncourse.evidence.nope.stream_import` stores that folder in ``results/nope/``. It imports
torch, numpy and the standard library only (what the lent machines have).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import hashlib
import io
import json
import math
import os
import platform
import subprocess
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import torch

from lncourse.evidence.nope.stream import order, save_atomic
from lncourse.evidence.nope.stream_fast import FastConfig, OutOfTime, train_fast

__all__ = ["PHASES", "CODE", "blob_id", "pack", "forward_check", "profile_updates", "run",
           "main"]

PHASES = {
    "stored": lambda: FastConfig(train_eval=1600, train_keep=40),
    "paper": lambda: FastConfig(train_seqs=160_000, seqs_per_batch=32,
                                update_positions=32 * 512, inputs="device",
                                checkpoint_every=500),
    # the same two at a size a CPU runs in seconds (the tests' and a dry run's)
    "tiny_stored": lambda: FastConfig(**TINY, train_seqs=32, seqs_per_batch=4, updates=40,
                                      update_positions=32, held_out_start=32,
                                      train_eval=16, train_keep=4, checkpoint_every=3),
    "tiny_paper": lambda: FastConfig(**TINY, train_seqs=40, seqs_per_batch=4, updates=10,
                                     update_positions=4 * 16, inputs="device",
                                     held_out_start=32, checkpoint_every=3),
}
TINY = dict(d_model=32, n_heads=4, n_layers=2, seq_len=16, eval_seqs=4, hidden=8,
            lr=3e-3, seeds=(0, 1), bidirectional_seeds=(0,))
# the code that runs: its git blob ids go into the record, so the importer can name
# the commit (the device's copy of the tree has no .git)
CODE = ["lncourse/evidence/nope/stream_device.py", "lncourse/evidence/nope/stream_fast.py",
        "lncourse/evidence/nope/stream.py", "lncourse/evidence/nope/features.py",
        "lncourse/evidence/nope/probe.py", "lncourse/nope/variance.py", "lncourse/transformer.py", "lncourse/attention.py",
        "lncourse/layernorm.py", "lncourse/rng.py"]
ROOT = Path(__file__).resolve().parents[3]
FILE_LIMIT = 15 * 2**20
MAX_FILES = 6
ARRAYS = ("pred_", "seqerr_")   # a model's arrays: predictions, per-sequence errors


def blob_id(path: Path) -> str:
    """The id git gives the file's contents (``git hash-object``)."""
    data = Path(path).read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


def pack(arrays: dict[str, np.ndarray], limit: int = FILE_LIMIT) -> list[list[str]]:
    """Names of ``arrays`` in groups whose compressed sizes add to under ``limit`` each
    (first fit, in order)."""
    groups, sizes = [], []
    for name, a in arrays.items():
        size = len(zlib.compress(_npy(a), 6)) + 200
        if size > limit:
            raise ValueError(f"{name} alone compresses to {size} bytes, over {limit}")
        fit = next((i for i, s in enumerate(sizes) if s + size <= limit), None)
        if fit is None:
            groups.append([])
            sizes.append(0)
            fit = len(groups) - 1
        groups[fit].append(name)
        sizes[fit] += size
    return groups


def _write(out: Path, record: dict, done: dict) -> None:
    """The record and the predictions of every finished model, under ``out``."""
    arrays = {f"{ph}__{m['kind']}_{m['seed']}__{k}": np.asarray(
        m[k], np.int16 if k.startswith("pred_") else np.float32)
        for ph, models in done.items() for m in models for k in m if k.startswith(ARRAYS)}
    groups = pack(arrays)
    if len(groups) > MAX_FILES:
        raise ValueError(f"predictions need {len(groups)} files, more than {MAX_FILES}")
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("preds_*.npz"):
        old.unlink()
    files = {}
    for i, names in enumerate(groups):
        np.savez_compressed(out / f"preds_{i}.npz", **{n: arrays[n] for n in names})
        files.update({n: f"preds_{i}.npz" for n in names})
    record["predictions"] = files
    for ph, models in done.items():
        record["phases"][ph]["models"] = [
            {k: v for k, v in m.items() if not k.startswith(ARRAYS)} for m in models]
    tmp = out / "stream_gpu.json.tmp"
    tmp.write_text(json.dumps(record, indent=1))
    os.replace(tmp, out / "stream_gpu.json")


def _device_info(device: torch.device) -> dict:
    info = {"device": device.type, "torch": torch.__version__,
            "python": platform.python_version(), "numpy": np.__version__,
            "cpu_threads": torch.get_num_threads(),
            "tf32_matmul": torch.backends.cuda.matmul.allow_tf32}
    if device.type == "cuda":
        info.update(device=f"cuda: {torch.cuda.get_device_name(device)}",
                    cuda=torch.version.cuda,
                    gpu_memory_gib=round(torch.cuda.get_device_properties(device)
                                         .total_memory / 2**30, 1))
        try:
            info["nvidia_smi"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=name,memory.total,driver_version,clocks.max.sm",
                 "--format=csv,noheader"], capture_output=True, text=True,
                timeout=20).stdout.strip()
        except (OSError, subprocess.SubprocessError) as e:
            info["nvidia_smi"] = f"not read: {e}"
    else:
        info["device"] = f"cpu: {platform.processor() or platform.machine()}"
    return info


def forward_check(device, n_seqs: int = 2) -> dict:
    """On the paper's model (seed 0, causal), the fast forward pass against the model's
    own (:func:`lncourse.evidence.nope.features.feature_batches`) on ``device``: the largest
    difference in float32, and bfloat16's relative RMS error per depth (expected about
    2^-9 sqrt(2k + 1); tests/nope/test_stream_fast.py holds it at a small size)."""
    from lncourse.evidence.nope.features import feature_batches
    from lncourse.evidence.nope.stream_fast import FrozenNoPE, host_inputs
    from lncourse.nope.variance import random_nope_model

    cfg = PHASES["paper"]()
    model = random_nope_model(768, 12, 12, 512, 0.02, True, 0, device)
    x = host_inputs(0, range(n_seqs), cfg, device)
    (ref, _), = feature_batches(model, 0, range(n_seqs), 0.02, batch=n_seqs)
    ref = ref.to(device)
    f32 = FrozenNoPE(model, torch.float32).features(x)
    bf = FrozenNoPE(model, torch.bfloat16).features(x)
    rel = ((bf - ref).pow(2).mean((1, 2)).sqrt() / ref.pow(2).mean((1, 2)).sqrt())
    return {"seqs": n_seqs, "float32_max_abs_diff": (f32 - ref).abs().max().item(),
            "feature_max_abs": ref.abs().max().item(),
            "bfloat16_rel_rms": [round(v, 6) for v in rel.tolist()]}


def profile_updates(device, phase: str = "paper", updates: int = 8, top: int = 15) -> dict:
    """The busiest operations of a short run of ``phase``'s protocol (``updates`` batches,
    one held-out batch) under torch.profiler: (name, calls, self milliseconds) by
    self time on ``device``; where the next speed-up would come from."""
    from torch.profiler import ProfilerActivity, profile

    base = PHASES[phase]()
    B = base.seqs_per_batch
    cfg = dataclasses.replace(base, train_seqs=B * updates, updates=updates, eval_seqs=B,
                              checkpoint_every=updates, train_eval=0, train_keep=0)
    device = torch.device(device)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    t0 = time.perf_counter()
    with profile(activities=acts) as prof:
        r = train_fast(cfg, 0, True, device)
    attr = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    rows = sorted(prof.key_averages(), key=lambda e: getattr(e, attr, 0), reverse=True)
    return {"phase": phase, "updates": updates, "wall_s": time.perf_counter() - t0,
            "train_seconds": r["train_seconds"], "by": attr,
            "ops": [[e.key, e.count, round(getattr(e, attr, 0) / 1e3, 2)]
                    for e in rows[:top]]}


def run(phases: list[str], out: Path, ck: Path, device: str = "cpu",
        budget_s: float = float("inf"), models: list[str] | None = None,
        overrides: dict | None = None, reserve_s: float = 20.0, argv=None,
        have: Path | None = None, probe_tf32: bool = False, profile: bool = False) -> dict:
    """Run ``phases`` model by model until done or ``budget_s`` (minus ``reserve_s`` for
    a model's measurement and the writing) has passed; returns the record written.
    ``have``: an imported record (``results/nope/stream_gpu.json``) whose models, where
    their phase's configuration is this one, are not run again."""
    t_start = time.perf_counter()
    end = t_start + budget_s - reserve_s
    device = torch.device(device)
    cfgs = {ph: PHASES[ph]() for ph in phases}
    cfgs = {ph: dataclasses.replace(c, **(overrides or {})) if c.inputs == "stream" else c
            for ph, c in cfgs.items()}
    ck.mkdir(parents=True, exist_ok=True)
    done_file = ck / "done.pt"
    saved = torch.load(done_file, weights_only=False) if done_file.exists() else {}
    for ph, cfg in cfgs.items():
        if ph in saved and saved[ph]["config"] != dataclasses.asdict(cfg):
            raise ValueError(f"{done_file} holds another {ph} configuration; delete {ck}")
    done = {ph: saved.get(ph, {"models": []})["models"] for ph in phases}
    skip = set()
    if have is not None:
        old = json.loads(Path(have).read_text())["phases"]
        skip = {(ph, m["kind"], m["seed"]) for ph, c in cfgs.items() if ph in old
                and old[ph]["config"] == json.loads(json.dumps(dataclasses.asdict(c)))
                for m in old[ph]["models"]}
    record = {"format": 1, "phases": {ph: {"config": dataclasses.asdict(c), "models": [],
                                           "planned": [f"{k}:{s}" for k, s in order(c)],
                                           "partial": None} for ph, c in cfgs.items()},
              "provenance": {**_device_info(device),
                             "command": "python -m lncourse.evidence.nope.stream_device "
                             + " ".join(sys.argv[1:] if argv is None else argv),
                             "code": {p: blob_id(ROOT / p) for p in CODE},
                             "started": datetime.datetime.now(datetime.timezone.utc)
                             .isoformat(timespec="seconds"),
                             "budget_s": budget_s if math.isfinite(budget_s) else None,
                             "stopped": "finished"}}
    if device.type == "cuda":
        record["provenance"]["forward_check"] = forward_check(device)
        print("forward check:", record["provenance"]["forward_check"], flush=True)
    if profile:
        record["provenance"]["profile"] = profile_updates(device, phases[-1])
        print("profile:", record["provenance"]["profile"], flush=True)
    for ph, cfg in cfgs.items():
        last = max([m["train_seconds"] for m in done[ph]], default=None)
        for kind, seed in order(cfg):
            name = f"{kind}:{seed}"
            if models and name not in models or (ph, kind, seed) in skip or any(
                    (m["kind"], m["seed"]) == (kind, seed) for m in done[ph]):
                continue
            left = end - time.perf_counter()
            if left <= 0 or (last is not None and 1.05 * last > left):
                record["provenance"]["stopped"] = (
                    f"budget: {ph} {name} not started ({left + reserve_s:.0f} s left, "
                    f"the last model trained for {last or 0:.0f} s)")
                return _finish(record, out, done, t_start)
            part = ck / f"{ph}_{kind}_{seed}.pt"
            state = torch.load(part, weights_only=False) if part.exists() else None

            def keep(s, p=part, ph=ph, name=name, B=cfg.seqs_per_batch):
                save_atomic(s, p)
                record["phases"][ph]["partial"] = {"model": name, "batch": s["batch"],
                                                   "seconds": round(s["seconds"], 1)}
                print(f"  {ph} {name}: batch {s['batch']}, {s['seconds']:.0f} s, "
                      f"{s['batch'] * B / max(s['seconds'], 1e-9):.0f} sequences/s "
                      "(with the checkpoints)", flush=True)
            try:
                r = train_fast(cfg, seed, kind == "causal", device, state, keep, end,
                               probe_tf32)
            except OutOfTime as e:
                record["provenance"]["stopped"] = f"budget: {ph} {name} {e}"
                return _finish(record, out, done, t_start)
            done[ph].append({"kind": kind, "seed": seed, **r})
            last = r["train_seconds"]
            record["phases"][ph]["partial"] = None
            save_atomic({p: {"config": dataclasses.asdict(cfgs[p]), "models": done[p]}
                         for p in cfgs}, done_file)
            part.unlink(missing_ok=True)
            mid = r["mae_classifier"][len(r["mae_classifier"]) // 2]
            print(f"{ph} {name}: {r['seconds']:.1f} s, {r['seqs_per_s']:.0f} training "
                  f"sequences/s; classifier error at depth {cfg.n_layers // 2}: {mid:.1f}",
                  flush=True)
            _finish(record, out, done, t_start, final=False)
    return _finish(record, out, done, t_start)


def _finish(record: dict, out: Path, done: dict, t_start: float, final: bool = True):
    record["provenance"]["wall_seconds"] = round(time.perf_counter() - t_start, 1)
    _write(out, record, done)
    if final:
        print(f"{record['provenance']['stopped']}; wrote {out} after "
              f"{record['provenance']['wall_seconds']:.0f} s", flush=True)
    return record


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m lncourse.evidence.nope.stream_device",
                                description="Chapter 4's all-positions probe on a GPU, "
                                "within a wall budget, written to a folder.")
    p.add_argument("--out", type=Path, required=True, help="folder for the record")
    p.add_argument("--budget-s", type=float, default=float("inf"))
    p.add_argument("--device", default="cuda")
    p.add_argument("--phases", default="stored,paper")
    p.add_argument("--models", default=None, help="e.g. causal:0,bidirectional:1")
    p.add_argument("--ck", type=Path, default=ROOT / "results/checkpoints/nope_stream_gpu")
    p.add_argument("--train-eval", type=int, default=None,
                   help="training sequences read again (stored phase; default 1,600)")
    p.add_argument("--train-keep", type=int, default=None)
    p.add_argument("--probe-tf32", action="store_true",
                   help="the probes' float32 products in training in TF32 (a GPU's)")
    p.add_argument("--profile", action="store_true",
                   help="first profile a few updates of the last phase")
    p.add_argument("--have", type=Path, default=None,
                   help="an imported record whose models are not run again")
    a = p.parse_args(argv)
    phases = a.phases.split(",")
    for ph in phases:
        if ph not in PHASES:
            p.error(f"unknown phase {ph!r}; choose from {sorted(PHASES)}")
    over = {k: v for k, v in (("train_eval", a.train_eval), ("train_keep", a.train_keep))
            if v is not None}
    return run(phases, a.out, a.ck, a.device, a.budget_s,
               a.models.split(",") if a.models else None, over, argv=argv, have=a.have,
               probe_tf32=a.probe_tf32, profile=a.profile)


if __name__ == "__main__":
    main()
