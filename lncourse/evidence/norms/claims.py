"""The sentences of chapter 5 that state a comparison, as claims checked against the stored
measurements (``results/norms/real_paper.json``). The chapter prints them and asserts them;
``tests/norms/test_real.py`` checks them, so a stored file that no longer supports a
sentence fails a test."""

from __future__ import annotations

import numpy as np

from lncourse.norms.hidden import chance_abs_cos

__all__ = ["claims", "heads_claims", "arms_claims", "arms_batch_claims", "vlens_claims",
           "logits_claims", "periln_claims"]


def claims(stored: dict) -> dict[str, bool]:
    """Each claim of the chapter's prose -> whether the stored measurements support it."""
    smol, mini = stored["models"]["smollm2"], stored["models"]["minilm"]
    s = smol["summary"]
    n = len(smol["names"])
    below_random = np.array(s["abs_cos_ones"]["high"]) < np.array(s["abs_cos_random"]["mean"])
    norm = s["norm"]["mean"]
    rest = max(s["massive_rest"]["mean"])
    strongest = int(np.argmin(s["saturation"]["mean"]))
    rest_below = np.array(s["saturation_rest"]["high"]) < 1
    return {
        "SmolLM2's h is closer to ⟂ 1 than to ⟂ a random direction at most norms":
            bool(below_random.sum() > n / 2),
        "SmolLM2's median |cos(h, 1)| is below the isotropic chance level":
            bool(np.median(s["abs_cos_ones"]["mean"]) < chance_abs_cos(smol["d"])),
        "the median fraction of ||h||² along 1 is below 0.1%":
            bool(np.median(s["cos2_ones"]["mean"]) < 1e-3),
        "SmolLM2's residual stream is longer at its last norm than at its first":
            bool(norm[-1] > norm[0]),
        "token 0's largest entry exceeds every other token's by more than 10 times":
            bool(max(s["massive_token0"]["mean"]) > 10 * rest),
        "SmolLM2's median slope ratio is below 1 (an S-shape) and MiniLM's is nearer 1":
            bool(np.median(s["saturation"]["mean"]) < 1
                 and abs(np.median(mini["summary"]["saturation"]["mean"]) - 1)
                 < abs(np.median(s["saturation"]["mean"]) - 1)),
        "SmolLM2's strongest bend is token 0's: without it the ratio there is above 0.8":
            bool(s["saturation_rest"]["mean"][strongest] > 0.8),
        "without token 0 a milder bend remains: the interval is below 1 at most norms":
            bool(rest_below.sum() > n / 2),
    }


def heads_claims(stored: dict) -> dict[str, bool]:
    """The claims of the trained per-head section (``results/norms/trained_heads.json``),
    from the summaries recomputed from the stored counts: intervals are 95% t intervals
    over seeds of the share of unselectable keys per head."""
    from lncourse.evidence.norms.trained import summarize

    s = summarize(stored["models"])
    trained = {v: s[v]["trained"]["overall"] for v in s}      # mean, low, high
    init = {v: s[v]["init"]["overall"] for v in s}
    qk = trained["QK-norm"]
    loss = {v: float(np.mean([r["history"]["test_loss"][-1] for r in runs]))
            for v, runs in stored["models"].items()}
    others = [v for v in trained if v != "QK-norm"]
    return {
        "after training, QK-norm's interval lies below each other norm's":
            all(qk[2] < trained[v][1] for v in others),
        "QK-norm leaves some keys unselectable (its mean is above 0)": qk[0] > 0,
        "Pre-LN, RMSNorm and DyT each leave more than half the keys unselectable":
            all(trained[v][0] > 0.5 for v in others),
        "at initialisation too, QK-norm's interval lies below each other norm's":
            all(init["QK-norm"][2] < init[v][1] for v in others),
        "at every layer, QK-norm's trained interval lies below each other norm's":
            all(q[2] < o[1] for v in others
                for q, o in zip(s["QK-norm"]["trained"]["layers"], s[v]["trained"]["layers"])),
        "training lowers QK-norm's share (its trained interval lies below its initial one)":
            qk[2] < init["QK-norm"][1],
        "DyT's mean test loss exceeds each other norm's by more than 0.5 nats":
            all(loss["DyT"] > loss[v] + 0.5 for v in loss if v != "DyT"),
    }


