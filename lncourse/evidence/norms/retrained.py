"""Chapter 5's per-head models trained with a recipe that learns (issue 35 item 8).

The stored run of :mod:`lncourse.evidence.norms.trained` (constant lr 3e-3, 2,000 steps of batch
16) left its models at the bigram level (Pre-LN and RMSNorm 2.49, QK-norm 2.53, against
the bigram table's 2.51) or at the unigram level (DyT 3.33, the unigram's 3.32), so its
per-head counts "after training" describe models that did not use their context. This
run trains the same four variants (:data:`lncourse.evidence.norms.trained.VARIANTS`) with
:class:`lncourse.lm_recipe.Recipe` (warm-up, clipping, cosine decay), each at the peak
rate a short sweep chose by a rule fixed beforehand
(:data:`lncourse.lm_recipe.SWEEP_RULE`), and measures each from its stored weights
(rounded to bfloat16 before any measurement):

* the test loss beside the bigram and unigram losses of the same split;
* the per-position loss against the bigram table on the same tokens: the gain at
  positions >= ``late_start`` is what attention's context adds;
* the unselectable fraction of every head's keys (dh = 2, counted exactly by
  :func:`lncourse.evidence.norms.trained.head_counts`) on the held-out contexts of the old run,
  at initialisation and after training;
* on the same contexts, what reaches the final norm and what leaves it
  (:func:`lncourse.evidence.norms.retrained_models.residual_parts`): in the DyT models of the
  sweeps a constant vector outgrew the token-dependent part, tanh saturated, and every
  position got the same logits.

Presets: ``paper`` is chapter 2's model (d = 8, 4 heads, 4 layers); ``wide`` keeps
dh = 2 with d = 32 and 16 heads, in case d = 8 cannot get clearly below the bigram;
``wide_cpu`` is ``wide`` at batch 16 for 2,000 steps, the CPU's run; ``dyt_cpu`` is
``wide_cpu`` for the two DyT recipes of the released LLaMA code
(:data:`lncourse.evidence.norms.retrained_models.DYT_RECIPES`), ``dyt_long_cpu`` the first of
them for twice the steps, and ``dyt_llama_lr_cpu`` and ``dyt_scaled_high_lr_cpu`` each
at the rate ``dyt_cpu``'s sweep chose for the other::

    python -m lncourse.evidence.norms.retrained --preset paper --part sweep/DyT/0 --device cuda
    python -m lncourse.evidence.norms.retrained --preset paper --part final/DyT/0 --device cuda
    python -m lncourse.evidence.norms.retrained --preset paper     # trains what is missing, stores

The configuration, presets, contexts and models are in
:mod:`lncourse.evidence.norms.retrained_models`.
Shapes: contexts (S, T); per-position losses (S, T); counts [layer][head][context].
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import numpy as np
import torch

from lncourse.lm import LEARNED_MARGIN
from lncourse.lm import evaluate_lm, slim_checkpoint, train_lm
from lncourse.lm_recipe import (SWEEP_RULE, choose_lr, context_gain, position_losses, sweep_run,
                                reference_losses, with_references)
from lncourse.norms.heads import mean_interval
from lncourse.evidence.norms.retrained_models import (PRESETS, RECIPE_VARIANTS, HeadsRecipeConfig,
                                             plays_data, build, contexts_of, residual_parts)
from lncourse.evidence.norms.trained import head_counts
from lncourse.results import RESULTS_DIR, command_line, run_arguments, run_started, store_run
from lncourse.summary import paired_interval
from lncourse.transformer import GPT

__all__ = ["run_sweep", "sweep_choice", "train_final", "measure", "run", "report",
           "paired_loss_difference",
           "claims", "residual_claims", "main"]


def _ck(ck_dir: Path, kind: str, variant: str, index: int) -> Path:
    return ck_dir / f"{kind}_{variant}_{index}.ckpt"


def _train(cfg, recipe, variant, seed, lr, ck, device, progress):
    tok, train_ids, test_ids = plays_data()
    model = build(cfg, tok.vocab_size, variant, seed)
    timing: dict = {}
    history = train_lm(model, train_ids, test_ids, **recipe.kwargs(lr), seed=seed,
                       device=device, checkpoint_path=ck, progress=progress, timing=timing)
    return model.cpu(), history, timing


def run_sweep(cfg: HeadsRecipeConfig, variant: str, index: int, ck_dir: Path | None,
              device: str = "cpu", progress: bool = False) -> dict:
    """One short run of the sweep (seed 0): lr and final training loss (None: diverged)."""
    lr = cfg.sweep_lrs[index]
    record = _ck(ck_dir, "sweep", variant, index).with_suffix(".json") if ck_dir else None
    return sweep_run(lr, lambda: _train(
        cfg, cfg.recipe().short(cfg.sweep_steps), variant, 0, lr,
        _ck(ck_dir, "sweep", variant, index) if ck_dir else None, device, progress), record)


def sweep_choice(sweep: dict) -> dict:
    return {v: choose_lr(runs) for v, runs in sweep.items()}


def train_final(cfg, variant, seed, lr, ck_dir, device="cpu", progress=False):
    return _train(cfg, cfg.recipe(), variant, seed, lr,
                  _ck(ck_dir, "final", variant, seed) if ck_dir else None, device, progress)


def _round(model: GPT) -> GPT:
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    return model


def measure(model: GPT, cfg: HeadsRecipeConfig, seed: int) -> dict:
    """Test loss, per-position losses and per-head counts of one model (on the CPU)."""
    tok, train_ids, test_ids = plays_data()
    model = model.cpu().eval()
    loss = evaluate_lm(model, test_ids, batches=cfg.eval_batches, batch_size=cfg.batch_size,
                       block_size=cfg.block_size, seed=seed + 1, device="cpu")
    per_pos = position_losses(model, train_ids, test_ids, windows=cfg.loss_windows,
                              block_size=cfg.block_size, seed=seed + 100,
                              vocab_size=tok.vocab_size)
    contexts = contexts_of(cfg, test_ids)
    return {"test_loss": loss, "positions": per_pos, "counts": head_counts(model, contexts),
            "residual": residual_parts(model, contexts)}


def run(cfg: HeadsRecipeConfig, ck_dir: Path | None, device: str = "cpu",
        progress: bool = True) -> tuple[dict, dict]:
    """Sweep, choose, train (resuming), round, measure: the payload (with ``seconds``)
    and the weights {"<variant>/<seed>": bfloat16 state_dict}."""
    tok, train_ids, test_ids = plays_data()
    refs = reference_losses(train_ids, test_ids, tok.vocab_size)
    contexts = contexts_of(cfg, test_ids)
    sweep = {v: [run_sweep(cfg, v, i, ck_dir, device, progress)
                 for i in range(len(cfg.sweep_lrs))] for v in cfg.variants}
    chosen = sweep_choice(sweep)
    wall = sum(r.get("seconds", 0.0) for rs in sweep.values() for r in rs)
    models, weights = {}, {}
    for variant in cfg.variants:
        models[variant] = []
        for seed in cfg.seeds:
            init = head_counts(build(cfg, tok.vocab_size, variant, seed), contexts)
            model, history, timing = train_final(cfg, variant, seed, chosen[variant],
                                                 ck_dir, device, progress)
            wall += timing.get("seconds", 0.0)
            _round(model)
            weights[f"{variant}/{seed}"] = {k: v.detach().to(torch.bfloat16).clone()
                                            for k, v in model.state_dict().items()}
            m = measure(model, cfg, seed)
            models[variant].append({"seed": seed, "lr": chosen[variant], "history": history,
                                    "sessions": timing.get("sessions", []),
                                    "test_loss": m["test_loss"], "positions": m["positions"],
                                    "init": init, "trained": m["counts"],
                                    "residual": m["residual"]})
            if progress:
                print(f"{variant} seed {seed}: {with_references(m['test_loss'], refs)}")
    payload = {"config": {**dataclasses.asdict(cfg), "vocab_size": tok.vocab_size},
               "variants": {v: RECIPE_VARIANTS[v] for v in cfg.variants},
               "references": refs, "sweep_rule": SWEEP_RULE,
               "sweep": sweep, "chosen_lr": chosen, "contexts": contexts.tolist(),
               "models": models, "seconds": wall}
    payload["report"] = report(payload)
    return payload, weights


def _interval(values) -> list[float]:
    return list(paired_interval(np.asarray(values, dtype=np.float64)))


def paired_loss_difference(a: dict, recipe_a: str, b: dict, recipe_b: str) -> list[float]:
    """``recipe_a``'s test loss in run ``a`` minus ``recipe_b``'s in run ``b``, seed by
    seed: the mean and its 95% t interval. The two must hold the same seeds."""
    runs_a, runs_b = a["models"][recipe_a], b["models"][recipe_b]
    if [r["seed"] for r in runs_a] != [r["seed"] for r in runs_b]:
        raise ValueError(f"{recipe_a} and {recipe_b} do not hold the same seeds: "
                         f"{[r['seed'] for r in runs_a]} and {[r['seed'] for r in runs_b]}")
    return _interval([x["test_loss"] - y["test_loss"] for x, y in zip(runs_a, runs_b)])


def _per_context(counts) -> np.ndarray:
    """[layer][head][context] -> each context's unselectable share (%) over layers and
    heads: (S,)."""
    return 100 * np.asarray(counts, dtype=np.float64).mean(axis=(0, 1))


def report(result: dict) -> dict:
    """Per variant and seed: the trainer's test loss and its distance below the bigram;
    the loss over the held-out windows of the per-position measurement beside the
    bigram's on the same tokens, and the gain over the bigram at positions >=
    ``late_start`` (95% t intervals over windows); the unselectable share of the heads'
    keys (%) at initialisation and after training (mean over contexts of the mean over
    layers and heads, t interval over contexts). With two seeds or more,
    ``across_seeds`` adds means with t intervals over seeds."""
    cfg = HeadsRecipeConfig.from_dict(result["config"])
    bigram = result["references"]["bigram"]
    out = {"references": result["references"], "chosen_lr": result["chosen_lr"]}
    for variant, runs in result["models"].items():
        rows = []
        for r in runs:
            m = np.asarray(r["positions"]["model"], dtype=np.float64).mean(1)
            b = np.asarray(r["positions"]["bigram"], dtype=np.float64).mean(1)
            rows.append({"seed": r["seed"], "test_loss": r["test_loss"],
                         "below_bigram": bigram - r["test_loss"],
                         "windows": {"model": _interval(m), "bigram": _interval(b),
                                     "below_bigram": _interval(b - m)},
                         "late": context_gain(r["positions"], cfg.late_start),
                         "unselectable_init": _interval(_per_context(r["init"])),
                         "unselectable_trained": _interval(_per_context(r["trained"]))})
            if "residual" in r:    # (runs stored before it was measured lack it)
                rows[-1]["residual"] = r["residual"]
        out[variant] = {"seeds": rows}
        if len(rows) >= 2:
            out[variant]["across_seeds"] = {
                "test_loss": _interval([x["test_loss"] for x in rows]),
                "late_gain": _interval([x["late"]["gain"][0] for x in rows]),
                "unselectable_trained": list(mean_interval(
                    [x["unselectable_trained"][0] for x in rows]))}
    return out


def claims(result: dict, margin: float = LEARNED_MARGIN) -> dict[str, bool]:
    """What the replication page may say, True or False on ``result`` (every seed must
    satisfy a statement for it to hold):

    * ``<variant> learned``: the test loss is at least ``margin`` nats below the
      bigram's (the course's bar, lncourse.lm.LEARNED_MARGIN: a claim "after training"
      needs a model clearly below);
    * ``<variant> below bigram``: the held-out windows' loss is below the bigram's on the
      same tokens (95% interval of the difference above 0);
    * ``<variant> uses context``: the gain over the bigram at late positions has its 95%
      interval above 0."""
    rep = report(result)
    out = {}
    for v in result["models"]:
        rows = rep[v]["seeds"]
        out[f"{v} learned"] = all(x["below_bigram"] >= margin for x in rows)
        out[f"{v} below bigram"] = all(x["windows"]["below_bigram"][1] > 0 for x in rows)
        out[f"{v} uses context"] = all(x["late"]["gain"][1] > 0 for x in rows)
    return out


def residual_claims(result: dict) -> dict[str, bool]:
    """Why DyT stays at the unigram level, as statements on every seed's
    :func:`~lncourse.evidence.norms.retrained_models.residual_parts` (thresholds set after
    reading the ``wide_cpu`` sweeps' DyT models, before any final model was measured):

    * ``DyT saturates``: |alpha h| > 2 on at least 99% of the final norm's inputs;
    * ``DyT's constant dominates``: the residual's constant part is over 10 times its
      token part;
    * ``DyT predicts alike everywhere``: what leaves the final DyT differs from token to
      token by under 1e-3 (root mean square);
    * ``<norm> keeps the tokens apart`` for every other variant: over 0.1 there.
    Variants without a stored ``residual`` are left out."""
    out = {}
    for v, runs in result["models"].items():
        parts = [r["residual"] for r in runs if "residual" in r]
        if not parts or len(parts) < len(runs):
            continue
        if v == "DyT":
            out["DyT saturates"] = all(p["saturated"] >= 0.99 for p in parts)
            out["DyT's constant dominates"] = all(
                p["constant_rms"] > 10 * p["token_rms"] for p in parts)
            out["DyT predicts alike everywhere"] = all(p["out_token_rms"] < 1e-3
                                                       for p in parts)
        else:
            out[f"{v} keeps the tokens apart"] = all(p["out_token_rms"] > 0.1
                                                     for p in parts)
    return out


def _sweep_records(cfg, ck_dir: Path, variant: str) -> list[dict]:
    """The sweep's records of ``variant``, as its finished parts wrote them."""
    out = []
    for i in range(len(cfg.sweep_lrs)):
        record = _ck(ck_dir, "sweep", variant, i).with_suffix(".json")
        if not record.exists():
            raise RuntimeError(f"the sweep's run {variant}/{i} is not finished: run the "
                               "sweep parts first")
        out.append(json.loads(record.read_text()))
    return out


def main(argv: list[str] | None = None) -> Path | None:
    """With ``--part`` (comma-separated parts), train those models (checkpointed) and
    stop; without, train what is missing, measure on the CPU and store."""
    parser = run_arguments("lncourse.evidence.norms.retrained", "Chapter 5's per-head models "
                           "trained with a recipe that learns.", PRESETS)
    parser.add_argument("--part", help="sweep/<variant>/<lr index> or "
                        "final/<variant>/<seed>, comma-separated")
    args = parser.parse_args(argv)
    cfg = PRESETS[args.preset]()
    name = "retrained_heads" if args.preset == "paper" else f"retrained_heads_{args.preset}"
    ck_dir = RESULTS_DIR / "checkpoints" / f"norms_{name}"
    if args.part:
        for part in args.part.split(","):
            kind, variant, index = part.split("/")
            if kind not in ("sweep", "final") or variant not in RECIPE_VARIANTS:
                raise ValueError(f"--part: cannot read {part!r}")
            if kind == "sweep":
                r = run_sweep(cfg, variant, int(index), ck_dir, args.device, not args.quiet)
                print(json.dumps({"part": part, "lr": r["lr"],
                                  "train_loss": r["train_loss"]}))
            else:
                lr = choose_lr(_sweep_records(cfg, ck_dir, variant))
                _, hist, _ = train_final(cfg, variant, int(index), lr, ck_dir, args.device,
                                         not args.quiet)
                slim_checkpoint(_ck(ck_dir, "final", variant, int(index)))   # to ship
                print(f"{part} lr {lr}: test loss {hist['test_loss'][-1]:.3f}")
        return None
    started = run_started(ck_dir / "run", command_line("lncourse.evidence.norms.retrained", argv))
    ck_dir.mkdir(parents=True, exist_ok=True)
    (ck_dir / "run").touch()
    t0 = time.perf_counter()
    payload, weights = run(cfg, ck_dir, args.device, not args.quiet)
    training = payload.pop("seconds")
    payload["measure_seconds"] = round(time.perf_counter() - t0, 1)
    out = RESULTS_DIR / "norms" / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(weights, out.with_suffix(".pt"))
    payload["weights"] = out.with_suffix(".pt").name
    devices = sorted({s["device"] for runs in payload["models"].values() for r in runs
                      for s in r["sessions"]})
    payload["training_devices"] = devices
    return store_run(out, payload, "cpu", training, started,
                     device_note=f"trained on {', '.join(devices) or 'this CPU'}; "
                     "measured on the CPU")


if __name__ == "__main__":
    main()
