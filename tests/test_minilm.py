import pytest
import torch

from lncourse.minilm import load_minilm, model_dir


def test_loads_offline_and_caches_shapes():
    model = load_minilm()
    ids, mask = model.tokenize(["To be, or not to be, that is the question.", "Hello."])
    assert ids.shape == mask.shape and ids.shape[0] == 2 and mask.dtype == torch.bool
    with torch.no_grad():
        h, cache = model(ids, mask, return_cache=True)
    assert h.shape == (2, ids.shape[1], 384)
    assert cache["layers.0.q"].shape == (2, 12, ids.shape[1], 32)
    assert cache["layers.2.attn_scores"].shape == (2, 12, ids.shape[1], ids.shape[1])
    # attention reads LayerNorm outputs: the embedding LN for layer 0
    torch.testing.assert_close(cache["layers.0.attn_in"], model.ln_embed(cache["embeddings.pre_ln"]))
    torch.testing.assert_close(cache["layers.1.attn_in"], model.layers[0].ln_out(cache["layers.1.pre_ln"]))


def test_matches_reference_implementation():
    transformers = pytest.importorskip("transformers")
    model = load_minilm()
    ids, mask = model.tokenize(["Now is the winter of our discontent", "Made glorious summer."])
    ref = transformers.BertModel.from_pretrained(str(model_dir())).eval()
    with torch.no_grad():
        ours, _ = model(ids, mask)
        theirs = ref(input_ids=ids, attention_mask=mask.long()).last_hidden_state
    valid = mask[..., None].expand_as(ours)
    assert (ours - theirs).abs()[valid].max() < 1e-4