def _shared_arms_claims(arms: dict) -> dict[str, bool]:
    """The claims both runs of the majority arms make: nGPT's sign flip at one shared lr,
    the query angle to 1 and attention's distance to uniform."""
    same = list(arms["ngpt"]["vs_layernorm_90_same_lr"].values())
    angles = {a: c["mean_query_angle"] for a, c in arms.items()
              if c["mean_query_angle"] is not None}
    return {
        "at one shared lr, nGPT is resolved faster at one lr and slower at another":
            any(ci[2] < 0 for ci in same) and any(ci[1] > 0 for ci in same),
        "only LayerNorm's mean query angle to 1 is below 60 degrees":
            [a for a, x in angles.items() if x < 60] == ["layernorm"],
        "every arm's attention is within 0.05 (TV) of uniform":
            all(c["mean_attention_tv"] < 0.05 for c in arms.values()),
    }


def arms_claims(summary: dict) -> dict[str, bool]:
    """The claims of the majority-arms section, from
    :func:`lncourse.evidence.norms.majority_report.summary` of the stored run."""
    arms, ran = summary["arms"], summary["ran"]
    ng = arms["ngpt"]
    return {
        "at its own lr, no arm reaches 90% measurably sooner or later than LayerNorm":
            all(v["tuned"] == "not resolved" for v in summary["verdict"].values()),
        "nGPT's chosen lr is the top of the grid": ng["best_lr"] == max(ran["lrs"]),
        "at its own lr, nGPT reaches 80% sooner than LayerNorm (interval below 0)":
            ng["vs_layernorm_80"][2] < 0,
        **_shared_arms_claims(arms),
    }


def arms_batch_claims(summary: dict) -> dict[str, bool]:
    """The claims of the majority arms at the paper's batch (``paper_batch``), from
    :func:`lncourse.evidence.norms.majority_report.summary` of that run."""
    arms, verdict = summary["arms"], summary["verdict"]
    ng = arms["ngpt"]

    def open_interval(ci):
        return ci[1] < 0 < ci[2]
    return {
        "every arm reaches 90% in every seed at its chosen lr":
            all(c["reached_90"] == len(c["steps_to_90"]) for c in arms.values()),
        "at its own lr, the projection-free arm reaches 90% sooner than LayerNorm and no "
        "other arm is resolved":
            verdict["no_projection"]["tuned"] == "faster"
            and all(v["tuned"] == "not resolved" for a, v in verdict.items()
                    if a != "no_projection"),
        "nGPT's lr with the fewest steps to 90% is ruled out by the divergence clause, and "
        "at that lr too it is not resolved from LayerNorm":
            ng["fastest_lr"] != ng["best_lr"]
            and open_interval(ng["vs_layernorm_90_fastest_lr"]),
        **_shared_arms_claims(arms),
    }


