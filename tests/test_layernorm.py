import math

import pytest
import torch
import torch.nn.functional as F

import lncourse.layernorm as L

from lncourse.layernorm import (FactorizedLayerNorm, layer_norm, project, projection_matrix,
                                rms_norm, scale)


@pytest.mark.parametrize("shape", [(7, 2), (5, 8), (2, 3, 64)])
def test_layer_norm_matches_torch(shape):
    x = torch.randn(shape, dtype=torch.float64) * 3 + 1
    for eps in (0.0, 1e-5, 0.1):
        torch.testing.assert_close(layer_norm(x, eps=eps), F.layer_norm(x, shape[-1:], eps=eps))


def test_layer_norm_is_scale_after_project():
    x = torch.randn(10, 16, dtype=torch.float64)
    torch.testing.assert_close(scale(project(x)), layer_norm(x))


def test_project_and_scale_geometry():
    x = torch.randn(100, 12, dtype=torch.float64) + 5
    p = project(x)
    assert p.sum(-1).abs().max() < 1e-12
    torch.testing.assert_close(scale(x).norm(dim=-1), torch.full((100,), math.sqrt(12), dtype=torch.float64))
    torch.testing.assert_close(p, x @ projection_matrix(12, dtype=torch.float64).T)


def test_projection_matrix_properties():
    P = projection_matrix(9, dtype=torch.float64)
    torch.testing.assert_close(P, P.T)
    torch.testing.assert_close(P @ P, P)
    ev = torch.linalg.eigvalsh(P)
    assert (ev.abs() < 1e-12).sum() == 1 and ((ev - 1).abs() < 1e-12).sum() == 8
    with pytest.raises(ValueError, match="d must be"):
        projection_matrix(1)


def test_inputs_are_not_modified():
    x = torch.randn(4, 6)
    before = x.clone()
    layer_norm(x), scale(x), project(x), rms_norm(x)
    assert torch.equal(x, before)


def test_rms_norm_matches_definition():
    x = torch.randn(5, 8, dtype=torch.float64) + 2
    expected = x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-6)
    torch.testing.assert_close(rms_norm(x, eps=1e-6), expected)


@pytest.mark.parametrize("fn", [layer_norm, scale])
def test_constant_row_raises_without_eps(fn):
    x = torch.randn(3, 5)
    x[1] = 0.1  # constant row: centred to (almost) zero by round-off
    if fn is scale:
        x[1] = 0.0
    with pytest.raises(ValueError, match="eps"):
        fn(x)
    assert torch.isfinite(fn(x, eps=1e-5)).all()


def test_constant_row_with_rounding_is_caught():
    # mean of identical floats is not always exact: the centred row is tiny noise
    x = torch.full((1, 3), 0.1, dtype=torch.float64)
    with pytest.raises(ValueError, match="zero variance"):
        layer_norm(x)


@pytest.mark.parametrize("bad, err, match", [
    (torch.ones(3, 1), ValueError, "at least 2"),
    (torch.tensor(1.0), ValueError, "at least 2"),
    (torch.tensor([[1.0, float("nan")]]), ValueError, "NaN"),
    (torch.tensor([[1.0, float("inf")]]), ValueError, "NaN or infinite"),
    (torch.tensor([[1, 2, 3]]), TypeError, "floating"),
])
def test_bad_input_errors(bad, err, match):
    for fn in (layer_norm, scale, project):
        with pytest.raises(err, match=match):
            fn(bad)


def test_numpy_input_is_a_type_error():
    import numpy as np
    with pytest.raises(TypeError, match="torch.Tensor"):
        layer_norm(np.ones((2, 3)))


def test_negative_eps_rejected():
    with pytest.raises(ValueError, match="eps"):
        layer_norm(torch.randn(2, 3), eps=-1.0)


