import math

import pytest
import torch

from lncourse.folding import center_writing_weights, divide_by_std, fold_layer_norm
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
    with pytest.raises(TypeError):
        fold_layer_norm(torch.nn.Identity(), torch.nn.Linear(4, 2))


def test_center_writing_weights_invisible_to_next_layernorm():
    d = 12
    lin = torch.nn.Linear(5, d)
    centred = center_writing_weights(lin)
    ln = _random_ln(d)
    resid, z = torch.randn(30, d), torch.randn(30, 5)
    with torch.no_grad():
        torch.testing.assert_close(ln(resid + centred(z)), ln(resid + lin(z)), atol=1e-5, rtol=1e-5)
        assert centred(z).mean(-1).abs().max() < 1e-5


def test_folding_on_minilm_matches_attention_scores():
    from lncourse.minilm import load_minilm

    model = load_minilm()
    ids, mask = model.tokenize(["Now, fair Hippolyta, our nuptial hour draws on apace.",
                                "Four days will quickly steep themselves in night."])
    with torch.no_grad():
        _, cache = model(ids, mask, return_cache=True)
        for i in (0, 3, 5):
            layer, ln = model.layers[i], model.attn_norm(i)
            x_hat = divide_by_std(cache[f"layers.{i}.pre_ln"], ln.eps)
            q = fold_layer_norm(ln, layer.W_Q)(x_hat)
            k = fold_layer_norm(ln, layer.W_K)(x_hat)
            B, T, _ = q.shape
            q = q.view(B, T, 12, 32).transpose(1, 2)
            k = k.view(B, T, 12, 32).transpose(1, 2)
            scores = q @ k.transpose(-2, -1) / math.sqrt(32)
            valid = (mask[:, None, :, None] & mask[:, None, None, :]).expand_as(scores)
            gap = (scores - cache[f"layers.{i}.attn_scores"]).abs()[valid].max()
            assert gap < 1e-3, f"layer {i}: {gap}"
