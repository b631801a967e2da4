"""Tests of the shared pieces: device, checkpoint, text, transformer, lm."""

import math

import pytest
import torch

from lncourse.checkpoint import load_checkpoint, save_checkpoint
from lncourse.device import default_device
from lncourse.text import CharTokenizer, load_shakespeare, sample_batch, sample_sentences, split_ids
from lncourse.transformer import GPT, TransformerConfig


def test_default_device_is_cached_and_overridable(monkeypatch):
    default_device.cache_clear()
    monkeypatch.setenv("LNCOURSE_DEVICE", "cpu")
    assert default_device() == torch.device("cpu")
    assert default_device() is default_device()
    default_device.cache_clear()


def test_checkpoint_roundtrip_and_safe_load(tmp_path):
    path = tmp_path / "ck.pt"
    assert load_checkpoint(path) is None
    state = {"w": torch.randn(3), "step": 7, "history": {"loss": [1.0, 0.5]}}
    save_checkpoint(path, state)
    loaded = load_checkpoint(path)
    assert loaded["step"] == 7 and torch.equal(loaded["w"], state["w"])
    assert not list(tmp_path.glob("*.tmp"))

    import datetime
    torch.save({"obj": datetime.datetime(2020, 1, 1)}, tmp_path / "evil.pt")
    with pytest.raises(Exception):
        load_checkpoint(tmp_path / "evil.pt")  # weights_only=True refuses arbitrary objects


def test_shakespeare_corpus_and_tokenizer():
    text = load_shakespeare()
    assert len(text) > 4_000_000 and "Hippolyta" in text and "**" not in text
    tok = CharTokenizer.from_text(text)
    ids = tok.encode("To be, or not to be")
    assert tok.decode(ids) == "To be, or not to be"
    with pytest.raises(ValueError, match="not in the vocabulary"):
        tok.encode("\u4e00")
    train, test = split_ids(ids, 0.25)
    assert len(train) + len(test) == len(ids)
    x, y = sample_batch(tok.encode(text[:5000]), 4, 16, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (4, 16) and torch.equal(x[:, 1:], y[:, :-1])
    s = sample_sentences(5, seed=1)
    assert len(set(s)) == 5 and s == sample_sentences(5, seed=1)


def test_gpt_cache_and_placements():
    cfg = TransformerConfig(vocab_size=20, d_model=16, n_heads=4, n_layers=2, block_size=12,
                            init_std=0.5)  # large enough that eps does not shrink the LN output
    model = GPT(cfg)
    idx = torch.randint(0, 20, (3, 12))
    logits, loss, cache = model(idx, idx, return_cache=True)
    assert logits.shape == (3, 12, 20) and loss.ndim == 0
    logits2, _, _ = model(idx)  # the fast path (SDPA) equals the explicit one
    torch.testing.assert_close(logits, logits2, atol=1e-5, rtol=1e-5)
    w = cache["blocks.1.attn_weights"]
    assert torch.allclose(w.sum(-1), torch.ones_like(w.sum(-1)))
    assert (w.triu(1) == 0).all()  # causal
    # pre-LN: attention reads LN outputs, on the sphere of radius sqrt(d) in H
    a = cache["blocks.0.attn_in"]
    torch.testing.assert_close(a.norm(dim=-1), torch.full(a.shape[:-1], math.sqrt(16)), atol=1e-3, rtol=1e-4)
    post = GPT(TransformerConfig(vocab_size=20, d_model=16, n_heads=4, n_layers=2, block_size=12,
                                 placement="post"))
    _, _, c = post(idx, return_cache=True)
    torch.testing.assert_close(c["blocks.0.attn_in"], c["embed"])
    torch.testing.assert_close(c["blocks.1.attn_in"], c["blocks.0.resid_post"])


def test_gpt_variants_and_errors():
    idx = torch.randint(0, 10, (2, 8))
    for norm in ("layernorm", "no_scaling", "no_projection", "none"):
        m = GPT(TransformerConfig(vocab_size=10, d_model=8, n_heads=2, n_layers=1, block_size=8,
                                  norm_attn=norm, pos_emb=False, causal=False))
        _, _, c = m(idx, return_cache=True)
        if norm == "no_scaling":
            assert c["blocks.0.attn_in"].mean(-1).abs().max() < 1e-5
    with pytest.raises(ValueError, match="divisible"):
        TransformerConfig(vocab_size=10, d_model=10, n_heads=3)
    with pytest.raises(ValueError, match="unknown norm"):
        TransformerConfig(vocab_size=10, norm="batchnorm")
    m = GPT(TransformerConfig(vocab_size=10, d_model=8, n_heads=2, n_layers=1, block_size=4))
    with pytest.raises(ValueError, match="block_size"):
        m(torch.zeros(1, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="LongTensor"):
        m(torch.zeros(1, 4))


# train_lm's resumption and its refusal of other runs' checkpoints: tests/test_lm.py
