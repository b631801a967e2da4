"""The Table 1/2 experiment of chapter 2: measurement, claims, and the stored results.

Every stored file under results/selectability/ is checked against the code: a prefix of
its training is recomputed, and a few cells of its sweep are recomputed from its stored
weights, so a stored result cannot drift from the code that is said to produce it.
"""

import copy
import dataclasses
import json

import numpy as np
import pytest
import torch

from lncourse.evidence.selectability import measure
from lncourse.lm import TRACE_STEPS, evaluate_lm, train_lm
from lncourse.results import RESULTS_DIR, load_result, today_command
from lncourse.selectability.exact import selectability_batch
from lncourse.selectability.experiments import prefix_fractions
from lncourse.text import char_streams
from stored_results_plugin import representative
from lncourse.selectability.lm import (PRESETS, VARIANTS, KeysLMConfig, build_model, held_out_contexts,
                                       layer_vectors, load_model, measure_model, run, tokenized)

TINY = dataclasses.replace(KeysLMConfig.quick(), text_chars=100_000, block_size=48,
                           batch_size=2, steps=6, eval_every=3, eval_batches=1, contexts=2,
                           track_contexts=1, sweep=(16, 48), proxy_runs=2)


@pytest.fixture(scope="module")
def tiny_run():
    return run(TINY, progress=False)


def test_run_shapes_and_plain_data(tiny_run):
    import json
    json.dumps(tiny_run)                                  # storable as it is
    for label, m in tiny_run["models"].items():
        s = m["sweep"]
        assert np.asarray(s["before"]).shape == (4, 2, 2)          # layers, contexts, ns
        assert len(m["history"]["measure"]) == len(m["history"]["step"]) == 3
        assert len(s["distinct"]) == 2 and s["distinct"][0][0] <= s["distinct"][0][1]
    assert np.asarray(tiny_run["proxy"]["7"]).shape == (2, 2)
    assert max(measure.layer_table(tiny_run)[measure.FULL]["after"]) == 0.0


def test_no_scaling_ln1_keeps_the_vertices_of_the_projected_inputs(tiny_run):
    """An invertible affine map keeps hull vertices: ln1 without scaling (gamma, beta
    learned) has the vertices of x - mean(x), exactly, when measured in float64."""
    model = load_model(tiny_run, measure.NO_SCALING)
    vec = layer_vectors(model, torch.tensor(tiny_run["contexts"]))
    for i in range(4):
        x = vec["resid_pre"][i]
        projected = x - x.mean(-1, keepdims=True)
        np.testing.assert_array_equal(selectability_batch(vec["ln1"][i]).selectable,
                                      selectability_batch(projected).selectable)
        # and ln1 lies on a hyperplane to float64 precision
        gamma = model.blocks[i].ln1.weight.detach().double().numpy()
        beta = model.blocks[i].ln1.bias.detach().double().numpy()
        assert np.abs(((vec["ln1"][i] - beta) / gamma).sum(-1)).max() < 1e-9


def test_float32_measurement_would_miscount():
    """What layer_vectors guards against: the float32 ln1 of a no-scaling LN is not flat."""
    cfg = TINY
    tok, _, test_ids = tokenized(cfg)
    model = build_model(cfg, tok.vocab_size, VARIANTS[measure.NO_SCALING])
    ctx = held_out_contexts(test_ids, cfg)
    with torch.no_grad():
        _, _, cache = model(ctx, return_cache=True)
    f32 = cache["blocks.0.ln1"].double().numpy()
    f64 = layer_vectors(model, ctx)["ln1"][0]
    sv32 = np.linalg.svd(f32 - f32.mean(1, keepdims=True), compute_uv=False)
    sv64 = np.linalg.svd(f64 - f64.mean(1, keepdims=True), compute_uv=False)
    assert (sv32[:, -1] / sv32[:, 0]).min() > 1e-9 > (sv64[:, -1] / sv64[:, 0]).max()


def test_layer_vectors_are_the_float64_models_own_cache(tiny_run):
    """The hooks read exactly what the model's cache holds: each block's input and its
    ln1's output, every layer, bit for bit, and leave no hook behind."""
    model = load_model(tiny_run, measure.NO_SCALING)
    ctx = torch.tensor(tiny_run["contexts"])
    with torch.no_grad():
        _, _, cache = copy.deepcopy(model).double()(ctx, return_cache=True)
    vec = layer_vectors(model, ctx)
    for key in ("resid_pre", "ln1"):
        want = np.stack([cache[f"blocks.{i}.{key}"].numpy() for i in range(4)])
        np.testing.assert_array_equal(vec[key], want)
    assert vec["resid_pre"].dtype == np.float64 and not model.blocks[0]._forward_pre_hooks


def test_layer_vectors_leave_the_model_alone(tiny_run):
    model = load_model(tiny_run, measure.FULL).train()
    before = copy.deepcopy(model.state_dict())
    layer_vectors(model, torch.tensor(tiny_run["contexts"]))
    assert model.training and next(model.parameters()).dtype == torch.float32
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k])


