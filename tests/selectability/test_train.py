"""Chapter 2's fast trainer: the compiled attention kernel equals PyTorch's attention,
the batched models equal the models trained one by one, and runs resume exactly."""

import copy
import math

import pytest
import torch
import torch.nn.functional as F

from lncourse.evidence.selectability import kernel
from lncourse.lm import train_lm
from lncourse.evidence.selectability.fused import fused_losses, scaling_flags, stack_models, unstack
from lncourse.evidence.selectability import train as train_module
from lncourse.evidence.selectability.train import train_fused
from lncourse.text import CharTokenizer, load_shakespeare, split_ids
from lncourse.transformer import GPT, TransformerConfig

needs_kernel = pytest.mark.skipif(not kernel.kernel_available(),
                                  reason="no C compiler: the kernel falls back to SDPA")


@pytest.fixture(scope="module")
def data():
    text = load_shakespeare()[:20000]
    ids = CharTokenizer.from_text(text).encode(text)
    return (*split_ids(ids), int(ids.max()) + 1)


def _model(vocab, seed, norm_attn, dtype=torch.float64, T=16, layers=2):
    torch.manual_seed(seed)
    m = GPT(TransformerConfig(vocab_size=vocab, d_model=8, n_heads=4, n_layers=layers,
                              block_size=T, norm_attn=norm_attn))
    return m.to(dtype)


@needs_kernel
@pytest.mark.parametrize("dh", kernel.HEAD_SIZES)
def test_kernel_equals_sdpa_values_and_gradients(dh):
    gen = torch.Generator().manual_seed(dh)
    q, k, v = (torch.randn(5, 37, dh, generator=gen, dtype=torch.float64) * 3
               for _ in range(3))
    for t in (q, k, v):
        t.requires_grad_(True)
    ours = kernel.causal_attention(q, k, v)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    g = torch.randn(ours.shape, generator=gen, dtype=torch.float64)
    assert torch.allclose(ours, ref, atol=1e-13, rtol=0)
    for a, b in zip(torch.autograd.grad(ours, (q, k, v), g),
                    torch.autograd.grad(ref, (q, k, v), g)):
        assert torch.allclose(a, b, atol=1e-12, rtol=0)


@needs_kernel
def test_kernel_float32_and_large_scores_stay_finite():
    q, k, v = (torch.randn(2, 64, 2) * 40 for _ in range(3))   # scores ~ 1e3: needs the max
    ours = kernel.causal_attention(q, k, v)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.isfinite(ours).all() and torch.allclose(ours, ref, atol=1e-4)


@needs_kernel
@pytest.mark.parametrize("spread", [1.0, 40.0])     # one pass under the bound; two passes
@pytest.mark.parametrize("dh", kernel.HEAD_SIZES)
def test_kernel_float32_equals_float64_attention(dh, spread):
    """The float32 path (fexp2; at dh = 2 the AVX-512 loops where the CPU has them) on an
    odd T (a last row without its pair, masked tails): values and gradients within
    float32's rounding of float64 SDPA."""
    gen = torch.Generator().manual_seed(10 + dh)
    qkv = torch.randn(3, 37, 3, 2, dh, generator=gen, dtype=torch.float64)
    qkv[:, :, :2] *= spread
    g = torch.randn(3, 37, 2, dh, generator=gen, dtype=torch.float64)
    x64 = qkv.clone().requires_grad_(True)
    ref = kernel.qkv_attention(x64, use_kernel=False)
    (want,) = torch.autograd.grad(ref, x64, g)
    x32 = qkv.float().requires_grad_(True)
    ours = kernel.qkv_attention(x32)
    (got,) = torch.autograd.grad(ours, x32, g.float())
    assert torch.allclose(ours.double(), ref, atol=2e-6 * spread, rtol=1e-5)
    assert torch.allclose(got.double(), want, atol=2e-5 * spread ** 2, rtol=1e-4)


@needs_kernel
def test_kernel_threads_split_heads_without_changing_a_bit():
    qkv = torch.randn(4, 50, 3, 4, 2).requires_grad_(True)
    g = torch.randn(4, 50, 4, 2)
    threads = torch.get_num_threads()
    out = []
    try:
        for n in (1, 3):
            torch.set_num_threads(n)
            o = kernel.qkv_attention(qkv)
            out.append((o, *torch.autograd.grad(o, qkv, g)))
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(a, b) for a, b in zip(*out))


@needs_kernel
def test_loading_the_kernel_keeps_denormal_numbers():
    # a library linked with -ffast-math would switch on flush-to-zero for the process
    assert kernel.kernel_available()
    tiny = torch.tensor(torch.finfo(torch.float64).tiny, dtype=torch.float64)
    assert float(tiny / 4) > 0 and 1e-5 / torch.finfo(torch.float64).max > 0


