"""Tests for the NoPE modules of chapter 4: measurement, lemmas, probe, trained LM."""

import dataclasses
import math

import matplotlib
import numpy as np
import pytest
import torch

matplotlib.use("Agg")

from lncourse.nope import lemmas as nope_lemmas, lm as nope_lm, variance as nope
from lncourse.evidence.nope import probe as nope_probe
from lncourse.nope import figures as nope_plots  # noqa: E402
from lncourse.results import RESULTS_DIR, load_result, today_command  # noqa: E402
from lncourse.rng import SEED_LIMIT  # noqa: E402

D, H, T, N = 256, 4, 64, 120


@pytest.fixture(scope="module")
def stats():
    return nope.layer_statistics(D, H, T, 0.02, N, causal=True, seed=0, device="cpu")


# ------------------------------------------------------------------ measurement
def test_lemma3_ratio_and_slope(stats):
    v = stats["attn_out_var"].mean(-1)
    ratio = v / nope_lemmas.theory_variance(D, 0.02, T)
    assert ((ratio - 1).abs() < 0.15).all(), ratio
    assert abs(nope.loglog_slope(v, m_min=10) + 1) < 0.1


def test_public_function_matches_statistics(stats):
    v = nope.attention_output_variance(D, H, T, 0.02, N, seed=0, device="cpu")
    assert v.shape == (T,)
    torch.testing.assert_close(v, stats["attn_out_var"].mean(-1).float())


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


def test_final_ln_variance_summaries(stats):
    ln = nope.final_ln_variance(stats)
    torch.testing.assert_close(ln["resid"], stats["resid_var"].mean(-1).float())
    torch.testing.assert_close(ln["ln_mean"], torch.ones(T), atol=0.05, rtol=0)
    torch.testing.assert_close(ln["ln_spread"], stats["ln_final_var"].std(-1).float())
    assert (ln["resid"][:8] > ln["resid"][-8:].max()).all()      # x + o shrinks with m


def test_library_leaves_the_global_rng_alone():
    torch.manual_seed(42)
    expected = torch.rand(3)
    torch.manual_seed(42)
    nope.random_nope_model(16, 2, 1, 8, 0.02, seed=5)
    nope.layer_statistics(16, 2, 8, 0.02, 4, seed=5)
    nope_probe.probe_positions(_tiny_probe(), seed=5)
    assert torch.equal(torch.rand(3), expected)


def test_model_weights_do_not_depend_on_the_global_rng():
    torch.manual_seed(1)
    a = nope.random_nope_model(16, 2, 2, 8, 0.02, seed=5)
    torch.manual_seed(2)
    b = nope.random_nope_model(16, 2, 2, 8, 0.02, seed=5)
    for k, v in a.state_dict().items():
        torch.testing.assert_close(v, b.state_dict()[k], rtol=0, atol=0)


def test_device_comes_from_the_argument(monkeypatch):
    import lncourse.device as dev
    monkeypatch.setattr(dev, "default_device", lambda: torch.device("meta"))
    for module in (nope, nope_lemmas, nope_probe, nope_lm):
        assert not hasattr(module, "default_device"), module.__name__
    assert nope.random_nope_model(16, 2, 1, 8, 0.02).W_E.weight.device.type == "cpu"
    assert nope.layer_statistics(16, 2, 8, 0.02, 4)["attn_out_var"].device.type == "cpu"


@pytest.mark.parametrize("kwargs, match", [
    (dict(d_model=30, n_heads=4), "divisible"), (dict(sigma=-1.0), "sigma must be"),
    (dict(seq_len=0), "seq_len must be"), (dict(n_samples=1), "n_samples must be"),
    (dict(eps=-1.0), "eps must be"), (dict(eps=float("nan")), "eps must be"),
    (dict(seed=SEED_LIMIT), "seed must be in"),
])
def test_bad_input(kwargs, match):
    base = dict(d_model=32, n_heads=4, seq_len=8, sigma=0.02, n_samples=4, device="cpu")
    base.update(kwargs)
    with pytest.raises(ValueError, match=match):
        nope.layer_statistics(**base)


