/*
 * kernels/simd_avx2.c — the AVX2+FMA kernels behind kernels/simd.h: the
 * dot-form f32 micro-kernel (3 tokens x 4 rows, 8 k per step), the
 * broadcast-form f32 GEMM (6 x 16), and the int8 path for quantized
 * weights (activations quantized as on avx512, the I8 groups packed with
 * Q8_0 signed and the K-quants with integer scales, 4-token x 16-row
 * tiles on vpmaddubsw, or on the ymm vpdpbusd where it exists).  16 vector
 * registers: 12 accumulators in the f32 tiles.
 * Function target attributes keep the file buildable with baseline flags.
 */
#include "kernels/simd.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/kquant_x86.h"
#include "kernels/transpose_x86.h"

#define T256 __attribute__((target("avx2,fma")))
#define T256F16 __attribute__((target("avx2,fma,f16c"))) /* the avx2 path requires F16C too */
#define INLINE static inline __attribute__((always_inline))

/* Mask of the first n of 8 lanes (for maskload/maskstore). */
INLINE T256 __m256i lanes8(int64_t n) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    int c = n <= 0 ? 0 : n >= 8 ? 8 : (int)n;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(c), idx);
}

/* The first n of 8 floats at p (n >= 8: all 8), and their store.  The
 * masked forms only for a short tail: AMD microcodes vmaskmovps, and with
 * it on every vector the elementwise stage of a Zen 3 prefill took twice
 * as long. */
INLINE T256 __m256 ld8(const float *p, int64_t n) {
    return n >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, lanes8(n));
}
INLINE T256 void st8(float *p, int64_t n, __m256 v) {
    if (n >= 8) _mm256_storeu_ps(p, v);
    else _mm256_maskstore_ps(p, lanes8(n), v);
}
/* The same for 4 floats. */
INLINE T256 __m128 ld4(const float *p, int64_t n) {
    return n >= 4 ? _mm_loadu_ps(p) : _mm_maskload_ps(p, _mm256_castsi256_si128(lanes8(n)));
}
INLINE T256 void st4(float *p, int64_t n, __m128 v) {
    if (n >= 4) _mm_storeu_ps(p, v);
    else _mm_maskstore_ps(p, _mm256_castsi256_si128(lanes8(n)), v);
}

INLINE T256 __m128 hsum4(__m256 a, __m256 b, __m256 c, __m256 d) {
    __m256 s = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    return _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
}

enum { DM = 3, DN = 4 };

/* 8 weights from k-offset kk of a row of kind wk (0 f32, 1 BF16, 2 F16),
 * widened exactly to f32; n < 8: the first n, the rest zero. */
INLINE T256F16 __m256 load_w8(const int wk, const void *row, int64_t kk, int64_t n) {
    if (wk == 0) {
        return ld8((const float *)row + kk, n);
    }
    const uint16_t *p = (const uint16_t *)row + kk;
    uint16_t tail[8] = {0};
    if (n < 8) {
        memcpy(tail, p, (size_t)n * sizeof *p);
        p = tail;
    }
    const __m128i h = _mm_loadu_si128((const __m128i *)p);
    if (wk == 2) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)); /* BF16: the top half */
}

/* DM tokens x DN rows, the dot form; the sums run in the same order for
 * every weight kind, so BF16 / F16 rows give the bits of their f32 decoding. */
INLINE T256F16 void dot_tile(const int wk, int64_t k, const float *A, int64_t lda, int mr,
                             const void *B, int64_t ldb, int nr, float *C, int64_t ldc, bool add) {
    const size_t esz = wk == 0 ? sizeof(float) : sizeof(uint16_t);
    __m256 c[DM][DN];
    const float *a[DM];
    const uint8_t *b[DN];
#pragma GCC unroll 3
    for (int i = 0; i < DM; i++) {
        a[i] = A + (i < mr ? i : mr - 1) * lda;
#pragma GCC unroll 4
        for (int j = 0; j < DN; j++) c[i][j] = _mm256_setzero_ps();
    }
#pragma GCC unroll 4
    for (int j = 0; j < DN; j++) b[j] = (const uint8_t *)B + (size_t)((j < nr ? j : nr - 1) * ldb) * esz;
    for (int64_t kk = 0; kk < k; kk += 8) {
        const int64_t n = k - kk;
        __m256 w[DN];
#pragma GCC unroll 4
        for (int j = 0; j < DN; j++) w[j] = load_w8(wk, b[j], kk, n);
#pragma GCC unroll 3
        for (int i = 0; i < DM; i++) {
            __m256 x = ld8(a[i] + kk, n);
#pragma GCC unroll 4
            for (int j = 0; j < DN; j++) c[i][j] = _mm256_fmadd_ps(x, w[j], c[i][j]);
        }
    }
#pragma GCC unroll 3
    for (int i = 0; i < DM; i++) {
        if (i >= mr) break;
        __m128 s = hsum4(c[i][0], c[i][1], c[i][2], c[i][3]);
        float *p = C + i * ldc;
        if (add) s = _mm_add_ps(s, ld4(p, nr));
        st4(p, nr, s);
    }
}

#define DOT_ARGS int64_t k, const float *A, int64_t lda, int mr, const void *B, int64_t ldb, \
    int nr, float *C, int64_t ldc, bool add
T256F16 static void dot_tile_f32(DOT_ARGS) { dot_tile(0, k, A, lda, mr, B, ldb, nr, C, ldc, add); }
T256F16 static void dot_tile_bf16(DOT_ARGS) { dot_tile(1, k, A, lda, mr, B, ldb, nr, C, ldc, add); }
T256F16 static void dot_tile_f16(DOT_ARGS) { dot_tile(2, k, A, lda, mr, B, ldb, nr, C, ldc, add); }

static void dot_panel(void (*tile)(DOT_ARGS), size_t esz, int64_t kc, const float *x, int64_t ldx,
                      int64_t T, const void *w, int64_t ldw, int64_t np, float *y, int64_t ldy,
                      bool add, const mm_prefetch *next) {
    mm_pf_cursor pf = mm_pf_start(next, (T + DM - 1) / DM * ((np + DN - 1) / DN));
    for (int64_t t = 0; t < T; t += DM) {
        int mr = (int)(T - t < DM ? T - t : DM);
        for (int64_t r = 0; r < np; r += DN) {
            int nr = (int)(np - r < DN ? np - r : DN);
            mm_pf_step(&pf);
            tile(kc, x + t * ldx, ldx, mr, (const uint8_t *)w + (size_t)(r * ldw) * esz, ldw, nr,
                 y + t * ldy + r, ldy, add);
        }
    }
}

void avx2_dot_f32(int64_t kc, const float *x, int64_t ldx, int64_t T, const float *w,
                  int64_t ldw, int64_t np, float *y, int64_t ldy, bool add, const mm_prefetch *pf) {
    dot_panel(dot_tile_f32, sizeof(float), kc, x, ldx, T, w, ldw, np, y, ldy, add, pf);
}

