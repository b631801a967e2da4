"""Tests for lncourse.majority: data, model, the multiset equivalence, the trainer."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from lncourse import majority as M
from lncourse.majority_train import initial_model, main

# A small configuration that exercises every code path in a second or two.
SMALL = M.MajorityConfig(n_samples=1500, seq_len=20, n_classes=6, min_margin=2, d_model=4,
                         batch_size=128, steps=12, eval_every=4, seeds=(11, 123),
                         variants=("layernorm", "no_projection_released"))


@pytest.fixture(scope="module")
def paper_data():
    return M.make_dataset(seed=0)


# ------------------------------------------------------------------------- data
def test_dataset_matches_released_rules(paper_data):
    tokens, labels = paper_data
    assert tokens.shape == (100_010, 50) and labels.shape == (100_010,)
    assert tokens.dtype == labels.dtype == torch.int64
    counts = M.class_counts(tokens, 20)
    top2 = counts.topk(2, dim=1).values
    assert (top2[:, 0] - top2[:, 1] >= 6).all()
    assert (top2[:, 1] > 0).all()                 # never a single class
    assert torch.equal(labels, counts.argmax(dim=1))
    assert (counts.sum(dim=1) == 50).all()
    # tokens sit in blocks: a class never reappears after another one
    changes = (tokens[:, 1:] != tokens[:, :-1]).sum(dim=1)
    assert torch.equal(changes + 1, (counts > 0).sum(dim=1))
    # the reference's statistics: majority fraction about 0.39, classes balanced
    assert abs(float((top2[:, 0] / 50.0).mean()) - 0.39) < 0.02
    assert torch.bincount(labels, minlength=20).min() > 4000


def test_dataset_is_seeded():
    a = M.make_dataset(500, 20, 6, 2, seed=1)
    b = M.make_dataset(500, 20, 6, 2, seed=1)
    c = M.make_dataset(500, 20, 6, 2, seed=2)
    assert torch.equal(a[0], b[0]) and not torch.equal(a[0], c[0])
    assert a[0].shape[0] == 510                   # stops once more than n_samples exist


@pytest.mark.parametrize("kwargs", [dict(seq_len=1), dict(n_classes=1), dict(min_margin=0),
                                    dict(n_samples=0)])
def test_dataset_rejects_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        M.make_dataset(**{"n_samples": 100, **kwargs})


def test_dataset_without_valid_partition_raises():
    with pytest.raises(ValueError, match="margin"):
        M.make_dataset(100, seq_len=6, n_classes=3, min_margin=10)


def test_stratified_split(paper_data):
    _, labels = paper_data
    train, test = M.stratified_split(labels, 0.2, seed=0)
    assert len(train) + len(test) == len(labels)
    assert len(np.intersect1d(train.numpy(), test.numpy())) == 0
    n_all = torch.bincount(labels, minlength=20)
    n_test = torch.bincount(labels[test], minlength=20)
    assert ((n_test - 0.2 * n_all).abs() <= 0.5).all()
    with pytest.raises(ValueError):
        M.stratified_split(labels, 1.5)


# ------------------------------------------------------------------------ model
def test_parameter_count_and_architecture():
    model = M.MajorityModel("layernorm")
    assert sum(p.numel() for p in model.parameters()) == 584
    layer = model.layer
    assert layer.self_attn.in_proj_bias is None and layer.norm_first
    assert layer.self_attn.num_heads == 1 and layer.linear1.out_features == 8
    assert not any(True for _ in layer.norm1.parameters())
    for variant in M.ALL_VARIANTS:
        assert sum(p.numel() for p in M.MajorityModel(variant).parameters()) == 584
    with pytest.raises(ValueError, match="variant"):
        M.MajorityModel("rmsnorm")


def test_norm1_variants():
    x = torch.randn(50, 8, generator=torch.Generator().manual_seed(0)) * 3 + 1
    d = 8
    assert torch.allclose(M.norm1(x, "layernorm"), F.layer_norm(x, (d,), eps=0.0))
    norms = {v: M.norm1(x, v).norm(dim=-1) for v in M.ALL_VARIANTS}
    assert torch.allclose(norms["layernorm"], torch.full((50,), math.sqrt(d)), atol=1e-5)
    assert torch.allclose(norms["no_projection"], torch.full((50,), math.sqrt(d)), atol=1e-5)
    small = torch.full((50,), 1 / math.sqrt(d))
    assert torch.allclose(norms["no_projection_released"], small, atol=1e-6)
    assert torch.allclose(norms["layernorm_released_scale"], small, atol=1e-6)
    # the paper's and the released "no projection" differ only by the factor d
    assert torch.allclose(M.norm1(x, "no_projection"),
                          d * M.norm1(x, "no_projection_released"), atol=1e-5)
    assert torch.equal(M.norm1(x, "none"), x)
    # without projection nothing is orthogonal to 1; with it everything is
    assert M.norm1(x, "layernorm").sum(-1).abs().max() < 1e-4
    assert M.norm1(x, "no_projection").sum(-1).abs().mean() > 1.0


@pytest.mark.parametrize("variant", M.ALL_VARIANTS)
def test_multiset_forward_equals_token_model(paper_data, variant):
    """Permutation invariance: counts per class give exactly the token-level logits."""
    tokens = paper_data[0][::997][:80]
    labels = paper_data[1][::997][:80]
    models = [initial_model(variant, s, M.MajorityConfig()) for s in (1, 2)]
    with torch.no_grad():
        for m in models:                          # trained-looking, larger weights
            for p in m.parameters():
                p.mul_(2.0)
        params = M.stack_params(models)
        counts = M.class_counts(tokens, 20)
        logits, pairs = M.multiset_forward(params, counts, (variant, variant))
        loss, acc = M.multiset_loss_and_accuracy(logits, pairs, labels)
        for i, m in enumerate(models):
            token_logits = m(tokens)                                    # (B, T, C)
            # the pair (b, class) of every token
            rows = {(int(b), int(c)): logits[i, p]
                    for p, (b, c) in enumerate(zip(pairs.seq[i], pairs.cls[i]))
                    if pairs.count[i, p] > 0}
            expected = torch.stack([rows[(b, int(tokens[b, t]))]
                                    for b in range(len(tokens)) for t in range(20)])
            got = token_logits[:, :20].reshape(-1, 20)
            assert torch.allclose(got, expected, rtol=1e-5, atol=1e-4)
            ref_loss = F.cross_entropy(token_logits.reshape(-1, 20),
                                       labels[:, None].expand(-1, 50).reshape(-1))
            ref_acc = (token_logits.argmax(-1) == labels[:, None]).double().mean()
            assert abs(float(loss[i]) - float(ref_loss)) <= 1e-6 * float(ref_loss) + 1e-6
            assert abs(float(acc[i]) - float(ref_acc)) < 1e-6


def test_present_pairs_cover_every_token():
    counts = torch.tensor([[3, 0, 2], [0, 5, 0]])
    pairs = M.present_pairs(counts)
    real = pairs.count > 0
    assert int(pairs.count.sum()) == 10
    assert sorted(zip(pairs.seq[real].tolist(), pairs.cls[real].tolist())) == \
        [(0, 0), (0, 2), (1, 1)]


def test_effective_queries_and_angles():
    q = torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0], [1.0, -1.0, 0.0], [1.0, 0.0, 0.0]])
    angles = M.query_angles(q)
    expected = torch.tensor([0.0, 0.0, 90.0, math.degrees(math.acos(1 / math.sqrt(3)))])
    assert torch.allclose(angles, expected, atol=1e-3)
    model = M.MajorityModel("layernorm")
    W_E, W_in = model.embedding.weight, model.layer.self_attn.in_proj_weight
    queries = M.effective_queries(W_E, W_in, "layernorm")
    keys = M.norm1(W_E, "layernorm")
    W_Q, W_K, _ = W_in.chunk(3)
    scores = (keys @ W_Q.T) @ (keys @ W_K.T).T / math.sqrt(8)
    assert torch.allclose(queries @ keys.T, scores, atol=1e-5)


def test_hand_built_model_solves_the_task():
    tokens, labels = M.make_dataset(3000, seed=3)
    model = M.hand_built_model(20)
    with torch.no_grad():
        acc = (model(tokens).argmax(-1) == labels[:, None]).double().mean()
    assert acc == 1.0
    queries = M.effective_queries(model.embedding.weight,
                                  model.layer.self_attn.in_proj_weight, "layernorm")
    assert M.query_angles(queries).max() < 1e-3
    # alpha too small: the token's own class wins over a close majority
    weak = M.hand_built_model(20, alpha=2.0)
    with torch.no_grad():
        assert (weak(tokens).argmax(-1) == labels[:, None]).double().mean() < 0.99


# ---------------------------------------------------------------------- trainer
def test_config_presets_and_validation():
    paper = M.MajorityConfig.paper()
    assert (paper.batch_size, paper.lr, paper.seq_len, paper.n_classes) == (6000, 1e-3, 50, 20)
    assert len(paper.seeds) == 10 and paper.variants == M.VARIANTS
    assert M.MajorityConfig.quick().batch_size < paper.batch_size
    assert M.MajorityConfig.three_d().d_model == 3
    with pytest.raises(ValueError, match="variant"):
        M.MajorityConfig(variants=("rms",))
    with pytest.raises(ValueError):
        M.MajorityConfig(batch_size=0)
    with pytest.raises(ValueError, match="repeat"):
        M.MajorityConfig(seeds=(1, 1))
    with pytest.raises(dataclasses.FrozenInstanceError):
        paper.lr = 1.0


def test_batched_training_equals_training_each_alone():
    """All (variant, seed) models at once, on counts == each released model alone."""
    cfg = dataclasses.replace(SMALL, steps=10, eval_every=5)
    batched = M.train(cfg, device="cpu", dtype=torch.float64, show_progress=False)
    for m, (variant, seed) in enumerate(cfg.models):
        alone = M.train_single(cfg, variant, seed, dtype=torch.float64)
        assert alone["step"] == batched["step"]
        for key in ("train_loss", "test_acc", "query_angle"):
            np.testing.assert_allclose(np.asarray(batched[key])[:, m],
                                       np.asarray(alone[key])[:, 0], rtol=1e-9, atol=1e-9)
        for name in M.PARAM_NAMES:
            np.testing.assert_allclose(np.asarray(batched["final_params"][name][m]),
                                       np.asarray(alone["final_params"][name][0]),
                                       rtol=1e-8, atol=1e-9)
    # and training actually changed something
    assert batched["train_loss"][-1][0] < batched["train_loss"][0][0]


def test_models_are_independent():
    """A model's history does not depend on which other models train beside it."""
    both = M.train(SMALL, device="cpu", dtype=torch.float64, show_progress=False)
    one = M.train(dataclasses.replace(SMALL, seeds=(123,), variants=("layernorm",)),
                  device="cpu", dtype=torch.float64, show_progress=False)
    m = SMALL.models.index(("layernorm", 123))
    np.testing.assert_allclose(np.asarray(both["test_acc"])[:, m],
                               np.asarray(one["test_acc"])[:, 0], atol=1e-12)


