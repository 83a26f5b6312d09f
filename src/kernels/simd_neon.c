/*
 * kernels/simd_neon.c — the AArch64 Advanced SIMD (NEON) kernels behind
 * kernels/simd.h: the dot-form f32 micro-kernel (6 tokens x 4 rows, 4 k per
 * step) and the broadcast-form f32 GEMM (6 x 16), the two shapes every
 * dense product of the backbone, attention and the delta rule is built on
 * (BF16 and quantized weights reach the dot form as f32 rows, as on avx2).
 * 32 vector registers of 4 floats: 24 accumulators, the rest operands.
 * NEON is part of every AArch64 CPU, so no run-time check is needed; off
 * AArch64 the definitions have empty bodies and are never called.
 */
#include "kernels/simd.h"

#if defined(__aarch64__)
#include <arm_neon.h>
#include <math.h>
#include <string.h>

#define INLINE static inline __attribute__((always_inline))

enum { NDM = 6, NDN = 4 }; /* dot form: tokens x rows */

/* [Σa, Σb, Σc, Σd] */
INLINE float32x4_t hsum4(float32x4_t a, float32x4_t b, float32x4_t c, float32x4_t d) {
    return vpaddq_f32(vpaddq_f32(a, b), vpaddq_f32(c, d));
}

/* y[i][j] (=, +=) x_i·w_j for i < mr tokens and j < nr rows: each output a
 * vector of four partial sums over k, reduced once at the end. */
static void dot_tile(int64_t k, const float *A, int64_t lda, int mr, const float *B,
                     int64_t ldb, int nr, float *C, int64_t ldc, bool add) {
    float32x4_t c[NDM][NDN];
    const float *a[NDM], *b[NDN];
#pragma GCC unroll 6
    for (int i = 0; i < NDM; i++) {
        a[i] = A + (i < mr ? i : mr - 1) * lda; /* past mr: computed, not stored */
#pragma GCC unroll 4
        for (int j = 0; j < NDN; j++) c[i][j] = vdupq_n_f32(0.0f);
    }
#pragma GCC unroll 4
    for (int j = 0; j < NDN; j++) b[j] = B + (j < nr ? j : nr - 1) * ldb;
    int64_t kk = 0;
    for (; kk + 4 <= k; kk += 4) {
        float32x4_t w[NDN];
#pragma GCC unroll 4
        for (int j = 0; j < NDN; j++) w[j] = vld1q_f32(b[j] + kk);
#pragma GCC unroll 6
        for (int i = 0; i < NDM; i++) {
            float32x4_t x = vld1q_f32(a[i] + kk);
#pragma GCC unroll 4
            for (int j = 0; j < NDN; j++) c[i][j] = vfmaq_f32(c[i][j], x, w[j]);
        }
    }
    for (int i = 0; i < mr; i++) {
        float s[NDN];
        vst1q_f32(s, hsum4(c[i][0], c[i][1], c[i][2], c[i][3]));
        for (int64_t t = kk; t < k; t++) /* the k % 4 tail */
            for (int j = 0; j < NDN; j++) s[j] = fmaf(a[i][t], b[j][t], s[j]);
        float *p = C + i * ldc;
        for (int j = 0; j < nr; j++) p[j] = add ? p[j] + s[j] : s[j];
    }
}

void neon_dot_f32(int64_t kc, const float *x, int64_t ldx, int64_t T, const float *w,
                  int64_t ldw, int64_t np, float *y, int64_t ldy, bool add) {
    for (int64_t t = 0; t < T; t += NDM) {
        int mr = (int)(T - t < NDM ? T - t : NDM);
        for (int64_t r = 0; r < np; r += NDN) {
            int nr = (int)(np - r < NDN ? np - r : NDN);
            dot_tile(kc, x + t * ldx, ldx, mr, w + r * ldw, ldw, nr, y + t * ldy + r, ldy, add);
        }
    }
}

enum { NBM = 6 }; /* broadcast form: rows of A per tile */

/* C[i][0..4·nv) (=, +=) Σ_k A(i,k)·B[k][0..4·nv) for i < mr, nv ≤ 4 whole
 * vectors of columns (a compile-time constant at each call). */
