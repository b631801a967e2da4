"""Causal attention with tiny heads, computed row by row in C (chapter 2's trainer).

At the paper's Table 1 size (d = 8, 4 heads: dh = 2, contexts of 1,024) nearly all of a
training step is attention, and PyTorch's fused CPU kernel spends it on blocks built
for large heads. Here each query row is one pass over its prefix of keys, with the
scores in a row buffer that stays in the L1 cache: forward saves the output and the
row's log-sum-exp; backward recomputes the probabilities (as flash attention does), so
no (T, T) tensor ever exists. The C source below is compiled once per machine with the
system's C compiler (``cc``; ``LNCOURSE_CC`` overrides) and loaded with ctypes; where
none is found, :func:`causal_attention` falls back to
``F.scaled_dot_product_attention``, the same function (tests hold them equal).

Shapes: N independent heads (models x batch x heads), T positions, dh head size;
q, k, v: (N, T, dh).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["causal_attention", "kernel_available", "kernel_applies", "HEAD_SIZES"]

# One C function per dtype: REAL is float or double. Layout (N, dh, T): a head's
# coordinates are rows, so each inner loop runs over contiguous key positions.
_SOURCE = r"""
#include <math.h>
/* Head size DH is a compile-time constant, so the loops over it unroll and each row is
   two passes over its keys forward (scores and their maximum; exp, sum and the
   weighted values) and one backward (everything at once). */