def vlens_claims(stored: dict) -> dict[str, bool]:
    """The claims of the V-lens section (``results/norms/vlens.json``), from the summary
    recomputed from the stored curves (:func:`lncourse.norms.vlens.summarize`): each
    number is [mean, low, high], a 95% t interval over groups of samples."""
    from lncourse.norms.vlens import summarize

    s = summarize(stored)
    ln, rms, qk, dyt = (s[a] for a in ("layernorm", "rmsnorm", "qk_norm", "dyt"))
    return {
        "with nothing fitted, the lens predicts every norm's attention variance within 2% "
        "(its interval inside [0.98, 1.02])":
            all(0.98 < v["attn_ratio"][1] and v["attn_ratio"][2] < 1.02 for v in s.values()),
        "chapter 4's Lemma 3 alone (with the energy, without the floor) falls short of "
        "QK-norm's variance by more than 10% and of LayerNorm's by less than 5%":
            qk["lemma3_ratio"][1] > 1.10 and ln["lemma3_ratio"][2] < 1.05,
        "QK-norm's log-log slope is above -0.9, LayerNorm's and DyT's below -0.95":
            qk["attn_slope"][1] > -0.9 and ln["attn_slope"][2] < -0.95
            and dyt["attn_slope"][2] < -0.95,
        "RMSNorm's slope and ratio equal LayerNorm's to within 0.001":
            abs(rms["attn_slope"][0] - ln["attn_slope"][0]) < 1e-3
            and abs(rms["attn_ratio"][0] - ln["attn_ratio"][0]) < 1e-3,
        "at m = 1, DyT's attention output is less than a tenth of LayerNorm's share of the "
        "block output's variance":
            dyt["share_first"][2] < 0.1 * ln["share_first"][1],
        "DyT's block output has no trend with position (|slope| below 0.001), LayerNorm's "
        "falls (interval below 0)":
            max(abs(dyt["resid_slope"][1]), abs(dyt["resid_slope"][2])) < 1e-3
            and ln["resid_slope"][2] < 0,
        "after the final LayerNorm or RMSNorm the average variance has no trend with "
        "position (|slope| below 0.002)":
            all(max(abs(v["out_slope"][1]), abs(v["out_slope"][2])) < 2e-3
                for v in (ln, rms)),
    }


def logits_claims(stored: dict) -> dict[str, bool]:
    """The claims of the logit-growth section (``results/norms/logits.json``): from the
    stored records (largest logits per model: they spread over orders of magnitude, so
    they are compared seed by seed, not by t intervals) and from the summary recomputed
    from them (:func:`lncourse.evidence.norms.logits.summarize`; paired 95% t intervals over
    seeds)."""
    from lncourse.evidence.norms.logits import LogitsConfig, summarize

    cfg = LogitsConfig.from_dict(stored["config"])
    s = summarize(stored["models"], cfg)
    n = len(cfg.lrs)

    def logits(variant: str, i: int) -> list[float]:
        return [max(r["final_max_logit"]) for r in stored["models"][variant]
                if r["lr_index"] == i and None not in r["final_max_logit"]]

    low = [i for i, lr in enumerate(cfg.lrs) if lr <= 0.03]
    mid = n - 3                            # the highest lr below the two top ones

    def worst_seed(variant: str) -> int:
        runs = [r for r in stored["models"][variant] if r["lr_index"] == mid]
        return max(runs, key=lambda r: r["test_loss"])["seed"]
    return {
        "no model diverged: every final test loss is finite":
            all(r["test_loss"] is not None for runs in stored["models"].values()
                for r in runs),
        "at the two highest learning rates, every Pre-LN model's largest attention logit "
        "is more than 100 times every QK-norm model's":
            all(min(logits("Pre-LN", i)) > 100 * max(logits("QK-norm", i))
                for i in (n - 2, n - 1)),
        "every QK-norm model's largest attention logit is below 100":
            max(max(logits("QK-norm", i)) for i in range(n)) < 100,
        "QK-norm's LR sensitivity is lower than Pre-LN's (paired interval below 0)":
            s["sensitivity_difference"][2] < 0,
        "at the two highest learning rates QK-norm's test loss is lower than Pre-LN's "
        "(paired intervals below 0)":
            all(s["loss_difference"][i] is not None and s["loss_difference"][i][2] < 0
                for i in (n - 2, n - 1)),
        "at the third-highest learning rate the same seed has the highest test loss in "
        "both variants, and every largest logit there is below 100":
            worst_seed("Pre-LN") == worst_seed("QK-norm")
            and max(logits("Pre-LN", mid) + logits("QK-norm", mid)) < 100,
        "at every learning rate up to 0.03 the paired difference in test loss has an "
        "interval that contains 0":
            bool(low) and all(s["loss_difference"][i] is not None
                              and s["loss_difference"][i][1] < 0 < s["loss_difference"][i][2]
                              for i in low),
    }


