"""Exact selectability at n = 1,024: today's path against the previous version, side by
side in one run, with their verdicts compared key by key.

    python benchmarks/selectability_exact.py                 # 4 contexts, not stored
    OMP_NUM_THREADS=1 python benchmarks/selectability_exact.py --contexts 6 --store

The sets are those chapter 2 measures: the stored Table 1/2 models of
``results/selectability/lm_paper.json`` (d = 8, 4 layers, contexts of 1,024 characters;
full LayerNorm and no scaling before attention), on held-out contexts, every layer's
``resid_pre`` and ``ln1`` (16 sets of 1,024 keys per context). Two methods:

* ``previous``: :func:`selectability_batch` as it was at commit 97cf349 (read from git:
  NNLS on all n keys for every key the walk leaves, the walk by gathered einsums);
* ``today``: :func:`lncourse.selectability.exact.selectability_batch` (warm-started
  column generation, :mod:`lncourse.selectability.search`).

They take turns set by set, so each meets the same load of the shared machine; seconds
are CPU time of this process (``time.process_time``). Both return certificates that
they verify; the verdicts must agree on every key. Writes
``results/selectability/exact_benchmark.json`` with its provenance.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


from lncourse.results import RESULTS_DIR, load_result, provenance, write_result
from lncourse.selectability.exact import selectability_batch
from lncourse.selectability.lm import (VARIANTS, KeysLMConfig, held_out_contexts,
                                       layer_vectors, load_model, tokenized)

PREVIOUS = "97cf349"          # main before issue 22's selectability work


def previous_version():
    """exact.py at :data:`PREVIOUS`, imported from git as its own module."""
    root = Path(__file__).resolve().parents[1]
    src = subprocess.run(["git", "show", f"{PREVIOUS}:lncourse/selectability/exact.py"],
                         cwd=root, capture_output=True, text=True, check=True).stdout
    path = Path(tempfile.mkdtemp()) / "exact_previous.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("exact_previous", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contexts", type=int, default=4, help="held-out contexts")
    parser.add_argument("--store", action="store_true",
                        help="write results/selectability/exact_benchmark.json")
    args = parser.parse_args()
    start, load_start = time.perf_counter(), list(os.getloadavg())
    old = previous_version()
    stored = load_result(RESULTS_DIR / "selectability" / "lm_paper.json")
    cfg = KeysLMConfig.paper()
    _, _, test_ids = tokenized(cfg)
    contexts = held_out_contexts(test_ids, KeysLMConfig(contexts=args.contexts,
                                                        track_contexts=0))
    seconds = {"previous": [], "today": []}
    sets, keys, disagree = [], 0, 0
    for label in VARIANTS:
        vec = layer_vectors(load_model(stored, label), contexts)
        for key in ("resid_pre", "ln1"):
            for layer in range(cfg.n_layers):
                for c in range(args.contexts):
                    V = vec[key][layer][c:c + 1]                  # (1, 1024, 8)
                    got = {}
                    for name, fn in (("previous", old.selectability_batch),
                                     ("today", selectability_batch)):
                        t0 = time.process_time()
                        got[name] = fn(V)
                        seconds[name].append(time.process_time() - t0)
                    disagree += int((got["previous"].selectable
                                     != got["today"].selectable).sum())
                    keys += V.shape[1]
                    sets.append({"model": label, "vectors": key, "layer": layer,
                                 "context": c,
                                 "fraction": float(got["today"].unselectable_fraction[0]),
                                 "methods_today": got["today"].method_counts()})
    total = {k: float(sum(v)) for k, v in seconds.items()}
    ratio = total["previous"] / total["today"]
    print(f"{len(sets)} sets of 1,024 keys ({args.contexts} contexts x 2 models x "
          f"{cfg.n_layers} layers x before/after the norm): previous {total['previous']:.1f} s,"
          f" today {total['today']:.1f} s CPU, {ratio:.1f}x; verdicts differ on {disagree} "
          f"of {keys} keys; load average {load_start[0]:.2f} at the start, "
          f"{os.getloadavg()[0]:.2f} at the end")
    if disagree:
        sys.exit("the verdicts differ")
    if args.store:
        out = {"config": {"contexts": args.contexts, "n": cfg.block_size,
                          "models": "results/selectability/lm_paper.json",
                          "previous_commit": PREVIOUS},
               "seconds": total, "seconds_per_set": seconds, "speedup": ratio,
               "keys": keys, "verdicts_differ": disagree, "sets": sets,
               "load_average": {"start": load_start, "end": list(os.getloadavg())},
               "provenance": provenance("cpu", time.perf_counter() - start,
                                        command="python " + " ".join(sys.argv))}
        print("wrote", write_result(RESULTS_DIR / "selectability" / "exact_benchmark.json",
                                    out))


if __name__ == "__main__":
    main()