void avx2_dot_w16(bool f16, int64_t kc, const float *x, int64_t ldx, int64_t T, const uint16_t *w,
                  int64_t ldw, int64_t np, float *y, int64_t ldy, bool add) {
    dot_panel(f16 ? dot_tile_f16 : dot_tile_bf16, sizeof(uint16_t), kc, x, ldx, T, w, ldw, np, y,
              ldy, add, NULL);
}

T256F16 void avx2_widen_w16(bool f16, const uint16_t *w, int64_t ldw, int64_t nr, int64_t kc,
                            float *dst, int64_t ldd) {
    for (int64_t r = 0; r < nr; r++)
        for (int64_t k = 0; k < kc; k += 8) {
            const int64_t n = kc - k < 8 ? kc - k : 8;
            const __m256 v = f16 ? load_w8(2, w + r * ldw, k, n) : load_w8(1, w + r * ldw, k, n);
            st8(dst + r * ldd + k, n, v);
        }
}

enum { BM = 6 }; /* 6 rows x 16 columns */

T256 static void bc_tile(int64_t k, const float *A, int64_t rsa, int64_t csa, int mr,
                         const float *B, int64_t ldb, int nc, float *C, int64_t ldc, bool add) {
    __m256 c[BM][2];
    const float *a[BM];
#pragma GCC unroll 6
    for (int i = 0; i < BM; i++) {
        a[i] = A + (i < mr ? i : mr - 1) * rsa;
        c[i][0] = c[i][1] = _mm256_setzero_ps();
    }
    for (int64_t kk = 0; kk < k; kk++, B += ldb) {
        __m256 b0 = ld8(B, nc), b1 = ld8(B + 8, nc - 8);
        const int64_t o = kk * csa;
#pragma GCC unroll 6
        for (int i = 0; i < BM; i++) {
            __m256 av = _mm256_broadcast_ss(a[i] + o);
            c[i][0] = _mm256_fmadd_ps(av, b0, c[i][0]);
            c[i][1] = _mm256_fmadd_ps(av, b1, c[i][1]);
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < BM; i++) {
        if (i >= mr) break;
        float *p = C + i * ldc;
        __m256 v0 = c[i][0], v1 = c[i][1];
        if (add) {
            v0 = _mm256_add_ps(v0, ld8(p, nc));
            v1 = _mm256_add_ps(v1, ld8(p + 8, nc - 8));
        }
        st8(p, nc, v0);
        st8(p + 8, nc - 8, v1);
    }
}

T256 void avx2_gemm_nn(int64_t m, int64_t n, int64_t k, const float *A, int64_t rsa, int64_t csa,
                       const float *B, int64_t ldb, float *C, int64_t ldc, bool add) {
    if (m <= 0 || n <= 0) return;
    if (k <= 0) {
        if (!add)
            for (int64_t i = 0; i < m; i++) memset(C + i * ldc, 0, (size_t)n * sizeof *C);
        return;
    }
    for (int64_t j = 0; j < n; j += 16) {
        int nc = (int)(n - j < 16 ? n - j : 16);
        for (int64_t i = 0; i < m; i += BM) {
            int mr = (int)(m - i < BM ? m - i : BM);
            bc_tile(k, A + i * rsa, rsa, csa, mr, B + j, ldb, nc, C + i * ldc + j, ldc, add);
        }
    }
}

/* ==== elementwise ============================================================= */

/* e^x = y·2^n for a clamped x: n the nearest integer to x·log2 e (out),
 * y = e^r on r = x − n·ln 2 in [−ln2/2, ln2/2] by its degree-7 polynomial. */
INLINE T256 __m256 exp8_mantissa(__m256 x, __m256i *ni) {
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504089f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    __m256 y = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
    *ni = _mm256_cvtps_epi32(n);
    return y;
}

/* e^x as in simd_avx512.c; 2^n through the exponent bits, so inputs below
 * −87.3 (results under FLT_MIN) give 0. */
INLINE T256 __m256 exp8(__m256 x) {
    __m256 tiny = _mm256_cmp_ps(x, _mm256_set1_ps(-87.33654f), _CMP_LT_OQ);
    x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.72283f)), _mm256_set1_ps(-87.33654f));
    __m256i ni;
    __m256 y = exp8_mantissa(x, &ni);
    /* n in [−126, 128]: 2^n = 2^(n/2)·2^(n−n/2) keeps both factors normal */
    __m256i h = _mm256_srai_epi32(ni, 1), l = _mm256_sub_epi32(ni, h);
    __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h, _mm256_set1_epi32(127)), 23));
    __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(l, _mm256_set1_epi32(127)), 23));
    y = _mm256_mul_ps(_mm256_mul_ps(y, s1), s2);
    return _mm256_andnot_ps(tiny, y);
}

/* exp8 for the sigmoid: x clamped to [−87.34, 88.37], where 2^n is one
 * normal factor, so no split scale and no underflow mask.  Inside that
 * range the bits are exp8's (a power of two scales exactly either way);
 * outside it 1 + e^x is 1 or over 2^127, and the sigmoid 1 or below 2^-127
 * both ways. */