def periln_claims(summary: dict, initial: dict) -> dict[str, bool]:
    """The claims of the Peri-LN section, from :func:`lncourse.evidence.norms.periln.summary` of the
    stored Peri-LN run beside the logit-growth run (paired 95% t intervals over seeds)
    and the streams at initialisation (:func:`lncourse.evidence.norms.periln.initial_streams`)."""
    rows = summary["per_lr"]
    top = rows[-2:]                                   # the two highest learning rates
    low = [r for r in rows if r["lr"] <= 0.01]

    def below(ci):
        return ci is not None and ci[2] < 0

    def above(ci):
        return ci is not None and ci[1] > 0
    share = {v: x[0] / x[1] for v, x in initial.items()}   # embedding / after 1 sublayer
    return {
        "no Peri-LN model's sublayer adds more than its output norm's bound":
            summary["bound_ratio_max"] <= 1 + 1e-4,
        "at the two highest learning rates, Pre-LN's mean stream norm at the last depth is "
        "more than 100 times that of either Peri-LN variant":
            all(r["Pre-LN"]["last_norm"][0] > 100 * r[v]["last_norm"][0]
                for r in top for v in ("Peri-LN", "Peri-LN-0.02")),
        "at the two highest learning rates, every Peri-LN model's largest attention logit "
        "is above 10,000: the output norm does not bound the logits":
            all(r[v]["max_logit"][0] > 1e4 for r in top for v in ("Peri-LN", "Peri-LN-0.02")),
        "at the two highest learning rates, each Peri-LN variant's largest logit is above "
        "Pre-LN's smallest: the logits grow as far, and the loss does not follow":
            all(r[v]["max_logit"][1] > r["Pre-LN"]["max_logit"][0]
                for r in top for v in ("Peri-LN", "Peri-LN-0.02")),
        "at the third-highest learning rate, every Peri-LN model's largest logit is more "
        "than 10 times every Pre-LN model's":
            all(rows[-3][v]["max_logit"][0] > 10 * rows[-3]["Pre-LN"]["max_logit"][1]
                for v in ("Peri-LN", "Peri-LN-0.02")),
        "Peri-LN's best mean test loss over the grid is higher than Pre-LN's":
            min(r["Peri-LN"]["test_loss"][0] for r in rows)
            > min(r["Pre-LN"]["test_loss"][0] for r in rows),
        "at the two highest learning rates both Peri-LN variants have a lower test loss than "
        "Pre-LN (paired intervals below 0)":
            all(below(r[v]["minus_pre_ln"]) for r in top for v in ("Peri-LN", "Peri-LN-0.02")),
        "at every learning rate up to 0.01, Peri-LN with γ_out = 1 has a higher test loss "
        "than Pre-LN (paired intervals above 0)":
            bool(low) and all(above(r["Peri-LN"]["minus_pre_ln"]) for r in low),
        "at every learning rate up to 0.01, the control with γ_out = 0.02 has a paired "
        "interval from Pre-LN that contains 0":
            bool(low) and all(r["Peri-LN-0.02"]["minus_pre_ln"] is not None
                              and r["Peri-LN-0.02"]["minus_pre_ln"][1] < 0
                              < r["Peri-LN-0.02"]["minus_pre_ln"][2] for r in low),
        "both Peri-LN variants are less sensitive to the learning rate than Pre-LN "
        "(paired intervals below 0)":
            all(below(summary["sensitivity_minus_pre_ln"][v])
                for v in ("Peri-LN", "Peri-LN-0.02")),
        "at initialisation the embedding is under a tenth of the stream after the first "
        "sublayer with γ_out = 1, and over half of it in Pre-LN and with γ_out = 0.02":
            share["Peri-LN"] < 0.1 and share["Pre-LN"] > 0.5 and share["Peri-LN-0.02"] > 0.5,
    }
