"""Tests of the shared pieces: device, checkpoint, text, transformer, lm."""

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import lncourse
from lncourse.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from lncourse.device import default_device
from lncourse.text import CharTokenizer, load_shakespeare, sample_batch, sample_sentences, split_ids
from lncourse.transformer import NORMS, GPT, TransformerConfig


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
    with pytest.raises(CheckpointError, match="evil.pt holds objects other than tensors"):
        load_checkpoint(tmp_path / "evil.pt")  # weights_only=True refuses arbitrary objects


def test_broken_checkpoints_name_the_file(tmp_path):
    empty = tmp_path / "empty.pt"
    empty.touch()
    with pytest.raises(CheckpointError, match="empty.pt is empty"):
        load_checkpoint(empty)
    save_checkpoint(tmp_path / "good.pt", {"w": torch.randn(1000), "step": 3})
    data = (tmp_path / "good.pt").read_bytes()
    for name, content in [("truncated.pt", data[: len(data) // 2]), ("text.pt", b"hello"),
                          ("one_byte.pt", data[:1])]:
        (tmp_path / name).write_bytes(content)
        with pytest.raises(CheckpointError, match=f"{name} is truncated or not a checkpoint"):
            load_checkpoint(tmp_path / name)
    torch.save([1, 2], tmp_path / "list.pt")
    with pytest.raises(CheckpointError, match="list.pt holds a list"):
        load_checkpoint(tmp_path / "list.pt")


def test_checkpoint_kind_refuses_the_other_trainers_file(tmp_path):
    path = tmp_path / "ck.pt"
    save_checkpoint(path, {"step": 1}, kind="majority")
    assert load_checkpoint(path, kind="majority")["step"] == 1
    assert load_checkpoint(path)["kind"] == "majority"
    with pytest.raises(CheckpointError, match="ck.pt was written by the 'majority' trainer, not by 'lm'"):
        load_checkpoint(path, kind="lm")
    save_checkpoint(path, {"step": 1})
    with pytest.raises(CheckpointError, match="without a trainer kind"):
        load_checkpoint(path, kind="lm")


MY_MODULES = ["layernorm", "folding", "attention", "transformer", "minilm", "checkpoint"]


@pytest.mark.parametrize("module", MY_MODULES + [
    str(p.relative_to(Path(lncourse.__file__).parent).with_suffix(""))
    for p in sorted((Path(lncourse.__file__).parent).glob("*/*.py"))
    if p.parent.name not in ("grading", "checks")])
def test_library_code_never_picks_a_device(module):
    """device.py's promise: the device comes from the inputs or an argument (the core
    modules named here, and every module of a chapter folder and of plotting/)."""
    source = (Path(lncourse.__file__).parent / f"{module}.py").read_text()
    assert "default_device" not in source and "cuda.is_available" not in source


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
    logits2, _, _ = model(idx)
    assert torch.equal(logits, logits2)  # a cache does not switch the numerical path
    w = cache["blocks.1.attn_weights"]
    torch.testing.assert_close(w.sum(-1), torch.ones_like(w.sum(-1)))
    assert (w.triu(1) == 0).all()  # causal
    # pre-LN: attention reads LN outputs, on the sphere of radius sqrt(d) in H
    a = cache["blocks.0.attn_in"]
    torch.testing.assert_close(a.norm(dim=-1), torch.full(a.shape[:-1], math.sqrt(16)), atol=1e-3, rtol=1e-4)
    torch.testing.assert_close(a.mean(-1), torch.zeros(a.shape[:-1]), atol=1e-5, rtol=0)


def _independent_block(block, x, placement, causal=True):
    """A pre-, peri- or post-LN block written with torch's own LayerNorm and attention."""
    def ln(module, h):
        return F.layer_norm(h, h.shape[-1:], module.weight, module.bias, module.eps)

    def attn(h):
        a, (B, T, d) = block.attn, h.shape
        q, k, v = (W(h).view(B, T, 4, d // 4).transpose(1, 2) for W in (a.W_Q, a.W_K, a.W_V))
        z = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return a.W_O(z.transpose(1, 2).reshape(B, T, d))

    if placement == "pre":
        mid = x + attn(ln(block.ln1, x))
        return mid, mid + block.mlp(ln(block.ln2, mid))
    if placement == "peri":
        mid = x + ln(block.ln1_out, attn(ln(block.ln1, x)))
        return mid, mid + ln(block.ln2_out, block.mlp(ln(block.ln2, mid)))
    mid = x + attn(x)
    h = ln(block.ln1, mid)
    return mid, ln(block.ln2, h + block.mlp(h))


@pytest.mark.parametrize("placement", ["pre", "post", "peri"])
def test_block_against_an_independent_implementation(placement):
    cfg = TransformerConfig(vocab_size=20, d_model=16, n_heads=4, n_layers=2, block_size=12,
                            placement=placement, init_std=0.3)
    model = GPT(cfg)
    for p in model.parameters():  # gamma and beta away from 1 and 0
        torch.nn.init.normal_(p, 0.0, 0.3)
    idx = torch.randint(0, 20, (3, 12))
    with torch.no_grad():
        _, _, c = model(idx, return_cache=True)
        x = c["embed"]
        for i, block in enumerate(model.blocks):
            mid, out = _independent_block(block, x, placement)
            torch.testing.assert_close(c[f"blocks.{i}.resid_mid"], mid, atol=1e-5, rtol=1e-4)
            torch.testing.assert_close(c[f"blocks.{i}.resid_post"], out, atol=1e-5, rtol=1e-4)
            # the keys mean the same in both placements
            torch.testing.assert_close(c[f"blocks.{i}.resid_mid"],
                                       c[f"blocks.{i}.resid_pre"] + c[f"blocks.{i}.attn_out"])
            post = placement == "post"
            ln1_reads = c[f"blocks.{i}.resid_mid" if post else f"blocks.{i}.resid_pre"]
            torch.testing.assert_close(c[f"blocks.{i}.ln1"], block.ln1(ln1_reads))
            attn_reads = x if post else c[f"blocks.{i}.ln1"]
            torch.testing.assert_close(c[f"blocks.{i}.attn_in"], attn_reads)
            x = out
    if placement == "peri":    # what each sublayer adds lies on its output norm's ellipsoid
        for i, block in enumerate(model.blocks):
            for key, norm in (("attn_out", block.ln1_out), ("mlp_out", block.ln2_out)):
                added = (c[f"blocks.{i}.{key}"] - norm.bias) / norm.weight
                torch.testing.assert_close(added.norm(dim=-1),
                                           torch.full(added.shape[:-1], 4.0), rtol=1e-3, atol=0)


def test_peri_ln_shares_every_weight_of_the_pre_ln_model_of_its_seed():
    models = {}
    for placement in ("pre", "peri"):
        torch.manual_seed(3)
        models[placement] = GPT(TransformerConfig(vocab_size=20, d_model=16, n_heads=4,
                                                  n_layers=2, placement=placement))
    pre, peri = (dict(m.named_parameters()) for m in models.values())
    assert set(pre) < set(peri) and all(torch.equal(pre[k], peri[k]) for k in pre)
    assert {k.split(".")[-2] for k in set(peri) - set(pre)} == {"ln1_out", "ln2_out"}
    assert hasattr(models["peri"], "ln_final") and models["peri"].ln_final is not None

def _independent_norm(name, x, eps=1e-5):
    if name == "layernorm":
        return F.layer_norm(x, x.shape[-1:], eps=eps)
    if name == "no_scaling":
        return x - x.mean(-1, keepdim=True)
    if name == "no_projection":  # RMSNorm
        return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    if name == "dyt":            # DyT at its initial alpha 0.5, gain 1, bias 0
        return torch.tanh(0.5 * x)
    return x


@pytest.mark.parametrize("norm", sorted(NORMS))
def test_each_norm_is_what_its_name_says(norm):
    model = GPT(TransformerConfig(vocab_size=10, d_model=8, n_heads=2, n_layers=1, block_size=8,
                                  norm_attn=norm, pos_emb=False, causal=False, init_std=0.5))
    idx = torch.randint(0, 10, (2, 8))
    with torch.no_grad():
        _, _, c = model(idx, return_cache=True)
    torch.testing.assert_close(c["blocks.0.attn_in"], _independent_norm(norm, c["embed"]))
    # the MLP's norm is the default, full LayerNorm
    torch.testing.assert_close(c["blocks.0.mlp_in"], _independent_norm("layernorm", c["blocks.0.resid_mid"]))


def test_norms_have_one_name_each_and_errors():
    flags = [f for f in NORMS.values()]
    assert len(set(flags)) == len(flags) == 5
    with pytest.raises(ValueError, match="'rmsnorm' is called 'no_projection'"):
        TransformerConfig(vocab_size=10, norm="rmsnorm")
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
