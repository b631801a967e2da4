"""The machinery every check shares: answers of the wrong kind, learners' errors, time
limits, forbidden calls, tolerances set by the inputs' precision."""

import time

import numpy as np
import pytest
import torch

from lncourse import checks
from lncourse.checks import _core
from lncourse.checks._core import case, run_check


def layer_norm_fgh(x, gamma, beta, eps):
    c = x - x.mean(-1, keepdim=True)
    return c / torch.sqrt((c * c).mean(-1, keepdim=True) + eps) * gamma + beta


BOOLEAN_ANSWERS = [
    (checks.check_centering_matrix, lambda d: torch.ones(d, d, dtype=torch.bool)),
    (checks.check_layer_norm_fgh, lambda x, gamma, beta, eps: x > 0),
    (checks.check_fold_into_linear, lambda W, b, gamma, beta: (W > 0, b > 0)),
    (checks.check_rms_norm_gain, lambda x, gain, eps: x > 0),
    (checks.check_layer_norm_jacobian, lambda x, gamma, eps: torch.ones(len(x), len(x)) > 0),
    (checks.check_layer_norm_on_plane, lambda s, t, v: torch.ones(len(s), len(v)) > 0),
    (checks.check_norm_without_projection, lambda x: x > 0),
    (checks.check_running_mean, lambda v: v > 0),
    (checks.check_sample_covariance, lambda samples: torch.ones(samples.shape[1], samples.shape[1]) > 0),
    (checks.check_effective_tokens, lambda weights: weights.sum(-1) > 0),
]


@pytest.mark.parametrize("check, answer", BOOLEAN_ANSWERS, ids=lambda v: getattr(v, "__name__", ""))
def test_boolean_answers_fail_naming_the_dtype(check, answer):
    with pytest.raises(AssertionError, match=r"boolean tensor \(dtype bool\); the answer is a floating-point"):
        check(answer)


def test_a_python_bool_or_int_is_not_a_slope():
    with pytest.raises(AssertionError, match=r"returned True \(bool\); the answer is a floating-point number"):
        checks.check_fit_loglog_slope(lambda variance, m_min: True)
    with pytest.raises(AssertionError, match=r"returned -1 \(int\)"):
        checks.check_fit_loglog_slope(lambda variance, m_min: -1)


def test_float32_answer_to_a_float64_exercise_names_the_dtype():
    with pytest.raises(AssertionError, match="returned float32, but this exercise works in float64"):
        checks.check_running_mean(lambda v: (v.cumsum(-2) / torch.arange(
            1, v.shape[-2] + 1, dtype=v.dtype)[:, None]).float())


def test_float32_rounding_inside_a_float64_answer_gets_a_hint():
    def fold(W, b, gamma, beta):
        d = W.shape[1]
        P = (torch.eye(d) - torch.ones(d, d) / d).double()       # built in float32
        return (W * gamma) @ P, W @ beta + b
    with pytest.raises(AssertionError, match="rounding of float32"):
        checks.check_fold_into_linear(fold)


def test_returning_none_asks_about_return():
    def forgot(x, gamma, beta, eps):
        layer_norm_fgh(x, gamma, beta, eps)
    with pytest.raises(AssertionError, match="returned None: did you forget `return`"):
        checks.check_layer_norm_fgh(forgot)


def test_meta_tensors_are_not_mistaken_for_a_stub():
    with pytest.raises(AssertionError, match="meta device, which has a shape but no values"):
        checks.check_layer_norm_fgh(lambda x, gamma, beta, eps: torch.empty(x.shape, device="meta"))
    with pytest.raises(AssertionError, match="comes from PyTorch, not from the stub"):
        checks.check_layer_norm_fgh(lambda x, gamma, beta, eps: layer_norm_fgh(
            x.to("meta"), gamma.to("meta"), beta.to("meta"), eps).cpu())


def test_stub_reads_as_unfinished(capsys, monkeypatch):
    """Issue 61, item 4: in a notebook a stub's check prints "not done yet", naming the
    function, and returns, so that "Run all" goes on; the grader (unfinished="raise")
    gets the NotImplementedError, which scores 0."""
    from lncourse.checks import _core

    def stub(x, gamma, beta, eps):
        raise NotImplementedError("Exercise: replace this line with your code")

    def own_stub(x, gamma, beta, eps):
        raise NotImplementedError
    for fn in (stub, own_stub):
        assert checks.check_layer_norm_fgh(fn) is None
        out = capsys.readouterr().out
        assert out.startswith("check_layer_norm_fgh: not done yet: layer_norm_fgh "), out
        assert "passed" not in out
    monkeypatch.setattr(_core, "UNFINISHED", "report")
    checks.configure(unfinished="raise")
    with pytest.raises(NotImplementedError, match="replace this line"):
        checks.check_layer_norm_fgh(stub)
    with pytest.raises(NotImplementedError, match="^$"):
        checks.check_layer_norm_fgh(own_stub)
    with pytest.raises(ValueError, match="'report' or 'raise'"):
        checks.configure(unfinished="ignore")