def test_variance_config_presets():
    q, p = nope.VarianceConfig.quick(), nope.VarianceConfig.paper()
    assert (q.d_model, q.sigma) == (p.d_model, p.sigma) == (768, 0.02)
    assert (p.seq_len, p.n_samples) == (512, 500) and q.seq_len < p.seq_len
    with pytest.raises(ValueError, match="n_samples must be"):
        nope.VarianceConfig(n_samples=1)


# --------------------------------------------------------------------- lemmas
def test_correction_closes_the_gap():
    # at paper-like d the softmax is visibly non-uniform (ratio ~ exp(d^2 sigma^4))
    d, h, t = 512, 8, 128
    st = nope.layer_statistics(d, h, t, 0.02, 120, seed=1, device="cpu")
    v = st["attn_out_var"].mean(-1)
    raw = v / nope_lemmas.theory_variance(d, 0.02, t)
    fixed = v / nope_lemmas.corrected_variance(d, 0.02, t, h)
    late = slice(32, None)
    assert raw[late].mean() > 1.02          # the paper's Lemma 3 underestimates
    assert abs(fixed[late].mean() - 1) < abs(raw[late].mean() - 1) / 2
    # at m = 1 a single key gets all the weight: only the eps gain remains, and it is
    # what the measurement shows (the variance of one value vector, from 120 x 512 numbers)
    assert abs(float(fixed[0]) - 1) < 0.015
    assert float(raw[0]) < 0.99


