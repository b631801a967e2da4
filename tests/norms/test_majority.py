"""Chapter 5's majority arms: each arm's implementation, the fused path against the
readable token-level model, the trainer's resume, the lr selection rule, and every
reported number recomputed from the stored run and compared with its ledger
(results/norms/majority_reported.json)."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F

from lncourse.evidence import claims as C
from lncourse.majority import task
from lncourse.norms import majority as NM
from lncourse.evidence.norms import majority_report as R
from lncourse.evidence.norms.majority_run import ArmsConfig, train
from lncourse.results import RESULTS_DIR, load_result, today_command


def _params(seed: int, perturb: bool = True) -> dict:
    p = {k: v.double() for k, v in NM.initial_params(seed).items()}
    if perturb:   # move the arms' own parameters off their initial values, so they matter
        gen = torch.Generator().manual_seed(seed)
        for k in ("n1_w", "n1_b", "q_gain", "k_gain", "s_qk"):
            p[k] = p[k] + 0.2 * torch.randn(p[k].shape, generator=gen, dtype=torch.float64)
        p["n1_alpha"] = p["n1_alpha"] + 0.3
    return p


@pytest.fixture(scope="module")
def batch():
    tokens, labels = task.make_dataset(3000, seed=1)
    idx = torch.randperm(len(labels), generator=torch.Generator().manual_seed(0))[:48]
    return tokens[idx], labels[idx]


def test_fused_loss_and_gradients_equal_the_readable_token_model(batch):
    tokens, labels = batch
    arms = NM.ALL_ARMS + ("ngpt", "dyt")            # runs of arms, and arms repeated
    ps = [_params(s) for s in range(len(arms))]
    stack = {k: torch.stack([p[k] for p in ps]).requires_grad_() for k in NM.PARAM_NAMES}
    counts = task.class_counts(tokens, 20)
    loss, _ = NM.fused_loss(stack, counts.unsqueeze(0), labels.unsqueeze(0), arms, chunk=3)
    grads = torch.autograd.grad(loss.sum(), list(stack.values()))
    for m, arm in enumerate(arms):
        p = {k: t.clone().requires_grad_() for k, t in ps[m].items()}
        ref = NM.token_loss(p, tokens, labels, arm)
        ref_grads = torch.autograd.grad(ref, list(p.values()), allow_unused=True)
        assert float(loss[m].detach()) == pytest.approx(float(ref.detach()), rel=1e-12), arm
        for name, g, r in zip(stack, grads, ref_grads):
            r = torch.zeros_like(g[m]) if r is None else r
            torch.testing.assert_close(g[m], r, rtol=1e-9, atol=1e-12, msg=f"{arm} {name}")


@pytest.mark.parametrize("arm", ["layernorm", "no_projection"])
def test_the_reference_arms_are_chapter_3s_models(batch, arm):
    tokens, labels = batch
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(11)
        model = task.MajorityModel(arm).double()
    with torch.no_grad():
        logits = model(tokens)
    ref = F.cross_entropy(logits.reshape(-1, 20), labels.view(-1, 1).expand(-1, 50).reshape(-1))
    assert float(NM.token_loss(_params(11), tokens, labels, arm)) == pytest.approx(float(ref),
                                                                                   rel=1e-12)


def _inputs(arm, p, x):
    return NM.attention_inputs(arm, {k: t.unsqueeze(0) for k, t in p.items()}, x.unsqueeze(0))


def test_qk_norm_keys_and_queries_have_rms_1_before_their_gain():
    p = _params(3)
    x = torch.randn(30, 8, dtype=torch.float64) * 3
    one = torch.ones(8, dtype=torch.float64)
    plain = dict(p, q_gain=one, k_gain=one)
    q, k, _, _ = _inputs("qk_norm", plain, x)
    W_Q, W_K, _ = p["W_in"].chunk(3)
    for normed, W in ((q * math.sqrt(8), W_Q), (k, W_K)):
        ms = (F.layer_norm(x, (8,), eps=0.0) @ W.T).pow(2).mean(-1)     # before the norm
        torch.testing.assert_close(normed.pow(2).mean(-1)[0], ms / (ms + NM.QK_EPS))
        assert (normed.pow(2).mean(-1) - 1).abs().max() < 1e-4          # RMS 1 (eps aside)
    _, k_g, _, _ = _inputs("qk_norm", p, x)          # the gain multiplies each channel
    torch.testing.assert_close(k_g, k * p["k_gain"])


def test_rmsnorm_is_no_projection_times_its_gain():
    p = _params(4)
    x = torch.randn(30, 8, dtype=torch.float64) + 2   # far from the sphere, off-centre
    _, _, v_rms, _ = _inputs("rmsnorm", p, x)
    h = math.sqrt(8) * x / x.norm(dim=-1, keepdim=True) * p["n1_w"]
    torch.testing.assert_close(v_rms[0], h @ p["W_in"].chunk(3)[2].T)
    init = _params(4, perturb=False)                   # gain 1: exactly no_projection
    for a, b in zip(_inputs("rmsnorm", init, x), _inputs("no_projection", init, x)):
        torch.testing.assert_close(a, b)


def test_dyt_is_its_formula_and_affine_as_alpha_goes_to_0():
    p = _params(5)
    x = torch.randn(30, 8, dtype=torch.float64) * 4
    W_V = p["W_in"].chunk(3)[2]
    _, _, v, e = _inputs("dyt", p, x)
    h = p["n1_w"] * torch.tanh(p["n1_alpha"] * x) + p["n1_b"]
    torch.testing.assert_close(v[0], h @ W_V.T)
    torch.testing.assert_close(e[0], x)                # the residual stream is untouched
    small = dict(p, n1_alpha=torch.tensor(1e-5, dtype=torch.float64))
    _, _, v, _ = _inputs("dyt", small, x)
    affine = (1e-5 * p["n1_w"] * x + p["n1_b"]) @ W_V.T
    assert (v[0] - affine).abs().max() < 1e-12         # tanh(αx) = αx + O(α³)
    _, _, v, _ = _inputs("dyt", p, x)                  # at α ≈ 0.8 it is not affine
    assert (v[0] - (p["n1_alpha"] * p["n1_w"] * x + p["n1_b"]) @ W_V.T).abs().max() > 0.1


def test_ngpt_vectors_are_on_the_unit_sphere_and_scores_scaled_by_s_qk():
    p = _params(6)
    x = torch.randn(30, 8, dtype=torch.float64) * 3
    q, k, _, e = _inputs("ngpt", p, x)
    ones = torch.ones(1, 30, dtype=torch.float64)
    torch.testing.assert_close(e.norm(dim=-1), ones)
    s = p["s_qk"] * math.sqrt(8)
    torch.testing.assert_close((k / s).norm(dim=-1), ones)
    torch.testing.assert_close((q / s / math.sqrt(8)).norm(dim=-1), ones)
    torch.testing.assert_close(NM.unembedding("ngpt", p["W_E"]).norm(dim=-1),
                               torch.ones(20, dtype=torch.float64))
    init = _params(6, perturb=False)                   # s_qk = 1: scores = √d cos(q, k)
    q, k, _, _ = _inputs("ngpt", init, x)
    S = q @ k.transpose(-1, -2)
    assert S.abs().max() <= math.sqrt(8) + 1e-12 and S.abs().max() > 1


def test_an_arm_leaves_the_parameters_it_does_not_read_at_zero_gradient(batch):
    tokens, labels = batch
    reads = {"layernorm": set(), "no_projection": set(), "rmsnorm": {"n1_w"},
             "qk_norm": {"q_gain", "k_gain"}, "dyt": {"n1_w", "n1_b", "n1_alpha"},
             "ngpt": {"s_qk"}}
    for arm in NM.ALL_ARMS:
        p = {k: t.clone().requires_grad_() for k, t in _params(7).items()}
        grads = torch.autograd.grad(NM.token_loss(p, tokens, labels, arm), list(p.values()),
                                    allow_unused=True)
        extra = {k for k, g in zip(p, grads) if k in NM.extra_params(8) and g is not None
                 and g.abs().max() > 0}
        assert extra == reads[arm], arm


def test_the_layernorm_arms_query_angle_and_uniformity_are_chapter_3s():
    p = _params(8)
    counts = task.class_counts(task.make_dataset(2000, seed=2)[0][:200], 20)
    ch3 = task.query_angles(task.effective_queries(p["W_E"], p["W_in"], "layernorm"))
    torch.testing.assert_close(NM.query_angles(p, "layernorm"), ch3)
    assert NM.uniformity(p, "layernorm", counts) == pytest.approx(
        task.attention_uniformity(p["W_E"], p["W_in"], "layernorm", counts), rel=1e-12)
    assert NM.query_angles(p, "qk_norm").isnan().all()


def test_training_resumes_identically(tmp_path):
    config = ArmsConfig.tiny()
    whole = train(config, show_progress=False)
    ckpt = tmp_path / "c.ckpt"
    first = train(config, show_progress=False, checkpoint_path=ckpt, max_seconds=0)
    assert first["step"][-1] < config.steps
    resumed = train(config, show_progress=False, checkpoint_path=ckpt)
    for key in ("step", "test_acc", "train_loss", "final_params", "diverged_at"):
        assert resumed[key] == whole[key], key


def _history(acc_by_lr: dict, diverged: dict | None = None) -> dict:
    """A synthetic history of one arm, 2 seeds, evaluated at steps 0, 100, 200."""
    lrs = sorted(acc_by_lr)
    models = [(lr, s) for lr in lrs for s in range(2)]
    acc = [[acc_by_lr[lr][s][t] for lr, s in models] for t in range(3)]
    return {"config": {"lrs": lrs, "eval_every": 100}, "step": [0, 100, 200],
            "arm": ["layernorm"] * len(models), "lr": [lr for lr, _ in models],
            "test_acc": acc, "diverged_at": [(diverged or {}).get((lr, s)) for lr, s in models]}


def test_the_selection_rule_penalises_never_reached_breaks_ties_low_and_avoids_divergence():
    # lr 0.1 reaches 90% at step 100 in one seed, never in the other: mean (100 + 300) / 2
    h = _history({0.01: [[0, .5, .95], [0, .5, .95]], 0.1: [[0, .95, .95], [0, .5, .5]]})
    best, score = R.select_lr(h, "layernorm")
    assert score == {0.01: 200.0, 0.1: 200.0} and best == 0.01      # a tie: the smaller lr
    h = _history({0.01: [[0, .5, .95], [0, .5, .95]], 0.1: [[0, .95, .95], [0, .95, .95]]})
    assert R.select_lr(h, "layernorm")[0] == 0.1
    h = _history({0.01: [[0, .5, .95], [0, .5, .95]], 0.1: [[0, .95, .95], [0, .95, .95]]},
                 diverged={(0.1, 1): 150})
    assert R.select_lr(h, "layernorm")[0] == 0.01      # a diverged seed rules its lr out
    # a seed that diverged before reaching 90% has not reached it
    h = _history({0.1: [[0, .5, .95], [0, .5, .95]]}, diverged={(0.1, 0): 50})
    steps = R.per_seed_steps(h, "layernorm", 0.1, 0.9)
    assert math.isnan(steps[0]) and steps[1] == 200


# ----------------------------------------------------------------- the stored runs
LEDGER = RESULTS_DIR / f"{R.LEDGER}.json"


@pytest.fixture(scope="module")
def runs():
    """name -> (stored history, its test set) of each stored run of the arms."""
    from lncourse.evidence.norms.majority_run import test_data
    out = {}
    for name, source in R.RUNS.items():
        stored = load_result(source)
        out[name] = stored, test_data(ArmsConfig.from_dict(stored["config"]))
    return out


@pytest.fixture(scope="module")
def computed(runs):
    return {name: R.reported(stored, data, run=name) for name, (stored, data) in runs.items()}


def test_every_reported_number_matches_the_ledger(computed):
    differences = C.compare(computed, C.load_ledger(LEDGER))
    assert not differences, ("the majority arms' numbers differ from their ledger (rewrite "
                             "it if a new run is meant: python -m "
                             "lncourse.evidence.norms.majority_report):\n  " + "\n  ".join(differences[:20]))


@pytest.mark.parametrize("name", sorted(R.RUNS))
def test_each_runs_claims_hold(computed, name):
    claims = computed[name]["claims"]
    assert claims and all(claims.values()), [k for k, v in claims.items() if not v]


def _edit(stored, what):
    stored = copy.deepcopy(stored)
    m = stored["arm"].index("ngpt")
    if what == "an accuracy":               # every reported arm's curve feeds the table
        for row in stored["test_acc"]:
            row[m] = 0.0
    elif what == "a final weight":          # feeds the query angle and uniformity
        best = R.select_lr(stored, "layernorm")[0]
        k = next(i for i, (a, lr) in enumerate(zip(stored["arm"], stored["lr"]))
                 if a == "layernorm" and lr == best)
        stored["final_params"]["W_in"][k][0][0] += 0.5
    elif what == "a divergence":
        stored["diverged_at"][m] = 100
    elif what == "the steps":
        stored["config"]["steps"] += 100
    return stored


@pytest.mark.parametrize("name", sorted(R.RUNS))
@pytest.mark.parametrize("what", ["an accuracy", "a final weight", "a divergence", "the steps"])
def test_an_edited_stored_number_fails_the_ledger(runs, computed, name, what):
    stored, data = runs[name]
    edited = {**computed, name: R.reported(_edit(stored, what), data, run=name)}
    assert C.compare(edited, C.load_ledger(LEDGER)), (name, what)


def test_reported_refuses_an_unknown_run():
    with pytest.raises(ValueError, match="run must be one of"):
        R.reported({}, run="papre")


def test_command_line_stores_a_run_and_exports_a_partial_one(tmp_path, monkeypatch):
    import json

    from lncourse import results
    from lncourse.evidence.norms import majority_run

    monkeypatch.setattr(results, "git_commit", lambda: "c" * 40)   # as from a clean clone
    monkeypatch.setattr(majority_run, "RESULTS_DIR", tmp_path)
    out = tmp_path / "tiny.json"
    majority_run.main(["--preset", "tiny", "--out", str(out), "--quiet", "--max-seconds", "0"])
    h = json.loads(out.read_text())            # stopped after its first evaluation past 0 s
    assert h["step"] == [0, 10] and h["complete"] is False
    assert today_command(h["provenance"]["command"]).startswith(
        "python -m lncourse.evidence.norms.majority_run")
    assert results.describe(h).endswith("INCOMPLETE: the first 10 of 20 steps")
    partial = tmp_path / "partial.json"
    majority_run.main(["--preset", "tiny", "--out", str(out), "--export-partial"])
    q = json.loads(out.read_text())
    assert q["test_acc"] == h["test_acc"] and q["final_params"] == h["final_params"]
    assert q["provenance"]["device"].endswith("(partial export; threads not recorded)")
    majority_run.main(["--preset", "tiny", "--out", str(out), "--quiet"])   # resumes, ends
    r = json.loads(out.read_text())
    assert r["step"] == [0, 10, 20] and r["complete"] is True
    assert r["test_acc"][:2] == h["test_acc"]
    assert not partial.exists()


def test_the_paper_batch_claims_fail_on_contrary_numbers(computed):
    """Each claim of claims.arms_batch_claims turns False when its run says otherwise."""
    from lncourse.evidence.norms import claims

    s = computed["paper_batch"]
    cases = {"no_projection not faster": ("verdict", "no_projection", "tuned", "not resolved"),
             "nGPT's fastest lr chosen": ("arms", "ngpt", "fastest_lr", s["arms"]["ngpt"]["best_lr"]),
             "a seed short of 90%": ("arms", "dyt", "reached_90", 9)}
    for name, (top, arm, key, value) in cases.items():
        edited = copy.deepcopy(s)
        edited[top][arm][key] = value
        assert not all(claims.arms_batch_claims(edited).values()), name
