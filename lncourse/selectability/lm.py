"""Unselectable keys inside a small language model (chapter 2, Tables 1 and 2).

Two GPT-style models (d = 8, 4 layers, 4 heads) are trained on Shakespeare, one with full
LayerNorm and one whose LayerNorm in front of attention keeps its projection and affine
part but does not divide by the norm. On held-out contexts we count, per layer, the
vectors that are not vertices of their context's hull, before the LayerNorm
(``resid_pre``, 8-D) and after it (``ln1``; 7-D without scaling: the projection removes
the all-ones direction), for every prefix length n of :attr:`KeysLMConfig.sweep`, beside
n Gaussian points in 7 and 8 dimensions. Stored runs::

    python -m lncourse.selectability.lm --preset paper       # characters, contexts of 1024
    python -m lncourse.selectability.lm --preset quick_bpe   # BPE at the build's size

Shapes: S contexts of T tokens (S, T); per layer vectors (S, T, d); L layers.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import functools
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from lncourse.lm import train_lm
from lncourse.modes import scaled
from lncourse.results import RESULTS_DIR, command_line, run_arguments, run_started, store_run
from lncourse.rng import check_seed, generator, seeded
from lncourse.selectability.experiments import gaussian_proxy, norm_cv, prefix_fractions
from lncourse.text import (BPETokenizer, CharTokenizer, char_streams, load_shakespeare,
                           sample_batch, split_text)
from lncourse.transformer import GPT, TransformerConfig

__all__ = ["VARIANTS", "KeysLMConfig", "MiniLMPassages", "tokenized", "held_out_contexts", "build_model",
           "layer_vectors", "measure_model", "run", "load_model", "stored_config",
           "stored_models", "PRESETS", "main"]

# label -> the norm in front of attention (the rest of the model uses full LayerNorm)
VARIANTS = {"full LayerNorm": "layernorm", "no scaling before attention": "no_scaling"}


@dataclass(frozen=True)
class KeysLMConfig:
    """One run of the Table 1/2 experiment: data, both models, training, measurement."""

    tokenizer: str = "char"          # "char" or "bpe" (byte-level, trained on the plays)
    bpe_vocab: int = 4096            # BPE vocabulary size, when tokenizer == "bpe"
    text_chars: int | None = None    # None: all 38 plays; else their first characters
    d_model: int = 8                 # the paper's model: d = 8, 4 layers, 4 heads
    n_heads: int = 4
    n_layers: int = 4
    block_size: int = 1024           # training context = largest n measured (paper: 1024)
    batch_size: int = 16             # the paper's batch
    steps: int = 400                 # the paper: 50,000 (Table 2 read at 34,000)
    lr: float = 3e-3                 # AdamW, constant (the release: 5e-5, linear decay)
    eval_every: int = 100
    eval_batches: int = 4
    contexts: int = 8                # held-out contexts measured after training
    track_contexts: int = 2          # of those, measured at every evaluation (n = T)
    sweep: tuple[int, ...] = (32, 64, 128, 256, 512, 1024)   # prefix lengths n
    proxy_runs: int = 16             # Gaussian sets per dimension for the proxy
    seed: int = 0

    def __post_init__(self):
        if self.tokenizer not in ("char", "bpe"):
            raise ValueError(f"tokenizer must be 'char' or 'bpe', got {self.tokenizer!r}")
        for name in ("d_model", "n_heads", "n_layers", "block_size", "batch_size", "steps",
                     "eval_every", "eval_batches", "contexts", "proxy_runs"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not 0 <= self.track_contexts <= self.contexts:
            raise ValueError("track_contexts must be between 0 and contexts")
        if list(self.sweep) != sorted(set(self.sweep)) or self.sweep[0] < 2 \
                or self.sweep[-1] > self.block_size:
            raise ValueError(f"sweep must increase within [2, block_size], got {self.sweep}")
        check_seed(self.seed, offset=3)

    @classmethod
    def paper(cls) -> "KeysLMConfig":
        """The paper's context (1024 tokens) and batch (16); characters; 400 steps (6.6
        million tokens, about 1.5 passes over the plays). The stored run's training took
        5,634 s (94 min) on one thread of the shared 2-core CPU, beside other runs
        (1,036 s and 4,598 s for the two models; see its provenance), plus the
        measurements. Longer runs with seeds: :mod:`lncourse.evidence.selectability.seeds`."""
        return cls()

    @classmethod
    def paper_bpe(cls) -> "KeysLMConfig":
        """As :meth:`paper`, with a byte-level BPE of 4,096 tokens trained on the plays.
        The stored run took 3,332 s (56 min) of one thread beside two other runs,
        training and measurements together."""
        return cls(tokenizer="bpe")

    @classmethod
    def quick_bpe(cls) -> "KeysLMConfig":
        """As :meth:`quick`, with a byte-level BPE of 4,096 tokens: the tokenisation
        comparison at the fast size (the same n, batch and steps as the build's run)."""
        return dataclasses.replace(cls.quick(), tokenizer="bpe")

    @classmethod
    def quick(cls) -> "KeysLMConfig":
        """Fast mode: contexts of 256 characters, batch 4, 300 steps, the first plays."""
        return cls(text_chars=1_500_000, block_size=256, batch_size=4, steps=300, lr=1e-2,
                   eval_every=50, contexts=8, track_contexts=0, sweep=(32, 64, 128, 256),
                   proxy_runs=8)

    def scaled(self, scale: float) -> "KeysLMConfig":
        """Steps, evaluations, measured contexts and proxy sets multiplied by ``scale``
        (at least 2, 1, 2 and 2), see :mod:`lncourse.modes`; model and context unchanged."""
        contexts = scaled(self.contexts, scale, 2)
        return dataclasses.replace(
            self, steps=scaled(self.steps, scale, 2),
            eval_every=scaled(self.eval_every, scale, 1),
            eval_batches=scaled(self.eval_batches, scale, 1), contexts=contexts,
            track_contexts=min(self.track_contexts, contexts),
            proxy_runs=scaled(self.proxy_runs, scale, 2))


@dataclass(frozen=True)
class MiniLMPassages:
    """Passages of verse fed to all-MiniLM-L6-v2: how many, and how long."""

    passages: int = 16
    lines_per_passage: int = 12
    max_tokens: int = 256

    @classmethod
    def paper(cls) -> "MiniLMPassages":
        return cls()

    @classmethod
    def quick(cls) -> "MiniLMPassages":
        return cls(passages=3, max_tokens=128)

    def scaled(self, scale: float) -> "MiniLMPassages":
        """As many passages times ``scale`` (at least 2), see :mod:`lncourse.modes`."""
        return dataclasses.replace(self, passages=scaled(self.passages, scale, 2))


PRESETS = {"quick": KeysLMConfig.quick, "quick_bpe": KeysLMConfig.quick_bpe,
           "paper": KeysLMConfig.paper, "paper_bpe": KeysLMConfig.paper_bpe}


# ---------------------------------------------------------------- data and models
def tokenized(cfg: KeysLMConfig) -> tuple[CharTokenizer | BPETokenizer, Tensor, Tensor]:
    """The tokenizer and the training and test token streams (N,) of ``cfg``.

    The text is split 90/10 by characters before tokenising; BPE learns its merges from
    the training part only. Made once per process for each tokenizer and text length
    (BPE on the whole plays takes about 5 s of CPU, and the tests, ledgers and pages ask
    for the same streams many times); each call gets its own copy of the streams.
    """
    bpe = cfg.tokenizer != "char"
    tok, train_ids, test_ids = _tokenized(cfg.tokenizer, cfg.text_chars,
                                          cfg.bpe_vocab if bpe else None)
    return tok, train_ids.clone(), test_ids.clone()


@functools.lru_cache(maxsize=4)
def _tokenized(tokenizer: str, text_chars: int | None, bpe_vocab: int | None):
    if tokenizer == "char":
        return char_streams(text_chars)
    text = load_shakespeare()
    train_text, test_text = split_text(text[:text_chars] if text_chars else text)
    tok = BPETokenizer.train(train_text, bpe_vocab)
    return tok, tok.encode(train_text), tok.encode(test_text)


def held_out_contexts(test_ids: Tensor, cfg: KeysLMConfig) -> Tensor:
    """``cfg.contexts`` random windows of the test stream: (S, T) token ids, fixed seed."""
    x, _ = sample_batch(test_ids, cfg.contexts, cfg.block_size, generator(cfg.seed + 3))
    return x


def build_model(cfg: KeysLMConfig, vocab_size: int, norm_attn: str) -> GPT:
    """A freshly initialised model (seeded; the caller's random state is left alone)."""
    with seeded(cfg.seed):
        return GPT(TransformerConfig(vocab_size, d_model=cfg.d_model, n_heads=cfg.n_heads,
                                     n_layers=cfg.n_layers, block_size=cfg.block_size,
                                     norm_attn=norm_attn))


@torch.no_grad()
def layer_vectors(model: GPT, contexts: Tensor) -> dict[str, np.ndarray]:
    """``resid_pre`` and ``ln1`` of every layer: (L, S, T, d) each.

    Computed by a float64 copy of the model. In float32, LayerNorm without scaling puts
    its outputs on its 7-dimensional hyperplane only to within rounding (about 1e-7 of
    their size); the exact test resolves that as an eighth dimension and calls about a
    quarter of the interior keys vertices. In float64 the hyperplane is flat to 1e-16.
    """
    m64 = copy.deepcopy(model).double().eval()
    device = next(m64.parameters()).device
    # Hooks read each block's input and its ln1's output: the model's cache would also
    # write out every (B, H, T, T) attention pattern, more than half the time at T = 1,024.
    grabbed: dict[str, list[Tensor]] = {"resid_pre": [], "ln1": []}
    hooks = []
    for block in m64.blocks:
        hooks.append(block.register_forward_pre_hook(
            lambda _, args: grabbed["resid_pre"].append(args[0])))
        hooks.append(block.ln1.register_forward_hook(
            lambda _, args, out: grabbed["ln1"].append(out)))
    try:
        m64(contexts.to(device))
    finally:
        for hook in hooks:
            hook.remove()
    return {key: np.stack([t.cpu().numpy() for t in grabbed[key]])
            for key in ("resid_pre", "ln1")}


def measure_model(model: GPT, contexts: Tensor, ns) -> dict:
    """Per layer and prefix length, the unselectable fraction of each context, and the
    diagnostics that explain it.

    Returns lists (plain data) indexed [layer][context][n]: ``before`` (resid_pre),
    ``after`` (ln1); [layer][context]: ``cv_before``, ``cv_after`` (coefficient of
    variation of the centred norms, whitened: comparable with a Gaussian's) and
    ``raw_cv_before``, ``raw_cv_after`` (not whitened) at n = T;
    [context][n]: ``distinct`` (distinct tokens in the prefix); and ``min_var_over_eps``
    (smallest variance of a resid_pre vector, in units of the LayerNorm's eps) and
    ``min_abs_gamma`` per layer (what could make a full LayerNorm leave a key inside).
    """
    vec = layer_vectors(model, contexts)
    out = {"before": [], "after": [], "cv_before": [], "cv_after": [], "raw_cv_before": [],
           "raw_cv_after": [], "min_var_over_eps": [], "min_abs_gamma": []}
    for i, block in enumerate(model.blocks):
        for key, name in (("resid_pre", "before"), ("ln1", "after")):
            out[name].append(prefix_fractions(vec[key][i], ns).tolist())
            out["cv_" + name].append(norm_cv(vec[key][i], whiten=True).tolist())
            out["raw_cv_" + name].append(norm_cv(vec[key][i]).tolist())
        eps = getattr(block.ln1, "eps", 1e-5)
        out["min_var_over_eps"].append(float(vec["resid_pre"][i].var(-1).min() / eps))
        gamma = getattr(block.ln1, "weight", None)
        out["min_abs_gamma"].append(None if gamma is None
                                    else float(gamma.detach().abs().min()))
    out["distinct"] = [[len(set(c[:n].tolist())) for n in ns] for c in contexts]
    return out


def _tracker(model: GPT, contexts: Tensor):
    """What ``train_lm`` records at every evaluation: the mean fraction per layer at n = T."""
    def track(m: GPT) -> dict:
        vec = layer_vectors(m, contexts)
        T = contexts.shape[1]
        return {name: [float(prefix_fractions(v, [T]).mean()) for v in vec[key]]
                for key, name in (("resid_pre", "before"), ("ln1", "after"))}
    return track


# ------------------------------------------------------------------ the whole run
def _encode_state(model: GPT) -> dict:
    return {k: {"shape": list(v.shape), "float32": base64.b64encode(
        v.detach().cpu().float().contiguous().numpy().tobytes()).decode()}
        for k, v in model.state_dict().items()}


def load_model(result: dict, label: str) -> GPT:
    """The trained model ``label`` (a key of :data:`VARIANTS`) of a stored result."""
    cfg = KeysLMConfig(**{k: tuple(v) if isinstance(v, list) else v
                          for k, v in result["config"].items()})
    model = build_model(cfg, result["tokenizer"]["vocab_size"], VARIANTS[label])
    state = {k: torch.from_numpy(np.frombuffer(base64.b64decode(v["float32"]),
                                               dtype=np.float32).copy()).reshape(v["shape"])
             for k, v in result["models"][label]["weights"].items()}
    model.load_state_dict(state)
    return model.eval()


def stored_config(result: dict) -> KeysLMConfig:
    """The language model's configuration of a stored seeded run
    (``results/selectability/seeds_*.json``: its ``config["lm"]``)."""
    return KeysLMConfig(**{k: tuple(v) if isinstance(v, list) else v
                           for k, v in result["config"]["lm"].items()})


def stored_models(result: dict, step: int | None = None) -> list[GPT]:
    """The models of a stored seeded run (in the result's order: its ``seeds`` and
    ``labels``) at a snapshot ``step`` (default: the last stored), rebuilt from their
    float32 weights as GPTs in eval mode."""
    lm = stored_config(result)
    step = str(result["snapshot_steps_done"][-1] if step is None else step)
    if step not in result["weights"]:
        raise KeyError(f"no weights stored at step {step}; "
                       f"stored: {sorted(result['weights'], key=int)}")
    out = []
    for seed, label, snap in zip(result["seeds"], result["labels"], result["weights"][step]):
        model = build_model(dataclasses.replace(lm, seed=seed),
                            result["tokenizer"]["vocab_size"], VARIANTS[label])
        state = {k: torch.from_numpy(np.frombuffer(base64.b64decode(v), dtype=np.float32)
                                     .copy()).reshape(result["shapes"][k])
                 for k, v in snap.items()}
        state["W_U.weight"] = state["W_E.weight"]          # tied to the embedding
        model.load_state_dict(state)
        out.append(model.eval())
    return out


def run(cfg: KeysLMConfig, device: torch.device | str = "cpu",
        checkpoint_prefix: str | Path | None = None, progress: bool = True) -> dict:
    """Train both models of ``cfg``, measure them and the Gaussian proxy; plain data.

    With ``checkpoint_prefix`` each model's training resumes from
    ``<prefix>_<norm>.ckpt``. Returns ``config``, ``tokenizer`` (kind, vocabulary size,
    fingerprint, characters per token), ``contexts`` (the held-out token ids), ``models``
    ({label: history, sweep measurements, training seconds, weights}), ``proxy``
    ({dimension: per-set fractions (len(sweep), runs)} and the proxy's whitened norm CV)
    and ``seconds``.
    """
    start = time.perf_counter()
    tok, train_ids, test_ids = tokenized(cfg)
    contexts = held_out_contexts(test_ids, cfg)
    text_len = len(load_shakespeare()[:cfg.text_chars] if cfg.text_chars else load_shakespeare())
    out = {"config": dataclasses.asdict(cfg),
           "tokenizer": {"kind": cfg.tokenizer, "vocab_size": tok.vocab_size,
                         "fingerprint": getattr(tok, "fingerprint", None),
                         "chars_per_token": text_len / (len(train_ids) + len(test_ids))},
           "contexts": contexts.tolist(), "models": {}}
    for label, norm in VARIANTS.items():
        model = build_model(cfg, tok.vocab_size, norm)
        timing: dict = {}
        ckpt = None if checkpoint_prefix is None else f"{checkpoint_prefix}_{norm}.ckpt"
        history = train_lm(model, train_ids, test_ids, steps=cfg.steps,
                           batch_size=cfg.batch_size, block_size=cfg.block_size, lr=cfg.lr,
                           eval_every=cfg.eval_every, eval_batches=cfg.eval_batches,
                           seed=cfg.seed, device=device, checkpoint_path=ckpt,
                           progress=progress, timing=timing,
                           measure=_tracker(model, contexts[:cfg.track_contexts])
                           if cfg.track_contexts else None)
        t0 = time.perf_counter()
        sweep = measure_model(model, contexts, cfg.sweep)
        out["models"][label] = {"history": history, "sweep": sweep,
                                "train_seconds": timing["seconds"],
                                "train_session_seconds": timing["session_seconds"],
                                "measure_seconds": time.perf_counter() - t0,
                                "weights": _encode_state(model)}
    proxy_sets = {d: gaussian_proxy(cfg.sweep, d, cfg.proxy_runs, cfg.seed) for d in (7, 8)}
    out["proxy"] = {str(d): f.tolist() for d, f in proxy_sets.items()}
    out["seconds"] = time.perf_counter() - start
    return out


def main(argv: list[str] | None = None) -> Path:
    """``python -m lncourse.selectability.lm --preset paper``: run, write the result."""
    args = run_arguments("lncourse.selectability.lm", "Train and measure the Table 1/2 "
                         "models of chapter 2; store the result with its provenance.",
                         PRESETS).parse_args(argv)
    cfg = PRESETS[args.preset]()
    out = RESULTS_DIR / "selectability" / f"lm_{args.preset}.json"
    prefix = RESULTS_DIR / "checkpoints" / f"selectability_{args.preset}"
    started = run_started(f"{prefix}_{VARIANTS['full LayerNorm']}.ckpt",
                          command_line("lncourse.selectability.lm", argv))
    result = run(cfg, args.device, prefix, progress=not args.quiet)
    # this session's wall time, with the training of earlier (interrupted) sessions added
    models = result["models"].values()
    wall = result.pop("seconds") + sum(m["train_seconds"] - m.pop("train_session_seconds")
                                       for m in models)
    return store_run(out, result, args.device, wall, started)


if __name__ == "__main__":
    main()
