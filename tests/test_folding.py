import warnings

import pytest
import torch
import torch.nn.functional as F

from lncourse.folding import (center_writing_weights, divide_by_std, fold_layer_norm,
                              folded_attention_scores, folding_gaps)
from lncourse.layernorm import FactorizedLayerNorm


def _random_ln(d, eps=1e-5):
    ln = torch.nn.LayerNorm(d, eps=eps)
    with torch.no_grad():
        ln.weight.normal_(1.0, 0.5)
        ln.bias.normal_(0.0, 0.5)
    return ln


@pytest.mark.parametrize("d, out, eps", [(4, 3, 1e-5), (16, 16, 1e-5), (32, 8, 0.5)])
def test_fold_layer_norm_is_exact(d, out, eps):
    ln, lin = _random_ln(d, eps), torch.nn.Linear(d, out)
    folded = fold_layer_norm(ln, lin)
    x = torch.randn(200, d) * 3 + 2
    with torch.no_grad():
        torch.testing.assert_close(folded(divide_by_std(x, eps)), lin(ln(x)), atol=2e-5, rtol=1e-5)
        # the folded weights kill the all-ones direction
        assert folded.weight.sum(dim=1).abs().max() < 1e-5


def test_fold_does_not_modify_inputs_and_handles_no_bias():
    ln, lin = _random_ln(6), torch.nn.Linear(6, 2, bias=False)
    w_before = lin.weight.clone()
    folded = fold_layer_norm(ln, lin)
    assert torch.equal(lin.weight, w_before)
    x = torch.randn(10, 6)
    with torch.no_grad():
        torch.testing.assert_close(folded(divide_by_std(x, ln.eps)), lin(ln(x)), atol=1e-5, rtol=1e-5)


def test_fold_rejects_factorised_variants_and_mismatch():
    with pytest.raises(ValueError, match="full LayerNorm"):
        fold_layer_norm(FactorizedLayerNorm(4, scaling=False), torch.nn.Linear(4, 2))
    with pytest.raises(ValueError, match="reads 5 features"):
        fold_layer_norm(torch.nn.LayerNorm(4), torch.nn.Linear(5, 2))
    with pytest.raises(TypeError, match="expected nn.LayerNorm"):
        fold_layer_norm(torch.nn.Identity(), torch.nn.Linear(4, 2))


def test_fold_explains_other_modules_and_dtypes():
    with pytest.raises(TypeError, match="needs an nn.Linear.*got Conv1d"):
        fold_layer_norm(torch.nn.LayerNorm(4), torch.nn.Conv1d(4, 2, 1))
    with pytest.raises(TypeError, match="needs an nn.Linear.*got Conv1d"):
        center_writing_weights(torch.nn.Conv1d(4, 2, 1))
    with pytest.raises(ValueError, match="gamma is torch.float32.*weight is torch.float64"):
        fold_layer_norm(torch.nn.LayerNorm(4), torch.nn.Linear(4, 2).double())
    # once converted, folding in float64 is exact to float64 round-off
    ln, lin = _random_ln(4).double(), torch.nn.Linear(4, 2).double()
    x = torch.randn(5, 4, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(fold_layer_norm(ln, lin)(divide_by_std(x, ln.eps)), lin(ln(x)))


def test_center_writing_weights_invisible_to_next_layernorm():
    d = 12
    lin = torch.nn.Linear(5, d)
    centred = center_writing_weights(lin)
    ln = _random_ln(d)
    resid, z = torch.randn(30, d), torch.randn(30, 5)
    with torch.no_grad():
        torch.testing.assert_close(ln(resid + centred(z)), ln(resid + lin(z)), atol=1e-5, rtol=1e-5)
        assert centred(z).mean(-1).abs().max() < 1e-5


def _independent_divide_by_std(x, eps):
    x = x.double()
    return x / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + eps)


@pytest.mark.parametrize("dtype, size", [(torch.float16, 300.0), (torch.bfloat16, 300.0),
                                         (torch.float32, 2e19), (torch.float32, 1e-30)])
def test_divide_by_std_in_low_precision_and_at_extremes(dtype, size):
    x = torch.tensor([[1.0, -1.0, 0.0, 0.3], [0.5, 2.0, -1.0, 0.25]]) * size
    expected = _independent_divide_by_std(x / size, 0.0).to(dtype)  # scale-free
    torch.testing.assert_close(divide_by_std(x.to(dtype)), expected)