INLINE T256 __m256 exp8_sig(__m256 x) {
    x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.37626f)), _mm256_set1_ps(-87.33654f));
    __m256i ni;
    const __m256 y = exp8_mantissa(x, &ni);
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(ni, _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

/* 1 / (1 + e^−x) by a division.  Each 8 lanes are one long dependent
 * chain, and vdivps is a shorter link than rcp and two Newton steps
 * (silu_mul on Zen 3, L1-resident: 3.0 -> 2.45 cycles per element). */
INLINE T256 __m256 sigmoid8(__m256 x) {
    __m256 one = _mm256_set1_ps(1.0f);
    __m256 d = _mm256_add_ps(one, exp8_sig(_mm256_sub_ps(_mm256_setzero_ps(), x)));
    return _mm256_div_ps(one, d);
}

/* body once per 8 floats at i, left = n - i of them left (ld8, st8) */
#define AVX2_MAP(body)                                                                          \
    for (int64_t i = 0; i < n; i += 8) {                                                        \
        const int64_t left = n - i;                                                             \
        body                                                                                    \
    }

T256 void avx2_exp(const float *x, float *y, int64_t n) {
    AVX2_MAP(st8(y + i, left, exp8(ld8(x + i, left)));)
}
T256 void avx2_sigmoid(float *x, int64_t n) {
    AVX2_MAP(st8(x + i, left, sigmoid8(ld8(x + i, left)));)
}
T256 void avx2_silu_mul(float *x, const float *g, int64_t n) {
    AVX2_MAP(__m256 v = ld8(x + i, left);
             st8(x + i, left, _mm256_mul_ps(_mm256_mul_ps(v, sigmoid8(v)), ld8(g + i, left)));)
}
T256 void avx2_mul_silu(float *x, const float *g, int64_t n) {
    AVX2_MAP(__m256 v = ld8(g + i, left);
             st8(x + i, left, _mm256_mul_ps(ld8(x + i, left), _mm256_mul_ps(v, sigmoid8(v))));)
}
T256 void avx2_mul_sigmoid(float *x, const float *g, int64_t n) {
    AVX2_MAP(st8(x + i, left, _mm256_mul_ps(ld8(x + i, left), sigmoid8(ld8(g + i, left))));)
}

/* Σ_{k ≥ first} hist_k·w_k for 8 channels (the first n of them), product
 * then sum, each rounded: the reference's order. */
INLINE T256 __m256 conv8(const float *hist, const float *wt, int64_t ld, int first, int K,
                         int64_t n) {
    __m256 acc = _mm256_setzero_ps();
    for (int k = first; k < K; k++)
        acc = _mm256_add_ps(acc, _mm256_mul_ps(ld8(hist + k * ld, n), ld8(wt + k * ld, n)));
    return acc;
}

T256 void avx2_conv_silu_row(const float *hist, const float *wt, int64_t ld, int first, int K,
                             float *o, int64_t n) {
    int64_t i = 0;
    /* four chains at a time, as avx512's: one SiLU alone leaves the core
     * waiting on its dependent steps */
    for (; i + 32 <= n; i += 32) {
        __m256 a[4];
        for (int u = 0; u < 4; u++) a[u] = conv8(hist + i + 8 * u, wt + i + 8 * u, ld, first, K, 8);
        for (int u = 0; u < 4; u++) _mm256_storeu_ps(o + i + 8 * u, _mm256_mul_ps(a[u], sigmoid8(a[u])));
    }
    for (; i < n; i += 8) {
        const __m256 a = conv8(hist + i, wt + i, ld, first, K, n - i);
        st8(o + i, n - i, _mm256_mul_ps(a, sigmoid8(a)));
    }
}

INLINE T256 double sumsq8(const float *x, int64_t n) {
    __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
    for (int64_t i = 0; i < n; i += 8) {
        __m256 v = ld8(x + i, n - i);
        __m256 sq = _mm256_mul_ps(v, v);
        a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(sq)));
        a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(sq, 1)));
    }
    __m256d a = _mm256_add_pd(a0, a1);
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(a), _mm256_extractf128_pd(a, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

T256 void avx2_rmsnorm(float *y, const float *x, const float *w, int64_t n, int64_t rows, float eps) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * n;
        float *yr = y + r * n;
        __m256 sc = _mm256_set1_ps(1.0f / sqrtf((float)(sumsq8(xr, n) / (double)n) + eps));
        AVX2_MAP(st8(yr + i, left,
                     _mm256_mul_ps(_mm256_mul_ps(ld8(xr + i, left), sc), ld8(w + i, left)));)
    }
}

T256 void avx2_l2norm(float *x, int64_t n, int64_t rows, float eps) {
    for (int64_t r = 0; r < rows; r++) {
        float *xr = x + r * n;
        __m256 sc = _mm256_set1_ps(1.0f / fmaxf(sqrtf((float)sumsq8(xr, n)), eps));
        AVX2_MAP(st8(xr + i, left, _mm256_mul_ps(ld8(xr + i, left), sc));)
    }
}

/* ==== int8 (vpmaddubsw) ========================================================= */

enum { IG = MM_I8_G, IM = MM_I8_RM }; /* tiles of at most IM tokens */

INLINE T256 int32_t hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* mm_quant_block_fn on ymm (n a multiple of 32): the bits avx512_act_i8 gives. */
T256 static float quant_block(const float *x, int n, int8_t *q, int32_t *sums16) {
    const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 a = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 8) a = _mm256_max_ps(a, _mm256_and_ps(_mm256_loadu_ps(x + i), magnitude));
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float d = _mm_cvtss_f32(m) / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    const __m256 iv = _mm256_set1_ps(id);
    /* the two packs interleave 128-bit lanes: dwords back in order */
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int i = 0; i < n; i += 32) {
        __m256i v[4];
        for (int u = 0; u < 4; u++)
            v[u] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 8 * u), iv));
        const __m256i h01 = _mm256_packs_epi32(v[0], v[1]), h23 = _mm256_packs_epi32(v[2], v[3]);
        const __m256i b = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(h01, h23), order);
        _mm256_storeu_si256((__m256i *)(q + i), b);
        sums16[i / 16] = hsum_i32(_mm256_add_epi32(v[0], v[1]));
        sums16[i / 16 + 1] = hsum_i32(_mm256_add_epi32(v[2], v[3]));
    }
    return d;
}

void avx2_act_i8(const mm_i8_kind *kind, const float *x, int64_t in, int64_t t0, int64_t t1,
                 int8_t *q, float *dx, void *mb) {
    mm_act_i8_by_blocks(quant_block, kind, x, in, t0, t1, q, dx, mb);
    if (kind->isc == 6) /* the Q6_K panel's unsigned operand: x + 128, the sign bit flipped */
        for (int64_t i = t0 * in; i < t1 * in; i++) q[i] = (int8_t)((uint8_t)q[i] ^ 0x80u);
}

/* The 4 bytes at p as a dword (0 where p is NULL: a row past the end). */
static inline uint32_t ld32(const uint8_t *p, int off) {
    uint32_t v = 0;
    if (p) memcpy(&v, p + off, 4);
    return v;
}

/* Dword `off` of 8 rows' super-blocks (blk[i] + off), a lane per row. */
INLINE T256 __m256i rows8(const uint8_t *const blk[8], int off) {
    return _mm256_setr_epi32((int)ld32(blk[0], off), (int)ld32(blk[1], off), (int)ld32(blk[2], off),
                             (int)ld32(blk[3], off), (int)ld32(blk[4], off), (int)ld32(blk[5], off),
                             (int)ld32(blk[6], off), (int)ld32(blk[7], off));
}

/* The f16 halves of 8 dwords as f32: the low ones (hi false) or the high. */
INLINE T256F16 __m256 halves8(__m256i v, bool hi) {
    const __m256i h = hi ? _mm256_srli_epi32(v, 16) : _mm256_and_si256(v, _mm256_set1_epi32(0xffff));
    const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(h, h), 0x08); /* lanes 0, 2 */
    return _mm256_cvtph_ps(_mm256_castsi256_si128(p));
}

/* Store a pair of int16 lanes per row: lo | hi << 16. */
INLINE T256 void put_pairs(void *dst, __m256i lo, __m256i hi) {
    const __m256i m = _mm256_set1_epi32(0xffff);
    const __m256i v = _mm256_or_si256(_mm256_and_si256(lo, m), _mm256_slli_epi32(hi, 16));
    _mm256_storeu_si256((__m256i *)dst, v);
}