@pytest.mark.parametrize("use_kernel", [True, False])
def test_fused_losses_equal_each_model_alone(data, use_kernel):
    if use_kernel and not kernel.kernel_available():
        pytest.skip("no C compiler")
    train, _, vocab = data
    models = [_model(vocab, s, n) for s in (0, 1) for n in ("layernorm", "no_scaling")]
    gen = torch.Generator().manual_seed(5)
    starts = torch.randint(len(train) - 17, (4, 3), generator=gen)
    win = train[starts[..., None] + torch.arange(17)]
    x, y = win[..., :-1], win[..., 1:]
    params = stack_models(models)
    ours = fused_losses(params, scaling_flags(models), x, y, 4, use_kernel=use_kernel)
    ours.sum().backward()
    for m, model in enumerate(models):
        loss = model(x[m], y[m])[1]
        loss.backward()
        assert abs(float(ours[m].detach()) - float(loss.detach())) < 1e-13
        for name, p in model.named_parameters():
            assert torch.allclose(params[name].grad[m], p.grad, atol=1e-13, rtol=0), name
        model.load_state_dict(unstack(params, m))      # the round trip keeps the weights


KW = dict(steps=12, batch_size=3, block_size=16, lr=1e-2, eval_every=4, eval_batches=2,
          progress=False)


def test_fused_training_equals_train_lm_per_model(data):
    """Seeds 3 and 7, both variants: four models trained in one batch, in float64, have
    each model's own train_lm history and final weights."""
    train, test, vocab = data
    seeds = [3, 3, 7, 7]
    norms = ["layernorm", "no_scaling"] * 2
    models = [_model(vocab, s, n) for s, n in zip(seeds, norms)]
    fused = train_fused([copy.deepcopy(m) for m in models], seeds, train, test, **KW,
                        snapshot_steps=(0, 8))
    assert sorted(fused["snapshots"]) == [0, 8]
    for m, (model, seed) in enumerate(zip(models, seeds)):
        alone = train_lm(model, train, test, seed=seed, **KW)
        ours = fused["histories"][m]
        assert ours["step"] == alone["step"]
        for key in ("train_loss", "test_loss", "trace"):
            assert all(math.isclose(a, b, rel_tol=0, abs_tol=1e-11)
                       for a, b in zip(ours[key], alone[key], strict=True)), (m, key)
        for name, p in model.named_parameters():
            assert torch.allclose(fused["params"][name][m], p, atol=1e-10, rtol=0), name


def test_fused_run_resumes_to_the_same_result(data, tmp_path, monkeypatch):
    train, test, vocab = data
    make = lambda: [_model(vocab, s, n, torch.float32) for s, n in  # noqa: E731
                    ((1, "layernorm"), (1, "no_scaling"))]
    full = train_fused(make(), [1, 1], train, test, **KW, snapshot_steps=(4, 12))
    ck = tmp_path / "fused.ckpt"

    def crash(step):
        if step == 6:                         # after the checkpoint at step 4
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_fused(make(), [1, 1], train, test, **KW, snapshot_steps=(4, 12),
                    checkpoint_path=ck, _on_step=crash)
    torch.manual_seed(99)
    timing = {}
    resumed = train_fused(make(), [1, 1], train, test, **KW, snapshot_steps=(4, 12),
                          checkpoint_path=ck, timing=timing)
    assert resumed["histories"] == full["histories"]
    assert all(torch.equal(resumed["params"][k], full["params"][k]) for k in full["params"])
    assert sorted(resumed["snapshots"]) == [4, 12]
    with pytest.raises(ValueError, match="differs in lr"):
        train_fused(make(), [1, 1], train, test, **{**KW, "lr": 2e-2}, checkpoint_path=ck)
    monkeypatch.setattr(train_module, "NUMERICS", train_module.NUMERICS + 1)
    with pytest.raises(ValueError, match="differs in numerics"):    # another trainer's
        train_fused(make(), [1, 1], train, test, **KW, snapshot_steps=(4, 12),
                    checkpoint_path=ck)


def test_models_that_differ_in_more_than_the_norm_are_refused(data):
    _, _, vocab = data
    with pytest.raises(ValueError, match="differ in more"):
        stack_models([_model(vocab, 0, None), _model(vocab, 0, None, T=32)])
    with pytest.raises(ValueError, match="one seed per model"):
        train_fused([_model(vocab, 0, None)], [0, 1], *data[:2], **KW)


def test_without_a_compiler_attention_falls_back_to_sdpa(monkeypatch):
    monkeypatch.setattr(kernel, "_LIB", False)          # as if the build had failed
    q, k, v = (torch.randn(3, 20, 2) for _ in range(3))
    assert not kernel.kernel_available() and not kernel.kernel_applies(q)
    assert torch.equal(kernel.causal_attention(q, k, v),
                       F.scaled_dot_product_attention(q, k, v, is_causal=True))
