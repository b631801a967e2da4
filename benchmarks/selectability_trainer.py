"""Training speed at the paper's Table 1 size: today's train_lm step against the fused
trainer, side by side in one run, with their losses.

    python benchmarks/selectability_trainer.py            # 3 seeds x 2 variants, 3 steps
    OMP_NUM_THREADS=1 python benchmarks/selectability_trainer.py --steps 6 \
        --baseline-models 2 --methods fused --store       # the stored result
    OMP_NUM_THREADS=2 python benchmarks/selectability_trainer.py --steps 6 \
        --baseline-models 2 --methods fused --store --out trainer_benchmark_2threads.json

Configuration: d = 8, 4 layers, 4 heads, contexts of 1,024, batch 16 (the paper's), on
characters; 3 seeds x 2 variants (full LayerNorm; no scaling before attention). Three
ways to take the same optimiser steps from the same initial weights on the same windows:

* ``train_lm``: one model at a time, as :func:`lncourse.lm.train_lm` steps (the GPT
  module, PyTorch's fused attention, AdamW), the previous version;
* ``fused_sdpa``: the six models as one batched model, attention by PyTorch's kernel;
* ``fused``: the same with the compiled tiny-head kernel (the trainer of the runs).

The methods take turns step by step (:func:`interleaved`), so that each meets the same
load of the shared machine (the load average is stored beside the timings).
Seconds per model-step are the median over the timed steps (after one warm-up step), in
CPU time of this process (``time.process_time``: on the shared machine other jobs take
turns on the core, which wall time would count) and in wall time. The losses of every
step are compared with ``train_lm``'s (``--baseline-models``: train_lm steps only the
first N models, whose losses are compared).
Writes ``results/selectability/trainer_benchmark.json`` (or ``--out``) with its provenance.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time

import torch

from lncourse.results import RESULTS_DIR, provenance, write_result
from lncourse.evidence.selectability.fused import fused_losses, scaling_flags, stack_models
from lncourse.evidence.selectability.kernel import kernel_available
from lncourse.selectability.lm import tokenized
from lncourse.evidence.selectability.seeds import SeedsConfig, models_of
from lncourse.text import sample_batch


def _windows(train_ids, cfg, seeds, steps):
    gens = {s: torch.Generator().manual_seed(s) for s in dict.fromkeys(seeds)}
    out = []
    for _ in range(steps):
        drawn = {s: sample_batch(train_ids, cfg.lm.batch_size, cfg.lm.block_size, g)
                 for s, g in gens.items()}
        out.append((torch.stack([drawn[s][0] for s in seeds]),
                    torch.stack([drawn[s][1] for s in seeds])))
    return out


def _clock():
    return time.process_time(), time.perf_counter()


def _since(t0):
    cpu, wall = _clock()
    return cpu - t0[0], wall - t0[1]


def _median(times, per=1):
    return {"cpu": statistics.median(t[0] for t in times) / per,
            "wall": statistics.median(t[1] for t in times) / per}


def _lm_step(model, opt, x, y):
    _, loss, _ = model(x, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return [loss.item()]


def _fused_step(state, x, y, n_heads, use_kernel):
    params, scale, opt = state
    loss = fused_losses(params, scale, x, y, n_heads, use_kernel)
    opt.zero_grad(set_to_none=True)
    loss.sum().backward()
    opt.step()
    return loss.tolist()


def interleaved(models, batches, lr, baseline_models, methods):
    """Step s of every method, then step s + 1 of every method, ...: each method meets
    the same load of the shared machine. Returns {method: (seconds per model-step,
    losses (models, steps))}; train_lm steps its first ``baseline_models`` models one at
    a time, each fused method all the models as one batch."""
    lms = [copy.deepcopy(m) for m in models[:baseline_models]]
    lm_opts = [torch.optim.AdamW(m.parameters(), lr=lr, weight_decay=0.0) for m in lms]
    fused = {}
    for name in methods:
        params = stack_models([copy.deepcopy(m) for m in models])
        fused[name] = (params, scaling_flags(models),
                       torch.optim.AdamW(list(params.values()), lr=lr, weight_decay=0.0))
    times = {name: [] for name in ("train_lm", *methods)}
    losses = {name: [] for name in times}
    for s, (x, y) in enumerate(batches):
        for name in methods:
            t0 = _clock()
            losses[name].append(_fused_step(fused[name], x, y, models[0].cfg.n_heads,
                                            name == "fused"))
            if s:
                times[name].append(_since(t0))
        row = []
        for m, (model, opt) in enumerate(zip(lms, lm_opts)):
            t0 = _clock()
            row += _lm_step(model, opt, x[m], y[m])
            if s:
                times["train_lm"].append(_since(t0))
        losses["train_lm"].append(row)
    return {name: (_median(times[name], 1 if name == "train_lm" else len(models)),
                   [list(r) for r in zip(*losses[name])]) for name in times}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4, help="steps per method (the first "
                        "is a warm-up, not timed)")
    parser.add_argument("--baseline-models", type=int, default=6,
                        help="step only the first N models with train_lm (default all 6)")
    parser.add_argument("--methods", nargs="+", default=["fused_sdpa", "fused"],
                        choices=["fused_sdpa", "fused"], help="fused methods to time")
    parser.add_argument("--store", action="store_true",
                        help="write the result (see --out)")
    parser.add_argument("--out", default="trainer_benchmark.json",
                        help="file name under results/selectability/ (default "
                        "trainer_benchmark.json)")
    args = parser.parse_args()
    if not kernel_available():
        sys.exit("the compiled kernel is not available here (no C compiler?)")
    start, load_start = time.perf_counter(), list(os.getloadavg())
    cfg = SeedsConfig.table1()
    tok, train_ids, _ = tokenized(cfg.lm)
    models, seeds, labels = models_of(cfg, tok.vocab_size)
    batches = _windows(train_ids, cfg, seeds, args.steps)
    lr = cfg.lm.lr
    got = interleaved(models, batches, lr, args.baseline_models, args.methods)
    base_s, base_loss = got["train_lm"]
    out = {"methods": {"train_lm": {"seconds_per_model_step": base_s, "losses": base_loss}}}
    for name in args.methods:
        s, loss = got[name]
        diff = max(abs(a - b) for r1, r2 in zip(loss, base_loss) for a, b in zip(r1, r2))
        out["methods"][name] = {"seconds_per_model_step": s, "losses": loss,
                                "max_loss_diff_to_train_lm": diff,
                                "speedup_over_train_lm": {
                                    k: base_s[k] / s[k] for k in ("cpu", "wall")}}
    print(f"{len(models)} models, d {cfg.lm.d_model}, {cfg.lm.n_layers} layers, "
          f"{cfg.lm.n_heads} heads, T {cfg.lm.block_size}, batch {cfg.lm.batch_size}, "
          f"{torch.get_num_threads()} thread(s), median of {args.steps - 1} steps, load "
          f"average {load_start[0]:.2f} at the start, {os.getloadavg()[0]:.2f} at the end")
    for name, m in out["methods"].items():
        t = m["seconds_per_model_step"]
        extra = "" if name == "train_lm" else (
            f"  {m['speedup_over_train_lm']['cpu']:5.1f}x faster in CPU time "
            f"({m['speedup_over_train_lm']['wall']:.1f}x in wall time), losses differ by "
            f"at most {m['max_loss_diff_to_train_lm']:.1e}")
        print(f"  {name:10s} {t['cpu']:7.3f} s CPU ({t['wall']:.3f} s wall) per model-step"
              + extra)
    if args.store:
        out["config"] = {"lm": {k: getattr(cfg.lm, k) for k in (
            "d_model", "n_layers", "n_heads", "block_size", "batch_size", "lr")},
            "seeds": list(cfg.seeds), "labels": labels, "steps": args.steps,
            "baseline_models": args.baseline_models, "methods": args.methods,
            "timed_steps": args.steps - 1, "threads": torch.get_num_threads()}
        command = "python benchmarks/selectability_trainer.py " + " ".join(sys.argv[1:])
        out["provenance"] = provenance("cpu", time.perf_counter() - start, command=command)
        out["load_average"] = {"start": load_start, "end": list(os.getloadavg())}
        print("wrote", write_result(RESULTS_DIR / "selectability" / args.out, out))


if __name__ == "__main__":
    main()
