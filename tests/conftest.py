import os
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("LNCOURSE_DEVICE", "cpu")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def assert_check_passes(check, solution, capsys) -> None:
    """A check accepts the reference solution, returns None and prints exactly one line."""
    assert check(solution) is None
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and "passed" in out[0] and "largest difference" in out[0]