def test_interrupted_run_resumes_to_the_same_history(tmp_path):
    path = tmp_path / "run.ckpt"
    full = M.train(SMALL, device="cpu", show_progress=False)

    def crash(step):
        if step == 7:                             # after the checkpoint at step 4
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        M.train(SMALL, device="cpu", checkpoint_path=path, show_progress=False, _on_step=crash)
    saved = torch.load(path, weights_only=True)
    assert saved["step"] == 4
    resumed = M.train(SMALL, device="cpu", checkpoint_path=path, show_progress=False)
    for key in ("step", "train_loss", "test_acc", "query_angle", "final_params"):
        assert resumed[key] == full[key], key
    with pytest.raises(ValueError, match="different configuration"):
        M.train(dataclasses.replace(SMALL, lr=2e-3), device="cpu", checkpoint_path=path,
                show_progress=False)


def test_history_helpers():
    h = M.train(SMALL, device="cpu", show_progress=False)
    a = M.history_arrays(h, "layernorm")
    assert a["test_acc"].shape == (2, len(h["step"])) and list(a["seed"]) == [11, 123]
    assert a["step"][0] == 0 and a["step"][-1] == SMALL.steps
    assert (a["query_angle"] >= 0).all() and (a["query_angle"] <= 90).all()
    with pytest.raises(ValueError, match="not in this history"):
        M.history_arrays(h, "none")
    steps = np.array([0, 10, 20, 30])
    vals = np.array([[0.1, 0.5, 0.95, 0.99], [0.1, 0.2, 0.3, 0.4], [0.9, 0.9, 0.9, 0.9]])
    out = M.steps_to_threshold(steps, vals, 0.9)
    assert out[0] == 20 and np.isnan(out[1]) and out[2] == 0


