"""The recipe that learns (lncourse.lm_recipe; lncourse.lm trains with it): warm-up,
clipping and cosine decay resume to the same history; the sweep's rule; the bigram and
unigram references; per-position losses."""

import math

import numpy as np
import pytest
import torch

from lncourse.lm import slim_checkpoint, train_lm
from lncourse.lm_recipe import (Recipe, bigram_loss, choose_lr, context_gain, lr_at,
                                position_losses, reference_losses, reference_tables,
                                tuned_bigram, with_references)
from lncourse.text import CharTokenizer, load_shakespeare, split_ids
from lncourse.transformer import GPT, TransformerConfig


@pytest.fixture(scope="module")
def data():
    text = load_shakespeare()[:20000]
    ids = CharTokenizer.from_text(text).encode(text)
    return (*split_ids(ids), int(ids.max()) + 1)


def _model(vocab: int) -> GPT:
    torch.manual_seed(0)
    return GPT(TransformerConfig(vocab_size=vocab, d_model=8, n_heads=2, n_layers=1,
                                 block_size=16))


RECIPE = Recipe(steps=20, batch_size=4, block_size=16, warmup=4, min_lr_ratio=0.1,
                clip=0.5, eval_every=5, eval_batches=2)


def test_schedule_warms_up_then_decays_to_min_lr():
    peak, steps = 1e-2, 20
    lrs = [lr_at(s, steps, peak, warmup=4, min_lr=1e-3) for s in range(steps)]
    assert lrs[:4] == pytest.approx([2.5e-3, 5e-3, 7.5e-3, 1e-2])
    assert lrs[4] == pytest.approx(peak) and lrs[-1] == pytest.approx(1e-3)
    assert all(a >= b for a, b in zip(lrs[4:], lrs[5:]))          # decays monotonically
    assert lr_at(10, steps, peak) == peak                            # constant by default


def test_recipe_run_resumes_to_the_same_history(data, tmp_path):
    train, test, vocab = data
    kw = dict(**RECIPE.kwargs(1e-2), seed=3, progress=False)
    full = train_lm(_model(vocab), train, test, **kw)
    ck = tmp_path / "lm.pt"

    def crash(step):
        if step == 12:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_lm(_model(vocab), train, test, **kw, checkpoint_path=ck, _on_step=crash)
    torch.manual_seed(99)
    timing = {}
    assert train_lm(_model(vocab), train, test, **kw, checkpoint_path=ck,
                    timing=timing) == full
    assert [s["from_step"] for s in timing["sessions"]] == [0, 10]
    assert timing["sessions"][-1]["to_step"] == 20


def test_recipe_differs_from_the_constant_rate_and_refuses_its_checkpoint(data, tmp_path):
    train, test, vocab = data
    kw = dict(**RECIPE.kwargs(1e-2), seed=3, progress=False)
    with_recipe = train_lm(_model(vocab), train, test, **kw)
    constant = train_lm(_model(vocab), train, test, steps=20, batch_size=4, block_size=16,
                        lr=1e-2, eval_every=5, eval_batches=2, seed=3, progress=False)
    assert with_recipe["trace"][0] == constant["trace"][0]      # same first loss
    assert with_recipe["train_loss"][1:] != constant["train_loss"][1:]
    ck = tmp_path / "c.pt"
    train_lm(_model(vocab), train, test, steps=20, batch_size=4, block_size=16, lr=1e-2,
             eval_every=5, eval_batches=2, seed=3, progress=False, checkpoint_path=ck)
    with pytest.raises(ValueError, match="recipe"):
        train_lm(_model(vocab), train, test, **kw, checkpoint_path=ck)


def test_slimmed_checkpoint_returns_the_history_and_rounded_weights(data, tmp_path):
    train, test, vocab = data
    kw = dict(**RECIPE.kwargs(1e-2), seed=3, progress=False)
    ck = tmp_path / "s.pt"
    model = _model(vocab)
    full = train_lm(model, train, test, **kw, checkpoint_path=ck)
    slim_checkpoint(ck)
    again = _model(vocab)
    assert train_lm(again, train, test, **kw, checkpoint_path=ck) == full
    for (k, a), b in zip(model.state_dict().items(), again.state_dict().values()):
        assert torch.equal(a.to(torch.bfloat16).float(), b), k
    short = dict(kw, steps=10, warmup=2)
    ck2 = tmp_path / "u.pt"
    train_lm(_model(vocab), train, test, **short, checkpoint_path=ck2)
    state = torch.load(ck2, weights_only=True)
    state["config"]["steps"] = 20            # pretend it stopped half-way
    torch.save(state, ck2)
    with pytest.raises(ValueError, match="unfinished"):
        slim_checkpoint(ck2)


