"""The numbers chapter 5's replication page quotes in its sentences (chapter 5).

``book/05_norms_replication.md`` prints each number of its prose with the ``{ledger}``
role, ``{ledger}`norms/page/<name>:<format>``` (book/_ext/ledger_role.py), from the
entry ``page/<name>`` of the chapter's ledger (``results/norms/reported.json``,
:mod:`lncourse.evidence.norms.ledger`). :func:`numbers` computes those entries from the
stored runs, as the page's cells did when they glued them: the character data's levels,
the context-use run, the trained heads (counts, losses, configuration), the DyT runs of
the recipe (:mod:`lncourse.evidence.norms.retrained`), the logit-growth sweep (with the
sphere's bound read from every stored QK-norm model's gains), Peri-LN, the two majority
runs, the V lens and the two real models. ``tests/norms/test_ledger.py`` recomputes them
with the rest of the ledger, so an edit of a stored number a sentence quotes fails it.
Numbers this page's build computes itself (its random keys, its recount of one stored
model with epsilon 0, its passages) stay glued on the page.
"""

from __future__ import annotations

import numpy as np

__all__ = ["numbers"]


def _tag(v: str) -> str:
    return v.lower().replace("-", "_").replace(".", "")


def _context(context: dict) -> dict:
    from lncourse.evidence.norms import review

    th = context["trained_heads"]
    return {"ctx_heads_max": max(r["late"]["gain"][0] for rows in th.values() for r in rows),
            "ctx_small": review.SMALL_GAIN}


def _heads(heads: dict) -> dict:
    from lncourse.evidence.norms import trained

    out = {}
    loss = {v: float(np.mean([r["history"]["test_loss"][-1] for r in runs]))
            for v, runs in heads["models"].items()}
    for v, s in trained.summarize(heads["models"]).items():
        key = v.lower().replace("-", "_")
        mean, low, high = (100 * x for x in s["trained"]["overall"])
        out[f"heads_{key}_init"] = 100 * s["init"]["overall"][0]
        out[f"heads_{key}"], out[f"heads_{key}_low"], out[f"heads_{key}_high"] = mean, low, high
        out[f"heads_{key}_loss"] = loss[v]
    out["heads_models"] = sum(len(runs) for runs in heads["models"].values())
    cfg = heads["config"]
    for name, value in (("layers", cfg["n_layers"]), ("heads", cfg["n_heads"]),
                        ("contexts", cfg["contexts"]), ("T", cfg["block_size"]),
                        ("steps", cfg["steps"]), ("seeds", len(cfg["seeds"]))):
        out[f"heads_{name}"] = value
    return out


def _retrained(run: dict) -> dict:
    rc, dyt, refs = run["config"], run["models"]["DyT"][0], run["references"]
    return {"rt_dyt_loss": float(dyt["test_loss"]), "rt_dyt_lr": float(dyt["lr"]),
            "rt_dyt_steps": int(rc["steps"]),
            "rt_dyt_above": float(dyt["test_loss"] - refs["bigram"]),
            "rt_sweep_gap": max(abs(r["history"]["test_loss"][-1] - refs["unigram"])
                                for r in run["sweep"]["DyT"])}


def _wide(wide: dict) -> dict:
    from lncourse.evidence.norms import retrained

    out, wrep, wref = {}, retrained.report(wide), wide["references"]
    for v in wide["models"]:
        for k, x in {"loss": wrep[v]["across_seeds"]["test_loss"][0],
                     "init": np.mean([r["unselectable_init"][0] for r in wrep[v]["seeds"]]),
                     **dict(zip(("unsel", "unsel_low", "unsel_high"),
                                wrep[v]["across_seeds"]["unselectable_trained"]))}.items():
            out[f"w_{v.lower().replace('-', '_')}_{k}"] = float(x)
    dyt = [r["residual"] for r in wide["models"]["DyT"]]
    out["w_dyt_const_low"] = min(p["constant_rms"] for p in dyt)
    out["w_dyt_const_high"] = max(p["constant_rms"] for p in dyt)
    out["w_dyt_token_high"] = max(p["token_rms"] for p in dyt)
    out["w_bigram"] = float(wref["bigram"])
    out["w_min_gain"] = min(float(wrep[v]["across_seeds"]["late_gain"][0])
                            for v in ("Pre-LN", "RMSNorm", "QK-norm"))
    out["w_unigram"] = float(wref["unigram"])
    return out


