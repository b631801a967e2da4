"""Training speed on majority: the fused trainer against the straightforward loop and the
previous (autograd) multiset formulation, with and without a tuned allocator, in one run,
each measurement in a fresh process (see lncourse/evidence/majority/bench.py).

    python benchmarks/majority_throughput.py                  # the paper's 50 models, batch 6000
    python benchmarks/majority_throughput.py --store          # and write results/majority/throughput.json
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from lncourse.majority import task as M
from lncourse.evidence.majority.bench import METHODS, compare
from lncourse.results import RESULTS_DIR, provenance, write_result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=6000)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--straightforward-models", type=int, default=None,
                        help="time only the first N models of the slow loop, scaled to all")
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--store", action="store_true",
                        help="write results/majority/throughput.json with provenance")
    args = parser.parse_args()
    start = time.perf_counter()
    out = compare(n_seeds=args.seeds, variants=M.VARIANTS + M.CONTROL_VARIANTS,
                  batch_size=args.batch_size, steps=args.steps, rounds=args.rounds,
                  methods=tuple(args.methods), device=args.device,
                  straightforward_models=args.straightforward_models)
    s = out["seconds_per_step"]
    print(f"{out['n_models']} models ({args.seeds} seeds x {len(out['variants'])} variants), "
          f"batch {args.batch_size}, {args.steps} steps, best of {args.rounds} rounds, "
          f"{out['device']}, {out['threads']} threads")
    for method in args.methods:
        ratio = f"{s[method] / s['fused']:6.1f}x the fused step" if "fused" in s else ""
        diff = out["max_loss_diff_to_fused"].get(method)
        print(f"  {method:16s} {s[method]:8.3f} s per step  {ratio}"
              + (f"   loss differs by {diff:.1e}" if diff is not None else ""))
    if args.store:
        command = "python benchmarks/majority_throughput.py " + " ".join(sys.argv[1:])
        out["config"] = {k: out[k] for k in ("n_models", "n_seeds", "variants", "batch_size",
                                             "steps", "rounds", "straightforward_models")}
        out["provenance"] = provenance(args.device, time.perf_counter() - start,
                                       command=command)
        print("wrote", write_result(RESULTS_DIR / "majority" / "throughput.json", out))


if __name__ == "__main__":
    main()