def test_command_line(tmp_path):
    main(["--preset", "three_d", "--steps", "3", "--out", str(tmp_path), "--device", "cpu",
          "--variants", "layernorm", "none"])
    h = json.loads((tmp_path / "majority_three_d.json").read_text())
    assert h["step"][-1] == 3 and h["config"]["d_model"] == 3
    assert sorted(set(h["variant"])) == ["layernorm", "none"]
    assert (tmp_path / "majority_three_d.ckpt").exists()


# ---------------------------------------------------------------------- figures
def test_figures():
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    from lncourse.plotting import majority as P

    step = np.arange(0, 500, 100)
    curves = {v: np.random.rand(3, 5) for v in M.ALL_VARIANTS}
    fig = P.majority_curves(step, curves, "accuracy",
                            paper={"layernorm": ([0, 400], [0.3, 0.9])})
    assert isinstance(fig, Figure)
    assert len(fig.axes[0].get_lines()) == len(M.ALL_VARIANTS) + 1
    with pytest.raises(ValueError, match="points"):
        P.majority_curves(step[:3], curves, "accuracy")
    keys, queries = np.random.randn(10, 3), np.random.randn(10, 3)
    assert isinstance(P.keys_queries_3d({"a": (keys, queries), "b": (keys, queries)}), Figure)
    with pytest.raises(ValueError, match="3-dimensional"):
        P.keys_queries_3d({"a": (np.zeros((4, 8)), np.zeros((4, 8)))})
    fig = P.steps_to_accuracy({"layernorm": np.array([100.0, 200.0]),
                               "none": np.array([np.nan, 300.0])}, 0.9, max_step=500)
    assert isinstance(fig, Figure)


def test_learning_rate_schedule_is_the_released_linear_decay():
    from lncourse.majority_train import _lr_at

    cfg = M.MajorityConfig()                  # 10,000 epochs of 14 steps in the schedule
    assert _lr_at(0, cfg, 14) == cfg.lr
    assert math.isclose(_lr_at(70_000, cfg, 14), cfg.lr / 2)
    assert math.isclose(_lr_at(14_000, cfg, 14), 0.9 * cfg.lr)   # where the paper stops
    assert _lr_at(200_000, cfg, 14) == 0.0