def _dyt(dyt: dict, wref: dict) -> dict:
    """DyT-scaled and DyT-LLaMA (``d_...``)."""
    from lncourse.evidence.norms import retrained

    drep, out = retrained.report(dyt), {}
    for v in dyt["models"]:
        a, runs, seeds = drep[v]["across_seeds"], dyt["models"][v], drep[v]["seeds"]
        init = [s["unselectable_init"][0] for s in seeds]
        one = {"lr": float(drep["chosen_lr"][v]), "init": float(np.mean(init)),
               "unsel": float(a["unselectable_trained"][0]),
               "n_learned": sum(s["below_bigram"] >= 0.3 for s in seeds),
               "n_below": sum(r["test_loss"] < wref["bigram"] for r in runs),
               "most_below": max(s["below_bigram"] for s in seeds)}
        for name, k in (("loss", "test_loss"), ("gain", "late_gain")):
            one.update(zip((name, f"{name}_low", f"{name}_high"), map(float, a[k])))
        for k in ("constant_rms", "token_rms", "saturated", "out_token_rms"):
            xs = [r["residual"][k] for r in runs]
            one[f"{k}_low"], one[f"{k}_high"] = min(xs), max(xs)
        out.update({f"d_{v.lower().replace('-', '_')}_{k}": x for k, x in one.items()})
    out["d_n_seeds"] = len(dyt["config"]["seeds"])
    return out


def _long(long: dict) -> dict:
    from lncourse.evidence.norms import retrained

    lrep = retrained.report(long)["DyT-scaled"]
    out = {}
    for k, name in (("test_loss", "loss"), ("late_gain", "gain"),
                    ("unselectable_trained", "unsel")):
        for end, x in zip(("", "_low", "_high"), lrep["across_seeds"][k]):
            out[f"l_{name}{end}"] = float(x)
    out["l_steps"] = int(long["config"]["steps"])
    out["l_n_learned"] = sum(s["below_bigram"] >= 0.3 for s in lrep["seeds"])
    out["l_least_below"] = min(s["below_bigram"] for s in lrep["seeds"])
    return out


def _square(dyt: dict, low: dict, high: dict, wref: dict) -> dict:
    """DyT-LLaMA at 1e-2 (``r_...``) and DyT-scaled at 3e-2 (``h_...``)."""
    from lncourse.evidence.norms import retrained

    rrep = retrained.report(low)["DyT-LLaMA"]
    hrep = retrained.report(high)["DyT-scaled"]
    swap = {"1e-2": retrained.paired_loss_difference(low, "DyT-LLaMA", dyt, "DyT-scaled"),
            "3e-2": retrained.paired_loss_difference(dyt, "DyT-LLaMA", high, "DyT-scaled")}
    out = {}
    below = [s["below_bigram"] for s in rrep["seeds"]]
    for pre, rep in (("r", rrep), ("h", hrep)):
        for k, name in (("test_loss", "loss"), ("late_gain", "gain"),
                        ("unselectable_trained", "unsel")):
            for end, x in zip(("", "_low", "_high"), rep["across_seeds"][k]):
                out[f"{pre}_{name}{end}"] = float(x)
    for pre, lr in (("r", "1e-2"), ("h", "3e-2")):
        for end, x in zip(("", "_low", "_high"), swap[lr]):  # + 0.0: no -0.00
            out[f"{pre}_paired{end}"] = round(float(x), 2) + 0.0
    out["r_least_below"], out["r_most_below"] = min(below), max(below)
    out["r_n_learned"] = sum(b >= 0.3 for b in below)
    out["r_n_below"] = sum(b > 0 for b in below)
    out["r_largest_miss"] = max(0.3 - b for b in below if b < 0.3)
    for pre, run, v in (("r", low, "DyT-LLaMA"), ("h", high, "DyT-scaled")):
        c = [r["residual"]["constant_rms"] for r in run["models"][v]]
        out[f"{pre}_constant_low"], out[f"{pre}_constant_high"] = min(c), max(c)
    out["h_farthest"] = max(abs(r["test_loss"] - wref["bigram"])
                            for r in high["models"]["DyT-scaled"])
    return out


