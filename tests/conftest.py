import os
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("LNCOURSE_DEVICE", "cpu")
sys.path.insert(0, str(ROOT / "scripts"))   # the build tools (editions.py) are not in lncourse


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def assert_check_passes(check, solution, capsys, hidden=False) -> None:
    """A check accepts a solution, returns None and prints exactly one message: a line
    saying it passed, wrapped to the book's column (continuation lines indented)."""
    assert check(solution, hidden=hidden) is None
    out = capsys.readouterr().out.rstrip().splitlines()
    assert out and out[0].startswith(f"{check.__name__} passed"), out
    assert all(line.startswith("  ") and line.strip() for line in out[1:]), out


def raised_message(check, answer, hidden=False) -> str:
    """The message of the AssertionError a check raises on a wrong answer."""
    with pytest.raises(AssertionError, match=answer.match) as info:
        check(answer.fn, hidden=hidden)
    return str(info.value)


# Every test that reads a stored result is marked `replay` (the perturbed pass runs
# them again under other numerics; tests/stored_results_plugin.py says how they are found).
import stored_results_plugin as _stored   # noqa: E402  (tests/ is on sys.path: rootdir)

_stored.configure_perturbed()


def pytest_collection_modifyitems(config, items):
    _stored.collection_modifyitems(items)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    _stored.start(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if call.when == "call":
        _stored.stop(item, outcome.get_result())


# Margins (TESTING.md, "Margins"): with LNCOURSE_MARGINS set, every elementwise comparison
# and every ledger comparison records how far it was from failing (lncourse.tolerance).
def _recording(assert_allclose):
    import functools

    from lncourse.tolerance import record_arrays

    @functools.wraps(assert_allclose)
    def wrapper(actual, desired, rtol=1e-7, atol=0, *args, **kwargs):
        record_arrays(actual, desired, rtol, atol)
        return assert_allclose(actual, desired, rtol, atol, *args, **kwargs)
    return wrapper


def _recording_approx(eq):
    import functools

    from lncourse.tolerance import record

    @functools.wraps(eq)
    def wrapper(self, actual):
        ok = eq(self, actual)
        try:
            if ok:      # a margin is of a comparison that passed
                record("approx", abs(float(actual) - float(self.expected)),
                       float(self.tolerance))
        except (TypeError, ValueError, OverflowError):
            pass
        return ok
    return wrapper


if os.environ.get("LNCOURSE_MARGINS"):
    import numpy as _np

    _np.testing.assert_allclose = _recording(_np.testing.assert_allclose)
    _approx = type(pytest.approx(1.0))
    _approx.__eq__ = _recording_approx(_approx.__eq__)


def pytest_sessionfinish(session):
    from lncourse.tolerance import write_margins

    write_margins()
