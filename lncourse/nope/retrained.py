"""The NoPE model trained with a recipe that learns, and its control with learned
positions (chapter 4, issue 35 item 7).

The stored run of :mod:`lncourse.nope.trained` (constant lr 3e-3, no warm-up, no
clipping) stalled: its test loss sat level with the bigram table's from step 300 on, so
what it says "after training" is about a model that never used its context. This run
trains two models of the same size with :class:`lncourse.lm.Recipe` (warm-up, clipping,
cosine decay):

* ``NoPE``: no positional embedding, as Chi et al.'s model;
* ``learned``: the control, a learned positional embedding added at the input.

The peak learning rate of each comes from a short sweep with a rule fixed beforehand
(:data:`lncourse.lm.SWEEP_RULE`), stored with the run. Then each model is trained with
three seeds, and measured from its stored weights (rounded to bfloat16 before any
measurement, so the file's numbers are those of the stored weights):

* its test loss, beside the data's bigram and unigram losses;
* the per-position loss on held-out windows against the bigram table on the same tokens
  (:func:`lncourse.lm.position_losses`): did the model use its context?
* per layer, the variance of the attention output across windows at each position and
  the slope of log variance against log m, in 16 groups of windows
  (:func:`lncourse.nope.trained.profiles`), before and after training.

Commands (the GPU parts run in parallel, then the last command measures on the CPU and
stores ``results/nope/trained_recipe.json`` and ``trained_recipe.pt``)::

    python -m lncourse.nope.retrained --part sweep/NoPE/0 --device cuda   # one model
    python -m lncourse.nope.retrained --part final/NoPE/0 --device cuda
    python -m lncourse.nope.retrained                 # trains what is missing, stores

Resumable: every model checkpoints at every evaluation (``train_lm``).
Shapes: windows (B, T); per-position losses (S, T).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from lncourse.checkpoint import load_checkpoint
from lncourse.lm import (SWEEP_RULE, Recipe, choose_lr, context_gain, evaluate_lm,
                         position_losses, reference_losses, slim_checkpoint, train_lm,
                         with_references)
from lncourse.nope.lm import NoPELMConfig
from lncourse.nope.trained import GROUPS, profiles, slopes, summary
from lncourse.results import (RESULTS_DIR, command_line, run_arguments, run_started,
                              store_run)
from lncourse.rng import seeded
from lncourse.summary import paired_interval
from lncourse.text import CharTokenizer, load_shakespeare, split_ids
from lncourse.transformer import GPT, TransformerConfig

__all__ = ["VARIANTS", "RetrainConfig", "PRESETS", "build", "run_sweep", "sweep_choice",
           "train_final", "measure", "load_models", "report", "claims", "main"]

VARIANTS = {"NoPE": {"pos_emb": False}, "learned": {"pos_emb": True}}


@dataclass(frozen=True)
class RetrainConfig:
    """The models, the recipe, the sweep and what is measured."""

    d_model: int = 128
    n_heads: int = 4
    n_layers: int = 4
    block_size: int = 128
    batch_size: int = 64
    steps: int = 4000
    warmup: int = 200
    min_lr_ratio: float = 0.1
    clip: float = 1.0
    eval_every: int = 250
    eval_batches: int = 8
    sweep_lrs: tuple[float, ...] = (1e-3, 2e-3, 4e-3, 8e-3)
    sweep_steps: int = 500
    windows: int = 512          # for the variance profiles (16 groups of 32)
    loss_windows: int = 256     # for the per-position loss
    late_start: int = 64        # "positions >= 64"
    seeds: tuple[int, ...] = (0, 1, 2)
    shared_lr: bool = False     # True: only NoPE is swept, the control takes its rate

    def recipe(self) -> Recipe:
        return Recipe(steps=self.steps, batch_size=self.batch_size,
                      block_size=self.block_size, warmup=self.warmup,
                      min_lr_ratio=self.min_lr_ratio, clip=self.clip,
                      eval_every=self.eval_every, eval_batches=self.eval_batches)

    def profile_cfg(self, seed: int) -> NoPELMConfig:
        """What :func:`lncourse.nope.trained.profiles` reads (windows, T, seed)."""
        return NoPELMConfig(d_model=self.d_model, n_heads=self.n_heads,
                            n_layers=self.n_layers, block_size=self.block_size,
                            windows=self.windows, seed=seed)

    @classmethod
    def from_dict(cls, d: dict) -> "RetrainConfig":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: tuple(v) if isinstance(v, list) else v
                      for k, v in d.items() if k in names})


def _tiny() -> RetrainConfig:
    """For tests: d 16, 2 layers, T 32, 12 steps, a sweep of two rates."""
    return RetrainConfig(d_model=16, n_heads=2, n_layers=2, block_size=32, batch_size=4,
                         steps=12, warmup=2, eval_every=6, eval_batches=1,
                         sweep_lrs=(1e-3, 1e-2), sweep_steps=5, windows=32,
                         loss_windows=4, late_start=16, seeds=(0, 1))


def _cpu() -> RetrainConfig:
    """What a shared 2-core CPU (load average 15-19) affords in under an hour (the GPU
    preset ``paper`` could not be sent to a GPU): d 64, 4 heads, 2 layers, T 128, batch
    32, 500 steps (25 of warm-up), a sweep of 3 rates over 150 steps for the NoPE model
    (the control takes the same rate, so the two differ only in the positional
    embedding), one seed; 256 windows (16 groups of 16) for the variance profiles, 128
    for the per-position loss."""
    return RetrainConfig(d_model=64, n_heads=4, n_layers=2, block_size=128, batch_size=32,
                         steps=500, warmup=25, eval_every=50, eval_batches=4,
                         sweep_lrs=(1e-3, 3e-3, 1e-2), sweep_steps=150, windows=256,
                         loss_windows=128, late_start=64, seeds=(0,), shared_lr=True)


PRESETS = {"paper": RetrainConfig, "cpu": _cpu, "tiny": _tiny}


@functools.lru_cache(maxsize=1)
def _data() -> tuple[CharTokenizer, torch.Tensor, torch.Tensor]:
    text = load_shakespeare()
    tok = CharTokenizer.from_text(text)
    train_ids, test_ids = split_ids(tok.encode(text))
    return tok, train_ids, test_ids


def build(cfg: RetrainConfig, vocab_size: int, variant: str, seed: int) -> GPT:
    """The model of ``variant`` at initialisation (seeded)."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose from {list(VARIANTS)}")
    with seeded(seed):
        return GPT(TransformerConfig(vocab_size=vocab_size, d_model=cfg.d_model,
                                     n_heads=cfg.n_heads, n_layers=cfg.n_layers,
                                     block_size=cfg.block_size, **VARIANTS[variant]))