def _logits(stored: dict, weights: dict) -> dict:
    from lncourse.evidence.norms import logits

    cfg = logits.LogitsConfig.from_dict(stored["config"])
    summary = logits.summarize(stored["models"], cfg)
    top_logit = {v: [[max(r["final_max_logit"]) for r in runs if r["lr_index"] == i]
                     for i in range(len(cfg.lrs))] for v, runs in stored["models"].items()}
    bound = []                  # the sphere's bound, from every stored QK-norm model's gains
    for r in stored["models"]["QK-norm"]:
        model = logits.load_model(stored, weights, "QK-norm", r["lr_index"], r["seed"])
        bound.append(max(m / b for m, b in zip(r["final_max_logit"], logits.qk_bound(model))))
    top, out = len(cfg.lrs) - 1, {}
    for v in logits.VARIANTS:
        key, per_lr, sens = v.lower().replace("-", "_"), summary[v]["per_lr"], \
            summary[v]["sensitivity"]
        out.update({f"lg_{key}_sens": sens[0], f"lg_{key}_sens_low": sens[1],
                    f"lg_{key}_sens_high": sens[2],
                    f"lg_{key}_logit_top_min": min(top_logit[v][top]),
                    f"lg_{key}_logit_top_max": max(top_logit[v][top]),
                    f"lg_{key}_logit_next_min": min(top_logit[v][top - 1]),
                    f"lg_{key}_logit_next_max": max(top_logit[v][top - 1]),
                    f"lg_{key}_logit_mid_max": max(top_logit[v][top - 2]),
                    f"lg_{key}_logit_all_max": max(map(max, top_logit[v])),
                    f"lg_{key}_loss_top": per_lr[top]["test_loss"][0],
                    f"lg_{key}_best_lr": summary[v]["best_lr"],
                    f"lg_{key}_best_loss": min(c["test_loss"][0] for c in per_lr),
                    f"lg_{key}_logit0": float(np.mean(
                        [r["history"]["max_logit"][0][0] for r in stored["models"][v]]))})
    d = summary["sensitivity_difference"]
    out.update({"lg_sens_diff": d[0], "lg_sens_diff_low": d[1], "lg_sens_diff_high": d[2],
                "lg_bound_max": max(bound), "lg_top_lr": cfg.lrs[top],
                "lg_next_lr": cfg.lrs[top - 1], "lg_mid_lr": cfg.lrs[top - 2]})
    for i, name in ((top, "top"), (top - 1, "next"), (top - 2, "mid")):
        d = summary["loss_difference"][i]
        out.update({f"lg_diff_{name}": d[0], f"lg_diff_{name}_low": d[1],
                    f"lg_diff_{name}_high": d[2]})
    out["lg_n_models"] = sum(map(len, stored["models"].values()))
    out["lg_n_per_variant"] = len(stored["models"]["QK-norm"])
    out["lg_diverged"] = sum(r["test_loss"] is None for runs in stored["models"].values()
                             for r in runs)
    return out


def _periln(pl: dict, refs: dict) -> dict:
    from lncourse.evidence.norms import review

    summary, out = pl["summary"], {}
    rows = summary["per_lr"]
    for name, r in (("top", rows[-1]), ("next", rows[-2]), ("third", rows[-3]),
                    ("low", rows[0]), ("mid", rows[2])):
        out[f"pl_{name}_lr"] = r["lr"]
        for v in ("Pre-LN", "Peri-LN", "Peri-LN-0.02", "QK-norm"):
            key, c = f"pl_{name}_{_tag(v)}", r[v]
            out[f"{key}_loss"] = c["test_loss"][0]
            out[f"{key}_logit_min"], out[f"{key}_logit_max"] = c["max_logit"][:2]
            if "last_norm" in c:
                out[f"{key}_norm"] = c["last_norm"][0]
            for k, x in zip(("", "_low", "_high"), c.get("minus_pre_ln") or ()):
                out[f"{key}_diff{k}"] = x
    for v, c in summary["sensitivity"].items():
        out[f"pl_sens_{_tag(v)}"] = c[0]
    for v, c in summary["sensitivity_minus_pre_ln"].items():
        for k, x in zip(("", "_low", "_high"), c):
            out[f"pl_sens_diff_{_tag(v)}{k}"] = x
    out["pl_bound_max"] = summary["bound_ratio_max"]
    for v in ("Pre-LN", "Peri-LN"):
        out[f"pl_best_{_tag(v)}"] = min(r[v]["test_loss"][0] for r in rows)
    for v, x in pl["initial_streams"].items():
        out[f"pl_init_share_{_tag(v)}"] = 100 * x[0] / x[1]
    learn = review.periln_learning(pl["models"], summary, refs)
    best_lr = learn["pre_ln_best_lr"]
    if best_lr != rows[2]["lr"]:   # the page compares at rows[2]'s rate ("mid")
        raise ValueError(f"Pre-LN learned most at lr {best_lr}, not at the page's 'mid' "
                         f"rate {rows[2]['lr']}")
    out.update({"pl_learn_best_lr": learn["peri_ln_best_lr"],
                "pl_learn_best_below": learn["peri_ln_best_below"],
                "pl_learn_pre_low_below": learn["pre_ln_mean_below"][rows[0]["lr"]],
                "pl_learn_pre_best_below": learn["pre_ln_mean_below"][best_lr],
                "pl_learn_control_learned": learn["control_learned_seeds"][best_lr]})
    return out


