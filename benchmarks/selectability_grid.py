"""Figure 1c/1d at the paper's resolution, and our method against the one-LP-per-key baseline.

    python benchmarks/selectability_grid.py              # the whole grid + the comparison
    python benchmarks/selectability_grid.py --quick      # a smaller grid, for a smoke test

Writes results/selectability/grid_benchmark.json (both heatmaps, times, the comparison)
with its provenance; chapter 2 quotes its times from there. Grid: keys ~ N(0, I),
n = 3..60, d = 3..15, 100 runs per cell, without and with LayerNorm. Comparison: the same
point sets through ``selectability_lp_baseline`` (one HiGHS LP per key, the formulation of
Grivas et al. 2022) and ``selectability_batch``, measured side by side in one run.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

from lncourse.results import RESULTS_DIR, provenance, write_result
from lncourse.selectability.experiments import (GridConfig, compare_with_baseline,
                                                unselectable_grid)

CELLS = [(3, 10), (4, 30), (6, 30), (8, 60), (12, 60), (15, 45)]   # (d, n) compared


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller grid, not stored")
    args = parser.parse_args()
    start = time.perf_counter()
    grid = GridConfig.quick() if args.quick else GridConfig.paper()
    cmp = compare_with_baseline(CELLS, runs=10 if args.quick else 20, seed=grid.seed,
                                layer_norm=(False, True))
    print(f"baseline (one HiGHS LP per key): {cmp['seconds_baseline']:.2f} s; "
          f"ours: {cmp['seconds_ours']:.3f} s; ratio {cmp['ratio']:.1f}x; "
          f"verdicts agree on all {cmp['keys']} keys: {cmp['verdicts_agree']}")
    plain = unselectable_grid(grid, layer_norm=False)
    normed = unselectable_grid(grid, layer_norm=True)
    print(f"grid of {len(grid.ds)} x {len(grid.ns)} cells x {grid.runs} runs: "
          f"{plain['seconds']:.1f} s without LayerNorm, {normed['seconds']:.1f} s with; "
          f"largest P(any unselectable) with LayerNorm: {normed['prob_any'].max():.3f}")
    if args.quick:
        return
    out = {"config": {**dataclasses.asdict(grid), "compared_cells": CELLS,
                      "compared_runs": cmp["runs"]},
           "without_ln": {k: plain[k].tolist() for k in ("mean_fraction", "prob_any")}
           | {"seconds": plain["seconds"]},
           "with_ln": {k: normed[k].tolist() for k in ("mean_fraction", "prob_any")}
           | {"seconds": normed["seconds"]},
           "comparison": cmp,
           "provenance": provenance("cpu", time.perf_counter() - start,
                                    command="python " + " ".join(sys.argv))}
    path = write_result(RESULTS_DIR / "selectability" / "grid_benchmark.json", out)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