def test_load_model_round_trip(tiny_run):
    model = load_model(tiny_run, measure.FULL)
    ctx = torch.tensor(tiny_run["contexts"])
    got = measure_model(model, ctx, TINY.sweep)["before"]
    assert got == tiny_run["models"][measure.FULL]["sweep"]["before"]


@pytest.mark.parametrize("kw, match", [
    (dict(tokenizer="wordpiece"), "tokenizer must be"),
    (dict(sweep=(64, 32)), "sweep must increase"),
    (dict(sweep=(32, 4096)), "sweep must increase"),
    (dict(track_contexts=9, contexts=8), "track_contexts must be"),
    (dict(steps=0), "steps must be a positive integer"),
    (dict(seed=2**32), "seed must be in"),
])
def test_config_refuses_bad_values(kw, match):
    with pytest.raises(ValueError, match=match):
        dataclasses.replace(KeysLMConfig.quick(), **kw)


def test_report_helpers(tiny_run):
    wide = 1000   # one row per line, to read the cells; the book's column wraps them
    table = measure.tables_1_2({"tiny": tiny_run}, width=wide)
    assert "paper (Table 1)" in table and "51.0" in table
    table = measure.release_differences(tiny_run, tiny_run, tiny_run, width=wide)
    assert "release" in table and f"{TINY.steps} steps, batch {TINY.batch_size}" in table
    assert "Gaussian proxy (7-D)" in measure.diagnostics(tiny_run, width=wide)
    for text in (measure.tables_1_2({"tiny": tiny_run}), measure.diagnostics(tiny_run),
                 measure.release_differences(tiny_run, tiny_run, tiny_run)):
        assert max(map(len, text.splitlines())) <= 77, text
    steps, track = measure.training_curve(tiny_run)
    assert steps == [0, 3, 6] and len(track[f"{measure.NO_SCALING}, ln1"]) == 3
    gap_keys = measure.gap_summary(tiny_run, tiny_run, tiny_run)
    assert gap_keys["bpe_distinct"] == gap_keys["fast_distinct"] == pytest.approx(
        np.mean([c[-1] for c in tiny_run["models"][measure.FULL]["sweep"]["distinct"]]))
    rows = measure.lengths_or_directions(tiny_run, seed=0)
    assert set(rows) == {"ln1, no scaling (7-D)", "resid_pre, full LN (8-D)"}
    own_t1 = np.asarray(tiny_run["models"][measure.NO_SCALING]["sweep"]["after"])[:, :, -1]
    assert rows["ln1, no scaling (7-D)"][0] == pytest.approx(100 * own_t1.mean())
    assert rows["ln1, no scaling (7-D)"][2] == pytest.approx(
        100 * np.mean(tiny_run["proxy"]["7"][-1]))
    assert all(0 <= v <= 100 for r in rows.values() for v in r)
    assert measure.lengths_or_directions(tiny_run, seed=0) == rows        # seeded


# ----------------------------------------------------------------- stored results
STORED = sorted((RESULTS_DIR / "selectability").glob("lm_*.json"))


def test_each_call_gets_its_own_token_streams():
    """tokenized keeps the streams it made for the next call (BPE on the plays takes
    seconds): a caller that changes its copy changes nobody else's, and the kept streams
    are those made afresh."""
    cfg = KeysLMConfig.quick()
    tok, train_ids, test_ids = tokenized(cfg)
    kept = train_ids.clone(), test_ids.clone()
    train_ids.zero_(), test_ids.zero_()
    tok2, train2, test2 = tokenized(cfg)
    assert tok2 == tok and torch.equal(train2, kept[0]) and torch.equal(test2, kept[1])
    fresh = char_streams.__wrapped__(cfg.text_chars)   # quick: characters
    assert fresh[0] == tok and torch.equal(fresh[1], kept[0])
    assert torch.equal(fresh[2], kept[1])


def _config(result: dict) -> KeysLMConfig:
    return KeysLMConfig(**{k: tuple(v) if isinstance(v, list) else v
                           for k, v in result["config"].items()})


@pytest.mark.parametrize("path", STORED, ids=[p.stem for p in STORED])
def test_stored_result_matches_the_code(path):
    """Recompute the stored run's data (tokenizer, held-out contexts) and two sweep cells
    of each model from the stored weights."""
    result = load_result(path)
    cfg = _config(result)
    assert today_command(result["provenance"]["command"]).startswith(
        "python -m lncourse.selectability.lm")
    tok, _, test_ids = tokenized(cfg)
    assert tok.vocab_size == result["tokenizer"]["vocab_size"]
    assert getattr(tok, "fingerprint", None) == result["tokenizer"]["fingerprint"]
    contexts = held_out_contexts(test_ids, cfg)
    assert contexts.tolist() == result["contexts"]
    for lab in VARIANTS:
        trained = load_model(result, lab)
        vec = layer_vectors(trained, contexts[:1])
        for key, q in (("resid_pre", "before"), ("ln1", "after")):
            got = prefix_fractions(vec[key][0], cfg.sweep[:2])[0]
            want = [result["models"][lab]["sweep"][q][0][0][j] for j in range(2)]
            np.testing.assert_array_equal(got, want)


