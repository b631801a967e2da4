"""Causal attention with tiny heads, computed row by row in C (chapter 2's trainer).

At the paper's Table 1 size (d = 8, 4 heads: dh = 2, contexts of 1,024) nearly all of a
training step is attention, and PyTorch's fused CPU kernel spends it on blocks built
for large heads. Here each query row is one pass over its prefix of keys, with the
scores in a row buffer that stays in the L1 cache: forward saves the output and the
row's log-sum-exp; backward recomputes the probabilities (as flash attention does), so
no (T, T) tensor ever exists. The kernel reads q, k and v straight from the output of
the QKV projection, (R, T, 3, H, dh), and writes the heads' outputs as (R, T, H, dh),
the layout the output projection reads: no permuted copies. In float32 the exponential
is a vectorised polynomial (``fexp2`` in ``kernel.c``; relative error 2.3e-7, four
roundings of float); in float64 it is the C library's ``exp``. With AVX-512, float heads of size 2
(Table 1's) run loops written with 16-lane intrinsics. Heads are split over
``torch.get_num_threads()`` threads (ctypes releases the GIL during each call).

The C source below is compiled once per machine with the system's C compiler (``cc``;
``LNCOURSE_CC`` overrides; ``LNCOURSE_PORTABLE_KERNEL=1`` compiles the portable build,
the same code on every CPU, see ``_PORTABLE_FLAGS``) and loaded with ctypes; where none is found,
:func:`causal_attention` falls back to ``F.scaled_dot_product_attention``, the same
function (tests hold them equal).

Shapes: R rows of a batch (models x batch), T positions, H heads, dh head size.
"""

from __future__ import annotations

import ctypes
import hashlib
from concurrent.futures import ThreadPoolExecutor
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

# the C source, shipped beside this module as package data
_SOURCE = (Path(__file__).resolve().parent / "kernel.c").read_text(encoding="utf-8")

__all__ = ["causal_attention", "qkv_attention", "kernel_available", "kernel_applies",
           "portable_build", "HEAD_SIZES"]

# -ffast-math lets GCC call glibc's vector exp (libmvec); the loops never meet an
# infinity or a NaN (each row reads only its own prefix). It is given to the compile
# step only: linked with -ffast-math, a library sets flush-to-zero for the whole process
# when it is loaded (GCC's crtfastmath.o), and denormal numbers elsewhere would become 0.
_FLAGS = ["-O3", "-march=native", "-ffast-math", "-fPIC"]
# LNCOURSE_PORTABLE_KERNEL=1 compiles the build any x86-64 (or other) CPU runs the same
# way: no -march=native (so no AVX-512 loops, no FMA contraction chosen for this CPU), no
# -ffast-math (no libmvec exp, no reassociated sums), -O2. The tests run the replays a
# second time with it (scripts/test.sh), beside PyTorch's kernels held to AVX2, to stand
# in for a CPU without AVX-512. It has a cache name of its own: the two builds never mix.
# It is slower: 0.24 s of CPU against 0.019 s for the forward pass of 24 Table 1 heads
# over 1,024 positions (Xeon with AVX-512; -O3 gives the same 0.24 s).
_PORTABLE_FLAGS = ["-O2", "-fPIC"]
_LIBS = (["-lm", "-lmvec"], ["-lm"])     # without libmvec: scalar exp
_LIB: ctypes.CDLL | None | bool = None   # None: not tried yet; False: not available


def portable_build() -> bool:
    """Whether this process uses the kernel's portable build (LNCOURSE_PORTABLE_KERNEL)."""
    return os.environ.get("LNCOURSE_PORTABLE_KERNEL", "") not in ("", "0")


_portable = portable_build


def _flags() -> list[str]:
    return _PORTABLE_FLAGS if _portable() else _FLAGS


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:   # the model and its instruction sets
            lines = [ln for ln in f if ln.startswith(("model name", "flags"))]
        return "".join(dict.fromkeys(lines))
    except OSError:
        return platform.processor()


def _load() -> ctypes.CDLL | None:
    """Compile (once per machine, cached) and load the kernel; None if impossible."""
    global _LIB
    if _LIB is None:
        _LIB = False
        if os.environ.get("LNCOURSE_NO_KERNEL") or sys.platform == "win32":
            return None
        flags = _flags()
        key = hashlib.sha256((_SOURCE + " ".join(flags) + "qkv-layout" + _cpu_model()
                              + platform.machine()).encode()).hexdigest()[:16]
        cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "lncourse"
        lib = cache / f"attn_{'portable_' if _portable() else ''}{key}.so"
        try:
            if not lib.exists():
                cache.mkdir(parents=True, exist_ok=True)
                with tempfile.TemporaryDirectory() as tmp:
                    src, obj, out = (Path(tmp) / f"attn.{x}" for x in ("c", "o", "so"))
                    src.write_text(_SOURCE)
                    cc = os.environ.get("LNCOURSE_CC", "cc")
                    if subprocess.run([cc, *flags, "-c", str(src), "-o", str(obj)],
                                      capture_output=True).returncode:
                        return None
                    if not any(subprocess.run([cc, "-shared", str(obj), "-o", str(out),
                                               *libs], capture_output=True).returncode == 0
                               for libs in _LIBS):
                        return None
                    os.replace(out, lib)      # atomic: concurrent builds do not collide
            _LIB = ctypes.CDLL(str(lib))
        except OSError:
            return None
    return _LIB or None


