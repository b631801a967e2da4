"""Causal attention with tiny heads, computed row by row in C (chapter 2's trainer).

At the paper's Table 1 size (d = 8, 4 heads: dh = 2, contexts of 1,024) nearly all of a
training step is attention, and PyTorch's fused CPU kernel spends it on blocks built
for large heads. Here each query row is one pass over its prefix of keys, with the
scores in a row buffer that stays in the L1 cache: forward saves the output and the
row's log-sum-exp; backward recomputes the probabilities (as flash attention does), so
no (T, T) tensor ever exists. The kernel reads q, k and v straight from the output of
the QKV projection, (R, T, 3, H, dh), and writes the heads' outputs as (R, T, H, dh),
the layout the output projection reads: no permuted copies. In float32 the exponential
is a vectorised polynomial (:data:`_SOURCE`, ``fexp2``; relative error 1.3e-9, below
float's rounding); in float64 it is the C library's ``exp``. Heads are split over
``torch.get_num_threads()`` threads (ctypes releases the GIL during each call).

The C source below is compiled once per machine with the system's C compiler (``cc``;
``LNCOURSE_CC`` overrides) and loaded with ctypes; where none is found,
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

__all__ = ["causal_attention", "qkv_attention", "kernel_available", "kernel_applies", "HEAD_SIZES"]

# One C function per dtype and head size: REAL is float or double. Each head is copied
# into rows (dh, T), so each inner loop runs over contiguous key positions.
_SOURCE = r"""
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
/* 2^x in float for x <= 0: x = k + f with k = rint(x), 2^f for |f| <= 1/2 by its Taylor
   polynomial of degree 7 (relative error 1.3e-9, below float's rounding of 6e-8), and k
   added to the exponent. Below -126 it returns 2^-126, about 1e-38 (the terms it meets
   there are negligible in a sum that is at least 1). Vectorises: no table, no branch. */
static inline float fexp2(float x) {
  x = x < -126.0f ? -126.0f : x;
  float k = rintf(x), f = x - k;
  float p = 1.5252733804059840e-05f;
  p = p * f + 1.5403530393381606e-04f; p = p * f + 1.3333558146428443e-03f;
  p = p * f + 9.6181291076284772e-03f; p = p * f + 5.5504108664821580e-02f;
  p = p * f + 2.4022650695910071e-01f; p = p * f + 6.9314718055994531e-01f;
  p = p * f + 1.0f;
  union { float f; int32_t i; } u = {p};
  u.i += (int32_t)k << 23;
  return u.f;
}
/* One head, its coordinates as rows of T: Q, K, V, O, G (dh, T). Forward saves the log
   (base e for double, base 2 for float) of each row's sum; backward recomputes the
   probabilities. EXP is e^x (double) or 2^x (float: the queries carry log2 e). */
#define DEF(NAME, REAL, EXP, LOG, LOGE, DH)                                              \
static __attribute__((noinline)) void NAME##_head_fwd(long T, REAL scale,               \
    const REAL *restrict Q, const REAL *restrict K, const REAL *restrict V,              \
    REAL *restrict O, REAL *restrict lse, REAL *restrict s) {                            \
  for (long i = 0; i < T; i++) {                                                         \
    long m = i + 1; REAL qc[DH], acc[DH], mx = -INFINITY, l = 0;                         \
    for (int c = 0; c < DH; c++) { qc[c] = Q[c * T + i] * (scale * LOGE); acc[c] = 0; }   \
    for (long j = 0; j < m; j++) {                                                       \
      REAL x = 0;                                                                        \
      for (int c = 0; c < DH; c++) x += qc[c] * K[c * T + j];                            \
      s[j] = x; mx = x > mx ? x : mx;                                                    \
    }                                                                                    \
    for (long j = 0; j < m; j++) {                                                       \
      REAL p = EXP(s[j] - mx); l += p;                                                   \
      for (int c = 0; c < DH; c++) acc[c] += p * V[c * T + j];                           \
    }                                                                                    \
    for (int c = 0; c < DH; c++) O[c * T + i] = acc[c] / l;                              \
    lse[i] = mx + LOG(l);                                                                \
  }                                                                                      \
}                                                                                        \
static __attribute__((noinline)) void NAME##_head_bwd(long T, REAL scale,               \
    const REAL *restrict Q, const REAL *restrict K, const REAL *restrict V,              \
    const REAL *restrict G, const REAL *restrict Dv, const REAL *restrict lse,           \
    REAL *restrict GQ, REAL *restrict GK, REAL *restrict GV) {                           \
  for (long i = 0; i < T; i++) {                                                         \
    long m = i + 1; REAL D = Dv[i], L = lse[i], qr[DH], qc[DH], gc[DH], acc[DH];         \
    for (int c = 0; c < DH; c++) {                                                       \
      qr[c] = Q[c * T + i]; qc[c] = qr[c] * (scale * LOGE); gc[c] = G[c * T + i]; acc[c] = 0; } \
    for (long j = 0; j < m; j++) {                                                       \
      REAL x = 0, dp = 0;                                                                \
      for (int c = 0; c < DH; c++) { x += qc[c] * K[c * T + j]; dp += gc[c] * V[c * T + j]; } \
      REAL p = EXP(x - L), ds = p * (dp - D);                                            \
      for (int c = 0; c < DH; c++) {                                                     \
        acc[c] += ds * K[c * T + j]; GK[c * T + j] += ds * qr[c];                        \
        GV[c * T + j] += p * gc[c]; }                                                    \
    }                                                                                    \
    for (int c = 0; c < DH; c++) GQ[c * T + i] = acc[c] * scale;                         \
  }                                                                                      \
}                                                                                        \
/* Heads n0 <= n < n1 (n = mb H + h) of qkv (MB, T, 3, H, DH); o, go (MB, T, H, DH);     \
   lse (MB H, T); gqkv like qkv, every entry written. */                                 \