def test_lemma1_and_direct_logit_variance(stats):
    q, k, v = stats["qkv_var"]
    assert nope_lemmas.eps_gain(0.02) == pytest.approx(4e-4 / (4e-4 + 1e-5))
    for x in (q, k, v):   # d sigma^2 times the LN's eps gain, to within sampling noise
        assert abs(float(x) / (D * 0.02 ** 2 * nope_lemmas.eps_gain(0.02)) - 1) < 0.01
    tau2 = float(stats["score_var"][T // 2:].mean())
    th = nope_lemmas.logit_variance_theory(D, H, 0.02)
    gain = nope_lemmas.eps_gain(0.02)
    assert abs(tau2 / (th["direct"] * gain ** 2) - 1) < 0.1
    assert th["paper"] == pytest.approx(th["direct"] / H)
    assert nope_lemmas.PAPER_LEMMA2["scaled logit variance"] == pytest.approx(0.0079, abs=1e-4)


def test_bidirectional_is_flat():
    v = nope.attention_output_variance(128, 4, 64, 0.02, 200, causal=False, seed=0,
                                       device="cpu")
    assert abs(nope.loglog_slope(v, m_min=1)) < 0.05
    torch.testing.assert_close(nope_lemmas.theory_variance(128, 0.02, 64, causal=False),
                               torch.full((64,), 128 ** 2 * 0.02 ** 4 / 64))


def test_softmax_energy_limits_and_large_logits():
    torch.testing.assert_close(nope_lemmas.softmax_energy(0.0, 50), torch.ones(50))
    e = nope_lemmas.softmax_energy(0.1, 400, n_draws=4000)
    assert abs(float(e[0]) - 1) < 1e-6
    assert abs(float(e[-1]) - math.exp(0.1)) < 0.01
    # tau^2 = 3000: the softmax is one-hot, so m * sum a^2 = m (no overflow, no NaN)
    for causal in (True, False):
        big = nope_lemmas.softmax_energy(3000.0, 8, causal=causal)
        assert torch.isfinite(big).all()
        expected = torch.arange(1, 9).float() if causal else torch.full((8,), 8.0)
        torch.testing.assert_close(big, expected, atol=0.05, rtol=0.05)   # rare near-ties
    # the prefix form equals a direct softmax of each prefix
    s = torch.randn(300, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    tau2 = 2.0
    direct = torch.stack([(torch.softmax(s[:, :m] * math.sqrt(tau2), -1) ** 2).sum(-1).mean() * m
                          for m in range(1, 7)])
    torch.testing.assert_close(nope_lemmas.softmax_energy(tau2, 6, n_draws=300).double(),
                               direct, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("call, match", [
    (lambda: nope_lemmas.corrected_variance(64, 0.02, 8, eps=-1.0), "eps must be"),
    (lambda: nope_lemmas.softmax_energy(-1.0, 8), "tau2 must be"),
    (lambda: nope_lemmas.softmax_energy(float("inf"), 8), "tau2 must be"),
    (lambda: nope.loglog_slope(-torch.arange(1.0, 20.0)), "positive and finite"),
    (lambda: nope.loglog_slope(torch.ones(5), m_min=10), "at least two positions"),
    (lambda: nope_lemmas.amplitude_noise({}, 1), "n_samples must be"),
])
def test_lemma_functions_refuse_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_corrected_variance_is_positive_for_every_valid_eps():
    for eps in (0.0, 1e-5, 1.0):
        assert (nope_lemmas.corrected_variance(64, 0.02, 8, eps=eps) > 0).all()


def test_loglog_slope_exact():
    m = torch.arange(1, 101, dtype=torch.float64)
    assert nope.loglog_slope(3.0 * m ** -0.7) == pytest.approx(-0.7)


def test_lemma4_mean_is_one_and_spread_shrinks(stats):
    pred = nope_lemmas.lemma4_variance(stats["weights"], 0.02, T)
    torch.testing.assert_close(pred.mean(-1), torch.ones(T), atol=1e-5, rtol=0)
    spread = pred.std(-1)
    assert spread[0] > 3 * spread[-1]


def test_lemma4_amplitude(stats):
    w = stats["weights"]
    pred = nope_lemmas.lemma4_predicted_amplitude(w, 0.02, T)
    c = (w["W_V"].double() @ w["W_O"].double()).pow(2).sum(0).mean()
    m = torch.arange(1, T + 1, dtype=torch.float64)
    torch.testing.assert_close(pred.double(), (c / m) / (0.02 ** 2 + c / m), atol=1e-5,
                               rtol=1e-4)
    # the measured amplitude follows the prediction within a few noise widths
    meas = nope_lemmas.lemma4_amplitude(stats["ln_final_var"], w)
    noise = nope_lemmas.amplitude_noise(w, N)
    assert abs(float(meas[:16].mean() - pred[:16].mean())) < 3 * noise
    # and an amplitude of pure noise is centred on zero
    fake = 1 + torch.randn(T, D, generator=torch.Generator().manual_seed(0)) * 0.1
    assert abs(float(nope_lemmas.lemma4_amplitude(fake, w).mean())) < 0.1


def test_log_bins():
    b = nope_lemmas.log_bins(torch.arange(1.0, 11.0))     # bins 1, 2-3, 4-7, 8-10
    assert b["count"].tolist() == [1, 2, 4, 3]
    assert b["mean"].tolist() == [1.0, 2.5, 5.5, 9.0]
    merged = nope_lemmas.log_bins(torch.arange(1.0, 129.0))     # 128 alone joins 64-127
    assert merged["count"].tolist() == [1, 2, 4, 8, 16, 32, 65] and merged["count"].sum() == 128


# ---------------------------------------------------------------------- probe
def _tiny_probe(**kw) -> nope_probe.ProbeConfig:
    base = dict(d_model=32, n_heads=4, n_layers=2, seq_len=16, train_seqs=800, eval_seqs=32,
                positions_per_seq=16, seqs_per_step=16, hidden=32, steps=300, lr=3e-3,
                seeds=(0,), bidirectional_seeds=(0,))
    return nope_probe.ProbeConfig(**{**base, **kw})


def test_probe_learns_positions_only_when_causal():
    c = nope_probe.probe_positions(_tiny_probe(), seed=0, causal=True)
    b = nope_probe.probe_positions(_tiny_probe(), seed=0, causal=False)
    assert c["baseline"] == pytest.approx(4.0)
    assert min(c["mae"][1:]) < 0.9 * c["baseline"]
    assert min(b["mae"]) > 0.95 * b["baseline"]


def test_probe_prefix_is_reproducible_from_fewer_layers():
    """Sequences and probes have their own streams: the first steps of probes 0..1 do not
    depend on how many layers are read (what the stored-result test relies on)."""
    cfg = _tiny_probe(n_layers=3)
    model = nope.random_nope_model(32, 4, 3, 16, 0.02, True, 0)
    full = nope_probe.probe_features(model, cfg, 0, range(8))
    part = nope_probe.probe_features(model, cfg, 0, range(8), n_layers=1)
    torch.testing.assert_close(full[0][:2], part[0])
    _, t_full = nope_probe.train_probes(full, dataclasses.replace(cfg, train_seqs=8, seqs_per_step=4), 0, 3)
    _, t_part = nope_probe.train_probes(part, dataclasses.replace(cfg, train_seqs=8, seqs_per_step=4), 0, 3)
    torch.testing.assert_close(torch.tensor(t_full)[:, :2], torch.tensor(t_part))


@pytest.mark.parametrize("kw, match", [
    (dict(seqs_per_step=0), "seqs_per_step must be a positive integer"),
    (dict(train_seqs=0), "train_seqs must be a positive integer"),
    (dict(positions_per_seq=17), "positions_per_seq must be <= seq_len"),
    (dict(lr=float("nan")), "lr must be"), (dict(seeds=(-1,)), "a seed must be in"),
])
def test_probe_config_refuses_bad_values(kw, match):
    with pytest.raises(ValueError, match=match):
        _tiny_probe(**kw)


# ------------------------------------------------------------------ trained LM
@pytest.fixture(scope="module")
def small_lm():
    from lncourse.text import CharTokenizer, load_shakespeare
    from lncourse.transformer import GPT, TransformerConfig
    text = load_shakespeare()[:20000]
    tok = CharTokenizer.from_text(text)
    torch.manual_seed(0)
    model = GPT(TransformerConfig(tok.vocab_size, d_model=16, n_heads=2, n_layers=1,
                                  block_size=32, pos_emb=False))
    return model, tok.encode(text)


def test_trained_lm_variance_is_the_variance_across_windows(small_lm):
    from lncourse.text import sample_batch
    model, ids = small_lm
    got = nope_lm.trained_lm_variance(model, ids, n_windows=40, block_size=32, seed=3,
                                      batch_size=16)
    x, _ = sample_batch(ids, 40, 32, torch.Generator().manual_seed(3))   # same windows
    with torch.no_grad():
        _, _, cache = model(x, return_cache=True)
    expected = cache["blocks.0.attn_out"].double().var(0).mean(-1).float()
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-4)
    assert model.training                  # the mode is restored


def test_trained_lm_variance_refuses_bad_input(small_lm):
    model, ids = small_lm
    with pytest.raises(ValueError, match="n_windows must be"):
        nope_lm.trained_lm_variance(model, ids, n_windows=1, block_size=32)
    with pytest.raises(ValueError, match="layer must be in"):
        nope_lm.trained_lm_variance(model, ids, n_windows=4, block_size=32, layer=1)


# --------------------------------------------------------------------- figures
def test_plots_return_figures(stats):
    v = stats["attn_out_var"].mean(-1)
    th = nope_lemmas.theory_variance(D, 0.02, T)
    figs = [nope_plots.variance_loglog(v, th, th),
            nope_plots.variance_with_ratios(v, th, th),
            nope_plots.cumulative_attention(stats["mean_weights"]),
            nope_plots.sigma_sweep({0.02: (v, th), 0.2: (v, th)}),
            nope_plots.probe_errors({"causal": ([0, 1], [4.0, 3.0])}, 4.0),
            nope_plots.probe_errors({"causal": ([0, 1], [4.0, 3.0])}, 4.0,
                                    spread={"causal": [0.1, 0.2]}),
            nope_plots.lemma4_signal(v, v, {"m": [1.0, 2.5], "mean": [1.0, 0.9],
                                            "err": [0.1, 0.05]}, v)]
    for f in figs:
        assert isinstance(f, matplotlib.figure.Figure)


def test_data_curve_ends_at_the_full_probe_and_refuses_bad_sizes():
    cfg = _tiny_probe(train_seqs=64, n_layers=1, steps=40)
    full = nope_probe.probe_positions(cfg, seed=0)
    curve = nope_probe.data_curve(cfg, 0, [16, 64])
    assert curve["sizes"] == [16, 64] and curve["baseline"] == full["baseline"]
    assert curve["mae"][-1] == full["mae"]
    assert curve["mae"][0] != full["mae"]
    with pytest.raises(ValueError, match="sizes must lie in"):
        nope_probe.data_curve(cfg, 0, [8])          # fewer than seqs_per_step
    with pytest.raises(ValueError, match="sizes must lie in"):
        nope_probe.data_curve(cfg, 0, [65])


def test_summarize_means_and_spreads_over_seeds():
    runs = {"causal": [{"layers": [0, 1], "mae": [4.0, 2.0], "baseline": 4.0},
                       {"layers": [0, 1], "mae": [4.0, 3.0], "baseline": 4.0}],
            "bidirectional": [{"layers": [0, 1], "mae": [4.0, 4.0], "baseline": 4.0}]}
    s = nope_probe.summarize(runs)
    assert s["causal"]["mae"] == [4.0, 2.5] and s["causal"]["seeds"] == 2
    assert s["causal"]["std"] == pytest.approx([0.0, math.sqrt(0.5)])
    assert s["bidirectional"]["std"] is None


def test_configs_scale_down_and_keep_the_model():
    from lncourse.modes import scaled  # noqa: F401  (the rule the presets follow)
    p = nope_probe.ProbeConfig.paper().scaled(0.01)
    assert (p.d_model, p.n_layers, p.seq_len, p.sigma) == (768, 12, 512, 0.02)
    assert p.seeds == (0,) and p.bidirectional_seeds == (0,)
    assert p.train_seqs >= p.seqs_per_step and p.steps >= 2
    assert nope_probe.ProbeConfig.paper().scaled(1.0) == nope_probe.ProbeConfig.paper()
    v = nope.VarianceConfig.paper().scaled(0.01)
    assert (v.d_model, v.seq_len, v.n_samples) == (768, 512, 5)
    lm = nope_lm.NoPELMConfig.paper().scaled(0.01)
    assert (lm.steps, lm.batch_size, lm.eval_batches, lm.d_model) == (30, 4, 1, 256)
    with pytest.raises(ValueError, match="SCALE must lie in"):
        nope.VarianceConfig.paper().scaled(2.0)


# ----------------------------------------------------------------- stored results
STORED_PROBES = sorted((RESULTS_DIR / "nope").glob("probe_*.json"))


@pytest.mark.parametrize("path", STORED_PROBES, ids=[p.stem for p in STORED_PROBES])
def test_stored_probe_run_replays(path):
    """The first training steps of the stored run's first causal and bidirectional
    probes (depths 0 and 1) come out of today's code. Only the sequences those steps
    draw are passed through the frozen model, and through its first block only."""
    stored = load_result(path)
    cfg = nope_probe.ProbeConfig(**{k: tuple(v) if isinstance(v, list) else v
                                    for k, v in stored["config"].items()})
    assert today_command(stored["provenance"]["command"]).startswith(
        "python -m lncourse.evidence.nope.probe")
    assert [r["seed"] for r in stored["results"]["causal"]] == list(cfg.seeds)
    P, steps = cfg.positions_per_seq, nope_probe.TRACE_STEPS
    for kind, causal in (("causal", True), ("bidirectional", False)):
        first = stored["results"][kind][0]
        seed = first["seed"]
        order = torch.randperm(cfg.train_seqs, generator=torch.Generator().manual_seed(
            nope_probe.stream_seed(seed, 3)))
        used = order[:steps * cfg.seqs_per_step].tolist()
        assert steps * cfg.seqs_per_step <= cfg.train_seqs        # one epoch, no reshuffle
        # built whole: a model of fewer layers draws other weights for its first block
        model = nope.random_nope_model(cfg.d_model, cfg.n_heads, cfg.n_layers, cfg.seq_len,
                                       cfg.sigma, causal, seed)
        f_used, p_used = nope_probe.probe_features(model, cfg, seed, used, n_layers=1)
        feats = torch.zeros(2, cfg.train_seqs * P, cfg.d_model)
        pos = torch.zeros(cfg.train_seqs * P, dtype=p_used.dtype)
        for j, i in enumerate(used):
            feats[:, i * P:(i + 1) * P] = f_used[:, j * P:(j + 1) * P]
            pos[i * P:(i + 1) * P] = p_used[j * P:(j + 1) * P]
        _, trace = nope_probe.train_probes((feats, pos), cfg, seed, steps=steps)
        np.testing.assert_allclose(np.asarray(trace), np.asarray(first["trace"])[:, :2],
                                   rtol=1e-4)
        assert first["baseline"] == nope_probe.middle_baseline(cfg.seq_len)
        assert len(first["mae"]) == cfg.n_layers + 1