def _ck(ck_dir: Path, kind: str, variant: str, index: int) -> Path:
    return ck_dir / f"{kind}_{variant}_{index}.ckpt"


def _train(cfg: RetrainConfig, recipe: Recipe, variant: str, seed: int, lr: float,
           ck: Path | None, device: str, progress: bool) -> tuple[GPT, dict, dict]:
    tok, train_ids, test_ids = _data()
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
    if record is not None and record.exists():      # a finished sweep run, kept small
        return json.loads(record.read_text())
    recipe = cfg.recipe().short(cfg.sweep_steps)
    try:
        _, history, timing = _train(cfg, recipe, variant, 0, lr,
                                    _ck(ck_dir, "sweep", variant, index) if ck_dir else None,
                                    device, progress)
    except FloatingPointError as err:
        out = {"lr": lr, "train_loss": None, "diverged": str(err)}
    else:
        out = {"lr": lr, "train_loss": history["train_loss"][-1], "history": history,
               "sessions": timing.get("sessions", []),
               "seconds": timing.get("seconds", 0.0)}
    if record is not None:
        record.write_text(json.dumps(out))
    return out


def sweep_choice(sweep: dict) -> dict:
    """The peak learning rate per variant by :data:`lncourse.lm.SWEEP_RULE`."""
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
    tok, train_ids, test_ids = _data()
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
    tok, _, _ = _data()
    model = build(cfg, tok.vocab_size, variant, seed)
    model.load_state_dict({k: v.float() for k, v in state["model"].items()})
    return model, state["history"], {"sessions": state.get("sessions", []),
                                     "seconds": state["elapsed"], "step": state["step"]}


def run(cfg: RetrainConfig, ck_dir: Path | None, device: str = "cpu",
        progress: bool = True, as_is: bool = False) -> tuple[dict, dict]:
    """Sweep, choose, train the final models (each resuming from its checkpoint), round
    and measure; returns the payload (with ``seconds``) and the weights. ``as_is``:
    measure the final models as far as their checkpoints got, training nothing."""
    tok, train_ids, test_ids = _data()
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


def load_models(result: dict, weights: dict, variant: str, seed: int) -> GPT:
    """A stored model (bfloat16 weights as float32)."""
    cfg = RetrainConfig.from_dict(result["config"])
    model = build(cfg, result["config"]["vocab_size"], variant, seed)
    model.load_state_dict({k: v.float() for k, v in weights[f"{variant}/{seed}"].items()})
    return model.eval()


def _interval(values) -> list[float]:
    return list(paired_interval(np.asarray(values, dtype=np.float64)))


def _window_loss(per_position: dict) -> dict:
    """The mean loss over every position of the held-out windows, of the model and of the
    bigram on the same tokens, with 95% t intervals over windows."""
    m = np.asarray(per_position["model"], dtype=np.float64).mean(1)
    b = np.asarray(per_position["bigram"], dtype=np.float64).mean(1)
    return {"model": _interval(m), "bigram": _interval(b), "below_bigram": _interval(b - m)}