void NAME##_fwd(long n0, long n1, long T, long H, REAL scale, const REAL *qkv,           \
                REAL *o, REAL *lse) {                                                    \
  REAL *buf = malloc(sizeof(REAL) * (4 * DH + 1) * T);                                   \
  REAL *Q = buf, *K = buf + DH * T, *V = buf + 2 * DH * T, *O = buf + 3 * DH * T,        \
       *s = buf + 4 * DH * T;                                                            \
  long st = 3 * H * DH, so = H * DH;                                                     \
  for (long n = n0; n < n1; n++) {                                                       \
    const REAL *src = qkv + (n / H) * T * st + (n % H) * DH;                             \
    for (long t = 0; t < T; t++) for (int c = 0; c < DH; c++) {                          \
      Q[c * T + t] = src[t * st + c]; K[c * T + t] = src[t * st + so + c];               \
      V[c * T + t] = src[t * st + 2 * so + c]; }                                         \
    NAME##_head_fwd(T, scale, Q, K, V, O, lse + n * T, s);                               \
    REAL *dst = o + (n / H) * T * so + (n % H) * DH;                                     \
    for (long t = 0; t < T; t++) for (int c = 0; c < DH; c++) dst[t * so + c] = O[c * T + t]; \
  }                                                                                      \
  free(buf);                                                                             \
}                                                                                        \
void NAME##_bwd(long n0, long n1, long T, long H, REAL scale, const REAL *qkv,           \
                const REAL *o, const REAL *lse, const REAL *go, REAL *gqkv) {            \
  REAL *buf = malloc(sizeof(REAL) * (7 * DH + 1) * T);                                   \
  REAL *Q = buf, *K = buf + DH * T, *V = buf + 2 * DH * T, *G = buf + 3 * DH * T,        \
       *GQ = buf + 4 * DH * T, *GK = buf + 5 * DH * T, *GV = buf + 6 * DH * T,           \
       *Dv = buf + 7 * DH * T;                                                           \
  long st = 3 * H * DH, so = H * DH;                                                     \
  for (long n = n0; n < n1; n++) {                                                       \
    long a = (n / H) * T * st + (n % H) * DH, b = (n / H) * T * so + (n % H) * DH;       \
    const REAL *src = qkv + a, *Og = o + b, *Gg = go + b;                                \
    for (long t = 0; t < T; t++) {                                                       \
      REAL D = 0;                                                                        \
      for (int c = 0; c < DH; c++) {                                                     \
        Q[c * T + t] = src[t * st + c]; K[c * T + t] = src[t * st + so + c];             \
        V[c * T + t] = src[t * st + 2 * so + c]; G[c * T + t] = Gg[t * so + c];          \
        D += Gg[t * so + c] * Og[t * so + c]; }                                          \
      Dv[t] = D; }                                                                       \
    memset(GK, 0, sizeof(REAL) * 2 * DH * T);                                            \
    NAME##_head_bwd(T, scale, Q, K, V, G, Dv, lse + n * T, GQ, GK, GV);                  \
    REAL *dst = gqkv + a;                                                                \
    for (long t = 0; t < T; t++) for (int c = 0; c < DH; c++) {                          \
      dst[t * st + c] = GQ[c * T + t]; dst[t * st + so + c] = GK[c * T + t] * scale;     \
      dst[t * st + 2 * so + c] = GV[c * T + t]; }                                        \
  }                                                                                      \
  free(buf);                                                                             \
}
#define BOTH(DH) DEF(attn32_##DH, float, fexp2, log2f, 1.4426950408889634f, DH)          \
                 DEF(attn64_##DH, double, exp, log, 1.0, DH)
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
        key = hashlib.sha256((_SOURCE + " ".join(_FLAGS) + "qkv-layout" + _cpu_model()
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
