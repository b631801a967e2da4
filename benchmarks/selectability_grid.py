"""Figure 1c/1d at the paper's resolution, and our method against the one-LP-per-key baseline.

    python benchmarks/selectability_grid.py              # the whole grid + the comparison
    python benchmarks/selectability_grid.py --quick      # a smaller grid, for a smoke test

Writes results/selectability_grid.json (both heatmaps, times, the comparison), which the
chapter may show as stored results in fast mode (it says so where it does).
Grid: keys ~ N(0, I), n = 3..60, d = 3..15, 100 runs per cell, without and with LayerNorm.
Comparison: the same point sets through ``selectability_lp_baseline`` (one HiGHS LP per
key, the formulation of Grivas et al. 2022) and ``selectability_batch``.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np

from lncourse.selectability import (random_key_sets, selectability_batch,
                                    selectability_lp_baseline, unselectable_grid)

ROOT = Path(__file__).resolve().parent.parent


def compare(cells, runs: int, seed: int) -> dict:
    """Both methods on the same sets: total seconds, and whether every verdict agrees."""
    sets = [random_key_sets(n, d, runs, seed, ln) for d, n in cells for ln in (False, True)]
    t0 = time.perf_counter()
    ours = [selectability_batch(k).selectable for k in sets]
    t_ours = time.perf_counter() - t0
    t0 = time.perf_counter()
    base = [np.stack([selectability_lp_baseline(k) for k in keys]) for keys in sets]
    t_base = time.perf_counter() - t0
    agree = all(np.array_equal(a, b) for a, b in zip(ours, base))
    n_keys = sum(k.shape[0] * k.shape[1] for k in sets)
    return {"cells": cells, "runs": runs, "keys": n_keys, "seconds_ours": t_ours,
            "seconds_baseline": t_base, "ratio": t_base / t_ours, "verdicts_agree": agree,
            "unselectable_ours": int(sum((~a).sum() for a in ours)),
            "unselectable_baseline": int(sum((~b).sum() for b in base))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller grid")
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--seed", type=int, default=123)
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "selectability_grid.json")
    args = parser.parse_args()
    ns = list(range(3, 61, 8 if args.quick else 1))
    ds = list(range(3, 16, 3 if args.quick else 1))

    # the comparison: a spread of cells, 20 runs each, with and without LayerNorm
    cells = [(3, 10), (4, 30), (6, 30), (8, 60), (12, 60), (15, 45)]
    cmp = compare(cells, runs=10 if args.quick else 20, seed=args.seed)
    print(f"baseline (one HiGHS LP per key): {cmp['seconds_baseline']:.2f} s; "
          f"ours: {cmp['seconds_ours']:.3f} s; ratio {cmp['ratio']:.1f}x; "
          f"verdicts agree on all {cmp['keys']} keys: {cmp['verdicts_agree']}")

    start = time.perf_counter()
    plain = unselectable_grid(ns, ds, args.runs, args.seed, layer_norm=False)
    normed = unselectable_grid(ns, ds, args.runs, args.seed, layer_norm=True)
    total = time.perf_counter() - start
    print(f"grid of {len(ds)} x {len(ns)} cells x {args.runs} runs, without and with "
          f"LayerNorm: {total:.1f} s (without {plain['seconds']:.1f} s, with "
          f"{normed['seconds']:.1f} s); largest P(any unselectable) with LayerNorm: "
          f"{normed['prob_any'].max():.3f}")

    out = {
        "ns": ns, "ds": ds, "runs": args.runs, "seed": args.seed,
        "without_ln": {"mean_fraction": plain["mean_fraction"].tolist(),
                       "prob_any": plain["prob_any"].tolist(), "seconds": plain["seconds"]},
        "with_ln": {"mean_fraction": normed["mean_fraction"].tolist(),
                    "prob_any": normed["prob_any"].tolist(), "seconds": normed["seconds"]},
        "grid_seconds": total, "comparison": cmp,
        "machine": f"{platform.processor() or platform.machine()}, shared 2-core CPU",
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
