/* The C source of chapter 2's attention kernel: lncourse/evidence/selectability/kernel.py
   compiles and loads it (with the course's flags, or without -march=native and
   -ffast-math in its portable build).

   One C function per dtype and head size: REAL is float or double. Each head is copied
   into rows (dh, T), so each inner loop runs over contiguous key positions. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#define ROWS 2
/* 2^x in float: x = k + f with k = rint(x), 2^f for |f| <= 1/2 by a degree-5 polynomial
   fitted for relative error (7.5e-8; 2.3e-7, four float roundings, evaluated in float), and k
   added to the exponent. Below -126 it returns 2^-126, about 1e-38 (the terms it meets
   there are negligible in a sum that is at least 2^-64). No table, no branch: it
   vectorises. */
static inline float fexp2(float x) {
  x = x < -126.0f ? -126.0f : x;
  float k = rintf(x), f = x - k;
  float p = 1.3276471959909608e-03f;
  p = p * f + 9.6755415026315399e-03f; p = p * f + 5.5507132750649633e-02f;
  p = p * f + 2.4022119720751411e-01f; p = p * f + 6.9314696706288403e-01f;
  p = p * f + 1.0000000716553015f;
  union { float f; int32_t i; } u = {p};
  u.i += (int32_t)k << 23;
  return u.f;
}
#if defined(__AVX512F__)
#include <immintrin.h>
/* Float, dh = 2, with AVX-512 (the Table 1 heads): the loops of attn32_2_head_* written
   with 16-lane intrinsics, 2^x as the polynomial of fexp2 scaled by vscalefps (which
   also gives 0 below the range: no clamp), the rows' tails masked. */
