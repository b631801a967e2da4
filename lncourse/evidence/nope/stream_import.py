"""Store what a device run of the Figure 2 probe brought back, and read it (chapter 4).

:mod:`lncourse.evidence.nope.stream_device` writes a folder (``stream_gpu.json`` and
``preds_<i>.npz``) on the machine that ran it. Here::

    python -m lncourse.evidence.nope.stream_import DIR [--name stream_gpu]

checks that every error in it is the error of its predictions, names the commit whose
code ran (the git blob ids it recorded), merges it with an earlier import of the same
configuration (a later session's models), and writes ``results/nope/<name>.json``, with
the device's provenance, and ``results/nope/<name>_predictions.npz``. The readings
(:func:`readings`) are computed here and stored in the JSON; ``tests/nope/
test_stream_import.py`` computes them again. Each phase reads as a stored stream run
(``{"results": {kind: [model, ...]}, "baseline": ...}``, :func:`phase_view`), so
:mod:`lncourse.evidence.nope.verdict` and :mod:`lncourse.evidence.nope.stream_report` read it as they
read ``nope/stream_paper.json``. The chapter's sentences: :mod:`lncourse.evidence.nope.stream_gpu`.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import subprocess
from pathlib import Path

import numpy as np
from scipy import stats

from lncourse.evidence.nope.probe import middle_baseline
from lncourse.evidence.nope.stream import errors
from lncourse.evidence.nope.stream_report import correlation, recalibrated, spread
from lncourse.evidence.nope.verdict import t_interval, depth_slope, uniform_guess
from lncourse.results import RESULTS_DIR, git_commit, load_result, write_result

__all__ = ["load_folder", "check", "find_commit", "phase_view", "welch_gap", "readings",
           "store", "main"]

PROBES = ("classifier", "regression")
STORED = "nope/stream_paper"      # the stored CPU run the device runs are set against


def load_folder(folder: Path) -> tuple[dict, dict[str, np.ndarray]]:
    """The record and its arrays ("<phase>__<kind>_<seed>__<key>")."""
    folder = Path(folder)
    rec = json.loads((folder / "stream_gpu.json").read_text())
    if rec.get("format") != 1:
        raise ValueError(f"{folder}/stream_gpu.json is not a device record (format 1)")
    arrays = {}
    for name, file in rec["predictions"].items():
        with np.load(folder / file) as f:
            arrays[name] = f[name]
    return rec, arrays


def check(rec: dict, arrays: dict) -> int:
    """Every error the record states is that of its arrays (held-out and kept training
    predictions exactly, per-sequence errors to float32's rounding of their mean);
    returns how many were checked, raises ``ValueError`` at the first that is not."""
    n = 0
    for ph, p in rec["phases"].items():
        T = p["config"]["seq_len"]
        low = "" if p["config"]["dtype"] == "float32" else "_" + p["config"]["dtype"]
        for m in p["models"]:
            pre = f"{ph}__{m['kind']}_{m['seed']}__"
            for probe in PROBES:
                pairs = [(f"pred_{probe}", f"mae_{probe}", errors),
                         (f"pred_{probe}_train", f"mae_{probe}_train_subset", errors),
                         (f"seqerr_{probe}_held", f"mae_{probe}{low}", _mean),
                         (f"seqerr_{probe}_train", f"mae_{probe}_train", _mean)]
                for arr, key, f in pairs:
                    if pre + arr not in arrays:
                        if key in m and arr == f"pred_{probe}":
                            raise ValueError(f"{pre}{arr} is missing")
                        continue
                    got = f(arrays[pre + arr], T)
                    tol = 1e-12 if f is errors else 1e-4
                    if not np.allclose(got, m[key], rtol=0, atol=tol):
                        raise ValueError(f"{ph} {m['kind']} {m['seed']}: {key} is not the "
                                         f"error of {arr}")
                    n += 1
    return n


def _mean(seqerr, seq_len: int) -> list[float]:
    return np.asarray(seqerr, dtype=np.float64).mean(1).tolist()


def find_commit(code: dict[str, str], depth: int = 400) -> str:
    """The newest commit (of the last ``depth``) whose files have the blob ids ``code``
    records; "unknown: ..." if none has."""
    root = Path(__file__).resolve().parents[3]
    git = lambda *a: subprocess.run(["git", *a], cwd=root, capture_output=True,  # noqa
                                    text=True, timeout=60).stdout
    for commit in git("rev-list", f"-n{depth}", "HEAD").split():
        tree = dict(line.split("\t")[::-1] for line in
                    git("ls-tree", commit, "--", *code).splitlines())
        if all(tree.get(p, "").split()[-1:] == [b] for p, b in code.items()):
            return commit
    return "unknown: no commit of the last %d has this code" % depth


def phase_view(stored: dict, phase: str) -> dict:
    """A phase as a stored stream run: {"config", "results": {kind: [model]},
    "baseline"}."""
    p = stored["phases"][phase]
    res = {"causal": [], "bidirectional": []}
    for m in p["models"]:
        res[m["kind"]].append({k: v for k, v in m.items() if k != "kind"})
    return {"config": p["config"], "results": res,
            "baseline": middle_baseline(p["config"]["seq_len"])}


def welch_gap(held: np.ndarray, train: np.ndarray, level: float = 0.95):
    """Mean held-out minus mean training error per sequence, with the Welch t interval
    (two independent samples of sequences): (difference, low, high)."""
    a, b = np.asarray(held, float), np.asarray(train, float)
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    dof = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    half = stats.t.ppf(0.5 + level / 2, dof) * math.sqrt(va + vb)
    d = float(a.mean() - b.mean())
    return d, d - half, d + half


def _depths(a: np.ndarray) -> list:
    """Per depth over models: (mean, low, high), the interval None for one model."""
    return [[float(a[:, k].mean()), *((t_interval(a[:, k]) or (0, None, None))[1:])]
            for k in range(a.shape[1])]


def _width(pred: np.ndarray, T: int) -> float:
    """How much wider the answers are spread than what they carry warrants, averaged over
    depths 1 ... K: spread / (correlation x the positions' standard deviation), as
    :func:`lncourse.evidence.nope.stream_report.claims` reads it (1: least squares)."""
    r = np.maximum(np.asarray(correlation(pred, T)[1:]), 1e-3)
    return float(np.mean(np.asarray(spread(pred, T)[1:]) / r / np.arange(T).std()))


def readings(stored: dict, arrays: dict, reference: dict | None = None) -> dict:
    """Per phase and probe, over the causal models (intervals: 95% Student t over
    models): the held-out error per depth, averaged over depths 1 ... K and its slope;
    the bidirectional control's mean; the correlation of the answers with the position
    and the recalibrated error, averaged over depths 1 ... K; with training sequences read
    again, their error, the gap (held-out minus training, both in the training
    precision) per depth and averaged over 1 ... K, and per model that average with a
    Welch interval over sequences; with kept training predictions, how much too wide
    the answers are (:func:`_width`) on those training sequences and on the held-out
    ones; against ``reference`` (the stored CPU run), the
    paired difference of the depth-averaged error over the seeds both have."""
    out = {"baseline_middle": None, "baseline_uniform": None, "phases": {}}
    for ph, p in stored["phases"].items():
        view, T = phase_view(stored, ph), p["config"]["seq_len"]
        out["baseline_middle"], out["baseline_uniform"] = middle_baseline(T), uniform_guess(T)
        low = "" if p["config"]["dtype"] == "float32" else "_" + p["config"]["dtype"]
        causal = view["results"]["causal"]
        r = {"causal_models": [m["seed"] for m in causal],
             "bidirectional_models": [m["seed"] for m in view["results"]["bidirectional"]],
             "seqs_per_s": [m["seqs_per_s"] for m in p["models"]]}
        for probe in PROBES if causal else ():
            mae = np.array([m[f"mae_{probe}"] for m in causal])
            pre = [f"{ph}__causal_{m['seed']}__" for m in causal]
            preds = [arrays[s + f"pred_{probe}"] for s in pre]
            q = {"mae": _depths(mae), "mean_1_to_K": t_interval(mae[:, 1:].mean(1)),
                 "mean_1_to_K_each": mae[:, 1:].mean(1).tolist(),
                 "slope": t_interval([depth_slope(x) for x in mae]),
                 "corr_1_to_K": [float(np.mean(correlation(x, T)[1:])) for x in preds],
                 "recal_1_to_K": [float(np.mean(recalibrated(x, T)[1:])) for x in preds]}
            bi = view["results"]["bidirectional"]
            if bi:
                q["bidirectional_mae"] = np.mean([m[f"mae_{probe}"] for m in bi], 0).tolist()
            if f"mae_{probe}_train" in causal[0]:
                train = np.array([m[f"mae_{probe}_train"] for m in causal])
                gap = np.array([m[f"mae_{probe}{low}"] for m in causal]) - train
                q.update(train=_depths(train), gap=_depths(gap),
                         gap_1_to_K=t_interval(gap[:, 1:].mean(1)),
                         gap_1_to_K_each=[welch_gap(
                             arrays[s + f"seqerr_{probe}_held"][1:].mean(0),
                             arrays[s + f"seqerr_{probe}_train"][1:].mean(0)) for s in pre])
            if pre and pre[0] + f"pred_{probe}_train" in arrays:
                q["width_train"] = t_interval([_width(arrays[x + f"pred_{probe}_train"], T)
                                              for x in pre]) or [None] * 3
                q["width_held"] = t_interval([_width(x, T) for x in preds]) or [None] * 3
            if reference is not None and all(reference["config"][k] == p["config"][k]
                                              for k in ("seq_len", "n_layers", "d_model")):
                ref = {m["seed"]: m[f"mae_{probe}"] for m in reference["results"]["causal"]}
                d = [float(np.mean(m[f"mae_{probe}"][1:]) - np.mean(ref[m["seed"]][1:]))
                     for m in causal if m["seed"] in ref]
                q["minus_stored_1_to_K"] = {"each": d, "interval": t_interval(d)}
            r[probe] = q
        out["phases"][ph] = r
    return out


def _merge(old: dict, rec: dict) -> dict:
    """An earlier import and a new record of the same phases' configurations: the
    models of both (a model in both is refused)."""
    for ph, p in rec["phases"].items():
        if ph not in old["phases"]:
            old["phases"][ph] = p
            continue
        if old["phases"][ph]["config"] != p["config"]:
            raise ValueError(f"phase {ph}: the new record has another configuration")
        have = {(m["kind"], m["seed"]) for m in old["phases"][ph]["models"]}
        for m in p["models"]:
            if (m["kind"], m["seed"]) in have:
                raise ValueError(f"phase {ph}: {m['kind']} {m['seed']} is in both")
            old["phases"][ph]["models"].append(m)
        old["phases"][ph]["partial"] = p["partial"]
    return old


def store(folder: Path, name: str = "stream_gpu", argv=None) -> Path:
    rec, arrays = load_folder(folder)
    n = check(rec, arrays)
    prov = dict(rec["provenance"])
    commit = find_commit(prov["code"])
    out = RESULTS_DIR / "nope" / f"{name}.json"
    npz = out.with_name(f"{name}_predictions.npz")
    runs = []
    if out.exists():
        old = load_result(out)
        runs = old["provenance"].get("runs", []) + [
            {k: v for k, v in old["provenance"].items() if k != "runs"}]
        with np.load(npz) as f:
            arrays = {**{k: f[k] for k in f.files}, **arrays}
        rec = _merge({"phases": old["phases"]}, rec)
    ref = load_result(STORED)
    stored = {"config": {ph: p["config"] for ph, p in rec["phases"].items()},
              "phases": rec["phases"], "predictions": npz.name}
    stored["readings"] = readings(stored, arrays, ref)
    stored["provenance"] = {
        **prov, "git_commit": commit, "runs": runs, "checked_errors": n,
        "written": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "imported": {"command": "python -m lncourse.evidence.nope.stream_import " + " ".join(
            argv if argv is not None else [str(folder)]), "git_commit": git_commit()}}
    npz.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(npz, **arrays)
    write_result(out, stored)
    print(f"wrote {out} ({n} errors checked; code of commit {commit[:12]}; "
          f"{prov['wall_seconds']:.0f} s on {prov['device']})")
    return out


def main(argv: list[str] | None = None) -> Path:
    p = argparse.ArgumentParser(prog="python -m lncourse.evidence.nope.stream_import",
                                description="Store a device run of chapter 4's "
                                "all-positions probe (a folder from stream_device).")
    p.add_argument("folder", type=Path)
    p.add_argument("--name", default="stream_gpu", help="results/nope/<name>.json")
    a = p.parse_args(argv)
    return store(a.folder, a.name, argv)


if __name__ == "__main__":
    main()