#define DEF(NAME, REAL, EXP, LOG, DH)                                                 \
void NAME##_fwd(long N, long T, REAL scale, const REAL *restrict q, const REAL *restrict k,            \
                const REAL *restrict v, REAL *restrict o, REAL *restrict lse, REAL *restrict s) {                        \
  for (long n = 0; n < N; n++) {                                                      \
    const REAL *restrict K = k + n * DH * T, *restrict V = v + n * DH * T, *restrict Q = q + n * DH * T;         \
    REAL *restrict O = o + n * DH * T;                                                         \
    for (long i = 0; i < T; i++) {                                                    \
      long m = i + 1; REAL qc[DH], acc[DH], mx = -INFINITY, l = 0;                    \
      for (int c = 0; c < DH; c++) { qc[c] = Q[c * T + i] * scale; acc[c] = 0; }      \
      for (long j = 0; j < m; j++) {                                                  \
        REAL x = 0;                                                                   \
        for (int c = 0; c < DH; c++) x += qc[c] * K[c * T + j];                       \
        s[j] = x; mx = x > mx ? x : mx;                                               \
      }                                                                               \
      for (long j = 0; j < m; j++) {                                                  \
        REAL p = EXP(s[j] - mx); l += p;                                              \
        for (int c = 0; c < DH; c++) acc[c] += p * V[c * T + j];                      \
      }                                                                               \
      for (int c = 0; c < DH; c++) O[c * T + i] = acc[c] / l;                         \
      lse[n * T + i] = mx + LOG(l);                                                   \
    }                                                                                 \
  }                                                                                   \
}                                                                                     \
void NAME##_bwd(long N, long T, REAL scale, const REAL *restrict q, const REAL *restrict k,            \
                const REAL *restrict v, const REAL *restrict o, const REAL *restrict lse, const REAL *restrict go,       \
                REAL *restrict gq, REAL *restrict gk, REAL *restrict gv) {                                      \
  for (long n = 0; n < N; n++) {                                                      \
    long off = n * DH * T;                                                            \
    const REAL *restrict K = k + off, *restrict V = v + off, *restrict Q = q + off, *restrict O = o + off, *restrict G = go + off; \
    REAL *restrict GQ = gq + off, *restrict GK = gk + off, *restrict GV = gv + off;                              \
    for (long i = 0; i < T; i++) {                                                    \
      long m = i + 1; REAL D = 0, L = lse[n * T + i], qc[DH], gc[DH], acc[DH];        \
      for (int c = 0; c < DH; c++) {                                                  \
        qc[c] = Q[c * T + i] * scale; gc[c] = G[c * T + i]; acc[c] = 0;               \
        D += gc[c] * O[c * T + i]; }                                                  \
      for (long j = 0; j < m; j++) {                                                  \
        REAL x = 0, dp = 0;                                                           \
        for (int c = 0; c < DH; c++) { x += qc[c] * K[c * T + j]; dp += gc[c] * V[c * T + j]; } \
        REAL p = EXP(x - L), ds = p * (dp - D);                                       \
        for (int c = 0; c < DH; c++) {                                                \
          acc[c] += ds * K[c * T + j]; GK[c * T + j] += ds * qc[c];                   \
          GV[c * T + j] += p * gc[c]; }                                               \
      }                                                                               \
      for (int c = 0; c < DH; c++) GQ[c * T + i] = acc[c] * scale;                    \
    }                                                                                 \
  }                                                                                   \
}
#define BOTH(DH) DEF(attn32_##DH, float, expf, logf, DH) DEF(attn64_##DH, double, exp, log, DH)
BOTH(1) BOTH(2) BOTH(4) BOTH(8)
"""
# -ffast-math lets GCC call glibc's vector exp (libmvec); the loops never meet an
# infinity or a NaN (each row reads only its own prefix). It is given to the compile
# step only: linked with -ffast-math, a library sets flush-to-zero for the whole process
# when it is loaded (GCC's crtfastmath.o), and denormal numbers elsewhere would become 0.
_FLAGS = ["-O3", "-march=native", "-ffast-math", "-fPIC"]
_LIBS = (["-lm", "-lmvec"], ["-lm"])     # without libmvec: scalar exp
_LIB: ctypes.CDLL | None | bool = None   # None: not tried yet; False: not available


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
        key = hashlib.sha256((_SOURCE + " ".join(_FLAGS) + "split-link" + _cpu_model()
                              + platform.machine()).encode()).hexdigest()[:16]
        cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "lncourse"
        lib = cache / f"attn_{key}.so"
        try:
            if not lib.exists():
                cache.mkdir(parents=True, exist_ok=True)
                with tempfile.TemporaryDirectory() as tmp:
                    src, obj, out = (Path(tmp) / f"attn.{x}" for x in ("c", "o", "so"))
                    src.write_text(_SOURCE)
                    cc = os.environ.get("LNCOURSE_CC", "cc")
                    if subprocess.run([cc, *_FLAGS, "-c", str(src), "-o", str(obj)],
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


def _call(name: str, dtype: torch.dtype, *args) -> None:
    lib = _load()
    prefix = {torch.float32: "attn32", torch.float64: "attn64"}[dtype]
    real = ctypes.c_float if dtype == torch.float32 else ctypes.c_double
    N, T, dh, scale, *tensors = args
    getattr(lib, f"{prefix}_{dh}_{name}")(ctypes.c_long(N), ctypes.c_long(T), real(scale),
                                           *[_ptr(t) for t in tensors])


class _CausalAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v):                       # (N, dh, T) each, contiguous
        N, dh, T = q.shape
        o = torch.empty_like(q)
        lse = torch.empty(N, T, dtype=q.dtype)
        row = torch.empty(T, dtype=q.dtype)                  # the scores of one row
        _call("fwd", q.dtype, N, T, dh, dh ** -0.5, q, k, v, o, lse, row)
        ctx.save_for_backward(q, k, v, o, lse)
        return o

    @staticmethod
    def backward(ctx, go):
        q, k, v, o, lse = ctx.saved_tensors
        N, dh, T = q.shape
        go = go.contiguous()
        gq, gk, gv = torch.empty_like(q), torch.zeros_like(k), torch.zeros_like(v)
        _call("bwd", q.dtype, N, T, dh, dh ** -0.5, q, k, v, o, lse, go, gq, gk, gv)
        return gq, gk, gv


def causal_attention(q: Tensor, k: Tensor, v: Tensor, use_kernel: bool = True) -> Tensor:
    """softmax(q k^T / sqrt(dh) + causal mask) v: q, k, v (N, T, dh) -> (N, T, dh).

    With the compiled kernel (CPU, float32 or float64) when available and ``use_kernel``;
    otherwise PyTorch's ``scaled_dot_product_attention``. Differentiable either way.
    """
    if q.shape != k.shape or q.shape != v.shape or q.dim() != 3:
        raise ValueError(f"q, k, v must share one shape (N, T, dh), got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    if use_kernel and kernel_applies(q):
        qt, kt, vt = (x.transpose(1, 2).contiguous() for x in (q, k, v))
        return _CausalAttention.apply(qt, kt, vt).transpose(1, 2)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)