def kernel_available() -> bool:
    """Whether the compiled kernel can be used on this machine."""
    return _load() is not None


def kernel_applies(q: Tensor) -> bool:
    """Whether the kernel computes attention for queries like ``q`` (..., dh): on a CPU,
    in float32 or float64, with a head size it is compiled for, where it is available."""
    return (q.device.type == "cpu" and q.dtype in (torch.float32, torch.float64)
            and q.shape[-1] in HEAD_SIZES and _load() is not None)


def _ptr(t: Tensor):
    return ctypes.c_void_p(t.data_ptr())


HEAD_SIZES = (1, 2, 4, 8)      # the head sizes the kernel is compiled for
_POOL: ThreadPoolExecutor | None = None


def _call(name: str, qkv: Tensor, H: int, *tensors: Tensor) -> None:
    """Run the kernel ``name`` on every head of ``qkv`` (R, T, 3, H, dh), the heads split
    into one contiguous range per thread of ``torch.get_num_threads()``."""
    global _POOL
    R, T, _, _, dh = qkv.shape
    real = ctypes.c_float if qkv.dtype == torch.float32 else ctypes.c_double
    prefix = "attn32" if qkv.dtype == torch.float32 else "attn64"
    fn = getattr(_load(), f"{prefix}_{dh}_{name}")
    args = (ctypes.c_long(T), ctypes.c_long(H), real(dh ** -0.5), _ptr(qkv),
            *[_ptr(t) for t in tensors])
    N, workers = R * H, max(1, min(torch.get_num_threads(), R * H))
    cuts = [N * w // workers for w in range(workers + 1)]
    if workers == 1:
        fn(ctypes.c_long(0), ctypes.c_long(N), *args)
        return
    if _POOL is None or _POOL._max_workers < workers:
        _POOL = ThreadPoolExecutor(workers)
    list(_POOL.map(lambda w: fn(ctypes.c_long(cuts[w]), ctypes.c_long(cuts[w + 1]), *args),
                   range(workers)))


class _QKVAttention(torch.autograd.Function):
    """qkv (R, T, 3, H, dh), contiguous -> the heads' outputs (R, T, H, dh)."""

    @staticmethod
    def forward(ctx, qkv, H):
        R, T, _, _, dh = qkv.shape
        o = torch.empty(R, T, H, dh, dtype=qkv.dtype)
        lse = torch.empty(R * H, T, dtype=qkv.dtype)
        _call("fwd", qkv, H, o, lse)
        ctx.save_for_backward(qkv, o, lse)
        ctx.H = H
        return o

    @staticmethod
    def backward(ctx, go):
        qkv, o, lse = ctx.saved_tensors
        gqkv = torch.empty_like(qkv)
        _call("bwd", qkv, ctx.H, o, lse, go.contiguous(), gqkv)
        return gqkv, None


def qkv_attention(qkv: Tensor, use_kernel: bool = True) -> Tensor:
    """Causal attention of the heads packed in ``qkv`` (R, T, 3, H, dh) (the QKV
    projection's output, viewed) -> (R, T, H, dh). The kernel where it applies, else
    ``scaled_dot_product_attention``. Differentiable either way."""
    if qkv.dim() != 5 or qkv.shape[2] != 3:
        raise ValueError(f"qkv must be (R, T, 3, H, dh), got {tuple(qkv.shape)}")
    if use_kernel and kernel_applies(qkv):
        return _QKVAttention.apply(qkv.contiguous(), qkv.shape[3])
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))             # (R, H, T, dh)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2)


def causal_attention(q: Tensor, k: Tensor, v: Tensor, use_kernel: bool = True) -> Tensor:
    """softmax(q k^T / sqrt(dh) + causal mask) v: q, k, v (N, T, dh) -> (N, T, dh).

    With the compiled kernel (CPU, float32 or float64) when available and ``use_kernel``;
    otherwise PyTorch's ``scaled_dot_product_attention``. Differentiable either way.
    """
    if q.shape != k.shape or q.shape != v.shape or q.dim() != 3:
        raise ValueError(f"q, k, v must share one shape (N, T, dh), got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    if use_kernel and kernel_applies(q):
        return qkv_attention(torch.stack([q, k, v], 2)[:, :, :, None])[:, :, 0]
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)