def test_factorized_layer_norm_variants():
    d = 8
    x = torch.randn(50, d) * 2 + 3
    full = FactorizedLayerNorm(d)
    torch.testing.assert_close(full(x), torch.nn.LayerNorm(d)(x))
    no_proj = FactorizedLayerNorm(d, projection=False, elementwise_affine=False, eps=0.0)
    torch.testing.assert_close(no_proj(x), math.sqrt(d) * x / x.norm(dim=-1, keepdim=True))
    no_scale = FactorizedLayerNorm(d, scaling=False, elementwise_affine=False)
    torch.testing.assert_close(no_scale(x), x - x.mean(-1, keepdim=True))
    ident = FactorizedLayerNorm(d, projection=False, scaling=False, elementwise_affine=False)
    torch.testing.assert_close(ident(x), x)
    with torch.no_grad():
        full.weight.fill_(2.0)
        full.bias.fill_(1.0)
    torch.testing.assert_close(full(x), 2 * F.layer_norm(x, (d,)) + 1)
    with pytest.raises(ValueError, match="last axis"):
        full(torch.randn(3, d + 1))


# --- numerics: 16-bit floats, huge and tiny rows (issue 11) ---------------------------

ROW = torch.tensor([[300.0, -300.0, 0.0, 100.0]])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_matches_torch(dtype):
    x = ROW.to(dtype)  # 300^2 overflows float16: computed naively, every entry is 0
    ref = F.layer_norm(x.double(), (4,)).to(dtype)
    torch.testing.assert_close(layer_norm(x), ref)
    torch.testing.assert_close(F.layer_norm(x, (4,)), ref)
    torch.testing.assert_close(FactorizedLayerNorm(4).to(dtype)(x), ref)
    ref_rms = (x.double() / x.double().pow(2).mean(-1, keepdim=True).sqrt()).to(dtype)
    for fn in (scale, rms_norm):
        torch.testing.assert_close(fn(x), ref_rms)
    no_proj = FactorizedLayerNorm(4, projection=False).to(dtype)
    torch.testing.assert_close(no_proj(x), ref_rms)
    assert layer_norm(x).dtype == dtype and project(x).dtype == dtype
    # a large mean against a small spread: the mean must be subtracted in float32
    offset = (torch.randn(8, 64) + 300).to(dtype)
    ref = F.layer_norm(offset.double(), (64,)).to(dtype)
    torch.testing.assert_close(layer_norm(offset), ref)
    torch.testing.assert_close(FactorizedLayerNorm(64).to(dtype)(offset), ref)


def test_gpt_runs_in_half_precision():
    from lncourse.transformer import GPT, TransformerConfig

    model = GPT(TransformerConfig(vocab_size=11, d_model=16, n_heads=2, n_layers=1,
                                  block_size=8, init_std=20.0))  # LN inputs of order 100s
    idx = torch.randint(0, 11, (2, 8))
    with torch.no_grad():
        full, _, _ = model(idx)
        half, _, _ = model.half()(idx)
    assert half.abs().max() > 0.1 * full.abs().max()
    torch.testing.assert_close(half.float(), full, atol=0.05 * float(full.abs().max()), rtol=0)


@pytest.mark.parametrize("size", [1e-30, 2e19, 1e30])
def test_huge_and_tiny_rows(size):
    x = ROW * size  # squares overflow (1e30, 2e19) or underflow (1e-30) in float32
    expected = F.layer_norm(ROW.double(), (4,)).float()  # LayerNorm does not see the size
    torch.testing.assert_close(layer_norm(x), expected)
    no_eps = FactorizedLayerNorm(4, elementwise_affine=False, eps=0.0)
    torch.testing.assert_close(no_eps(x), expected)
    expected_rms = scale(ROW.double()).float()
    torch.testing.assert_close(scale(x), expected_rms)
    torch.testing.assert_close(rms_norm(x), expected_rms)
    # with eps, the exact answer x / sqrt(var + eps) (computed in float64)
    for eps in (1e-5, 1.0):
        exact = F.layer_norm(x.double(), (4,), eps=eps).float()
        torch.testing.assert_close(layer_norm(x, eps=eps), exact)
        torch.testing.assert_close(FactorizedLayerNorm(4, eps=eps)(x), exact)


