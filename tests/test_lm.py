"""train_lm: exact resumption, refusal of another run's checkpoint, bad arguments."""

import pytest
import torch

from lncourse.lm import TRACE_STEPS, data_fingerprint, train_lm
from lncourse.rng import SEED_LIMIT
from lncourse.text import CharTokenizer, load_shakespeare, split_ids
from lncourse.transformer import GPT, TransformerConfig


@pytest.fixture(scope="module")
def data():
    text = load_shakespeare()[:20000]
    ids = CharTokenizer.from_text(text).encode(text)
    return (*split_ids(ids), int(ids.max()) + 1)


def _model(vocab: int, norm_attn=None) -> GPT:
    torch.manual_seed(0)
    return GPT(TransformerConfig(vocab_size=vocab, d_model=8, n_heads=2, n_layers=1,
                                 block_size=16, norm_attn=norm_attn))


KW = dict(steps=20, batch_size=4, block_size=16, lr=1e-2, eval_every=5, eval_batches=2,
          seed=3, progress=False)


def test_interrupted_run_resumes_to_the_same_history(data, tmp_path):
    train, test, vocab = data
    full = train_lm(_model(vocab), train, test, **KW)
    assert len(full["trace"]) == TRACE_STEPS and full["test_loss"][-1] < full["test_loss"][0]
    ck = tmp_path / "lm.pt"

    def crash(step):
        if step == 12:                        # after the checkpoint at step 10
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_lm(_model(vocab), train, test, **KW, checkpoint_path=ck, _on_step=crash)
    assert torch.load(ck, weights_only=True)["step"] == 10
    torch.manual_seed(123)            # a fresh process would not share the RNG state
    timing = {}
    resumed = train_lm(_model(vocab), train, test, **KW, checkpoint_path=ck, timing=timing)
    assert resumed == full
    assert timing["seconds"] >= timing["session_seconds"] > 0


def test_training_works_where_gradients_are_turned_off(data):
    """Chapter 5 turns gradients off for its measurements and trains in full mode: the
    trainer turns them back on for itself (and leaves the setting as it found it)."""
    train, test, vocab = data
    full = train_lm(_model(vocab), train, test, **KW)
    with torch.no_grad():
        assert train_lm(_model(vocab), train, test, **KW) == full
        assert not torch.is_grad_enabled()


def test_resume_from_the_step0_checkpoint_does_not_repeat_step0(data, tmp_path):
    train, test, vocab = data
    full = train_lm(_model(vocab), train, test, **KW)
    ck = tmp_path / "lm.pt"

    def crash(step):
        if step == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_lm(_model(vocab), train, test, **KW, checkpoint_path=ck, _on_step=crash)
    assert torch.load(ck, weights_only=True)["step"] == 0
    assert train_lm(_model(vocab), train, test, **KW, checkpoint_path=ck) == full


@pytest.mark.parametrize("change, what", [
    (dict(lr=2e-2), "lr"), (dict(batch_size=5), "batch_size"), (dict(seed=4), "seed"),
    (dict(steps=30), "steps"), ("data", "data"), ("model", "model"),
])
def test_a_checkpoint_of_another_run_is_refused(data, tmp_path, change, what):
    train, test, vocab = data
    ck = tmp_path / "lm.pt"
    train_lm(_model(vocab), train, test, **{**KW, "steps": 5}, checkpoint_path=ck)
    kw, model = {**KW, "steps": 5}, _model(vocab)
    if change == "data":
        train = train.flip(0)
    elif change == "model":
        model = _model(vocab, norm_attn="no_scaling")
    else:
        kw.update(change)
    with pytest.raises(ValueError, match=f"another run .*{what}"):
        train_lm(model, train, test, **kw, checkpoint_path=ck)


def test_a_foreign_checkpoint_is_refused(data, tmp_path):
    train, test, vocab = data
    ck = tmp_path / "other.pt"
    torch.save({"kind": "majority", "step": 3}, ck)
    with pytest.raises(ValueError, match="not a train_lm checkpoint"):
        train_lm(_model(vocab), train, test, **KW, checkpoint_path=ck)


def test_checkpoint_loads_with_weights_only(data, tmp_path):
    train, test, vocab = data
    ck = tmp_path / "lm.pt"
    train_lm(_model(vocab), train, test, **{**KW, "steps": 5}, checkpoint_path=ck)
    state = torch.load(ck, weights_only=True)
    assert state["config"]["lr"] == KW["lr"] and state["config"]["steps"] == 5
    assert state["config"]["data"] == data_fingerprint(train, test)


@pytest.mark.parametrize("change, match", [
    (dict(eval_batches=0), "eval_batches must be a positive integer"),
    (dict(steps=0), "steps must be a positive integer"),
    (dict(batch_size=2.5), "batch_size must be a positive integer"),
    (dict(lr=float("inf")), "lr must be a finite positive number"),
    (dict(lr=-1.0), "lr must be a finite positive number"),
    (dict(seed=SEED_LIMIT), "seed must be in"),
    (dict(seed=-1), "seed must be in"),
])
def test_bad_arguments_raise(data, change, match):
    train, test, vocab = data
    with pytest.raises(ValueError, match=match):
        train_lm(_model(vocab), train, test, **{**KW, **change})


def test_measure_is_recorded_at_every_evaluation(data):
    train, test, vocab = data
    calls = []

    def measure(model):
        calls.append(model.training)
        return {"n": len(calls)}

    h = train_lm(_model(vocab), train, test, **KW, measure=measure)
    assert h["measure"] == [{"n": k + 1} for k in range(len(h["step"]))]


@pytest.mark.parametrize("qk_norm", [False, True])
def test_a_checkpoint_from_before_a_new_config_field_resumes_only_at_its_default(
        data, tmp_path, qk_norm):
    """A checkpoint written before TransformerConfig gained ``qk_norm`` resumes a model
    that leaves the new field at its default, and is refused by one that sets it."""
    from lncourse.checkpoint import load_checkpoint, save_checkpoint
    train, test, vocab = data
    ck = tmp_path / "lm.pt"
    kw = {**KW, "steps": 10}
    full = train_lm(_model(vocab), train, test, **kw)
    crash = {"steps": 5}
    train_lm(_model(vocab), train, test, **{**kw, **crash}, checkpoint_path=ck)
    state = load_checkpoint(ck)
    state["config"]["steps"] = 10            # as if interrupted at step 5 of 10
    del state["config"]["model"]["cfg"]["qk_norm"]   # written before the field existed
    save_checkpoint(ck, {k: v for k, v in state.items() if k != "kind"}, kind="lm")
    torch.manual_seed(0)
    model = GPT(TransformerConfig(vocab_size=vocab, d_model=8, n_heads=2, n_layers=1,
                                  block_size=16, qk_norm=qk_norm))
    if qk_norm:
        with pytest.raises(ValueError, match="another run .*model"):
            train_lm(model, train, test, **kw, checkpoint_path=ck)
    else:
        assert train_lm(model, train, test, **kw, checkpoint_path=ck) == full
