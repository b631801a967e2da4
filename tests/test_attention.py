"""The shared attention (lncourse.attention) against PyTorch's, and each model against it."""

import pytest
import torch
import torch.nn.functional as F

from lncourse.attention import (allowed_keys, attend, attention_pattern, attention_scores,
                                merge_heads, self_attention, split_heads)
from lncourse.transformer import Attention, TransformerConfig


def _qkv(B=2, H=3, T=7, dh=4):
    return (torch.randn(B, H, T, dh, dtype=torch.float64) for _ in range(3))


@pytest.mark.parametrize("causal", [False, True])
def test_pattern_and_attend_match_torch_sdpa(causal):
    q, k, v = _qkv()
    scores, weights = attention_pattern(q, k, causal=causal)
    reference = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    torch.testing.assert_close(weights @ v, reference)      # the written-out weights
    torch.testing.assert_close(attend(q, k, v, causal=causal), reference)
    raw = q @ k.transpose(-2, -1) / 2.0  # sqrt(dh) = 2
    visible = torch.ones(7, 7, dtype=torch.bool)
    visible = visible.tril() if causal else visible
    torch.testing.assert_close(scores[..., visible], raw[..., visible])
    assert torch.isneginf(scores[..., ~visible]).all() and (weights[..., ~visible] == 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, 7, dtype=torch.float64))


def test_key_mask_with_and_without_causal():
    q, k, v = _qkv(T=6)
    key_mask = torch.tensor([[True] * 6, [True, True, True, False, True, False]])
    for causal in (False, True):
        allowed = key_mask[:, None, None, :]
        if causal:
            allowed = allowed & torch.ones(6, 6, dtype=torch.bool).tril()
        # softmax over the allowed keys, by hand
        e = torch.exp(q @ k.transpose(-2, -1) / 2.0) * allowed
        by_hand = e / e.sum(-1, keepdim=True)
        _, weights = attention_pattern(q, k, causal=causal, key_mask=key_mask)
        torch.testing.assert_close(weights, by_hand)
        torch.testing.assert_close(attend(q, k, v, causal=causal, key_mask=key_mask),
                                   by_hand @ v)


def test_a_query_with_no_key_is_an_error_not_nan():
    q, k, v = _qkv(T=4)
    with pytest.raises(ValueError, match="sequence 1: query position 0 may attend to no key"):
        attend(q, k, v, key_mask=torch.tensor([[True] * 4, [False] * 4]))
    left_padded = torch.tensor([[True] * 4, [False, True, True, True]])
    attend(q, k, v, key_mask=left_padded)  # bidirectional: fine
    with pytest.raises(ValueError, match="causal mask its first position must be True"):
        attend(q, k, v, causal=True, key_mask=left_padded)
    with pytest.raises(ValueError, match="key_mask must be a bool tensor of shape"):
        attention_scores(q, k, key_mask=torch.ones(2, 4))
    assert allowed_keys(4) is None


def test_split_and_merge_heads():
    x = torch.arange(2 * 5 * 12.0).view(2, 5, 12)
    h = split_heads(x, 3)
    assert h.shape == (2, 3, 5, 4)
    torch.testing.assert_close(h[1, 2, 4], x[1, 4, 8:12])  # head 2 reads entries 8..11
    torch.testing.assert_close(merge_heads(h), x)


def test_self_attention_with_matrices_in_the_x_at_W_convention():
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    W = {n: torch.randn(8, 8, dtype=torch.float64) for n in ("W_Q", "W_K", "W_V", "W_O")}
    out = self_attention(x, *(lambda e, M=W[n]: e @ M for n in ("W_Q", "W_K", "W_V", "W_O")),
                         n_heads=2, causal=True, pattern=True)
    q, k, v = ((x @ W[n]).view(2, 5, 2, 4).transpose(1, 2) for n in ("W_Q", "W_K", "W_V"))
    z = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(out["attn_out"], z.transpose(1, 2).reshape(2, 5, 8) @ W["W_O"])
    assert set(out) == {"q", "k", "v", "attn_scores", "attn_weights", "z", "attn_out"}
    without = self_attention(x, *(lambda e, M=W[n]: e @ M for n in ("W_Q", "W_K", "W_V", "W_O")),
                             n_heads=2, causal=True)
    assert torch.equal(without["attn_out"], out["attn_out"]) and "attn_weights" not in without
    with pytest.raises(ValueError, match="divisible by n_heads = 3"):
        self_attention(x, *([torch.nn.Identity()] * 4), n_heads=3)