static inline __m512 vexp2(__m512 x) {
  __m512 k = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 f = _mm512_sub_ps(x, k), p = _mm512_set1_ps(1.3276471959909608e-03f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6755415026315399e-03f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5507132750649633e-02f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022119720751411e-01f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314696706288403e-01f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0000000716553015f));
  return _mm512_scalef_ps(p, k);
}
static inline __mmask16 tail(long left) { return left >= 16 ? 0xFFFF : (__mmask16)((1u << left) - 1); }
static void x512_2_head_fwd(long T, float scale, const float *restrict Q, const float *restrict K,
    const float *restrict V, const float *restrict KN, float *restrict O, float *restrict lse,
    float *restrict s) {
  const float c = scale * 1.4426950408889634f;
  for (long i = 0; i < T; i++) {
    long m = i + 1;
    float q0 = Q[i] * c, q1 = Q[T + i] * c, U = sqrtf(q0 * q0 + q1 * q1) * KN[i];
    float sii = q0 * K[i] + q1 * K[T + i], mx = U, l, a0, a1;
    if (U - sii <= 64) {
      __m512 vq0 = _mm512_set1_ps(q0), vq1 = _mm512_set1_ps(q1), nU = _mm512_set1_ps(-U);
      __m512 vl = _mm512_setzero_ps(), va0 = vl, va1 = vl;
      for (long j = 0; j < m; j += 16) {
        __mmask16 k = tail(m - j);
        __m512 x = _mm512_fmadd_ps(vq1, _mm512_maskz_loadu_ps(k, K + T + j),
                   _mm512_fmadd_ps(vq0, _mm512_maskz_loadu_ps(k, K + j), nU));
        __m512 p = _mm512_maskz_mov_ps(k, vexp2(x));
        vl = _mm512_add_ps(vl, p);
        va0 = _mm512_fmadd_ps(p, _mm512_maskz_loadu_ps(k, V + j), va0);
        va1 = _mm512_fmadd_ps(p, _mm512_maskz_loadu_ps(k, V + T + j), va1);
      }
      l = _mm512_reduce_add_ps(vl); a0 = _mm512_reduce_add_ps(va0); a1 = _mm512_reduce_add_ps(va1);
    } else {                           /* two passes: the maximum, then the sums */
      mx = -INFINITY; l = a0 = a1 = 0;
      for (long j = 0; j < m; j++) { s[j] = q0 * K[j] + q1 * K[T + j]; mx = s[j] > mx ? s[j] : mx; }
      for (long j = 0; j < m; j++) { float p = fexp2(s[j] - mx); l += p; a0 += p * V[j]; a1 += p * V[T + j]; }
    }
    O[i] = a0 / l; O[T + i] = a1 / l; lse[i] = mx + log2f(l);
  }
}
static void x512_2_head_bwd(long T, float scale, const float *restrict Q, const float *restrict K,
    const float *restrict V, const float *restrict G, const float *restrict Dv,
    const float *restrict lse, float *restrict GQ, float *restrict GK, float *restrict GV) {
  const float c = scale * 1.4426950408889634f;
  for (long i = 0; i < T; i += 2) {    /* rows i, i + 1 (zeros past T: p 1, ds and p g 0) */
    int two = i + 1 < T;
    float qr0 = Q[i], qr1 = Q[T + i], qs0 = two ? Q[i + 1] : 0, qs1 = two ? Q[T + i + 1] : 0;
    float g0 = G[i], g1 = G[T + i], h0 = two ? G[i + 1] : 0, h1 = two ? G[T + i + 1] : 0;
    __m512 A0 = _mm512_set1_ps(qr0 * c), A1 = _mm512_set1_ps(qr1 * c);
    __m512 B0 = _mm512_set1_ps(qs0 * c), B1 = _mm512_set1_ps(qs1 * c);
    __m512 R0 = _mm512_set1_ps(qr0), R1 = _mm512_set1_ps(qr1);
    __m512 S0 = _mm512_set1_ps(qs0), S1 = _mm512_set1_ps(qs1);
    __m512 vg0 = _mm512_set1_ps(g0), vg1 = _mm512_set1_ps(g1);
    __m512 vh0 = _mm512_set1_ps(h0), vh1 = _mm512_set1_ps(h1);
    __m512 nL0 = _mm512_set1_ps(-lse[i]), nL1 = _mm512_set1_ps(two ? -lse[i + 1] : 0);
    __m512 nD0 = _mm512_set1_ps(-Dv[i]), nD1 = _mm512_set1_ps(two ? -Dv[i + 1] : 0);
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, b0 = a0, b1 = a0;
    long m = i + 1 + two;              /* row i sees keys <= i, row i + 1 keys <= i + 1 */
    for (long j = 0; j < m; j += 16) {
      __mmask16 k = tail(m - j), kr = tail(i + 1 - j);
      __m512 k0 = _mm512_maskz_loadu_ps(k, K + j), k1 = _mm512_maskz_loadu_ps(k, K + T + j);
      __m512 v0 = _mm512_maskz_loadu_ps(k, V + j), v1 = _mm512_maskz_loadu_ps(k, V + T + j);
      __m512 p = _mm512_maskz_mov_ps(kr, vexp2(_mm512_fmadd_ps(A1, k1, _mm512_fmadd_ps(A0, k0, nL0))));
      __m512 q = _mm512_maskz_mov_ps(k, vexp2(_mm512_fmadd_ps(B1, k1, _mm512_fmadd_ps(B0, k0, nL1))));
      __m512 dp = _mm512_mul_ps(p, _mm512_fmadd_ps(vg1, v1, _mm512_fmadd_ps(vg0, v0, nD0)));
      __m512 dq = _mm512_mul_ps(q, _mm512_fmadd_ps(vh1, v1, _mm512_fmadd_ps(vh0, v0, nD1)));
      a0 = _mm512_fmadd_ps(dp, k0, a0); a1 = _mm512_fmadd_ps(dp, k1, a1);
      b0 = _mm512_fmadd_ps(dq, k0, b0); b1 = _mm512_fmadd_ps(dq, k1, b1);
      __m512 gk0 = _mm512_fmadd_ps(dq, S0, _mm512_fmadd_ps(dp, R0, _mm512_maskz_loadu_ps(k, GK + j)));
      __m512 gk1 = _mm512_fmadd_ps(dq, S1, _mm512_fmadd_ps(dp, R1, _mm512_maskz_loadu_ps(k, GK + T + j)));
      __m512 gv0 = _mm512_fmadd_ps(q, vh0, _mm512_fmadd_ps(p, vg0, _mm512_maskz_loadu_ps(k, GV + j)));
      __m512 gv1 = _mm512_fmadd_ps(q, vh1, _mm512_fmadd_ps(p, vg1, _mm512_maskz_loadu_ps(k, GV + T + j)));
      _mm512_mask_storeu_ps(GK + j, k, gk0); _mm512_mask_storeu_ps(GK + T + j, k, gk1);
      _mm512_mask_storeu_ps(GV + j, k, gv0); _mm512_mask_storeu_ps(GV + T + j, k, gv1);
    }
    GQ[i] = _mm512_reduce_add_ps(a0) * scale; GQ[T + i] = _mm512_reduce_add_ps(a1) * scale;
    if (two) { GQ[i + 1] = _mm512_reduce_add_ps(b0) * scale; GQ[T + i + 1] = _mm512_reduce_add_ps(b1) * scale; }
  }
}
#endif
/* One head, its coordinates as rows of T: Q, K, V, O, G (dh, T). Forward saves the log
   (base e for double, base 2 for float) of each row's sum; backward recomputes the
   probabilities. EXP is e^x (double) or 2^x (float: the queries carry log2 e). A row's
   scores are shifted by a bound U >= their maximum, |q| times the largest |k| so far
   (KN, Cauchy-Schwarz), in one pass over the keys, when U exceeds the row's own score
   by at most 64 (so the sum is at least 2^-64); else by their maximum, in two passes. */