/* 8 rows' scales, mins, d and dmin (the integer-scale panel's, rows i0..i0+7
 * of super-block sp) decoded in lanes.  The layouts are clef_kq_unpack's:
 * Q4_K / Q5_K f16 d, dmin, then 12 bytes of 6-bit pairs (j < 4: sc = s[j],
 * mn = s[j+4], low 6 bits; j ≥ 4: low nibbles of s[j+4] with the top 2 bits
 * of s[j−4] / s[j]); Q6_K 16 int8 scales at 192, f16 d at 208, and in
 * place of mins and dmin its correction 128·Σ_j sc_j·bsum[j] (bsum: block
 * j's Σ(q − 32), row i in lane i). */
INLINE T256F16 void isc_scales8(int isc, const uint8_t *const blk[8], const __m256i bsum[16],
                                uint8_t *sp, int i0) {
    const int nb = isc == 6 ? 16 : 8;
    uint8_t *sc = sp + 256 * IG + 4 * i0, *mn = sc + nb * IG * 4;
    float *d = (float *)(mn + nb / 2 * IG * 4);
    __m256i v[16];
    if (isc == 6) {
        for (int q = 0; q < 4; q++) {
            const __m256i w = rows8(blk, 192 + 4 * q);
            for (int b = 0; b < 4; b++) /* byte b, sign-extended */
                v[4 * q + b] = _mm256_srai_epi32(_mm256_slli_epi32(w, 24 - 8 * b), 24);
        }
        _mm256_storeu_ps(d, halves8(rows8(blk, 206), true)); /* d: the block's last 2 bytes */
        __m256i cw = _mm256_setzero_si256(); /* 128·Σ_j sc_j·Σq_j, the rows in lanes */
        for (int j = 0; j < 16; j++)
            cw = _mm256_add_epi32(cw, _mm256_mullo_epi32(v[j], bsum[j]));
        _mm256_storeu_si256((__m256i *)mn, _mm256_slli_epi32(cw, 7));
    } else {
        const __m256i dd = rows8(blk, 0), w0 = rows8(blk, 4), w1 = rows8(blk, 8), w2 = rows8(blk, 12);
        const __m256i m6 = _mm256_set1_epi32(63), m4 = _mm256_set1_epi32(15), m2 = _mm256_set1_epi32(3);
        __m256i m[8];
        for (int b = 0; b < 4; b++) {
            const __m256i s0 = _mm256_srli_epi32(w0, 8 * b), s1 = _mm256_srli_epi32(w1, 8 * b);
            const __m256i s2 = _mm256_srli_epi32(w2, 8 * b);
            v[b] = _mm256_and_si256(s0, m6);
            m[b] = _mm256_and_si256(s1, m6);
            const __m256i h0 = _mm256_and_si256(_mm256_srli_epi32(s0, 6), m2); /* top 2 bits */
            const __m256i h1 = _mm256_and_si256(_mm256_srli_epi32(s1, 6), m2);
            v[4 + b] = _mm256_or_si256(_mm256_and_si256(s2, m4), _mm256_slli_epi32(h0, 4));
            m[4 + b] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(s2, 4), m4),
                                       _mm256_slli_epi32(h1, 4));
        }
        _mm256_storeu_ps(d, halves8(dd, false));
        _mm256_storeu_ps(d + IG, halves8(dd, true));
        for (int c = 0; c < 4; c++) put_pairs(mn + c * IG * 4, m[2 * c], m[2 * c + 1]);
    }
    for (int j = 0; j < nb; j++) put_pairs(sc + j * IG * 4, v[j], v[j]);
}

/* The stored rows r0 + row0 .. +7 of w from k0 on (NULL past np). */
static void rows8_at(const mm_weight *w, int64_t r0, int64_t np, int64_t row0, int64_t k0,
                     const uint8_t *rows[8]) {
    const clef_dtype_info *info = clef_dtype_get(w->type);
    const size_t off = (size_t)(k0 / info->block_size) * info->type_size;
    for (int i = 0; i < 8; i++)
        rows[i] = row0 + i < np ? (const uint8_t *)w->data + (size_t)(r0 + row0 + i) * w->row_bytes + off
                                : NULL;
}

/* 8 rows' 8 k-quads each (q[i], row i) transposed and stored as the
 * panel's k-quads [8][48][4] at dst, rows i0..i0+7. */
INLINE T256 void put_kquads8(__m256i q[8], uint8_t *dst, int i0) {
    x86_transpose8x8(q);
    for (int u = 0; u < 8; u++) _mm256_storeu_si256((__m256i *)(dst + ((size_t)u * IG + i0) * 4), q[u]);
}

/* 8 rows' sums of one Q6_K block (q − 32, the row in lane i) from its 4
 * k-quads as put_kquads8 leaves them: four bytes of [−32, 31] sum within
 * int8's range, then vpmaddubsw and vpmaddwd by ones add each dword. */
INLINE T256 __m256i q6_block_sums(const __m256i kq[4]) {
    const __m256i s = _mm256_add_epi8(_mm256_add_epi8(kq[0], kq[1]), _mm256_add_epi8(kq[2], kq[3]));
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), s), _mm256_set1_epi16(1));
}

/* The integer-scale panel on ymm, 8 rows at a time: each row's runs of 32
 * quants read as bytes (kernels/kquant_x86.h) and transposed to the
 * panel's [k-quad][48][4] order, the scales decoded in lanes.  Q6_K's
 * quants go in as q − 32, signed, with their block sums for its
 * correction term. */
