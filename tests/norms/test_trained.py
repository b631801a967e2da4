"""Per-head selectability of trained models under four norms (lncourse.norms.trained): the
run stores what recomputes its numbers, and an edited number fails the check."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from lncourse.claims import flatten
from lncourse.lm import evaluate_lm
from lncourse.norms import trained
from lncourse.results import RESULTS_DIR

STORED = RESULTS_DIR / "norms" / "trained_heads.json"


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("results")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(trained, "RESULTS_DIR", folder)
        path = trained.main(["--preset", "tiny", "--quiet", "--allow-dirty"])
    return json.loads(path.read_text())


def _check(stored: dict, variant: str, seed: int) -> None:
    """One model's counts recomputed from its stored weights (trained) and from its seed
    (initialisation); every summary recomputed from the stored counts."""
    contexts = torch.tensor(stored["contexts"])
    run = next(r for r in stored["models"][variant] if r["seed"] == seed)
    np.testing.assert_allclose(
        trained.head_counts(trained.load_model(stored, variant, seed), contexts),
        run["trained"], rtol=0, atol=1e-12, err_msg=f"{variant}, seed {seed}, trained")
    cfg = trained.HeadsConfig(**{k: tuple(v) if isinstance(v, list) else v
                                 for k, v in stored["config"].items() if k != "vocab_size"})
    init = trained.build(cfg, stored["config"]["vocab_size"], variant, seed)
    np.testing.assert_allclose(trained.head_counts(init, contexts), run["init"], rtol=0,
                               atol=1e-12, err_msg=f"{variant}, seed {seed}, init")
    assert flatten(trained.summarize(stored["models"])) == pytest.approx(
        flatten(stored["summary"]), rel=1e-12, nan_ok=True)
    _, _, test_ids = trained._data(cfg)
    model = trained.load_model(stored, variant, seed)
    loss = evaluate_lm(model, test_ids, batches=cfg.eval_batches, batch_size=cfg.batch_size,
                       block_size=cfg.block_size, seed=seed + 1, device="cpu")
    assert loss == pytest.approx(run["history"]["test_loss"][-1], rel=1e-6), (variant, seed)


def test_variants_are_the_norms_they_name(tiny_run):
    cfg = trained.PRESETS["tiny"]()
    models = {v: trained.build(cfg, 40, v, 0) for v in trained.VARIANTS}
    assert hasattr(models["QK-norm"].blocks[0].attn, "k_norm")
    assert not hasattr(models["Pre-LN"].blocks[0].attn, "k_norm")
    assert type(models["DyT"].blocks[0].ln1).__name__ == "DyT"
    assert models["RMSNorm"].blocks[0].ln1.projection is False


def test_qk_norm_leaves_few_keys_inside_and_the_run_recomputes(tiny_run):
    """QK-norm's keys lie on an ellipse, except those whose raw mean square is not large
    against its eps (1e-6), which fall inside: at initialisation (weights of size 0.02)
    some do. So QK-norm's share is far below Pre-LN's, not zero (measured here: about a
    tenth of it)."""
    summary = tiny_run["summary"]
    pre, qk = summary["Pre-LN"]["init"]["overall"][0], summary["QK-norm"]["init"]["overall"][0]
    assert pre > 0.2 and qk < pre / 3, (pre, qk)
    for variant in trained.VARIANTS:
        _check(tiny_run, variant, seed=1)


def test_qk_norm_with_eps_zero_puts_every_key_on_its_ellipse(tiny_run):
    """The keys QK-norm leaves inside come from its eps: counted again in float64 with
    eps = 0, none is left; in float32 a few keys a few 1e-5 radians from a neighbour fall
    inside by rounding (and the copy leaves the stored model as it was)."""
    contexts = torch.tensor(tiny_run["contexts"])
    model = trained.load_model(tiny_run, "QK-norm", 1)
    with_eps = np.mean(trained.head_counts(model, contexts))
    exact = trained.with_qk_eps(model, 0.0).double()
    assert np.mean(trained.head_counts(exact, contexts)) == 0.0 < with_eps
    rounded = np.mean(trained.head_counts(trained.with_qk_eps(model, 0.0), contexts))
    assert rounded < with_eps / 5
    assert np.mean(trained.head_counts(model, contexts)) == with_eps
    with pytest.raises(ValueError):
        trained.with_qk_eps(trained.load_model(tiny_run, "Pre-LN", 1), 0.0)


def test_an_edited_count_or_summary_fails_the_check(tiny_run):
    edited = json.loads(json.dumps(tiny_run))
    edited["models"]["DyT"][1]["trained"][2][1][0] += 1 / 32               # one count
    with pytest.raises(AssertionError):
        _check(edited, "DyT", seed=1)
    edited = json.loads(json.dumps(tiny_run))
    edited["summary"]["RMSNorm"]["trained"]["layers"][0][0] -= 0.01          # a reported mean
    with pytest.raises(AssertionError):
        _check(edited, "Pre-LN", seed=1)
    edited = json.loads(json.dumps(tiny_run))
    edited["models"]["QK-norm"][1]["history"]["test_loss"][-1] += 0.01        # a test loss
    with pytest.raises(AssertionError):
        _check(edited, "QK-norm", seed=1)


@pytest.fixture(scope="module")
def stored():
    return json.loads(STORED.read_text())


@pytest.mark.parametrize("variant", list(trained.VARIANTS))
def test_stored_run_recomputes_first_and_last_seed(stored, variant):
    """Every count, summary and test loss of the first and the last seed, from the stored
    weights (the ledger test recomputes every summary from the counts)."""
    for seed in (stored["config"]["seeds"][0], stored["config"]["seeds"][-1]):
        _check(stored, variant, seed)


@pytest.mark.slow
@pytest.mark.parametrize("variant", list(trained.VARIANTS))
def test_stored_run_recomputes_every_seed(stored, variant):
    for seed in stored["config"]["seeds"]:
        _check(stored, variant, seed)