def test_gradient_of_factorized_layer_norm_matches_torch():
    x = (torch.randn(6, 8, dtype=torch.float64) * 3 + 1).requires_grad_()
    w = torch.randn(6, 8, dtype=torch.float64)
    for projection in (True, False):
        ours = FactorizedLayerNorm(8, projection=projection, elementwise_affine=False,
                                   eps=1e-3).double()
        ref = (F.layer_norm(x, (8,), eps=1e-3) if projection
               else x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-3))
        g_ours, = torch.autograd.grad((ours(x) * w).sum(), x)
        g_ref, = torch.autograd.grad((ref * w).sum(), x)
        torch.testing.assert_close(g_ours, g_ref)


def test_projection_matrix_needs_a_floating_dtype():
    with pytest.raises(TypeError, match="floating dtype"):
        projection_matrix(3, dtype=torch.int64)


def test_factorized_layer_norm_explains_bad_inputs():
    with pytest.raises(ValueError, match="last axis has 4 entries, got \\(\\)"):
        FactorizedLayerNorm(4)(torch.tensor(1.0))
    with pytest.raises(ValueError, match="input is on meta"):
        FactorizedLayerNorm(4)(torch.zeros(2, 4, device="meta"))
    with pytest.raises(ValueError, match="zero variance"):
        FactorizedLayerNorm(4, eps=0.0)(torch.ones(2, 4))
    # a model built on the meta device (shapes only) still runs
    meta = FactorizedLayerNorm(4).to("meta")
    assert meta(torch.zeros(2, 4, device="meta")).shape == (2, 4)


@pytest.mark.parametrize("fn", [layer_norm, scale, project, rms_norm])
def test_meta_tensors_are_explained(fn):
    with pytest.raises(ValueError, match="'meta' tensor"):
        fn(torch.zeros(2, 4, device="meta"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_scaling_by_a_power_of_two_changes_no_bit_of_ordinary_results(dtype):
    x = torch.randn(300, 16, dtype=dtype) * 7 + 3
    centred = x - x.mean(-1, keepdim=True)
    var = (centred * centred).mean(-1, keepdim=True)
    for eps in (0.0, 1e-5):
        assert torch.equal(layer_norm(x, eps), centred / torch.sqrt(var + eps))
        assert torch.equal(scale(x, eps), math.sqrt(16) * x / torch.sqrt((x * x).sum(-1, keepdim=True) + 16 * eps))
    module = FactorizedLayerNorm(16, elementwise_affine=False).to(dtype)
    assert torch.equal(module(x), centred * torch.rsqrt(var + 1e-5))


def test_geometry_config_scales_points_and_sentences_with_floors():
    from lncourse.layernorm import GeometryConfig
    assert GeometryConfig.paper().scaled(1.0) == GeometryConfig.paper()
    assert GeometryConfig.paper().scaled(0.5) == GeometryConfig(1000, 32)
    assert GeometryConfig.paper().scaled(0.01) == GeometryConfig(50, 2)
    assert GeometryConfig.quick().n_points < GeometryConfig.paper().n_points


def test_todays_norms_put_vectors_where_they_say():
    x = torch.randn(10, 16) * 5 + 3
    assert torch.allclose(L.RMSNorm(16)(x).pow(2).mean(-1), torch.ones(10), atol=1e-4)
    assert torch.allclose(L.unit(x).norm(dim=-1), torch.ones(10))
    dyt = L.DyT(16)
    assert dyt(x * 1e6).abs().max() <= 1.0 + 1e-6                   # a box, not a sphere
    q, k = torch.randn(2, 3, 7, 4), torch.randn(2, 3, 7, 4) * 100
    s = L.qk_norm_scores(q, k)
    assert s.shape == (2, 3, 7, 7) and s.abs().max() <= 4 / 2 + 1e-4   # |q·k|/√dh <= dh/√dh
    h = L.unit(torch.randn(4, 16))
    assert torch.allclose(L.NGPTUpdate(16)(h, torch.randn(4, 16)).norm(dim=-1),
                          torch.ones(4))
    peri = L.PeriLN(torch.nn.Linear(16, 16), 16)
    assert peri(x).shape == x.shape