T256F16 static void pack_isc(const mm_i8_kind *kind, const mm_weight *w, int64_t r0, int64_t np,
                          int64_t k0, int64_t kc, uint8_t *dst) {
    const int64_t nsb = kc / 256, groups = (np + IG - 1) / IG;
    const size_t sbytes = mm_i8_group_bytes(kind, 256);
    const size_t tsz = clef_dtype_get(w->type)->type_size;
    for (int64_t g = 0; g < groups; g++)
        for (int i0 = 0; i0 < IG; i0 += 8) {
            const uint8_t *rows[8];
            rows8_at(w, r0, np, g * IG + i0, k0, rows);
            for (int64_t sb = 0; sb < nsb; sb++) {
                uint8_t *sp = dst + (size_t)(g * nsb + sb) * sbytes;
                const uint8_t *blk[8]; /* the 8 rows' super-block sb (NULL past np) */
                for (int i = 0; i < 8; i++) blk[i] = rows[i] ? rows[i] + sb * tsz : NULL;
                __m256i bsum[16]; /* Q6_K: block j's Σ(q − 32), row i in lane i */
                for (int c = 0; c < 4; c++) { /* runs 2c and 2c+1 of 32 quants */
                    __m256i q[2][8];
                    for (int i = 0; i < 8; i++) {
                        __m256i two[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
                        if (blk[i] && kind->isc == 6) kq_quants6(blk[i], c, 32, two);
                        else if (blk[i]) kq_quants45(kind->isc == 5, blk[i], c, two);
                        q[0][i] = two[0];
                        q[1][i] = two[1];
                    }
                    for (int h = 0; h < 2; h++) { /* k-quads 8·(2c+h) .. +7: blocks 4c+2h, +1 */
                        put_kquads8(q[h], sp + (size_t)(8 * (2 * c + h)) * IG * 4, i0);
                        if (kind->isc == 6)
                            for (int b = 0; b < 2; b++) bsum[4 * c + 2 * h + b] = q6_block_sums(q[h] + 4 * b);
                    }
                }
                isc_scales8(kind->isc, blk, bsum, sp, i0);
            }
        }
}

/* Q8_0 kept signed (m = 0) on ymm, 8 rows at a time: each block's 32
 * quants per row transposed to [k-quad][48][4], the 8 f16 scales widened
 * together. */
T256F16 static void pack_q8_signed(const mm_weight *w, int64_t r0, int64_t np, int64_t k0,
                                   int64_t kc, uint8_t *dst) {
    const int64_t nblk = kc / 32, groups = (np + IG - 1) / IG;
    const size_t bbytes = 32 * IG + 2 * IG * sizeof(float);
    for (int64_t g = 0; g < groups; g++)
        for (int i0 = 0; i0 < IG; i0 += 8) {
            const uint8_t *rows[8];
            rows8_at(w, r0, np, g * IG + i0, k0, rows);
            for (int64_t b = 0; b < nblk; b++) {
                uint8_t *bp = dst + (size_t)(g * nblk + b) * bbytes;
                const uint8_t *blk[8];
                __m256i q[8];
                for (int i = 0; i < 8; i++) {
                    blk[i] = rows[i] ? rows[i] + 34 * b : NULL;
                    q[i] = blk[i] ? _mm256_loadu_si256((const __m256i *)(blk[i] + 2))
                                  : _mm256_setzero_si256();
                }
                put_kquads8(q, bp, i0);
                float *sc = (float *)(bp + 32 * IG) + i0;
                _mm256_storeu_ps(sc, halves8(rows8(blk, 0), false));
                _mm256_storeu_ps(sc + IG, _mm256_setzero_ps());
            }
        }
}

void avx2_pack_i8(const mm_i8_kind *kind, const mm_weight *w, int64_t r0, int64_t np, int64_t k0,
                  int64_t kc, uint8_t *dst) {
    if (kind->isc) pack_isc(kind, w, r0, np, k0, kc, dst);
    else if (kind->signed_q && w->type == CLEF_DTYPE_Q8_0) pack_q8_signed(w, r0, np, k0, kc, dst);
    else mm_pack_i8_portable(kind, w, r0, np, k0, kc, dst);
}

/* The 4 activation bytes at p in every dword. */
INLINE T256 __m256i bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* How a tile multiplies bytes: vpmaddubsw (+ vpmaddwd), or vpdpbusd on
 * ymm in its VEX (AVX-VNNI) or EVEX (AVX512_VNNI + VL) encoding. */
enum { DP_MADDUBS = 0, DP_VEX = 1, DP_EVEX = 2 };

/* acc + Σ of 4 products u·s per dword (u unsigned, s signed bytes), exact.
 * Written in assembly: the intrinsic of either encoding would need its
 * target on every function it is inlined through, and the one tile source
 * serves both (the dispatch never runs an encoding the CPU lacks). */
INLINE T256 __m256i dpbusd256(const int dp, __m256i acc, __m256i u, __m256i s) {
    if (dp == DP_EVEX) __asm__("%{evex%} vpdpbusd %2, %1, %0" : "+x"(acc) : "x"(u), "x"(s));
    else __asm__("%{vex%} vpdpbusd %2, %1, %0" : "+x"(acc) : "x"(u), "x"(s));
    return acc;
}

/* An int8 tile's rows i < mr: f[i] (=, +=) into C, nc of its 8·tv columns. */
INLINE T256 void put_tile(const int tm, const int tv, __m256 f[IM][2], int mr, float *C,
                          int64_t ldc, int nc, bool add) {
#pragma GCC unroll 4
    for (int i = 0; i < tm; i++) { /* i < tm, not mr: GCC sees what f holds */
        if (i >= mr) break;
#pragma GCC unroll 2
        for (int v = 0; v < tv; v++) {
            float *p = C + i * ldc + 8 * v;
            __m256 o = f[i][v];
            if (add) o = _mm256_add_ps(o, ld8(p, nc - 8 * v));
            st8(p, nc - 8 * v, o);
        }
    }
}

/* tm tokens x 8·tv rows over nblk weight blocks, neon's i8_tile: per
 * block the integer dots accumulate exactly (dp: one vpdpbusd per k-quad,
 * Q8_0 unsigned; vpmaddubsw: Q8_0 alone, signed, so |w| meets x with w's
 * sign, the unsigned x signed operand it takes, then vpmaddwd widens),
 * then one f32 scale step (nsb 1: f += isum·(s·dx); nsb > 1: g += isum·s
 * [+ m·Σq], and per nsb blocks fm += g·dx in memory).  corr: the m term,
 * 0 none, 1 the integer −off·Σq added before the dots (Q8_0 unsigned,
 * Q6_K), 2 f32 m·Σq (Q4_K, Q5_K).  B: the group at this tile's first
 * row. */
INLINE T256 void i8_tile(const int dp, const int tm, const int tv, const int bk, const int corr,
                         const int nsb, int64_t nblk, const int8_t *A, int64_t lda, const float *dx,
                         int64_t ldx, const void *mb, int64_t ldm, int mr, const uint8_t *B,
                         size_t bbytes, int nc, float *C, int64_t ldc, bool add) {
    const mm_i8_rows r = mm_i8_rows_at(mr, A, lda, dx, ldx, mb, ldm);
    const int8_t *const *a = r.a;
    const float *const *d = r.d, *const *mf = r.mf;
    const int32_t *const *mi = r.mi;
    __m256 f[IM][2]; /* no initializer: GCC would zero all of it with rep stos */
#pragma GCC unroll 4
    for (int i = 0; i < tm; i++)
#pragma GCC unroll 2
        for (int v = 0; v < tv; v++) f[i][v] = _mm256_setzero_ps();
    _Alignas(32) float fm[IM][16]; /* nsb > 1: the finished super-blocks */
    if (nsb > 1) /* stores, not memset: rep stos cost 6% of a Q4_K tile on Zen 3 */
#pragma GCC unroll 4
        for (int i = 0; i < tm; i++)
#pragma GCC unroll 2
            for (int v = 0; v < tv; v++) _mm256_store_ps(fm[i] + 8 * v, _mm256_setzero_ps());
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t b = 0; b < nblk; b++) {
        const uint8_t *bp = B + (size_t)b * bbytes;
        __m256i acc[IM][2];
#pragma GCC unroll 4
        for (int i = 0; i < tm; i++)
#pragma GCC unroll 2
            for (int v = 0; v < tv; v++) acc[i][v] = _mm256_set1_epi32(corr == 1 ? mi[i][b] : 0);
        if (dp != DP_MADDUBS) {
#pragma GCC unroll 8
            for (int kq = 0; kq < bk / 4; kq++) {
                __m256i w[2];
#pragma GCC unroll 2
                for (int v = 0; v < tv; v++)
                    w[v] = _mm256_loadu_si256((const __m256i *)(bp + (size_t)kq * 4 * IG + 32 * v));
#pragma GCC unroll 4
                for (int i = 0; i < tm; i++) {
                    const __m256i xb = bcast4(a[i] + b * bk + 4 * kq);
#pragma GCC unroll 2
                    for (int v = 0; v < tv; v++) acc[i][v] = dpbusd256(dp, acc[i][v], w[v], xb);
                }
            }
        }
        if (dp == DP_MADDUBS)
#pragma GCC unroll 8
            for (int kq = 0; kq < bk / 4; kq++) {
                __m256i w[2], wu[2];
#pragma GCC unroll 2
                for (int v = 0; v < tv; v++) {
                    w[v] = _mm256_loadu_si256((const __m256i *)(bp + (size_t)kq * 4 * IG + 32 * v));
                    wu[v] = _mm256_abs_epi8(w[v]);
                }
#pragma GCC unroll 4
                for (int i = 0; i < tm; i++) {
                    const __m256i xb = bcast4(a[i] + b * bk + 4 * kq);
#pragma GCC unroll 2
                    for (int v = 0; v < tv; v++) {
                        const __m256i pr = _mm256_maddubs_epi16(wu[v], _mm256_sign_epi8(xb, w[v]));
                        acc[i][v] = _mm256_add_epi32(acc[i][v], _mm256_madd_epi16(pr, ones));
                        /* a chain per output: GCC would otherwise reassociate
                         * the block's adds into a tree and spill its leaves */
                        __asm__("" : "+x"(acc[i][v]));
                    }
                }
            }
        const float *s = (const float *)(bp + (size_t)bk * IG), *m = s + IG;
#pragma GCC unroll 4
        for (int i = 0; i < tm; i++)
#pragma GCC unroll 2
            for (int v = 0; v < tv; v++) {
                const __m256 sv = _mm256_loadu_ps(s + 8 * v);
                const __m256 sd = nsb > 1 ? sv : _mm256_mul_ps(sv, _mm256_set1_ps(d[i][b]));
                f[i][v] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[i][v]), sd, f[i][v]);
                if (corr == 2)
                    f[i][v] = _mm256_fmadd_ps(_mm256_loadu_ps(m + 8 * v), _mm256_set1_ps(mf[i][b]), f[i][v]);
            }
        if (nsb > 1 && (b + 1) % nsb == 0) /* a super-block done: fm += g·dx */