@pytest.mark.parametrize("causal", [False, True])
def test_gpt_attention_matches_torch_sdpa(causal):
    cfg = TransformerConfig(vocab_size=5, d_model=12, n_heads=3, causal=causal)
    attn = Attention(cfg).double()
    x = torch.randn(2, 6, 12, dtype=torch.float64)
    cache = {}
    with torch.no_grad():
        out = attn(x, cache, "a.")
        q, k, v = (W(x).view(2, 6, 3, 4).transpose(1, 2) for W in (attn.W_Q, attn.W_K, attn.W_V))
        z = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        torch.testing.assert_close(out, attn.W_O(z.transpose(1, 2).reshape(2, 6, 12)))
        assert torch.equal(attn(x), out)  # with or without a cache: one computation
    torch.testing.assert_close(cache["a.z"], z)
    torch.testing.assert_close(cache["a.attn_weights"] @ cache["a.v"], z)
    assert set(cache) == {f"a.{n}" for n in ("q", "k", "v", "attn_scores", "attn_weights", "z")}


def test_qk_norm_puts_each_heads_queries_and_keys_on_an_ellipse():
    """QK-norm (chapter 5): every head's q and k, as attention uses them, have RMS 1 over
    the head's channels times the learned gain; the output is SDPA of those."""
    cfg = TransformerConfig(vocab_size=5, d_model=12, n_heads=3, qk_norm=True)
    attn = Attention(cfg).double()
    with torch.no_grad():
        attn.k_norm.weight.copy_(torch.tensor([0.5, 2.0, 1.0, 3.0]))
    x = torch.randn(2, 6, 12, dtype=torch.float64) * 50
    cache = {}
    with torch.no_grad():
        out = attn(x, cache, "")
        k_raw = attn.W_K(x).view(2, 6, 3, 4).transpose(1, 2)
        k_unit = k_raw / k_raw.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt()
        torch.testing.assert_close(cache["k"], k_unit * attn.k_norm.weight)
        assert torch.allclose((cache["q"] / attn.q_norm.weight).pow(2).mean(-1),
                              torch.ones(2, 3, 6, dtype=torch.float64))
        z = F.scaled_dot_product_attention(cache["q"], cache["k"], cache["v"], is_causal=True)
        torch.testing.assert_close(out, attn.W_O(z.transpose(1, 2).reshape(2, 6, 12)))
    plain = Attention(TransformerConfig(vocab_size=5, d_model=12, n_heads=3))
    assert set(plain.state_dict()) < set(attn.state_dict())        # default: unchanged
    assert {"q_norm.weight", "k_norm.weight"} == set(attn.state_dict()) - set(plain.state_dict())


def test_dyt_is_an_elementwise_tanh_with_neither_projection_nor_sphere():
    from lncourse.transformer import GPT, DyT
    model = GPT(TransformerConfig(vocab_size=7, d_model=8, n_heads=2, n_layers=2,
                                  norm="dyt", dyt_alpha=0.7))
    norms = [model.blocks[0].ln1, model.blocks[1].ln2, model.ln_final]
    assert all(isinstance(n, DyT) and n.alpha.item() == pytest.approx(0.7) for n in norms)
    x = torch.randn(3, 8) * 1e4
    y = norms[0](x)
    assert torch.allclose(y, torch.tanh(0.7 * x)) and y.abs().max() <= 1.0   # a box
    _, _, cache = model(torch.randint(0, 7, (2, 5)), return_cache=True)
    assert cache["blocks.0.ln1"].abs().max() <= 1.0


def test_the_released_llama_dyt_switches_drop_beta_and_scale_the_embeddings():
    """``dyt_beta=False``: DyT is γ·tanh(αx) with no shift at all (an input of 0 gives
    0, whatever the weights); ``emb_scale``: one learned scalar multiplies the token
    plus position embeddings before the first block, and nothing else changes (the
    same seed gives the same weights)."""
    from lncourse.transformer import GPT, DyT
    base = dict(vocab_size=7, d_model=8, n_heads=2, n_layers=2, norm="dyt", bias=False)
    torch.manual_seed(0)
    plain = GPT(TransformerConfig(**base))
    torch.manual_seed(0)
    llama = GPT(TransformerConfig(**base, dyt_beta=False, emb_scale=3.0))
    assert all(n.bias is None for n in llama.modules() if isinstance(n, DyT))
    assert not any(k.endswith("bias") for k in llama.state_dict())
    norm = llama.blocks[0].ln1
    with torch.no_grad():
        norm.weight.uniform_(0.5, 2.0)
    assert torch.equal(norm(torch.zeros(2, 8)), torch.zeros(2, 8))
    assert llama.emb_scale.item() == 3.0 and plain.emb_scale is None
    torch.testing.assert_close(llama.W_E.weight, plain.W_E.weight)
    idx = torch.randint(0, 7, (2, 5))
    _, _, cache = llama(idx, return_cache=True)
    _, _, ref = plain(idx, return_cache=True)
    torch.testing.assert_close(cache["embed"], 3.0 * ref["embed"])
    with pytest.raises(ValueError, match="emb_scale"):
        TransformerConfig(**base, emb_scale=0.0)