#define DEF(NAME, REAL, EXP, LOG, LOGE, DH, HEAD)                                              \
static __attribute__((noinline, unused)) void NAME##_head_fwd(long T, REAL scale,               \
    const REAL *restrict Q, const REAL *restrict K, const REAL *restrict V,              \
    const REAL *restrict KN, REAL *restrict O, REAL *restrict lse, REAL *restrict s) {   \
  for (long i = 0; i < T; i++) {                                                         \
    long m = i + 1; REAL qc[DH], acc[DH], mx = -INFINITY, l = 0, qn = 0, sii = 0;        \
    for (int c = 0; c < DH; c++) {                                                       \
      qc[c] = Q[c * T + i] * (scale * LOGE); acc[c] = 0; qn += qc[c] * qc[c];            \
      sii += qc[c] * K[c * T + i]; }                                                     \
    REAL U = sqrt(qn) * KN[i];                                                           \
    if (U - sii <= 64) {                                                                 \
      mx = U;                                                                            \
      for (long j = 0; j < m; j++) {                                                     \
        REAL x = -U;                                                                     \
        for (int c = 0; c < DH; c++) x += qc[c] * K[c * T + j];                          \
        REAL p = EXP(x); l += p;                                                         \
        for (int c = 0; c < DH; c++) acc[c] += p * V[c * T + j];                         \
      }                                                                                  \
    } else {                                                                             \
      for (long j = 0; j < m; j++) {                                                     \
        REAL x = 0;                                                                      \
        for (int c = 0; c < DH; c++) x += qc[c] * K[c * T + j];                          \
        s[j] = x; mx = x > mx ? x : mx;                                                  \
      }                                                                                  \
      for (long j = 0; j < m; j++) {                                                     \
        REAL p = EXP(s[j] - mx); l += p;                                                 \
        for (int c = 0; c < DH; c++) acc[c] += p * V[c * T + j];                         \
      }                                                                                  \
    }                                                                                    \
    for (int c = 0; c < DH; c++) O[c * T + i] = acc[c] / l;                              \
    lse[i] = mx + LOG(l);                                                                \
  }                                                                                      \
}                                                                                        \
static __attribute__((noinline, unused)) void NAME##_head_bwd(long T, REAL scale,               \
    const REAL *restrict Q, const REAL *restrict K, const REAL *restrict V,              \
    const REAL *restrict G, const REAL *restrict Dv, const REAL *restrict lse,           \
    REAL *restrict GQ, REAL *restrict GK, REAL *restrict GV) {                           \
  /* ROWS query rows at a time share each key's loads and its GK, GV update; rows past  \
     T are zeros (their p is 1, their ds and p g are 0). */                              \
  for (long i = 0; i < T; i += ROWS) {                                                   \
    REAL qr[ROWS][DH], qc[ROWS][DH], gc[ROWS][DH], acc[ROWS][DH], L[ROWS], D[ROWS];      \
    for (int r = 0; r < ROWS; r++) {                                                     \
      int ok = i + r < T;                                                                \
      L[r] = ok ? lse[i + r] : 0; D[r] = ok ? Dv[i + r] : 0;                             \
      for (int c = 0; c < DH; c++) {                                                     \
        qr[r][c] = ok ? Q[c * T + i + r] : 0; qc[r][c] = qr[r][c] * (scale * LOGE);      \
        gc[r][c] = ok ? G[c * T + i + r] : 0; acc[r][c] = 0; } }                         \
    for (long j = 0; j <= i; j++) {    /* the keys every row of the block sees */        \
      REAL p[ROWS], ds[ROWS];                                                            \
      for (int r = 0; r < ROWS; r++) {                                                   \
        REAL x = -L[r], dp = -D[r];                                                      \
        for (int c = 0; c < DH; c++) { x += qc[r][c] * K[c * T + j]; dp += gc[r][c] * V[c * T + j]; } \
        p[r] = EXP(x); ds[r] = p[r] * dp; }                                              \
      for (int c = 0; c < DH; c++) {                                                     \
        REAL gk = GK[c * T + j], gv = GV[c * T + j];                                     \
        for (int r = 0; r < ROWS; r++) {                                                 \
          acc[r][c] += ds[r] * K[c * T + j]; gk += ds[r] * qr[r][c]; gv += p[r] * gc[r][c]; } \
        GK[c * T + j] = gk; GV[c * T + j] = gv; }                                        \
    }                                                                                    \
    for (long j = i + 1; j < i + ROWS && j < T; j++)   /* the block's own triangle */    \
      for (int r = j - i; r < ROWS; r++) {                                               \
        REAL x = -L[r], dp = -D[r];                                                      \
        for (int c = 0; c < DH; c++) { x += qc[r][c] * K[c * T + j]; dp += gc[r][c] * V[c * T + j]; } \
        REAL p = EXP(x), ds = p * dp;                                                    \
        for (int c = 0; c < DH; c++) {                                                   \
          acc[r][c] += ds * K[c * T + j]; GK[c * T + j] += ds * qr[r][c];                \
          GV[c * T + j] += p * gc[r][c]; } }                                             \
    for (int r = 0; r < ROWS && i + r < T; r++)                                          \
      for (int c = 0; c < DH; c++) GQ[c * T + i + r] = acc[r][c] * scale;                \
  }                                                                                      \
}                                                                                        \
/* Heads n0 <= n < n1 (n = mb H + h) of qkv (MB, T, 3, H, DH); o, go (MB, T, H, DH);     \
   lse (MB H, T); gqkv like qkv, every entry written. */                                 \