#pragma GCC unroll 4
            for (int i = 0; i < tm; i++) {
                const __m256 dv = _mm256_set1_ps(d[i][b / nsb]);
#pragma GCC unroll 2
                for (int v = 0; v < tv; v++) {
                    float *q = fm[i] + 8 * v;
                    _mm256_store_ps(q, _mm256_fmadd_ps(f[i][v], dv, _mm256_load_ps(q)));
                    f[i][v] = _mm256_setzero_ps();
                }
            }
    }
    if (nsb > 1)
#pragma GCC unroll 4
        for (int i = 0; i < tm; i++)
#pragma GCC unroll 2
            for (int v = 0; v < tv; v++) f[i][v] = _mm256_load_ps(fm[i] + 8 * v);
    put_tile(tm, tv, f, mr, C, ldc, nc, add);
}

/* One block of the integer-scale tile: its bk/4 k-quads' products summed
 * in int16, `run` at a time, then vpmaddwd by the block's scales sc (the
 * int16 pair (s, s) per row) into the super-block's int32 sums.  Q6_K
 * (bk 16) swaps vpmaddubsw's operands: its activations are the unsigned
 * bytes x + 128, its quants q − 32 signed. */
INLINE T256 void isc_block(const int tm, const int tv, const int bk, const int run,
                           const uint8_t *bp, const int32_t *sc, const int8_t *const *a, int64_t k,
                           __m256i acc[IM][2]) {
#pragma GCC unroll 4
    for (int kq = 0; kq < bk / 4; kq += run) {
        __m256i p[IM][2];
#pragma GCC unroll 8
        for (int u = 0; u < run; u++) {
            __m256i w[2];
#pragma GCC unroll 2
            for (int v = 0; v < tv; v++)
                w[v] = _mm256_loadu_si256((const __m256i *)(bp + (size_t)(kq + u) * 4 * IG + 32 * v));
#pragma GCC unroll 4
            for (int i = 0; i < tm; i++) {
                const __m256i xb = bcast4(a[i] + k + 4 * (kq + u));
#pragma GCC unroll 2
                for (int v = 0; v < tv; v++) {
                    const __m256i pr = bk == 16 ? _mm256_maddubs_epi16(xb, w[v])
                                                : _mm256_maddubs_epi16(w[v], xb);
                    p[i][v] = u == 0 ? pr : _mm256_add_epi16(p[i][v], pr);
                    __asm__("" : "+x"(p[i][v])); /* chains, not trees */
                }
            }
        }
#pragma GCC unroll 2
        for (int v = 0; v < tv; v++) {
            const __m256i s = _mm256_loadu_si256((const __m256i *)(sc + 8 * v));
#pragma GCC unroll 4
            for (int i = 0; i < tm; i++)
                acc[i][v] = _mm256_add_epi32(acc[i][v], _mm256_madd_epi16(p[i][v], s));
        }
    }
}

/* The K-quants on the integer-scale panel (kind->isc, kernels/simd.h): tm
 * tokens x 8·tv rows over nblk blocks of bk.  The sums stay exact integers
 * for a whole super-block, the mins' term too (vpmaddwd of the min pairs
 * by the activations' block-sum pairs), so each super-block takes one f32
 * step: f += dx·(d·Σ sc·q·x − dmin·Σ mn·Σx).  Q6_K's offset is the
 * weights' own: Σ sc·(q − 32)·(x + 128) less the row's 128·Σ sc·Σ(q − 32),
 * so f += dx·d·(that difference), with no per-token term.  B: the group
 * at this tile's first row, 256/bk·bbytes bytes per super-block. */