# lm_paper_bpe's model and trainer are lm_paper's and its tokens lm_quick_bpe's, and both
# of those replay in the fast suite; its own replay (about 15 s of a 4,096-token output
# layer at n = 1,024) is slow-marked.
REPLAYS = [pytest.param(p, id=p.stem, marks=[pytest.mark.slow] if p.stem == "lm_paper_bpe"
                        else []) for p in STORED]


@pytest.mark.parametrize("path", REPLAYS)
def test_stored_first_steps_replay(path):
    """Recompute a prefix of the stored training: the initial test loss and the first
    training steps of the model without scaling."""
    result = load_result(path)
    cfg = _config(result)
    tok, train_ids, test_ids = tokenized(cfg)
    label = measure.NO_SCALING
    history = result["models"][label]["history"]
    model = build_model(cfg, tok.vocab_size, VARIANTS[label])
    test0 = evaluate_lm(model, test_ids, batches=cfg.eval_batches, batch_size=cfg.batch_size,
                        block_size=cfg.block_size, seed=cfg.seed + 1, device="cpu")
    assert test0 == pytest.approx(history["test_loss"][0], rel=1e-5)
    steps = 2
    prefix = train_lm(model, train_ids, test_ids, steps=steps, batch_size=cfg.batch_size,
                      block_size=cfg.block_size, lr=cfg.lr, eval_every=steps,
                      eval_batches=1, seed=cfg.seed, progress=False)
    assert TRACE_STEPS >= steps
    np.testing.assert_allclose(prefix["trace"], history["trace"][:steps], rtol=1e-4)


@pytest.mark.parametrize("path", STORED, ids=[p.stem for p in STORED])
def test_stored_result_is_its_preset(path):
    """Each stored file is its named preset of today's code (the chapter compares the BPE
    run with the build's character run as 'the same configuration but the tokens')."""
    result = load_result(path)
    preset = path.stem.removeprefix("lm_")
    want = json.loads(json.dumps(dataclasses.asdict(PRESETS[preset]())))
    assert result["config"] == want
    assert f"--preset {preset}" in result["provenance"]["command"]
    if preset == "quick_bpe":
        quick = dataclasses.asdict(KeysLMConfig.quick())
        assert {k: v for k, v in want.items() if k != "tokenizer"} == \
            {k: list(v) if isinstance(v, tuple) else v for k, v in quick.items()
             if k != "tokenizer"}


@pytest.mark.parametrize("path", representative(STORED, {"lm_paper", "lm_quick_bpe"}, why=(
    "the character model at the paper's length and the BPE model at the quick length take "
    "every code path; the BPE model at the paper's length is 13 s of CPU natively, and "
    "chapter 2's ledger test guards its reported numbers")))
def test_stored_final_loss_and_largest_n_cells_recompute(path):
    """From each stored model's weights: its final test loss, and every cell of the sweep
    at the largest n (the n the chapter's Tables 1 and 2 report) of the first context,
    for every layer, before and after the LayerNorm. Editing any of them fails here."""
    result = load_result(path)
    cfg = _config(result)
    _, _, test_ids = tokenized(cfg)
    contexts = torch.tensor(result["contexts"])
    for lab in VARIANTS:
        trained = load_model(result, lab)
        history = result["models"][lab]["history"]
        loss = evaluate_lm(trained, test_ids, batches=cfg.eval_batches,
                           batch_size=cfg.batch_size, block_size=cfg.block_size,
                           seed=cfg.seed + 1, device="cpu")
        assert loss == pytest.approx(history["test_loss"][-1], rel=1e-5)
        vec = layer_vectors(trained, contexts[:1])
        for key, q in (("resid_pre", "before"), ("ln1", "after")):
            for layer in range(cfg.n_layers):
                got = prefix_fractions(vec[key][layer], [cfg.sweep[-1]])[0, 0]
                assert got == result["models"][lab]["sweep"][q][layer][0][-1], (lab, q, layer)


@pytest.mark.slow
@pytest.mark.parametrize("path", STORED, ids=[p.stem for p in STORED])
def test_stored_largest_n_cells_all_recompute(path):
    """Every cell of the sweep, every context and every n, from the stored weights (slow:
    249 s of wall time for lm_paper, 8 s for lm_quick_bpe, measured at load 10 on the
    shared 2-core machine; the ledger, tests/selectability/test_ledger.py, guards them in
    the fast suite)."""
    result = load_result(path)
    contexts = torch.tensor(result["contexts"])
    ns = list(result["config"]["sweep"])
    for lab in VARIANTS:
        vec = layer_vectors(load_model(result, lab), contexts)
        for key, q in (("resid_pre", "before"), ("ln1", "after")):
            for layer, cells in enumerate(result["models"][lab]["sweep"][q]):
                got = prefix_fractions(vec[key][layer], ns)
                np.testing.assert_array_equal(got, cells, err_msg=f"{lab} {q} {layer}")
