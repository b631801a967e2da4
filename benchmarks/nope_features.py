"""Probe features per CPU-second on chapter 4's frozen model: the first stored probe's path
(:func:`lncourse.evidence.nope.probe.probe_features`: 64 random positions per sequence, no_grad,
batches of 16) against :func:`lncourse.evidence.nope.features.feature_batches` (every position,
inference_mode, all depths in one pass) in float32 and in bfloat16, side by side in one
run, on the same sequences of the paper's model (d = 768, 12 heads, 12 layers, L = 512).

    python benchmarks/nope_features.py --store     # writes results/nope/features_benchmark.json

A labelled position is one (position, label) example with its features at all 13 depths.
CPU time is the process's (``time.process_time``), so other jobs on a shared machine
count less than in wall time; both are stored. bfloat16's features are compared with
float32's (relative error per depth) to say whether lower precision could be used.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

import torch

from lncourse.nope.variance import random_nope_model
from lncourse.evidence.nope.features import feature_batches
from lncourse.evidence.nope.probe import ProbeConfig, probe_features
from lncourse.results import RESULTS_DIR, provenance, write_result


def _timed(fn) -> tuple[object, float, float]:
    c0, w0 = time.process_time(), time.perf_counter()
    out = fn()
    return out, time.process_time() - c0, time.perf_counter() - w0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seqs", type=int, default=16, help="sequences per path")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--store", action="store_true")
    args = parser.parse_args()
    start = time.perf_counter()
    cfg = ProbeConfig.paper()                    # the old path's settings (P = 64)
    model = random_nope_model(cfg.d_model, cfg.n_heads, cfg.n_layers, cfg.seq_len, cfg.sigma,
                              True, args.seed)
    idx = list(range(args.seqs))
    T, K1 = cfg.seq_len, cfg.n_layers + 1
    probe_features(model, cfg, args.seed, [10_000], batch=1)               # warm-up
    paths = {}
    (f_old, p_old), cpu, wall = _timed(lambda: probe_features(model, cfg, args.seed, idx, batch=16))
    paths["old_p64_no_grad_b16"] = {"positions": int(p_old.numel()), "cpu_s": cpu, "wall_s": wall}
    feats = {}
    for name, dtype in (("new_all_positions_float32", torch.float32),
                        ("new_all_positions_bfloat16", torch.bfloat16)):
        def go(dtype=dtype):
            return [f for f, _ in feature_batches(model, args.seed, idx, cfg.sigma, batch=8,
                                                  dtype=dtype)]
        parts, cpu, wall = _timed(go)
        feats[name] = torch.cat(parts, 1)
        paths[name] = {"positions": args.seqs * T, "cpu_s": cpu, "wall_s": wall}
    for p in paths.values():
        p["positions_per_cpu_hour"] = p["positions"] / p["cpu_s"] * 3600
        p["positions_per_wall_hour"] = p["positions"] / p["wall_s"] * 3600
    base = paths["old_p64_no_grad_b16"]["positions_per_cpu_hour"]
    ratios = {k: p["positions_per_cpu_hour"] / base for k, p in paths.items()}
    # the same positions: the old path's kept positions, read from the new features
    new32 = feats["new_all_positions_float32"].view(K1, args.seqs, T, -1)
    rows = torch.arange(args.seqs)[:, None]
    keep = p_old.view(args.seqs, -1)
    same = (new32[:, rows, keep].flatten(1, 2) - f_old).abs().max().item()
    b16 = feats["new_all_positions_bfloat16"]
    f32 = feats["new_all_positions_float32"]
    rel = ((b16 - f32).norm(dim=-1) / f32.norm(dim=-1)).mean(-1).tolist()     # per depth
    out = {"paths": paths, "speedup_per_cpu_hour": ratios,
           "max_abs_diff_old_vs_new_float32": same,
           "bfloat16_relative_feature_error_per_depth": rel,
           "threads": torch.get_num_threads()}
    print(f"{args.seqs} sequences of the paper's model, {torch.get_num_threads()} threads")
    for k, p in paths.items():
        print(f"  {k:28s} {p['positions']:7d} positions  {p['cpu_s']:7.1f} CPU s  "
              f"{p['wall_s']:7.1f} wall s  {p['positions_per_cpu_hour']:10.0f} /CPU-h  "
              f"{ratios[k]:5.1f}x")
    print(f"  old vs new float32 on the old path's positions: max |diff| {same:.1e}")
    print("  bfloat16 relative feature error per depth: "
          + " ".join(f"{r:.3f}" for r in rel))
    if args.store:
        out["config"] = {"model": dataclasses.asdict(cfg), "seqs": args.seqs, "seed": args.seed,
                         "new_batch": 8, "old_batch": 16}
        command = "python benchmarks/nope_features.py " + " ".join(sys.argv[1:])
        out["provenance"] = provenance("cpu", time.perf_counter() - start, command=command)
        print("wrote", write_result(RESULTS_DIR / "nope" / "features_benchmark.json", out))


if __name__ == "__main__":
    main()
