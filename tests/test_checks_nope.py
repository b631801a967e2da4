"""Each chapter-4 check passes the reference and names at least three plausible mistakes."""

import pytest
import torch

from lncourse.checks import nope as ck


def test_running_mean():
    ck.check_running_mean(lambda v: v.cumsum(-2) / torch.arange(1, v.shape[-2] + 1,
                                                                 dtype=v.dtype)[:, None])
    with pytest.raises(AssertionError, match="divided every position by T"):
        ck.check_running_mean(lambda v: v.cumsum(-2) / v.shape[-2])
    with pytest.raises(AssertionError, match="running sum"):
        ck.check_running_mean(lambda v: v.cumsum(-2))
    with pytest.raises(AssertionError, match="off by one"):
        ck.check_running_mean(lambda v: v.cumsum(-2) / torch.arange(
            2, v.shape[-2] + 2, dtype=v.dtype)[:, None])


def test_sample_covariance():
    ck.check_sample_covariance(lambda samples: torch.cov(samples.T))
    with pytest.raises(AssertionError, match="N - 1"):
        ck.check_sample_covariance(lambda samples: torch.cov(samples.T, correction=0))
    with pytest.raises(AssertionError, match="subtract the mean"):
        ck.check_sample_covariance(lambda samples: samples.T @ samples / (samples.shape[0] - 1))
    with pytest.raises(AssertionError, match="across coordinates"):
        ck.check_sample_covariance(lambda samples: torch.cov(samples))


def _fit(variance, m_min):
    m = torch.arange(1, variance.numel() + 1, dtype=torch.float64)
    keep = m >= m_min
    A = torch.stack([m[keep].log(), torch.ones(int(keep.sum()), dtype=torch.float64)], 1)
    return float(torch.linalg.lstsq(A, variance.double()[keep].log()[:, None]).solution[0, 0])


def test_fit_loglog_slope():
    ck.check_fit_loglog_slope(_fit)
    with pytest.raises(AssertionError, match="every position"):
        ck.check_fit_loglog_slope(lambda variance, m_min: _fit(variance, 1))
    with pytest.raises(AssertionError, match="positions count from 1"):
        ck.check_fit_loglog_slope(ck._slope_zero_based)
    with pytest.raises(AssertionError, match="not on m"):
        ck.check_fit_loglog_slope(ck._slope_linear_m)


def _masked(scores, causal):
    if causal:
        T = scores.shape[-1]
        scores = scores.masked_fill(torch.ones(T, T).tril() == 0, float("-inf"))
    return torch.softmax(scores, dim=-1)


def test_masked_attention():
    ck.check_masked_attention(_masked)
    with pytest.raises(AssertionError, match="diagonal"):
        ck.check_masked_attention(ck._strict_mask)
    with pytest.raises(AssertionError, match="hid the past"):
        ck.check_masked_attention(ck._future_mask)
    with pytest.raises(AssertionError, match="apply the mask"):
        ck.check_masked_attention(lambda scores, causal: scores.softmax(-1))
    with pytest.raises(AssertionError, match="bidirectional"):
        ck.check_masked_attention(lambda scores, causal: _masked(scores, True))


def test_effective_tokens():
    ck.check_effective_tokens(lambda weights: 1 / (weights * weights).sum(-1))
    with pytest.raises(AssertionError, match="inverse"):
        ck.check_effective_tokens(lambda weights: (weights * weights).sum(-1))
    with pytest.raises(AssertionError, match="non-zero"):
        ck.check_effective_tokens(lambda weights: (weights > 0).sum(-1).double())
    with pytest.raises(AssertionError, match="square the weights"):
        ck.check_effective_tokens(lambda weights: 1 / weights.sum(-1))


def test_signature_is_checked():
    with pytest.raises(AssertionError, match="parameters"):
        ck.check_running_mean(lambda x, y: x)