def test_a_failing_check_shows_its_message_not_its_source():
    """Issue 60, item 5: a failure is an AssertionError (the grader and the tests read
    it so) that IPython renders as the message alone (``_render_traceback_``), without
    the check's source lines or its inputs; where the learner's code raised, only the
    learner's frames are shown under it."""
    from lncourse.checks._core import CheckFailure

    def wrong(x, gamma, beta, eps):
        return x

    def crash(x, gamma, beta, eps):
        return x[10_000]
    with pytest.raises(AssertionError) as info:
        checks.check_layer_norm_fgh(wrong)
    assert isinstance(info.value, CheckFailure)
    assert info.value._render_traceback_() == [f"CheckFailure: {info.value}"]
    with pytest.raises(CheckFailure) as info:
        checks.check_layer_norm_fgh(crash)
    shown = "\n".join(info.value._render_traceback_())
    assert shown.startswith("CheckFailure: layer_norm_fgh: your function raised IndexError")
    assert "return x[10_000]" in shown and "in crash" in shown
    assert "lncourse" not in shown and "run_check" not in shown and "case(" not in shown


def test_a_learners_assert_keeps_the_context():
    def picky(x, gamma, beta, eps):
        assert x.dim() == 2, "only matrices, please"
        return layer_norm_fgh(x, gamma, beta, eps)
    with pytest.raises(AssertionError, match=r"^layer_norm_fgh: your function raised AssertionError "
                                             r"\(an assert in your code failed\) on input .*only matrices"):
        checks.check_layer_norm_fgh(picky)


def test_crash_builtin_signature_and_mutation_are_reported():
    with pytest.raises(AssertionError, match="raised ZeroDivisionError: division by zero on input"):
        checks.check_centering_matrix(lambda d: 1 / 0)
    with pytest.raises(AssertionError, match="'eye' is a built-in whose parameters cannot be read"):
        checks.check_centering_matrix(torch.eye)
    with pytest.raises(AssertionError, match=r"should take 4 parameters, in this order: "
                                             r"\(x, gamma, beta, eps\); their names are yours"):
        checks.check_layer_norm_fgh(lambda x, g, b: x)
    with pytest.raises(AssertionError, match="expects a function, got int"):
        checks.check_layer_norm_fgh(3)

    def in_place(x, gamma, beta, eps):
        x -= x.mean(-1, keepdim=True)
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * gamma + beta
    with pytest.raises(AssertionError, match="modified its input in place"):
        checks.check_layer_norm_fgh(in_place)


def test_generic_failures_say_what_differs():
    with pytest.raises(AssertionError, match="differs from the reference.*largest difference"):
        checks.check_centering_matrix(lambda d: torch.zeros(d, d, dtype=torch.float64))
    with pytest.raises(AssertionError, match=r"shape \(3,\), expected \(3, 3\)"):
        checks.check_centering_matrix(lambda d: torch.zeros(d, dtype=torch.float64))
    with pytest.raises(AssertionError, match="contains NaN"):
        checks.check_centering_matrix(lambda d: torch.full((d, d), float("nan"), dtype=torch.float64))
    with pytest.raises(AssertionError, match="expected a tuple of 2 values"):
        checks.check_fold_into_linear(lambda W, b, gamma, beta: W)


def test_numpy_answers_are_accepted():
    checks.check_centering_matrix(lambda d: np.eye(d) - np.ones((d, d)) / d)


def test_a_loop_that_never_ends_is_stopped(monkeypatch):
    monkeypatch.setattr(_core, "SECONDS", 0.5)

    def forever(x, gamma, beta, eps):
        while True:
            pass
    start = time.monotonic()
    with pytest.raises(AssertionError, match="stopped on input .*time limit of 0.5 s ran out.*loop that never ends"):
        checks.check_layer_norm_fgh(forever)
    assert time.monotonic() - start < 5


def test_a_learner_cannot_catch_the_stop(monkeypatch):
    monkeypatch.setattr(_core, "SECONDS", 0.3)

    def stubborn(x, gamma, beta, eps):
        give_up = time.monotonic() + 3        # so that a stop it could catch ends the test
        while time.monotonic() < give_up:
            try:
                while time.monotonic() < give_up:
                    pass
            except Exception:
                pass
        return x
    with pytest.raises(AssertionError, match="time limit of 0.3 s ran out"):
        checks.check_layer_norm_fgh(stubborn)


def test_run_check_sequences_and_judges():
    cases = [case(torch.tensor([1.0, 2.0]))]
    run_check(lambda x: (x, x.sum()), "pair", ["x"], cases, reference=lambda x: (x, x.sum()))
    with pytest.raises(AssertionError, match="item 1"):
        run_check(lambda x: (x, x.sum() + 1), "pair", ["x"], cases, reference=lambda x: (x, x.sum()))
    with pytest.raises(ValueError, match="exactly one of reference and judge"):
        run_check(lambda x: x, "pair", ["x"], cases)