INLINE void bc_tile(const int nv, int64_t k, const float *A, int64_t rsa, int64_t csa, int mr,
                    const float *B, int64_t ldb, float *C, int64_t ldc, bool add) {
    float32x4_t c[NBM][4];
    const float *a[NBM];
#pragma GCC unroll 6
    for (int i = 0; i < NBM; i++) {
        a[i] = A + (i < mr ? i : mr - 1) * rsa;
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) c[i][v] = vdupq_n_f32(0.0f);
    }
    for (int64_t kk = 0; kk < k; kk++, B += ldb) {
        float32x4_t b[4];
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) b[v] = vld1q_f32(B + 4 * v);
        const int64_t o = kk * csa;
#pragma GCC unroll 6
        for (int i = 0; i < NBM; i++) {
            float32x4_t av = vld1q_dup_f32(a[i] + o);
#pragma GCC unroll 4
            for (int v = 0; v < nv; v++) c[i][v] = vfmaq_f32(c[i][v], av, b[v]);
        }
    }
    for (int i = 0; i < mr; i++) {
        float *p = C + i * ldc;
        for (int v = 0; v < nv; v++) {
            float32x4_t r = c[i][v];
            if (add) r = vaddq_f32(r, vld1q_f32(p + 4 * v));
            vst1q_f32(p + 4 * v, r);
        }
    }
}

static void bc_tile_n(int nv, int64_t k, const float *A, int64_t rsa, int64_t csa, int mr,
                      const float *B, int64_t ldb, float *C, int64_t ldc, bool add) {
    switch (nv) {
    case 4: bc_tile(4, k, A, rsa, csa, mr, B, ldb, C, ldc, add); break;
    case 3: bc_tile(3, k, A, rsa, csa, mr, B, ldb, C, ldc, add); break;
    case 2: bc_tile(2, k, A, rsa, csa, mr, B, ldb, C, ldc, add); break;
    default: bc_tile(1, k, A, rsa, csa, mr, B, ldb, C, ldc, add); break;
    }
}

void neon_gemm_nn(int64_t m, int64_t n, int64_t k, const float *A, int64_t rsa, int64_t csa,
                  const float *B, int64_t ldb, float *C, int64_t ldc, bool add) {
    if (m <= 0 || n <= 0) return;
    if (k <= 0) {
        if (!add)
            for (int64_t i = 0; i < m; i++) memset(C + i * ldc, 0, (size_t)n * sizeof *C);
        return;
    }
    const int64_t nvec = n / 4 * 4;
    for (int64_t j = 0; j < nvec; j += 16) {
        int nv = (int)((nvec - j < 16 ? nvec - j : 16) / 4);
        for (int64_t i = 0; i < m; i += NBM) {
            int mr = (int)(m - i < NBM ? m - i : NBM);
            bc_tile_n(nv, k, A + i * rsa, rsa, csa, mr, B + j, ldb, C + i * ldc + j, ldc, add);
        }
    }
    /* the last n % 4 columns, each with the fused multiply-adds of a vector
     * lane, so a column's bits do not depend on where n ends (attention's
     * chunked prefill meets its one-pass prefill bit for bit) */
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = nvec; j < n; j++) {
            float s = 0.0f;
            for (int64_t kk = 0; kk < k; kk++) s = fmaf(A[i * rsa + kk * csa], B[kk * ldb + j], s);
            C[i * ldc + j] = add ? C[i * ldc + j] + s : s;
        }
}

/* 12 independent FMA chains, as the x86 peak loops. */
#define KEEP(v) __asm__ volatile("" : "+w"(v));
double neon_peak(int64_t iters) {
    const float32x4_t b = vdupq_n_f32(1.0000001f), c = vdupq_n_f32(1e-7f);
    float32x4_t a[12];
    for (int i = 0; i < 12; i++) a[i] = vdupq_n_f32((float)i);
    for (int64_t it = 0; it < iters; it++) {
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) {
            a[i] = vfmaq_f32(c, a[i], b);
            KEEP(a[i])
        }
    }
    float s = 0.0f;
    for (int i = 0; i < 12; i++) s += vgetq_lane_f32(a[i], 0);
    return (double)iters * 12 * 8 + (s == 12345.678f ? 1 : 0);
}

#else /* not AArch64: never called */
void neon_dot_f32(int64_t kc, const float *x, int64_t ldx, int64_t T, const float *w,
                  int64_t ldw, int64_t np, float *y, int64_t ldy, bool add) {}
void neon_gemm_nn(int64_t m, int64_t n, int64_t k, const float *A, int64_t rsa, int64_t csa,
                  const float *B, int64_t ldb, float *C, int64_t ldc, bool add) {}
double neon_peak(int64_t iters) { return 0; }
#endif