void NAME##_fwd(long n0, long n1, long T, long H, REAL scale, const REAL *qkv,           \
                REAL *o, REAL *lse) {                                                    \
  REAL *buf = malloc(sizeof(REAL) * (4 * DH + 2) * T);                                   \
  REAL *Q = buf, *K = buf + DH * T, *V = buf + 2 * DH * T, *O = buf + 3 * DH * T,        \
       *s = buf + 4 * DH * T, *KN = buf + (4 * DH + 1) * T;                              \
  long st = 3 * H * DH, so = H * DH;                                                     \
  for (long n = n0; n < n1; n++) {                                                       \
    const REAL *src = qkv + (n / H) * T * st + (n % H) * DH;                             \
    for (long t = 0; t < T; t++) for (int c = 0; c < DH; c++) {                          \
      Q[c * T + t] = src[t * st + c]; K[c * T + t] = src[t * st + so + c];               \
      V[c * T + t] = src[t * st + 2 * so + c]; }                                         \
    for (long t = 0; t < T; t++) {     /* the largest |k| up to t */                     \
      REAL kn = 0; for (int c = 0; c < DH; c++) kn += K[c * T + t] * K[c * T + t];       \
      kn = sqrt(kn); KN[t] = t && KN[t - 1] > kn ? KN[t - 1] : kn; }                     \
    HEAD##_head_fwd(T, scale, Q, K, V, KN, O, lse + n * T, s);                           \
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
    HEAD##_head_bwd(T, scale, Q, K, V, G, Dv, lse + n * T, GQ, GK, GV);                  \
    REAL *dst = gqkv + a;                                                                \
    for (long t = 0; t < T; t++) for (int c = 0; c < DH; c++) {                          \
      dst[t * st + c] = GQ[c * T + t]; dst[t * st + so + c] = GK[c * T + t] * scale;     \
      dst[t * st + 2 * so + c] = GV[c * T + t]; }                                        \
  }                                                                                      \
  free(buf);                                                                             \
}
#define BOTH(DH) DEF(attn32_##DH, float, fexp2, log2f, 1.4426950408889634f, DH, attn32_##DH) \
                 DEF(attn64_##DH, double, exp, log, 1.0, DH, attn64_##DH)
BOTH(1) BOTH(4) BOTH(8) DEF(attn64_2, double, exp, log, 1.0, 2, attn64_2)
#if defined(__AVX512F__)
DEF(attn32_2, float, fexp2, log2f, 1.4426950408889634f, 2, x512_2)
#else
DEF(attn32_2, float, fexp2, log2f, 1.4426950408889634f, 2, attn32_2)
#endif