INLINE T256 void isc_tile(const int tm, const int tv, const int bk, const int run, int64_t nblk,
                          const int8_t *A, int64_t lda, const float *dx, int64_t ldx,
                          const void *mb, int64_t ldm, int mr, const uint8_t *B, size_t bbytes,
                          int nc, float *C, int64_t ldc, bool add) {
    const int nb = 256 / bk;
    /* the rows' activations alone live through the blocks: with the scale
     * and m pointers of mm_i8_rows too, GCC kept them in memory */
    const int8_t *a[IM];
#pragma GCC unroll 4
    for (int i = 0; i < tm; i++) a[i] = A + (i < mr ? i : mr - 1) * lda;
    __m256 f[IM][2];
#pragma GCC unroll 4
    for (int i = 0; i < tm; i++)
#pragma GCC unroll 2
        for (int v = 0; v < tv; v++) f[i][v] = _mm256_setzero_ps();
    for (int64_t sb = 0; sb < nblk / nb; sb++) {
        const uint8_t *sp = B + (size_t)(sb * nb) * bbytes;
        const int32_t *sc = (const int32_t *)(sp + 256 * IG), *mn = sc + nb * IG;
        const float *d = (const float *)(mn + nb / 2 * IG), *dmin = d + IG;
        __m256i acc[IM][2];
#pragma GCC unroll 4
        for (int i = 0; i < tm; i++)
#pragma GCC unroll 2
            for (int v = 0; v < tv; v++) acc[i][v] = _mm256_setzero_si256();
        for (int j = 0; j < nb; j++)
            isc_block(tm, tv, bk, run, sp + (size_t)(j * bk) * IG, sc + j * IG, a,
                      256 * sb + bk * j, acc);
#pragma GCC unroll 4
        for (int i = 0; i < tm; i++) {
            const int64_t row = i < mr ? i : mr - 1;
            const int32_t *bs = (const int32_t *)mb + row * ldm + nb * sb; /* pair c in slot 2c */
            const __m256 dv = _mm256_set1_ps(dx[row * ldx + sb]);
            if (bk == 16) { /* Q6_K: the correction in mn's first slot */
#pragma GCC unroll 2
                for (int v = 0; v < tv; v++) {
                    const __m256i cw = _mm256_loadu_si256((const __m256i *)(mn + 8 * v));
                    const __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(acc[i][v], cw)),
                                                   _mm256_loadu_ps(d + 8 * v));
                    f[i][v] = _mm256_fmadd_ps(t, dv, f[i][v]);
                }
                continue;
            }
#pragma GCC unroll 2
            for (int v = 0; v < tv; v++) {
                __m256i m = _mm256_setzero_si256();
#pragma GCC unroll 8
                for (int c = 0; c < nb / 2; c++) {
                    const __m256i mins = _mm256_loadu_si256((const __m256i *)(mn + c * IG + 8 * v));
                    m = _mm256_add_epi32(m, _mm256_madd_epi16(mins, _mm256_set1_epi32(bs[2 * c])));
                }
                const __m256 dm = _mm256_mul_ps(_mm256_cvtepi32_ps(m), _mm256_loadu_ps(dmin + 8 * v));
                const __m256 t =
                    _mm256_fmsub_ps(_mm256_cvtepi32_ps(acc[i][v]), _mm256_loadu_ps(d + 8 * v), dm);
                f[i][v] = _mm256_fmadd_ps(t, dv, f[i][v]);
            }
        }
    }
    put_tile(tm, tv, f, mr, C, ldc, nc, add);
}

/* 4 tokens x 16 rows: against 4 x 8, 2 x 16 and 3 x 16, the K-quants 10-15%
 * faster, Q8_0 the same (one thread, 1024 -> 3584 over 512 tokens, Zen 4) */
enum { TM = 4, TV = 2 };
#define I8_TILE_ARGS int64_t nblk, const int8_t *A, int64_t lda, const float *dx, int64_t ldx, \
    const void *mb, int64_t ldm, int mr, const uint8_t *B, size_t bbytes, int nc, float *C,    \
    int64_t ldc, bool add
#define I8_TILE_PASS nblk, A, lda, dx, ldx, mb, ldm, mr, B, bbytes, nc, C, ldc, add
typedef void (*i8_tile_fn)(I8_TILE_ARGS);

/* vpmaddubsw: Q8_0 signed (per-32 activations); the K-quants on the
 * integer-scale panel, Q4_K's 8 k-quads in int16 at once, Q5_K's 4, Q6_K's 2 */
T256 static void i8_tile_q8(I8_TILE_ARGS) { i8_tile(DP_MADDUBS, TM, TV, 32, 0, 1, I8_TILE_PASS); }
T256 static void isc_tile_q4(I8_TILE_ARGS) { isc_tile(TM, TV, 32, 8, I8_TILE_PASS); }
T256 static void isc_tile_q5(I8_TILE_ARGS) { isc_tile(TM, TV, 32, 4, I8_TILE_PASS); }
T256 static void isc_tile_q6(I8_TILE_ARGS) { isc_tile(TM, TV, 16, 2, I8_TILE_PASS); }

/* vpdpbusd (sfx _vex, _evex), every k-quad one instruction: Q8_0 unsigned
 * with the integer −128·Σq correction, Q4_K / Q5_K and Q6_K (per 256) with
 * f32 scales per block. */
#define I8_VNNI_TILES(dp, sfx)                                                                \
    T256 static void i8_tile_q8##sfx(I8_TILE_ARGS) {                                         \
        i8_tile(dp, TM, TV, 32, 1, 1, I8_TILE_PASS);                                         \
    }                                                                                        \
    T256 static void i8_tile_q45##sfx(I8_TILE_ARGS) {                                        \
        i8_tile(dp, TM, TV, 32, 2, 8, I8_TILE_PASS);                                         \
    }                                                                                        \
    T256 static void i8_tile_q6##sfx(I8_TILE_ARGS) {                                         \
        i8_tile(dp, TM, TV, 16, 1, 16, I8_TILE_PASS);                                        \
    }                                                                                        \
    T256 static i8_tile_fn i8_pick##sfx(const mm_i8_kind *kind) {                            \
        return kind->bk == 16 ? i8_tile_q6##sfx : kind->sym ? i8_tile_q8##sfx : i8_tile_q45##sfx; \
    }
I8_VNNI_TILES(DP_VEX, _vex)
I8_VNNI_TILES(DP_EVEX, _evex)

/* The panel as tiles of one kind; the stored rows at next (may be NULL)
 * brought into L2 a few lines per tile call. */
T256 static void i8_panel(i8_tile_fn tile, const mm_i8_kind *kind, const mm_i8_act *a, int64_t T,
                          int64_t k0, int64_t kc, const uint8_t *panel, int64_t np, float *y,
                          int64_t ldy, bool add, const mm_prefetch *next) {
    const int64_t nblk = kc / kind->bk, ldx = a->ld / kind->ab, ldm = a->ld / kind->bk;
    const size_t gbytes = mm_i8_group_bytes(kind, kc), bbytes = gbytes / (size_t)nblk;
    mm_pf_cursor pf = mm_pf_start(next, (T + TM - 1) / TM * ((np + 8 * TV - 1) / (8 * TV)));
    for (int64_t t = 0; t < T; t += TM) {
        const int mr = (int)(T - t < TM ? T - t : TM);
        const int8_t *A = a->q + t * a->ld + k0;
        const float *dx = a->dx + t * ldx + k0 / kind->ab;
        const void *mb = (const char *)a->mb + (size_t)(t * ldm + k0 / kind->bk) * 4;
        for (int64_t g = 0; g * IG < np; g++) {
            const int64_t rows = np - g * IG < IG ? np - g * IG : IG;
            for (int c0 = 0; c0 < rows; c0 += 8 * TV) {
                const int nc = (int)(rows - c0 < 8 * TV ? rows - c0 : 8 * TV);
                mm_pf_step(&pf);
                tile(nblk, A, a->ld, dx, ldx, mb, ldm, mr, panel + g * gbytes + 4 * (size_t)c0,
                     bbytes, nc, y + t * ldy + g * IG + c0, ldy, add);
            }
        }
    }
}

