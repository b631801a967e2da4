"""The NoPE model trained with a recipe that learns, and its control with learned
positions (chapter 4, issue 35 item 7).

The stored run of :mod:`lncourse.evidence.nope.trained` (constant lr 3e-3, no warm-up, no
clipping) stalled: its test loss sat level with the bigram table's from step 300 on, so
what it says "after training" is about a model that never used its context. This run
trains two models of the same size with :class:`lncourse.lm_recipe.Recipe` (warm-up,
clipping, cosine decay):

* ``NoPE``: no positional embedding, as Chi et al.'s model;
* ``learned``: the control, a learned positional embedding added at the input.

The peak learning rate of each comes from a short sweep with a rule fixed beforehand
(:data:`lncourse.lm_recipe.SWEEP_RULE`), stored with the run. Then each model is trained
with three seeds, and measured from its stored weights (rounded to bfloat16 before any
measurement, so the file's numbers are those of the stored weights):

* its test loss, beside the data's bigram and unigram losses;
* the per-position loss on held-out windows against the bigram table on the same tokens
  (:func:`lncourse.lm_recipe.position_losses`): did the model use its context?
* per layer, the variance of the attention output across windows at each position and
  the slope of log variance against log m, in 16 groups of windows
  (:func:`lncourse.evidence.nope.trained.profiles`), before and after training.

Commands (the GPU parts run in parallel, then the last command measures on the CPU and
stores ``results/nope/trained_recipe.json`` and ``trained_recipe.pt``)::

    python -m lncourse.evidence.nope.retrained --part sweep/NoPE/0 --device cuda   # one model
    python -m lncourse.evidence.nope.retrained --part final/NoPE/0 --device cuda
    python -m lncourse.evidence.nope.retrained                 # trains what is missing, stores

Resumable: every model checkpoints at every evaluation (``train_lm``). What is trained
(variants, configuration, presets, models) is in :mod:`lncourse.evidence.nope.retrained_models`;
what the stored run says (report, claims, the old run's stall) in
:mod:`lncourse.evidence.nope.retrained_report`.
Shapes: windows (B, T); per-position losses (S, T).
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import torch

from lncourse.checkpoint import load_checkpoint
from lncourse.lm import evaluate_lm, slim_checkpoint, train_lm
from lncourse.lm_recipe import (SWEEP_RULE, Recipe, choose_lr, position_losses, sweep_run,
                                reference_losses, with_references)
from lncourse.evidence.nope.retrained_models import (PRESETS, VARIANTS, RetrainConfig, plays_data,
                                            build)
# the replication page reads report and claims from here
from lncourse.evidence.nope.retrained_report import claims, report, slope_claims, stall
from lncourse.evidence.nope.trained import GROUPS, profiles, summary
from lncourse.results import (RESULTS_DIR, command_line, run_arguments, run_started,
                              store_run)
from lncourse.transformer import GPT

__all__ = ["run_sweep", "sweep_choice", "train_final", "measure", "run", "report",
           "claims", "slope_claims", "main"]


def _ck(ck_dir: Path, kind: str, variant: str, index: int) -> Path:
    return ck_dir / f"{kind}_{variant}_{index}.ckpt"


def _train(cfg: RetrainConfig, recipe: Recipe, variant: str, seed: int, lr: float,
           ck: Path | None, device: str, progress: bool) -> tuple[GPT, dict, dict]:
    tok, train_ids, test_ids = plays_data()
    model = build(cfg, tok.vocab_size, variant, seed)
    timing: dict = {}
    history = train_lm(model, train_ids, test_ids, **recipe.kwargs(lr), seed=seed,
                       device=device, checkpoint_path=ck, progress=progress, timing=timing)
    return model.cpu(), history, timing


def run_sweep(cfg: RetrainConfig, variant: str, index: int, ck_dir: Path | None,
              device: str = "cpu", progress: bool = False) -> dict:
    """One short run of the sweep (seed 0, peak rate ``cfg.sweep_lrs[index]``): its lr,
    final training loss (None if it diverged), history and timing."""
    lr = cfg.sweep_lrs[index]
    record = _ck(ck_dir, "sweep", variant, index).with_suffix(".json") if ck_dir else None
    recipe = cfg.recipe().short(cfg.sweep_steps)
    return sweep_run(lr, lambda: _train(
        cfg, recipe, variant, 0, lr, _ck(ck_dir, "sweep", variant, index) if ck_dir else None,
        device, progress), record)


def sweep_choice(sweep: dict) -> dict:
    """The peak learning rate per variant by :data:`lncourse.lm_recipe.SWEEP_RULE`."""
    return {v: choose_lr(runs) for v, runs in sweep.items()}


def train_final(cfg: RetrainConfig, variant: str, seed: int, lr: float,
                ck_dir: Path | None, device: str = "cpu", progress: bool = False):
    return _train(cfg, cfg.recipe(), variant, seed, lr,
                  _ck(ck_dir, "final", variant, seed) if ck_dir else None, device, progress)


def _round(model: GPT) -> GPT:
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    return model


def measure(model: GPT, cfg: RetrainConfig, seed: int) -> dict:
    """Everything stored about one model, on the CPU: test loss (the trainer's fixed test
    windows), per-position losses, and the per-layer variance profiles."""
    tok, train_ids, test_ids = plays_data()
    model = model.cpu().eval()
    loss = evaluate_lm(model, test_ids, batches=cfg.eval_batches, batch_size=cfg.batch_size,
                       block_size=cfg.block_size, seed=seed + 1, device="cpu")
    per_pos = position_losses(model, train_ids, test_ids, windows=cfg.loss_windows,
                              block_size=cfg.block_size, seed=seed + 100,
                              vocab_size=tok.vocab_size)
    prof = profiles(model, test_ids, cfg.profile_cfg(seed))
    return {"test_loss": loss, "positions": per_pos, "profiles": prof}


def as_far_as_it_got(cfg: RetrainConfig, variant: str, seed: int, ck_dir: Path):
    """A final model as its checkpoint holds it, without training further: (model,
    history, timing with ``step``): for a run the deadline cut short, stored as far as
    it got (and resumable from the same checkpoint)."""
    state = load_checkpoint(_ck(ck_dir, "final", variant, seed))
    if state is None or state.get("kind") != "lm":
        raise RuntimeError(f"no checkpoint of the final run {variant}/{seed}")
    tok, _, _ = plays_data()
    model = build(cfg, tok.vocab_size, variant, seed)
    model.load_state_dict({k: v.float() for k, v in state["model"].items()})
    return model, state["history"], {"sessions": state.get("sessions", []),
                                     "seconds": state["elapsed"], "step": state["step"]}


def run(cfg: RetrainConfig, ck_dir: Path | None, device: str = "cpu",
        progress: bool = True, as_is: bool = False) -> tuple[dict, dict]:
    """Sweep, choose, train the final models (each resuming from its checkpoint), round
    and measure; returns the payload (with ``seconds``) and the weights. ``as_is``:
    measure the final models as far as their checkpoints got, training nothing."""
    tok, train_ids, test_ids = plays_data()
    refs = reference_losses(train_ids, test_ids, tok.vocab_size)
    swept = ("NoPE",) if cfg.shared_lr else tuple(VARIANTS)
    sweep = {v: [run_sweep(cfg, v, i, ck_dir, device, progress)
                 for i in range(len(cfg.sweep_lrs))] for v in swept}
    chosen = sweep_choice(sweep)
    if cfg.shared_lr:
        chosen["learned"] = chosen["NoPE"]
    models, weights, wall = {}, {}, sum(r.get("seconds", 0.0) for rs in sweep.values()
                                        for r in rs)
    for variant in VARIANTS:
        models[variant] = []
        for seed in cfg.seeds:
            before = profiles(build(cfg, tok.vocab_size, variant, seed), test_ids,
                              cfg.profile_cfg(seed))
            if as_is:
                model, history, timing = as_far_as_it_got(cfg, variant, seed, ck_dir)
            else:
                model, history, timing = train_final(cfg, variant, seed, chosen[variant],
                                                     ck_dir, device, progress)
            wall += timing.get("seconds", 0.0)
            _round(model)
            weights[f"{variant}/{seed}"] = {k: v.detach().to(torch.bfloat16).clone()
                                            for k, v in model.state_dict().items()}
            after = measure(model, cfg, seed)
            models[variant].append({
                "seed": seed, "lr": chosen[variant], "history": history,
                "step": history["step"][-1], "complete": history["step"][-1] == cfg.steps,
                "sessions": timing.get("sessions", []),
                "test_loss": after["test_loss"], "positions": after["positions"],
                "before": {**before, "layers": summary(before)},
                "after": {**after["profiles"], "layers": summary(after["profiles"])}})
            if progress:
                print(f"{variant} seed {seed}: test loss "
                      f"{with_references(after['test_loss'], refs)}")
    payload = {"config": {**dataclasses.asdict(cfg), "groups": GROUPS,
                          "vocab_size": tok.vocab_size},
               "references": refs, "sweep_rule": SWEEP_RULE, "sweep": sweep,
               "chosen_lr": chosen, "models": models, "seconds": wall}
    payload["report"] = report(payload)
    return payload, weights


def _parse_part(part: str, cfg: RetrainConfig) -> tuple[str, str, int]:
    try:
        kind, variant, index = part.split("/")
        index = int(index)
    except ValueError:
        raise ValueError(f"--part must be sweep/<variant>/<lr index> or "
                         f"final/<variant>/<seed>, got {part!r}") from None
    if kind not in ("sweep", "final") or variant not in VARIANTS:
        raise ValueError(f"--part: unknown {kind!r} or variant {variant!r}")
    if kind == "sweep" and not 0 <= index < len(cfg.sweep_lrs):
        raise ValueError(f"--part: lr index {index} outside the sweep")
    if kind == "final" and index not in cfg.seeds:
        raise ValueError(f"--part: seed {index} is not one of {cfg.seeds}")
    return kind, variant, index


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
    """With ``--part``, train one model (checkpointed) and stop; without, train whatever
    is missing, measure on the CPU and store."""
    parser = run_arguments("lncourse.evidence.nope.retrained", "The NoPE model and its control "
                           "with learned positions, trained with a recipe that learns.",
                           PRESETS)
    parser.add_argument("--part", help="sweep/<variant>/<lr index> or final/<variant>/<seed>")
    parser.add_argument("--as-is", action="store_true", help="store the final models as "
                        "far as their checkpoints got, training nothing (a run cut short)")
    parser.add_argument("--stall", action="store_true", help="measure the stored run of "
                        "lncourse.evidence.nope.trained instead (results/nope/trained_lm_stall.json)")
    args = parser.parse_args(argv)
    cfg = PRESETS[args.preset]()
    name = "trained_recipe" if args.preset == "paper" else f"trained_recipe_{args.preset}"
    ck_dir = RESULTS_DIR / "checkpoints" / f"nope_{name}"
    if args.stall:
        started = run_started(RESULTS_DIR / "checkpoints" / "nope_trained_lm_stall",
                              command_line("lncourse.evidence.nope.retrained", argv))
        t0 = time.perf_counter()
        payload = {"config": {"windows": 64, "late_start": 64, "window_seed": 100,
                              "of": "nope/trained_lm"}, **stall()}
        return store_run(RESULTS_DIR / "nope" / "trained_lm_stall.json", payload, "cpu",
                         time.perf_counter() - t0, started)
    for part in args.part.split(",") if args.part else []:
        kind, variant, index = _parse_part(part, cfg)
        if kind == "sweep":
            r = run_sweep(cfg, variant, index, ck_dir, args.device, not args.quiet)
            print(json.dumps({"part": part, "lr": r["lr"], "train_loss": r["train_loss"]}))
        else:
            lr = choose_lr(_sweep_records(cfg, ck_dir,
                                          "NoPE" if cfg.shared_lr else variant))
            _, hist, _ = train_final(cfg, variant, index, lr, ck_dir, args.device,
                                     not args.quiet)
            slim_checkpoint(_ck(ck_dir, "final", variant, index))   # small enough to ship
            print(f"{part} lr {lr}: test loss {hist['test_loss'][-1]:.3f}")
    if args.part:
        return None
    started = run_started(ck_dir / "run", command_line("lncourse.evidence.nope.retrained", argv))
    ck_dir.mkdir(parents=True, exist_ok=True)
    (ck_dir / "run").touch()
    t0 = time.perf_counter()
    payload, weights = run(cfg, ck_dir, args.device, not args.quiet, args.as_is)
    training = payload.pop("seconds")
    payload["measure_seconds"] = round(time.perf_counter() - t0, 1)
    out = RESULTS_DIR / "nope" / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(weights, out.with_suffix(".pt"))
    payload["weights"] = out.with_suffix(".pt").name
    devices = sorted({s["device"] for runs in payload["models"].values() for r in runs
                      for s in r["sessions"]})
    return _store(out, payload, devices, training, started)


def _store(out: Path, payload: dict, devices: list[str], training: float,
           started: dict) -> Path:
    """Store with the training devices named (the models may have trained on a GPU and
    been measured here on the CPU)."""
    payload["training_devices"] = devices
    return store_run(out, payload, "cpu", training, started,
                     device_note=f"trained on {', '.join(devices)}; measured on the CPU")


if __name__ == "__main__":
    main()