def test_divide_by_std_validates_eps_and_warns_on_nearly_constant_rows():
    x = torch.randn(3, 8)
    for eps in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="eps must be a finite number >= 0"):
            divide_by_std(x, eps)
    with pytest.raises(ValueError, match="zero variance"):
        divide_by_std(torch.full((2, 4), 0.1))
    nearly_constant = torch.tensor([[1.0, 1.0, 1.0, 1.0 + 2 ** -20]])  # x / sigma ~ 1e6
    with pytest.warns(RuntimeWarning, match="nearly constant rows"):
        divide_by_std(nearly_constant)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        divide_by_std(torch.randn(100, 16) * 3 + 5)  # an ordinary offset: no warning
        divide_by_std(nearly_constant, eps=1e-5)     # eps bounds the result


@pytest.mark.parametrize("eps", [1e-5, 1.0])   # 1.0: the division by sigma keeps eps
def test_folded_attention_scores_equal_the_original(eps):
    d, H, T = 16, 4, 6
    ln, W_Q, W_K = _random_ln(d, eps), torch.nn.Linear(d, d), torch.nn.Linear(d, d)
    x = torch.randn(2, T, d) * 2 + 1
    key_mask = torch.tensor([[True] * T, [True] * 4 + [False] * 2])
    with torch.no_grad():
        q = W_Q(ln(x)).view(2, T, H, d // H).transpose(1, 2)
        k = W_K(ln(x)).view(2, T, H, d // H).transpose(1, 2)
    scores = q @ k.transpose(-2, -1) / (d // H) ** 0.5
    q_f, scores_f = folded_attention_scores(ln, W_Q, W_K, x, H, key_mask=key_mask)
    torch.testing.assert_close(q_f, q, atol=1e-5, rtol=1e-5)
    visible = key_mask[:, None, None, :].expand_as(scores)
    torch.testing.assert_close(scores_f[visible], scores[visible], atol=1e-4, rtol=1e-5)
    assert torch.isneginf(scores_f[~visible]).all()
    _, causal = folded_attention_scores(ln, W_Q, W_K, x, H, causal=True)
    assert torch.isneginf(causal[..., 0, 1:]).all() and torch.isfinite(causal[..., -1, :]).all()


def test_folding_on_minilm_matches_attention_scores():
    from lncourse.minilm import load_minilm

    model = load_minilm()
    ids, mask = model.tokenize(["Now, fair Hippolyta, our nuptial hour draws on apace.",
                                "Four days will quickly steep themselves in night."])
    with torch.no_grad():
        _, cache = model(ids, mask, return_cache=True)
    valid = mask[:, None, :, None] & mask[:, None, None, :]  # (B, 1, T, T): real tokens
    gaps = folding_gaps(model, cache, mask, n_heads=12)
    for i in (0, 3, 5):
        layer = model.layers[i]
        q, scores = folded_attention_scores(model.attn_norm(i), layer.W_Q, layer.W_K,
                                            cache[f"layers.{i}.attn_norm_in"], n_heads=12,
                                            key_mask=mask)
        original = cache[f"layers.{i}.attn_scores"]
        gap = (scores - original)[valid.expand_as(scores)].abs().max()
        assert gap < 1e-3, f"layer {i}: {gap}"
        assert (q - cache[f"layers.{i}.q"]).abs().max() < 1e-3
        # and independently of the cache: LayerNorm by torch, attention by hand
        with torch.no_grad():
            ln_out = F.layer_norm(cache[f"layers.{i}.attn_norm_in"], (384,),
                                  model.attn_norm(i).weight, model.attn_norm(i).bias, 1e-12)
            k = layer.W_K(ln_out).view(*ln_out.shape[:2], 12, 32).transpose(1, 2)
        by_hand = cache[f"layers.{i}.q"] @ k.transpose(-2, -1) / 32 ** 0.5
        assert (scores - by_hand)[valid.expand_as(scores)].abs().max() < 1e-3
        # folding_gaps, the lesson's measurement, reads the same gaps
        assert gaps.scores[i] == float(gap)
        assert gaps.queries[i] == float((q - cache[f"layers.{i}.q"]).abs().max())
        assert gaps.score_scales[i] == float(original[valid.expand_as(original)].abs().max())
    # a layer whose cached scores its fold does not give shows a gap of their own size
    edited = dict(cache, **{"layers.2.attn_scores": cache["layers.2.attn_scores"] * 1.01})
    wrong = folding_gaps(model, edited, mask, n_heads=12)
    assert wrong.scores[2] > 0.005 * gaps.score_scales[2] > 1e3 * gaps.scores[2]
    assert wrong.scores[:2] == gaps.scores[:2] and wrong.queries == gaps.queries
    with pytest.raises(KeyError, match="layers.0.q"):
        folding_gaps(model, {k: v for k, v in cache.items() if k != "layers.0.q"}, mask,
                     n_heads=12)
    with pytest.raises(ValueError, match="boolean"):
        folding_gaps(model, cache, mask.long(), n_heads=12)
    with pytest.raises(ValueError, match="no real token"):
        folding_gaps(model, cache, torch.zeros_like(mask), n_heads=12)