# ------------------------------------------- issue 60, item 7: messages that name the mistake
def test_the_float32_hint_needs_a_float32_tensor():
    """A difference the size of float32's rounding, with every tensor in float64 (an eps
    slightly off), gets no float32 hint; the same size of difference made by a float32
    tensor inside the function gets it."""
    def jacobian_eps_off(x, gamma, eps):
        d = len(x)
        c = x - x.mean()
        s = torch.sqrt((c * c).mean() + eps * 1.5)
        z = c / s
        P = torch.eye(d, dtype=x.dtype) - torch.ones(d, d, dtype=x.dtype) / d
        return gamma[:, None] * (P - torch.outer(z, z) / d) / s
    with pytest.raises(AssertionError, match="differs from the reference") as info:
        checks.check_layer_norm_jacobian(jacobian_eps_off)
    assert "float32" not in str(info.value)

    def jacobian_float32_p(x, gamma, eps):
        d = len(x)
        c = x - x.mean()
        s = torch.sqrt((c * c).mean() + eps)
        z = c / s
        P = (torch.eye(d) - torch.ones(d, d) / d).double()       # built in float32
        return gamma[:, None] * (P - torch.outer(z, z) / d) / s
    with pytest.raises(AssertionError, match="rounding of float32"):
        checks.check_layer_norm_jacobian(jacobian_float32_p)


def test_a_shape_message_names_the_output():
    def backward_gamma_by_rows(x, gamma, eps, grad_out):
        c = x - x.mean(-1, keepdim=True)
        s = torch.sqrt((c * c).mean(-1, keepdim=True) + eps)
        z = c / s
        gz = grad_out * gamma
        gx = (gz - gz.mean(-1, keepdim=True) - z * (gz * z).mean(-1, keepdim=True)) / s
        rows = tuple(range(x.dim() - 1))
        return gx, (grad_out * z).sum(-1), grad_out.sum(rows)     # over the features
    with pytest.raises(AssertionError, match=r"grad_gamma \(item 1 of the tuple\): it has "
                                             r"shape \(4,\), expected \(8,\)"):
        checks.check_layer_norm_backward(backward_gamma_by_rows)
    with pytest.raises(AssertionError, match=r"item 1 of the tuple: it has shape \(\), "
                                             r"expected \(2,\)"):
        run_check(lambda x: (x, x.sum()), "pair", ["x"], [case(torch.tensor([1.0, 2.0]))],
                  reference=lambda x: (x, x))
    with pytest.raises(AssertionError, match=r"your output has shape \(3,\)"):
        checks.check_centering_matrix(lambda d: torch.zeros(d, dtype=torch.float64))


def test_a_dict_input_is_described_by_its_shapes_not_its_values():
    def wrong_effect(cells, level=0.95):
        return 0.0, -1.0, 1.0
    with pytest.raises(AssertionError) as info:
        checks.check_projection_main_effect(wrong_effect)
    message = str(info.value)
    assert "a dict of 4 entries, each array(10,)" in message
    assert "array([" not in message and len(message) < 300, message


# ----------------------------- issue 60, item 4: right answers judged by what they compute
def test_parameter_names_are_free_where_the_check_calls_in_order(capsys):
    """Renamed parameters pass, extra ones with defaults and *args too; a wrong number is
    refused, saying the names are free; a keyword the check calls by is named."""
    checks.check_layer_norm_fgh(lambda v, g, b, epsilon: layer_norm_fgh(v, g, b, epsilon))
    checks.check_layer_norm_fgh(lambda *args: layer_norm_fgh(*args))
    checks.check_layer_norm_fgh(lambda x, g, b, e, scale=1.0: layer_norm_fgh(x, g, b, e) * scale)
    assert capsys.readouterr().out.count("check_layer_norm_fgh passed") == 3
    with pytest.raises(AssertionError, match=r"should take 1 parameter, \(d\); its name is "
                                             r"yours to choose .* but yours takes \(n, m\)"):
        checks.check_centering_matrix(lambda n, m: torch.eye(n))
    with pytest.raises(AssertionError, match=r"should take 4 parameters, in this order: "
                                             r"\(x, gamma, beta, eps\).* yours takes "
                                             r"\(x, gamma, beta, eps, extra\)"):
        checks.check_layer_norm_fgh(lambda x, gamma, beta, eps, extra: x)

    def effect(c, conf=0.95):
        return 0.0, 0.0, 0.0
    with pytest.raises(AssertionError, match=r"should have a parameter named `level`: the "
                                             r"check calls it by keyword, projection_main_"
                                             r"effect\(cells, level=...\).* yours takes "
                                             r"\(c, conf\)"):
        checks.check_projection_main_effect(effect)

    def effect_required(c, level):
        return 0.0, 0.0, 0.0
    with pytest.raises(AssertionError, match=r"calls it with 1 argument in order, "
                                             r"projection_main_effect\(cells\), so every "
                                             r"further parameter needs a default"):
        checks.check_projection_main_effect(effect_required)