def report(result: dict) -> dict:
    """What the replication page states, per variant and seed: the trainer's test loss
    beside the references; the loss over the held-out windows of the per-position
    measurement, with the bigram's on the same tokens (95% t intervals over windows);
    the gain over the bigram at positions >= ``late_start`` (t interval over windows);
    per layer, the variance slope and the attention's uniformity before and after
    training (mean over groups of windows, t interval over groups). With two seeds or
    more, ``across_seeds`` adds the mean of each over seeds with a t interval over
    seeds."""
    cfg = RetrainConfig.from_dict(result["config"])
    out = {"references": result["references"], "chosen_lr": result["chosen_lr"]}
    for variant, runs in result["models"].items():
        rows = []
        for r in runs:
            gain = context_gain(r["positions"], cfg.late_start)
            row = {"seed": r["seed"], "test_loss": r["test_loss"],
                   "below_bigram": result["references"]["bigram"] - r["test_loss"],
                   "windows": _window_loss(r["positions"]), "late": gain}
            for stage in ("before", "after"):
                row[f"slope_{stage}"] = [[x["slope"], *x["slope_ci"]]
                                         for x in r[stage]["layers"]]
                row[f"uniformity_{stage}"] = [[x["uniformity"], *x["uniformity_ci"]]
                                              for x in r[stage]["layers"]]
            rows.append(row)
        out[variant] = {"seeds": rows}
        if len(rows) >= 2:
            n_layers = len(rows[0]["slope_after"])
            out[variant]["across_seeds"] = {
                "test_loss": _interval([x["test_loss"] for x in rows]),
                "late_gain": _interval([x["late"]["gain"][0] for x in rows]),
                **{f"slope_{st}": [_interval([x[f"slope_{st}"][l][0] for x in rows])
                                   for l in range(n_layers)] for st in ("before", "after")}}
    return out


def claims(result: dict) -> dict[str, bool]:
    """The statements the replication page makes, each True or False on ``result``
    (every seed must satisfy a statement for it to hold):

    * ``<variant> learned``: the test loss is at least 0.3 nats below the bigram's (the
      issue's bar for a claim "after training");
    * ``<variant> below bigram``: over the held-out windows, the model's loss is below
      the bigram's on the same tokens (95% interval of the difference above 0);
    * ``<variant> uses context``: the gain over the bigram at positions >= late_start
      has its 95% interval above 0.1 nats;
    * ``<variant> complete``: the model trained all its steps."""
    rep = report(result)
    out = {}
    for v, runs in result["models"].items():
        rows = rep[v]["seeds"]
        out[f"{v} learned"] = all(x["below_bigram"] >= 0.3 for x in rows)
        out[f"{v} below bigram"] = all(x["windows"]["below_bigram"][1] > 0 for x in rows)
        out[f"{v} uses context"] = all(x["late"]["gain"][1] > 0.1 for x in rows)
        out[f"{v} complete"] = all(r.get("complete", True) for r in runs)
    return out


def stall(windows: int = 64, late_start: int = 64) -> dict:
    """The stored run of :mod:`lncourse.nope.trained` (``trained_lm.pt``: constant lr
    3e-3, 3,000 steps) read with the same lenses: its test losses beside the references,
    and its per-position loss against the bigram on held-out windows (seed 100)."""
    from lncourse.nope.trained import _paper
    from lncourse.nope.trained import build as build_old
    from lncourse.results import load_result

    old = load_result("nope/trained_lm")
    tok, train_ids, test_ids = _data()
    cfg = _paper()
    model = build_old(cfg, tok.vocab_size)
    model.load_state_dict(torch.load(RESULTS_DIR / "nope" / old["weights"],
                                     weights_only=True))
    pos = position_losses(model.eval(), train_ids, test_ids, windows=windows,
                          block_size=cfg.block_size, seed=100, vocab_size=tok.vocab_size)
    return {"references": reference_losses(train_ids, test_ids, tok.vocab_size),
            "history": {"step": old["history"]["step"],
                        "test_loss": old["history"]["test_loss"]},
            "windows": _window_loss(pos), "late": context_gain(pos, late_start),
            "positions": pos}


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
    parser = run_arguments("lncourse.nope.retrained", "The NoPE model and its control "
                           "with learned positions, trained with a recipe that learns.",
                           PRESETS)
    parser.add_argument("--part", help="sweep/<variant>/<lr index> or final/<variant>/<seed>")
    parser.add_argument("--as-is", action="store_true", help="store the final models as "
                        "far as their checkpoints got, training nothing (a run cut short)")
    parser.add_argument("--stall", action="store_true", help="measure the stored run of "
                        "lncourse.nope.trained instead (results/nope/trained_lm_stall.json)")
    args = parser.parse_args(argv)
    cfg = PRESETS[args.preset]()
    name = "trained_recipe" if args.preset == "paper" else f"trained_recipe_{args.preset}"
    ck_dir = RESULTS_DIR / "checkpoints" / f"nope_{name}"
    if args.stall:
        started = run_started(RESULTS_DIR / "checkpoints" / "nope_trained_lm_stall",
                              command_line("lncourse.nope.retrained", argv))
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
    started = run_started(ck_dir / "run", command_line("lncourse.nope.retrained", argv))
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
