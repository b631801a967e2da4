"""Cheap probe features from the frozen random NoPE model (chapter 4).

:func:`lncourse.evidence.nope.probe.probe_features` (the path the first stored probe used) keeps
64 random positions of each sequence. Here every position is kept, the sequences go
through the frozen model in batches under ``torch.inference_mode``, and one pass through
the blocks gives the features of every requested depth at once. ``dtype`` may lower the
precision of the forward pass (bfloat16); ``benchmarks/nope_features.py`` measures the
speed of each path side by side and how far bfloat16 moves the features and the probe.

The inputs of sequence ``index`` are those of :func:`lncourse.evidence.nope.probe.sequence_inputs`
(the same random stream), so both paths see the same vectors. Shapes: B sequences per
batch, T positions, d ``d_model``, D requested depths.
"""

from __future__ import annotations

from typing import Iterator

import torch
from torch import Tensor

from lncourse.evidence.nope.probe import stream_seed

__all__ = ["READS", "sequence_vectors", "feature_batches", "all_features"]

READS = ("ln_final", "resid")   # after the final LayerNorm (the paper's), or before it


def sequence_vectors(seed: int, index: int, seq_len: int, d_model: int, sigma: float) -> Tensor:
    """The inputs (T, d) ~ N(0, σ²) of sequence ``index`` of model ``seed``: the same
    vectors as :func:`lncourse.evidence.nope.probe.sequence_inputs`."""
    gen = torch.Generator().manual_seed(stream_seed(seed, index, 1))
    return torch.randn(seq_len, d_model, generator=gen) * sigma


def _check(model, depths, read: str, batch: int) -> list[int]:
    K = len(model.blocks)
    depths = [int(k) for k in depths]
    if not depths or any(not 0 <= k <= K for k in depths):
        raise ValueError(f"depths must lie in [0, {K}], got {depths}")
    if read not in READS:
        raise ValueError(f"read must be one of {READS}, got {read!r}")
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch must be a positive integer, got {batch!r}")
    return depths


def feature_batches(model, seed: int, indices, sigma: float, depths=None,
                    read: str = "ln_final", batch: int = 8,
                    dtype: torch.dtype = torch.float32) -> Iterator[tuple[Tensor, Tensor]]:
    """Yield, per ``batch`` sequences of ``indices``: features (D, B * T, d) in float32 and
    positions (B * T,), sequence-major, every position of every sequence.

    ``read``: ``"ln_final"`` reads the model's final LayerNorm of the residual stream
    after k blocks (what :func:`lncourse.evidence.nope.probe.probe_features` reads),
    ``"resid"`` the residual stream itself. ``depths`` (default 0 ... K) are computed in
    one pass through the blocks, up to the deepest. ``dtype`` is the forward pass's
    precision (the features come back in float32).
    """
    depths = _check(model, range(len(model.blocks) + 1) if depths is None else depths,
                    read, batch)
    cfg = model.cfg
    T, d = cfg.block_size, cfg.d_model
    device = next(model.parameters()).device
    indices = [int(i) for i in indices]
    last = max(depths)
    with torch.inference_mode(), torch.autocast(device.type, dtype=dtype,
                                                enabled=dtype != torch.float32):
        for b0 in range(0, len(indices), batch):
            chunk = indices[b0:b0 + batch]
            x = torch.stack([sequence_vectors(seed, i, T, d, sigma) for i in chunk]).to(device)
            out = {}

            def keep(k: int, z: Tensor) -> None:
                if k in depths:
                    h = model.ln_final(z) if read == "ln_final" else z
                    out[k] = h.float().flatten(0, 1).cpu()            # (B * T, d)

            keep(0, x)
            for k, block in enumerate(model.blocks[:last], start=1):
                x = block(x)
                keep(k, x)
            pos = torch.arange(T).repeat(len(chunk))                  # (B * T,)
            yield torch.stack([out[k] for k in depths]), pos


def all_features(model, seed: int, indices, sigma: float, depths=None, read: str = "ln_final",
                 batch: int = 8, dtype: torch.dtype = torch.float32) -> tuple[Tensor, Tensor]:
    """:func:`feature_batches` concatenated: (D, N * T, d) and (N * T,). Mind the memory:
    N * T * D * d * 4 bytes (1,600 x 512 x 13 x 768 would be 33 GB; stream instead)."""
    parts = list(feature_batches(model, seed, indices, sigma, depths, read, batch, dtype))
    return torch.cat([p[0] for p in parts], 1), torch.cat([p[1] for p in parts])