def _arms(reduced: dict) -> dict:
    """The reduced majority run (``arms_...``), from its summary."""
    ran, arms, ng = reduced["ran"], reduced["arms"], reduced["arms"]["ngpt"]
    out = {"arms_steps": ran["steps"], "arms_batch": ran["batch_size"],
           "arms_ln_90": arms["layernorm"]["mean_steps_to_90"], "arms_ngpt_lr": ng["best_lr"]}
    for n in ("90", "80"):
        out.update(zip((f"arms_ngpt_{n}", f"arms_ngpt_{n}_low", f"arms_ngpt_{n}_high"),
                       ng[f"vs_layernorm_{n}"]))
    same = ng["vs_layernorm_90_same_lr"]
    fast = min(same, key=lambda k: same[k][0])
    slow = max(same, key=lambda k: same[k][0])
    out.update({"arms_ngpt_fast_lr": float(fast), "arms_ngpt_fast": same[fast][0],
                "arms_ngpt_slow_lr": float(slow), "arms_ngpt_slow": same[slow][0],
                "arms_unresolved": sum(v["tuned"] == "not resolved"
                                       for v in reduced["verdict"].values()),
                "arms_compared": len(reduced["verdict"])})
    for arm in ("rmsnorm", "dyt"):
        for k, x in zip(("", "_low", "_high"), arms[arm]["vs_layernorm_90"]):
            out[f"arms_{arm}_90{k}"] = x
    return out


def _arms_batch(run: dict, summary: dict) -> dict:
    """The majority run at the paper's batch (``armsb_...``): its summary, and the stored
    run for the step at which a seed of the nGPT-style arm diverged."""
    from lncourse.evidence.norms import review

    arms, ng = summary["arms"], summary["arms"]["ngpt"]
    out = {"armsb_diverged": summary["ran"]["diverged"],
           "armsb_ln_90": arms["layernorm"]["mean_steps_to_90"],
           "armsb_ln_lr": arms["layernorm"]["best_lr"]}
    for arm in ("no_projection", "rmsnorm", "qk_norm", "dyt", "ngpt"):
        for k, x in zip(("", "_low", "_high"), arms[arm]["vs_layernorm_90"]):
            out[f"armsb_{arm}_90{k}"] = x
        out[f"armsb_{arm}_lr"] = arms[arm]["best_lr"]
    for k, x in zip(("", "_low", "_high"), ng["vs_layernorm_90_fastest_lr"]):
        out[f"armsb_ngpt_fast{k}"] = x
    out["armsb_ngpt_fast_lr"] = ng["fastest_lr"]
    out["armsb_ngpt_fast_steps"] = ng["lr_scores"][f"{ng['fastest_lr']:g}"]
    bad = [(s, d) for a, lr, s, d in zip(run["arm"], run["lr"], run["seed"], run["diverged_at"])
           if a == "ngpt" and lr == ng["fastest_lr"] and d is not None]
    out["armsb_ngpt_div_step"] = bad[0][1]
    out["armsb_ln_angle"] = arms["layernorm"]["mean_query_angle"]
    out["armsb_tv_max"] = max(c["mean_attention_tv"] for c in arms.values())
    corrected = review.arms_corrected(summary)["arms"]["no_projection"]["corrected"]
    for k, x in zip(("", "_low", "_high"), corrected):
        out[f"armsb_no_projection_corr{k}"] = x
    return out


def _vlens(stored: dict) -> dict:
    from lncourse.evidence.norms import review
    from lncourse.norms import vlens

    cfg = vlens.VConfig.from_dict(stored["config"])
    ratio = review.dyt_signal_ratio(stored)
    out = {"vl_samples": cfg.samples, "vl_seq_len": cfg.seq_len,
           "vl_dyt_abs_ratio": ratio["absolute"], "vl_dyt_rel_ratio": ratio["relative"],
           "vl_groups": cfg.groups}
    for arm, v in vlens.summarize(stored).items():
        for key in ("attn_slope", "attn_ratio", "lemma3_ratio", "share_first"):
            for part, x in zip(("", "_low", "_high"), v[key]):
                out[f"vl_{arm}_{key}{part}"] = x
        out[f"vl_{arm}_share_pct"] = 100 * v["share_first"][0]
        out[f"vl_{arm}_energy"] = v["energy_last"][0]
        out[f"vl_{arm}_out_slope"] = v["out_slope"][0]
        out[f"vl_{arm}_cross"] = vlens.predicted(arm, cfg)["crossover"]
    return out


