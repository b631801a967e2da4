"""Tests for lncourse.nope (chapter 4)."""

import math

import matplotlib
import pytest
import torch

matplotlib.use("Agg")

from lncourse import nope  # noqa: E402
from lncourse.plotting import nope as nope_plots  # noqa: E402

D, H, T, N = 256, 4, 128, 200


@pytest.fixture(scope="module")
def stats():
    return nope.layer_statistics(D, H, T, 0.02, N, causal=True, seed=0, device="cpu")


def test_lemma3_ratio_and_slope(stats):
    v = stats["attn_out_var"].mean(-1)
    ratio = v / nope.theory_variance(D, 0.02, T)
    assert ((ratio - 1).abs() < 0.15).all(), ratio
    assert abs(nope.loglog_slope(v, m_min=10) + 1) < 0.1


def test_public_function_matches_statistics(stats):
    v = nope.attention_output_variance(D, H, T, 0.02, N, seed=0, device="cpu")
    assert v.shape == (T,)
    torch.testing.assert_close(v, stats["attn_out_var"].mean(-1).float())


def test_correction_closes_the_gap():
    # at paper-like d the softmax is visibly non-uniform (ratio ~ exp(d^2 sigma^4))
    d, h, t = 512, 8, 128
    st = nope.layer_statistics(d, h, t, 0.02, 120, seed=1, device="cpu")
    v = st["attn_out_var"].mean(-1)
    raw = v / nope.theory_variance(d, 0.02, t)
    fixed = v / nope.corrected_variance(d, 0.02, t, h)
    late = slice(32, None)
    assert raw[late].mean() > 1.02          # the paper's Lemma 3 underestimates
    assert abs(fixed[late].mean() - 1) < abs(raw[late].mean() - 1) / 2


def test_lemma1_and_direct_logit_variance(stats):
    q, k, v = stats["qkv_var"]
    for x in (q, k, v):
        assert abs(float(x) / (D * 0.02 ** 2) - 1) < 0.08
    tau2 = float(stats["score_var"][T // 2:].mean())
    th = nope.logit_variance_theory(D, H, 0.02)
    gain = 0.02 ** 2 / (0.02 ** 2 + 1e-5)
    assert abs(tau2 / (th["direct"] * gain ** 2) - 1) < 0.1
    assert th["paper"] == pytest.approx(th["direct"] / H)


def test_bidirectional_is_flat():
    v = nope.attention_output_variance(128, 4, 64, 0.02, 200, causal=False, seed=0,
                                       device="cpu")
    assert abs(nope.loglog_slope(v, m_min=1)) < 0.05
    torch.testing.assert_close(nope.theory_variance(128, 0.02, 64, causal=False),
                               torch.full((64,), 128 ** 2 * 0.02 ** 4 / 64))


def test_first_layer_matches_gpt_block():
    model = nope.random_nope_model(32, 4, 1, 16, 0.02, True, seed=3, device="cpu")
    x = nope.sample_inputs(2, 16, 32, 0.02, torch.Generator().manual_seed(0))
    _, cache = model.forward_embeddings(x, return_cache=True)
    ours = nope.first_layer(x, nope.weights_from_block(model.blocks[0]), 4, causal=True)
    for key in ("ln1", "q", "k", "v", "attn_weights", "z", "attn_out"):
        torch.testing.assert_close(ours[key], cache[f"blocks.0.{key}"], atol=1e-6, rtol=1e-4)


def test_chunking_does_not_change_the_result(monkeypatch):
    a = nope.layer_statistics(32, 4, 16, 0.02, 20, seed=0, device="cpu")
    monkeypatch.setattr(nope, "_chunks", lambda n, *args: [3] * (n // 3) + [n % 3])
    b = nope.layer_statistics(32, 4, 16, 0.02, 20, seed=0, device="cpu")
    torch.testing.assert_close(a["attn_out_var"], b["attn_out_var"])
    torch.testing.assert_close(a["mean_weights"], b["mean_weights"])


def test_softmax_energy_limits():
    e0 = nope.softmax_energy(0.0, 50)
    torch.testing.assert_close(e0, torch.ones(50))
    e = nope.softmax_energy(0.1, 400, n_draws=4000)
    assert abs(float(e[0]) - 1) < 1e-6
    assert abs(float(e[-1]) - math.exp(0.1)) < 0.01


def test_loglog_slope_exact():
    m = torch.arange(1, 101, dtype=torch.float64)
    assert nope.loglog_slope(3.0 * m ** -0.7) == pytest.approx(-0.7)
    with pytest.raises(ValueError):
        nope.loglog_slope(-m)


def test_lemma4_mean_is_one_and_spread_shrinks(stats):
    pred = nope.lemma4_variance(stats["weights"], 0.02, T)
    torch.testing.assert_close(pred.mean(-1), torch.ones(T), atol=1e-5, rtol=0)
    spread = pred.std(-1)
    assert spread[0] > 5 * spread[-1]
    measured = stats["ln_final_var"]
    # measured per-dimension spread follows Lemma 4 at early positions
    assert abs(float(measured[:4].std(-1).mean() / spread[:4].mean()) - 1) < 0.3


def test_probe_learns_positions_only_when_causal():
    c = nope.probe_positions(32, 4, 2, 16, 0.02, True, steps=300, batch_size=16, hidden=32,
                             lr=3e-3, device="cpu", progress=False)
    b = nope.probe_positions(32, 4, 2, 16, 0.02, False, steps=300, batch_size=16, hidden=32,
                             lr=3e-3, device="cpu", progress=False)
    assert c["baseline"] == pytest.approx(4.0)
    assert c["mae"][2] < 0.92 * c["baseline"]
    assert min(b["mae"]) > 0.95 * b["baseline"]


@pytest.mark.parametrize("kwargs", [dict(d_model=30, n_heads=4), dict(sigma=-1.0),
                                    dict(seq_len=0), dict(n_samples=1)])
def test_bad_input(kwargs):
    base = dict(d_model=32, n_heads=4, seq_len=8, sigma=0.02, n_samples=4, device="cpu")
    base.update(kwargs)
    with pytest.raises(ValueError):
        nope.attention_output_variance(**base)


def test_plots_return_figures(stats):
    v = stats["attn_out_var"].mean(-1)
    th = nope.theory_variance(D, 0.02, T)
    figs = [nope_plots.variance_loglog(v, th, th),
            nope_plots.cumulative_attention(stats["mean_weights"]),
            nope_plots.sigma_sweep({0.02: (v, th), 0.2: (v, th)}),
            nope_plots.probe_errors({"causal": ([0, 1], [4.0, 3.0])}, 4.0),
            nope_plots.final_ln_signal(v, v, v, v)]
    for f in figs:
        assert isinstance(f, matplotlib.figure.Figure)