@pytest.mark.parametrize("bad", [dict(warmup=20), dict(warmup=-1), dict(clip=0.0),
                                 dict(min_lr=float("nan")), dict(min_lr=1.0)])
def test_bad_recipe_arguments_are_refused(data, bad):
    train, test, vocab = data
    kw = dict(steps=20, batch_size=4, block_size=16, lr=1e-2, progress=False, **bad)
    with pytest.raises(ValueError):
        train_lm(_model(vocab), train, test, **kw)


def test_sweep_rule_takes_the_lowest_training_loss_and_skips_diverged():
    runs = [{"lr": 1e-3, "train_loss": 2.4}, {"lr": 3e-3, "train_loss": 2.2},
            {"lr": 1e-2, "train_loss": None}]
    assert choose_lr(runs) == 3e-3
    assert choose_lr([dict(r, train_loss=2.2) if r["lr"] == 1e-3 else r
                      for r in runs]) == 1e-3        # a tie goes to the smaller rate
    with pytest.raises(ValueError, match="diverged"):
        choose_lr([{"lr": 1e-2, "train_loss": None}])


def test_references_are_the_smoothed_tables_cross_entropies():
    train = torch.tensor([0, 1, 0, 1, 0, 2])
    test = torch.tensor([0, 1, 2])
    refs = reference_losses(train, test, vocab_size=3)
    # unigram with add-one: counts 3+1, 2+1, 1+1 of 9; test targets 1 and 2
    assert refs["unigram"] == pytest.approx(-(math.log(3 / 9) + math.log(2 / 9)) / 2)
    # bigram rows with add-one: after 0 -> (1, 3, 2)/6; after 1 -> (3, 1, 1)/5
    assert refs["bigram"] == pytest.approx(-(math.log(3 / 6) + math.log(1 / 5)) / 2)
    with pytest.raises(ValueError):
        reference_tables(torch.tensor([0, 5]), vocab_size=3)
    assert "0.100 below the bigram" in with_references(2.0, {"bigram": 2.1, "unigram": 3})


def test_tuned_bigram_chooses_its_smoothing_on_held_out_training_text(data):
    """Add-alpha at alpha = 1 is the add-one table; the constant is chosen on the tail of
    the training stream (the table counted on the rest), never on the test stream."""
    train, test, vocab = data
    assert bigram_loss(train, test, vocab, 1.0) == pytest.approx(
        reference_losses(train, test, vocab)["bigram"], rel=1e-12)
    # by hand: after 0 -> counts (1: 2, 2: 1) of 3; add-0.5 over V = 3
    assert bigram_loss(torch.tensor([0, 1, 0, 1, 0, 2]), torch.tensor([0, 1]), 3,
                       0.5) == pytest.approx(-math.log(2.5 / 4.5))
    got = tuned_bigram(train, test, vocab, grid=(0.01, 0.1, 1.0))
    cut = int(len(train) * 0.9)
    held = {a: bigram_loss(train[:cut], train[cut:], vocab, a) for a in (0.01, 0.1, 1.0)}
    assert got["held_out"] == pytest.approx(held)
    assert got["alpha"] == min(held, key=held.get)
    assert got["bigram"] == bigram_loss(train, test, vocab, got["alpha"])
    # a test stream that favours another constant does not move the choice
    other = tuned_bigram(train, train[:200].flip(0), vocab, grid=(0.01, 0.1, 1.0))
    assert other["alpha"] == got["alpha"]
    with pytest.raises(ValueError):
        bigram_loss(train, test, vocab, 0.0)


def test_position_losses_match_the_trainer_and_the_bigram(data):
    train, test, vocab = data
    model = _model(vocab)
    pos = position_losses(model, train, test, windows=6, block_size=16, seed=5,
                          vocab_size=vocab, batch_size=4)
    m, b = np.array(pos["model"]), np.array(pos["bigram"])
    assert m.shape == b.shape == (6, 16)
    # the same windows through the model's own loss
    g = torch.Generator().manual_seed(5)
    from lncourse.text import sample_batch
    x1, y1 = sample_batch(test, 4, 16, g)
    x2, y2 = sample_batch(test, 2, 16, g)
    with torch.no_grad():
        loss = (float(model(x1, y1)[1]) * 4 + float(model(x2, y2)[1]) * 2) / 6
    assert m.mean() == pytest.approx(loss, abs=1e-5)
    _, bi = reference_tables(train, vocab)
    assert b[0, 3] == pytest.approx(float(-bi[x1[0, 3], y1[0, 3]]))
    gain = context_gain(pos, 9)
    assert gain["model"] == pytest.approx(m[:, 8:].mean())
    assert gain["gain"][0] == pytest.approx((b[:, 8:] - m[:, 8:]).mean())
    with pytest.raises(ValueError):
        context_gain(pos, 17)