def _real(stored: dict) -> dict:
    """SmolLM2 and MiniLM (``smol_...``, ``mini_...``), from the stored summaries."""
    from lncourse.norms import hidden

    smol, mini = stored["models"]["smollm2"], stored["models"]["minilm"]

    def over_chance(m: dict) -> np.ndarray:
        return np.array(m["summary"]["abs_cos_ones"]["mean"]) / hidden.chance_abs_cos(m["d"])

    def below_random(m: dict) -> int:
        return int((np.array(m["summary"]["abs_cos_ones"]["high"])
                    < np.array(m["summary"]["abs_cos_random"]["mean"])).sum())

    s = smol["summary"]
    strongest = int(np.argmin(s["saturation"]["mean"]))
    return {"chance_smol": hidden.chance_abs_cos(smol["d"]),
            "smol_ratio_median": float(np.median(over_chance(smol))),
            "smol_ratio_max": float(over_chance(smol).max()),
            "mini_ratio_median": float(np.median(over_chance(mini))),
            "smol_below_random": below_random(smol),
            "mini_below_random": below_random(mini),
            "smol_above_random": int((np.array(s["abs_cos_ones"]["low"])
                                      > np.array(s["abs_cos_random"]["mean"])).sum()),
            "smol_cos2_pct": 100 * float(np.median(s["cos2_ones"]["mean"])),
            "smol_n_norms": len(smol["names"]),
            "smol_growth": s["norm"]["mean"][-1] / s["norm"]["mean"][0],
            "smol_massive0": max(s["massive_token0"]["mean"]),
            "smol_massive_rest": max(s["massive_rest"]["mean"]),
            "smol_spread": float(np.median(s["rms_spread"]["mean"])),
            "smol_sat": float(np.median(s["saturation"]["mean"])),
            "smol_sat_below": int((np.array(s["saturation"]["high"]) < 1).sum()),
            "mini_sat": float(np.median(mini["summary"]["saturation"]["mean"])),
            "smol_sat_min": s["saturation"]["mean"][strongest],
            "smol_sat_min_rest": s["saturation_rest"]["mean"][strongest],
            "smol_sat_rest": float(np.median(s["saturation_rest"]["mean"])),
            "smol_sat_rest_below": int((np.array(s["saturation_rest"]["high"]) < 1).sum()),
            "n_stored": stored["config"]["n_passages"]}


def numbers(stored: dict, heads: dict, vlens: dict, logits: dict, logits_weights: dict,
            periln: dict, context: dict, retrained: dict, majority: dict,
            recipe_runs: dict) -> dict:
    """Every number the replication page's prose quotes, by the name its ``{ledger}`` roles
    use (``page/<name>``). ``periln`` is :func:`lncourse.evidence.norms.periln_report.
    reported`; ``logits_weights`` the logit-growth run's ``logits.pt``; ``majority`` the
    two stored majority runs by the keys of :data:`lncourse.evidence.norms.majority_report.
    RUNS`; ``recipe_runs`` the runs at d = 32 by the keys of
    :data:`lncourse.evidence.norms.ledger.RECIPE_RUNS`."""
    from lncourse.evidence.norms import majority_report, review

    refs = review.char_references()
    wide = recipe_runs["retrained_wide"]
    wref = wide["references"]
    return {"ref_bigram": refs["bigram"], "ref_unigram": refs["unigram"],
            **_context(context), **_heads(heads), **_retrained(retrained), **_wide(wide),
            **_dyt(recipe_runs["retrained_dyt"], wref),
            **_long(recipe_runs["retrained_dyt_long"]),
            **_square(recipe_runs["retrained_dyt"], recipe_runs["retrained_dyt_lr"],
                      recipe_runs["retrained_dyt_high"], wref),
            **_logits(logits, logits_weights), **_periln(periln, refs),
            **_arms(majority_report.summary(majority["reduced"])),
            **_arms_batch(majority["paper_batch"],
                          majority_report.summary(majority["paper_batch"])),
            **_vlens(vlens), **_real(stored)}
