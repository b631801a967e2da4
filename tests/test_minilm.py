import pytest
import torch
import torch.nn.functional as F

from lncourse.minilm import load_minilm, model_dir


@pytest.fixture(scope="module")
def model():
    return load_minilm()


def test_loads_offline_and_caches_shapes(model):
    ids, mask = model.tokenize(["To be, or not to be, that is the question.", "Hello."])
    assert ids.shape == mask.shape and ids.shape[0] == 2 and mask.dtype == torch.bool
    with torch.no_grad():
        h, cache = model(ids, mask, return_cache=True)
    T = ids.shape[1]
    assert h.shape == (2, T, 384)
    assert cache["layers.0.q"].shape == (2, 12, T, 32)
    assert cache["layers.2.attn_scores"].shape == cache["layers.2.attn_weights"].shape == (2, 12, T, T)
    # attention reads LayerNorm outputs: the embedding LN for layer 0, then each layer's ln_out
    torch.testing.assert_close(cache["layers.0.attn_in"], model.ln_embed(cache["embed"]))
    for i in range(1, 6):
        torch.testing.assert_close(cache[f"layers.{i}.attn_in"],
                                   model.attn_norm(i)(cache[f"layers.{i}.attn_norm_in"]))
        torch.testing.assert_close(cache[f"layers.{i}.attn_in"], cache[f"layers.{i - 1}.resid_post"])
    torch.testing.assert_close(cache["layers.5.resid_post"], h)


def test_attention_matches_torch_sdpa(model):
    """Each layer's attention, from its cached input, against PyTorch's own attention."""
    ids, mask = model.tokenize(["Now is the winter of our discontent", "Made glorious."])
    with torch.no_grad():
        _, cache = model(ids, mask, return_cache=True)
        for i in (0, 4):
            layer, x = model.layers[i], cache[f"layers.{i}.attn_in"]
            B, T, _ = x.shape
            q, k, v = (W(x).view(B, T, 12, 32).transpose(1, 2)
                       for W in (layer.W_Q, layer.W_K, layer.W_V))
            z = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None, None, :])
            out = layer.W_O(z.transpose(1, 2).reshape(B, T, 384))
            torch.testing.assert_close(cache[f"layers.{i}.attn_out"], out, atol=1e-5, rtol=1e-4)


def test_matches_reference_implementation(model):
    transformers = pytest.importorskip("transformers")
    ids, mask = model.tokenize(["Now is the winter of our discontent", "Made glorious summer."])
    ref = transformers.BertModel.from_pretrained(str(model_dir())).eval()
    with torch.no_grad():
        ours, _ = model(ids, mask)
        theirs = ref(input_ids=ids, attention_mask=mask.long()).last_hidden_state
    valid = mask[..., None].expand_as(ours)
    assert (ours - theirs).abs()[valid].max() < 1e-4


def test_tokenize_takes_each_calls_max_length(model):
    text = "one two three four five six seven eight nine ten eleven twelve"
    assert model.tokenize([text], max_length=8)[0].shape == (1, 8)
    assert model.tokenize([text], max_length=128)[0].shape == (1, 14)  # not cut to 8
    assert model.tokenize([text], max_length=512)[0].shape == (1, 14)


def test_tokenize_a_plain_string_is_one_sentence(model):
    ids, mask = model.tokenize("Hello world")
    assert ids.shape == mask.shape == (1, 4)  # [CLS] hello world [SEP]


@pytest.mark.parametrize("max_length", [-1, 0, 1, 513, 2.5, True])
def test_tokenize_refuses_impossible_lengths(model, max_length):
    with pytest.raises(ValueError, match="max_length must be an integer from 2 .* to 512"):
        model.tokenize(["Hello world"], max_length=max_length)


def test_errors_name_the_problem(model):
    with pytest.raises(ValueError, match="non-empty list of strings"):
        model.tokenize([])
    with pytest.raises(ValueError, match="MiniLM has 512 positions"):
        model(torch.ones(1, 513, dtype=torch.long))
    for i in (6, -1):
        with pytest.raises(ValueError, match="MiniLM has layers 0 to 5"):
            model.attn_norm(i)
    ids, mask = model.tokenize(["Hello world", "Hi"])
    mask[1] = False
    with pytest.raises(ValueError, match="sequence 1: query position 0 may attend to no key"):
        with torch.no_grad():
            model(ids, mask)
