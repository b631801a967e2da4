import os
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("LNCOURSE_DEVICE", "cpu")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
