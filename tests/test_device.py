"""lncourse.device: the bfloat16 rule on a T4, and what a full-mode run says before it
starts (issue 33)."""

import pytest
import torch

from lncourse import device as dev

T = {"runs": [
    {"chapter": "04_nope", "mode": "full", "scale": 0.05, "wall_s": 61.4, "ok": True,
     "device": "cuda: NVIDIA H100 80GB HBM3", "torch": "2.11.0+cu130", "commit": "a" * 40},
    {"chapter": "04_nope", "mode": "full", "scale": 0.01, "wall_s": 300.0, "ok": True,
     "device": "cpu: Some CPU, 1 threads", "torch": "2.13.0+cpu", "commit": "b" * 40},
    {"chapter": "04_nope", "mode": "fast", "scale": 1.0, "wall_s": 20.0, "ok": True,
     "device": "cpu: Some CPU, 1 threads", "torch": "2.13.0+cpu", "commit": "b" * 40},
    {"chapter": "01_x", "mode": "full", "scale": 0.05, "wall_s": 9.0, "ok": True,
     "device": "cpu: Some CPU, 1 threads", "torch": "2.13.0+cpu", "commit": "c" * 40}]}


def _t4(monkeypatch):
    """A T4: bfloat16 only through emulation."""
    monkeypatch.setattr(torch.cuda, "is_bf16_supported",
                        lambda including_emulation=True: including_emulation)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Tesla T4")


def test_bf16_only_where_native(monkeypatch):
    _t4(monkeypatch)
    assert not dev.bf16_native("cuda") and dev.compute_dtype("cuda") == torch.float16
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)
    assert dev.bf16_native("cuda") and dev.compute_dtype("cuda") == torch.bfloat16
    assert dev.bf16_native("cpu") and dev.compute_dtype("cpu") == torch.bfloat16


def test_fast_mode_says_nothing(capsys):
    assert dev.full_mode_plan("04_nope", False, 1.0, "cpu", timings=T) is None
    assert capsys.readouterr().out == ""


def test_full_mode_quotes_the_measured_times_with_their_devices(capsys):
    text = dev.full_mode_plan("04_nope", True, 0.01, "cpu", what="the paper's probe",
                              timings=T)
    assert capsys.readouterr().out.strip() == text
    assert text.startswith("04_nope, full mode at SCALE = 0.01: the paper's probe")
    assert "61 s for the whole notebook at SCALE = 0.05 on cuda: NVIDIA H100" in text
    assert "300 s for the whole notebook at SCALE = 0.01 on cpu: Some CPU" in text
    assert "20 s" not in text and "9 s" not in text          # fast mode, another chapter
    assert "here (cpu): expect about 300 s, as measured on cpu: Some CPU" in text
    # another SCALE: the nearest measurement, said to be at its own SCALE
    text = dev.full_mode_plan("04_nope", True, 1.0, "cpu", timings=T)
    assert "not measured at SCALE = 1; at SCALE = 0.01 it took 300 s" in text


def test_full_mode_on_a_t4_says_so_and_invents_nothing(monkeypatch, capsys):
    _t4(monkeypatch)
    text = dev.full_mode_plan("04_nope", True, 0.05, "cuda", timings=T)
    assert "here (cuda: Tesla T4): expect about 61 s, as measured on cuda: NVIDIA H100" in text
    assert "no native bfloat16" in text
    text = dev.full_mode_plan("01_x", True, 0.05, "cuda", timings=T)
    assert "none measured on a CUDA like this one" in text
    text = dev.full_mode_plan("09_new", True, 0.05, "cpu", timings=T)
    assert "no measured time of this chapter's full mode is stored yet" in text
    with pytest.raises(ValueError):
        dev.full_mode_plan("04_nope", True, 0.0, "cpu", timings=T)