T256 void avx2_i8_panel(const mm_i8_kind *kind, const mm_i8_act *a, int64_t T, int64_t k0,
                        int64_t kc, const uint8_t *panel, int64_t np, float *y, int64_t ldy,
                        bool add, const mm_prefetch *pf) {
    static const i8_tile_fn isc[3] = {isc_tile_q4, isc_tile_q5, isc_tile_q6};
    i8_panel(kind->isc ? isc[kind->isc - 4] : i8_tile_q8, kind, a, T, k0, kc, panel, np, y, ldy,
             add, pf);
}

T256 void avx2_vnni_i8_panel(const mm_i8_kind *kind, const mm_i8_act *a, int64_t T, int64_t k0,
                             int64_t kc, const uint8_t *panel, int64_t np, float *y, int64_t ldy,
                             bool add, const mm_prefetch *pf) {
    i8_panel(i8_pick_vex(kind), kind, a, T, k0, kc, panel, np, y, ldy, add, pf);
}

T256 void avx2_vnni_evex_i8_panel(const mm_i8_kind *kind, const mm_i8_act *a, int64_t T,
                                  int64_t k0, int64_t kc, const uint8_t *panel, int64_t np,
                                  float *y, int64_t ldy, bool add, const mm_prefetch *pf) {
    i8_panel(i8_pick_evex(kind), kind, a, T, k0, kc, panel, np, y, ldy, add, pf);
}

/* ==== peak loop ================================================================= */

#define R12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define KEEP(v) __asm__ volatile("" : "+v"(v));

T256 static double peak_fma(int64_t iters) {
    __m256 b = _mm256_set1_ps(1.0000001f), c = _mm256_set1_ps(1e-7f);
#define DF(i) __m256 a##i = _mm256_set1_ps((float)(i));
    R12(DF)
    for (int64_t k = 0; k < iters; k++) {
#define FF(i) a##i = _mm256_fmadd_ps(a##i, b, c); KEEP(a##i)
        R12(FF)
    }
    float s = 0;
#define SF(i) s += _mm256_cvtss_f32(a##i);
    R12(SF)
    return (double)iters * 12 * 16 + (s == 12345.678f ? 1 : 0);
}

T256 static double peak_maddubs(int64_t iters) {
    const __m256i b = _mm256_set1_epi8(1);
#define DI(i) __m256i a##i = _mm256_set1_epi8((char)(i));
    R12(DI)
    for (int64_t k = 0; k < iters; k++) {
#define FI(i) a##i = _mm256_maddubs_epi16(a##i, b); KEEP(a##i)
        R12(FI)
    }
    int s = 0;
#define SI(i) s += _mm256_extract_epi16(a##i, 0);
    R12(SI)
    return (double)iters * 12 * 64 + (s == 12345 ? 1 : 0);
}

/* 12 chains of ymm vpdpbusd (a lane: 4 products and their sum, 8 operations) */
INLINE T256 double peak_dpbusd(const int dp, int64_t iters) {
    const __m256i b = _mm256_set1_epi8(1);
    R12(DI)
    for (int64_t k = 0; k < iters; k++) {
#define FD(i) a##i = dpbusd256(dp, a##i, a##i, b);
        R12(FD)
    }
    int s = 0;
    R12(SI)
    return (double)iters * 12 * 64 + (s == 12345 ? 1 : 0);
}

T256 static double peak_dpbusd_vex(int64_t iters) { return peak_dpbusd(DP_VEX, iters); }
T256 static double peak_dpbusd_evex(int64_t iters) { return peak_dpbusd(DP_EVEX, iters); }

double avx2_peak(int kind, int64_t iters) {
    switch (kind) {
    case 2: return peak_maddubs(iters);
    case 3: return peak_dpbusd_vex(iters);
    case 4: return peak_dpbusd_evex(iters);
    default: return peak_fma(iters);
    }
}

#else /* not x86-64: never called */
void avx2_dot_f32(int64_t kc, const float *x, int64_t ldx, int64_t T, const float *w,
                  int64_t ldw, int64_t np, float *y, int64_t ldy, bool add, const mm_prefetch *pf) {}
void avx2_dot_w16(bool f16, int64_t kc, const float *x, int64_t ldx, int64_t T, const uint16_t *w,
                  int64_t ldw, int64_t np, float *y, int64_t ldy, bool add) {}
void avx2_widen_w16(bool f16, const uint16_t *w, int64_t ldw, int64_t nr, int64_t kc, float *dst,
                    int64_t ldd) {}
void avx2_gemm_nn(int64_t m, int64_t n, int64_t k, const float *A, int64_t rsa, int64_t csa,
                  const float *B, int64_t ldb, float *C, int64_t ldc, bool add) {}
void avx2_exp(const float *x, float *y, int64_t n) {}
void avx2_silu_mul(float *x, const float *g, int64_t n) {}
void avx2_mul_silu(float *x, const float *g, int64_t n) {}
void avx2_mul_sigmoid(float *x, const float *g, int64_t n) {}
void avx2_conv_silu_row(const float *hist, const float *wt, int64_t ld, int first, int K,
                        float *o, int64_t n) {}
void avx2_sigmoid(float *x, int64_t n) {}
void avx2_rmsnorm(float *y, const float *x, const float *w, int64_t n, int64_t rows, float eps) {}
void avx2_l2norm(float *x, int64_t n, int64_t rows, float eps) {}
double avx2_peak(int kind, int64_t iters) { return 0; }
void avx2_act_i8(const mm_i8_kind *kind, const float *x, int64_t in, int64_t t0, int64_t t1,
                 int8_t *q, float *dx, void *mb) {}
void avx2_pack_i8(const mm_i8_kind *kind, const mm_weight *w, int64_t r0, int64_t np, int64_t k0,
                  int64_t kc, uint8_t *dst) {}
void avx2_i8_panel(const mm_i8_kind *kind, const mm_i8_act *a, int64_t T, int64_t k0,
                   int64_t kc, const uint8_t *panel, int64_t np, float *y, int64_t ldy,
                   bool add, const mm_prefetch *pf) {}
void avx2_vnni_i8_panel(const mm_i8_kind *kind, const mm_i8_act *a, int64_t T, int64_t k0,
                        int64_t kc, const uint8_t *panel, int64_t np, float *y, int64_t ldy,
                        bool add, const mm_prefetch *pf) {}
void avx2_vnni_evex_i8_panel(const mm_i8_kind *kind, const mm_i8_act *a, int64_t T, int64_t k0,
                             int64_t kc, const uint8_t *panel, int64_t np, float *y,
                             int64_t ldy, bool add, const mm_prefetch *pf) {}
#endif
