/*
 * kernels/simd_avx512.c — the AVX-512 kernels behind kernels/simd.h:
 * dot-form f32 / BF16 micro-kernels, the broadcast-form f32 GEMM, int8 VNNI
 * micro-kernels on packed panels, and the activation conversions.
 *
 * Each function carries its own target attribute, so this file builds with
 * the default (baseline x86-64) flags and the binary still runs on a CPU
 * without AVX-512: nothing here is called unless cpu_choose picked avx512.
 * Micro-tiles are small constant-bound loops over arrays of vectors; GCC
 * unrolls them completely and keeps every accumulator in a register.
 */
#include "kernels/simd.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "core/dtype.h"
#include "kernels/dequant.h"
#include "kernels/kquant_x86.h"
#include "kernels/transpose_x86.h"

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma")))
#define T512BF __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,avx512bf16")))
#define T512VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,avx512vnni")))
#define INLINE static inline __attribute__((always_inline))

/* The first n of 16 / 32 lanes. */
INLINE T512 __mmask16 lanes16(int64_t n) {
    return n <= 0 ? 0 : n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1);
}
INLINE T512 __mmask32 lanes32(int64_t n) {
    return n <= 0 ? 0 : n >= 32 ? (__mmask32)0xFFFFFFFFu : (__mmask32)((1u << n) - 1);
}

/* Gather offsets of 16 rows `bytes` apart: lane i holds i·bytes (< 2^31). */
INLINE T512 __m512i lane_offsets(int64_t bytes) {
    const __m512i i = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    return _mm512_mullo_epi32(i, _mm512_set1_epi32((int)bytes));
}

/* Four horizontal sums as one vector {Σa, Σb, Σc, Σd}. */
INLINE T512 __m128 hsum4(__m512 a, __m512 b, __m512 c, __m512 d) {
#define HALVES(v) _mm256_add_ps(_mm512_castps512_ps256(v), \
                                _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)))
    __m256 ab = _mm256_hadd_ps(HALVES(a), HALVES(b));
    __m256 cd = _mm256_hadd_ps(HALVES(c), HALVES(d));
#undef HALVES
    __m256 s = _mm256_hadd_ps(ab, cd);
    return _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
}

/* ==== dot form ============================================================== */

enum { RM = MM_DOT_RM, RN = MM_DOT_RN };

/* Store the 6 x 4 tile: rows i < mr, columns j < nr. */
INLINE T512 void dot_store(__m512 c[RM][RN], int mr, int nr, float *C, int64_t ldc, bool add) {
    const __mmask8 sm = (__mmask8)((1u << nr) - 1);
#pragma GCC unroll 6
    for (int i = 0; i < RM; i++) {
        if (i >= mr) break;
        __m128 s = hsum4(c[i][0], c[i][1], c[i][2], c[i][3]);
        float *p = C + i * ldc;
        if (add) s = _mm_add_ps(s, _mm_maskz_loadu_ps(sm, p));
        _mm_mask_storeu_ps(p, sm, s);
    }
}

/* What a dot-form weight row holds: f32, or 16-bit floats widened (exactly)
 * to f32 in registers. */
enum { W_F32, W_BF16, W_F16 };

/* 16-bit rows are prefetched this many elements ahead (1 KB): the head's
 * products over 4 to 14 tokens read their weights once, from memory, four
 * rows at a time, and with the hardware prefetcher alone they waited on
 * memory (1024 -> 4096 over 14 tokens from DRAM on 2 threads: 0.81 -> 0.71
 * ms). */
enum { PF_AHEAD = 512 };

/* 16 weights of row b from k on as f32; masked (tails): only the lanes of
 * m, the others 0 (a masked load costs Intel an ALU uop beside the load). */
INLINE T512 __m512 load_w(const int wt, const bool masked, const void *b, int64_t k,
                          __mmask16 m) {
    if (wt == W_F32)
        return masked ? _mm512_maskz_loadu_ps(m, (const float *)b + k)
                      : _mm512_loadu_ps((const float *)b + k);
    const uint16_t *h16 = (const uint16_t *)b + k;
    __m256i h = masked ? _mm256_maskz_loadu_epi16(m, h16)
                       : _mm256_loadu_si256((const __m256i *)h16);
    if (wt == W_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* R (<= 6) tokens x 4 rows, f32 activations: rows past nr repeat the last
 * valid one.  R is a constant, so a short token tile does only its own
 * FMAs (the head's products have 1 to 18 tokens).  The lanes sum the same
 * k whatever wt is, so a 16-bit row gives the bits its f32 decoding gives. */
INLINE T512 void dot_tile(const int wt, const int R, int64_t k, const float *A, int64_t lda,
                          const void *B, int64_t ldb, int nr, float *C, int64_t ldc, bool add) {
    const size_t es = wt == W_F32 ? 4 : 2;
    __m512 c[RM][RN];
    const float *a[RM];
    const void *b[RN];
#pragma GCC unroll 6
    for (int i = 0; i < R; i++) {
        a[i] = A + i * lda;
#pragma GCC unroll 4
        for (int j = 0; j < RN; j++) c[i][j] = _mm512_setzero_ps();
    }
#pragma GCC unroll 4
    for (int j = 0; j < RN; j++)
        b[j] = (const char *)B + (size_t)((j < nr ? j : nr - 1) * ldb) * es;
    int64_t kk = 0;
    for (; kk + 16 <= k; kk += 16) {
        __m512 w[RN];
        if (wt != W_F32 && (kk & 16)) /* a line per row every 32 elements */
#pragma GCC unroll 4
            for (int j = 0; j < RN; j++)
                _mm_prefetch((const char *)b[j] + (kk + PF_AHEAD) * es, _MM_HINT_T0);
#pragma GCC unroll 4
        for (int j = 0; j < RN; j++) w[j] = load_w(wt, false, b[j], kk, 0);
#pragma GCC unroll 6
        for (int i = 0; i < R; i++) {
            __m512 x = _mm512_loadu_ps(a[i] + kk);
#pragma GCC unroll 4
            for (int j = 0; j < RN; j++) c[i][j] = _mm512_fmadd_ps(x, w[j], c[i][j]);
        }
    }
    if (kk < k) {
        const __mmask16 m = lanes16(k - kk);
        __m512 w[RN];
#pragma GCC unroll 4
        for (int j = 0; j < RN; j++) w[j] = load_w(wt, true, b[j], kk, m);
#pragma GCC unroll 6
        for (int i = 0; i < R; i++) {
            __m512 x = _mm512_maskz_loadu_ps(m, a[i] + kk);
#pragma GCC unroll 4
            for (int j = 0; j < RN; j++) c[i][j] = _mm512_fmadd_ps(x, w[j], c[i][j]);
        }
    }
    dot_store(c, R, nr, C, ldc, add);
}

/* 6 tokens x 4 rows, BF16 pairs into f32 (vdpbf16ps). */
T512BF static void dot_bf16_tile(int64_t k, const uint16_t *A, int64_t lda, int mr,
                                 const uint16_t *B, int64_t ldb, int nr, float *C, int64_t ldc,
                                 bool add) {
    __m512 c[RM][RN];
    const uint16_t *a[RM], *b[RN];
#pragma GCC unroll 6
    for (int i = 0; i < RM; i++) {
        a[i] = A + (i < mr ? i : mr - 1) * lda;
#pragma GCC unroll 4
        for (int j = 0; j < RN; j++) c[i][j] = _mm512_setzero_ps();
    }
#pragma GCC unroll 4
    for (int j = 0; j < RN; j++) b[j] = B + (j < nr ? j : nr - 1) * ldb;
    int64_t kk = 0;
    for (; kk + 32 <= k; kk += 32) {
        __m512i w[RN];
#pragma GCC unroll 4
        for (int j = 0; j < RN; j++) w[j] = _mm512_loadu_si512(b[j] + kk);
#pragma GCC unroll 6
        for (int i = 0; i < RM; i++) {
            __m512i x = _mm512_loadu_si512(a[i] + kk);
#pragma GCC unroll 4
            for (int j = 0; j < RN; j++)
                c[i][j] = _mm512_dpbf16_ps(c[i][j], (__m512bh)x, (__m512bh)w[j]);
        }
    }
    if (kk < k) {
        const __mmask32 m = lanes32(k - kk);
        __m512i w[RN];
#pragma GCC unroll 4
        for (int j = 0; j < RN; j++) w[j] = _mm512_maskz_loadu_epi16(m, b[j] + kk);
#pragma GCC unroll 6
        for (int i = 0; i < RM; i++) {
            __m512i x = _mm512_maskz_loadu_epi16(m, a[i] + kk);
#pragma GCC unroll 4
            for (int j = 0; j < RN; j++)
                c[i][j] = _mm512_dpbf16_ps(c[i][j], (__m512bh)x, (__m512bh)w[j]);
        }
    }
    dot_store(c, mr, nr, C, ldc, add);
}

/* Tiles over the panel: token tiles outer, so one tile's x rows (6 x kc)
 * stay in L1 while the panel's rows stream from L2. */
INLINE T512 void dot_panel(const int wt, int64_t kc, const float *x, int64_t ldx, int64_t T,
                           const void *w, int64_t ldw, int64_t np, float *y, int64_t ldy,
                           bool add) {
    const size_t es = wt == W_F32 ? 4 : 2;
    for (int64_t t = 0; t < T; t += RM) {
        const int mr = (int)(T - t < RM ? T - t : RM);
        for (int64_t r = 0; r < np; r += RN) {
            const int nr = (int)(np - r < RN ? np - r : RN);
            const void *wr = (const char *)w + (size_t)(r * ldw) * es;
            const float *xt = x + t * ldx;
            float *yt = y + t * ldy + r;
            switch (mr) {
#define DOT_TILE(R) dot_tile(wt, R, kc, xt, ldx, wr, ldw, nr, yt, ldy, add); break
            case 1: DOT_TILE(1);
            case 2: DOT_TILE(2);
            case 3: DOT_TILE(3);
            case 4: DOT_TILE(4);
            case 5: DOT_TILE(5);
            default: DOT_TILE(6);
#undef DOT_TILE
            }
        }
    }
}

T512 void avx512_dot_f32(int64_t kc, const float *x, int64_t ldx, int64_t T, const float *w,
                         int64_t ldw, int64_t np, float *y, int64_t ldy, bool add) {
    dot_panel(W_F32, kc, x, ldx, T, w, ldw, np, y, ldy, add);
}

T512 void avx512_dot_w16(bool f16, int64_t kc, const float *x, int64_t ldx, int64_t T,
                         const uint16_t *w, int64_t ldw, int64_t np, float *y, int64_t ldy,
                         bool add) {
    if (f16) dot_panel(W_F16, kc, x, ldx, T, w, ldw, np, y, ldy, add);
    else dot_panel(W_BF16, kc, x, ldx, T, w, ldw, np, y, ldy, add);
}

T512BF void avx512_dot_bf16(int64_t kc, const uint16_t *x, int64_t ldx, int64_t T,
                            const uint16_t *w, int64_t ldw, int64_t np, float *y, int64_t ldy,
                            bool add) {
    for (int64_t t = 0; t < T; t += RM) {
        int mr = (int)(T - t < RM ? T - t : RM);
        for (int64_t r = 0; r < np; r += RN) {
            int nr = (int)(np - r < RN ? np - r : RN);
            dot_bf16_tile(kc, x + t * ldx, ldx, mr, w + r * ldw, ldw, nr, y + t * ldy + r, ldy, add);
        }
    }
}

/* ==== broadcast form, f32 ==================================================== */

/* c += A(i,k) · b.  Folded: the broadcast is the FMA's {1to16} memory
 * operand.  Else xb, one vbroadcastss shared by the tile row's FMAs. */
INLINE T512 __m512 bc_fma(__m512 c, __m512 b, const float *a, __m512 xb, const bool fold) {
    if (!fold) return _mm512_fmadd_ps(xb, b, c);
    __asm__("vfmadd231ps %1%{1to16%}, %2, %0" : "+v"(c) : "m"(*a), "v"(b));
    return c;
}

/* C[i][j] (=, +=) Σ_k A[i·rsa + k·csa]·B[k·ldb + j] for i < mr, j < nc on an
 * R x 16V register tile; rows past mr repeat the last valid one.  full: nc
 * is all 16V columns, so B is loaded unmasked (a masked load costs Intel an
 * ALU uop beside the load, on the ports the FMAs need). */
INLINE T512 void bc_tile(const int R, const int V, const bool fold, const bool full, int64_t k,
                         const float *A, int64_t rsa, int64_t csa, int mr, const float *B,
                         int64_t ldb, int nc, float *C, int64_t ldc, bool add) {
    __m512 c[8][4];
    const float *a[8];
    __mmask16 m[4];
#pragma GCC unroll 8
    for (int i = 0; i < R; i++) {
        a[i] = A + (i < mr ? i : mr - 1) * rsa;
#pragma GCC unroll 4
        for (int j = 0; j < V; j++) c[i][j] = _mm512_setzero_ps();
    }
#pragma GCC unroll 4
    for (int j = 0; j < V; j++) m[j] = lanes16(nc - 16 * j);
    for (int64_t kk = 0; kk < k; kk++, B += ldb) {
        __m512 b[4];
#pragma GCC unroll 4
        for (int j = 0; j < V; j++)
            b[j] = full ? _mm512_loadu_ps(B + 16 * j) : _mm512_maskz_loadu_ps(m[j], B + 16 * j);
        const int64_t o = kk * csa;
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) {
            const __m512 xb = fold ? _mm512_setzero_ps() : _mm512_set1_ps(a[i][o]);
#pragma GCC unroll 4
            for (int j = 0; j < V; j++) c[i][j] = bc_fma(c[i][j], b[j], a[i] + o, xb, fold);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; i++) {
        if (i >= mr) break;
        float *p = C + i * ldc;
#pragma GCC unroll 4
        for (int j = 0; j < V; j++) {
            __m512 v = c[i][j];
            if (add) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m[j], p + 16 * j));
            _mm512_mask_storeu_ps(p + 16 * j, m[j], v);
        }
    }
}

typedef void bc_tile_fn(int64_t k, const float *A, int64_t rsa, int64_t csa, int mr,
                        const float *B, int64_t ldb, int nc, float *C, int64_t ldc, bool add);

/* The tiles: 8 rows x 48 columns, and 6 x 64 for widths that fill it. */
#define BC_TILE(name, R, V, fold, full)                                                        \
    T512 static void name(int64_t k, const float *A, int64_t rsa, int64_t csa, int mr,         \
                          const float *B, int64_t ldb, int nc, float *C, int64_t ldc,          \
                          bool add) {                                                          \
        bc_tile(R, V, fold, full, k, A, rsa, csa, mr, B, ldb, nc, C, ldc, add);                \
    }
BC_TILE(bc48, 8, 3, false, false)
BC_TILE(bc48_full, 8, 3, false, true)
BC_TILE(bc48_fold, 8, 3, true, false)
BC_TILE(bc48_fold_full, 8, 3, true, true)
BC_TILE(bc64, 6, 4, false, false)
BC_TILE(bc64_full, 6, 4, false, true)
BC_TILE(bc64_fold, 6, 4, true, false)
BC_TILE(bc64_fold_full, 6, 4, true, true)
#undef BC_TILE

T512 void avx512_gemm_nn(bool fold, int64_t m, int64_t n, int64_t k, const float *A, int64_t rsa,
                         int64_t csa, const float *B, int64_t ldb, float *C, int64_t ldc,
                         bool add) {
    /* [64 wide][fold][full] */
    static bc_tile_fn *const tiles[2][2][2] = {
        {{bc48, bc48_full}, {bc48_fold, bc48_fold_full}},
        {{bc64, bc64_full}, {bc64_fold, bc64_fold_full}},
    };
    if (m <= 0 || n <= 0) return;
    if (k <= 0) {
        if (!add)
            for (int64_t i = 0; i < m; i++) memset(C + i * ldc, 0, (size_t)n * sizeof *C);
        return;
    }
    /* the column tile that wastes fewer lanes: 64 wide (6 rows) or 48 (8 rows) */
    const bool w64 = (n + 63) / 64 * 64 < (n + 47) / 48 * 48;
    const int NW = w64 ? 64 : 48, MR = w64 ? 6 : 8;
    for (int64_t j = 0; j < n; j += NW) {
        int nc = (int)(n - j < NW ? n - j : NW);
        bc_tile_fn *tile = tiles[w64][fold][nc == NW];
        for (int64_t i = 0; i < m; i += MR) {
            int mr = (int)(m - i < MR ? m - i : MR);
            tile(k, A + i * rsa, rsa, csa, mr, B + j, ldb, nc, C + i * ldc + j, ldc, add);
        }
    }
}

T512 void avx512_transpose(int64_t rows, int64_t cols, const float *src, int64_t lds, float *dst,
                           int64_t ldd) {
    for (int64_t r0 = 0; r0 < rows; r0 += 16) {
        const int nr = (int)(rows - r0 < 16 ? rows - r0 : 16);
        const __mmask16 rm = lanes16(nr);
        for (int64_t c0 = 0; c0 < cols; c0 += 16) {
            const int nc = (int)(cols - c0 < 16 ? cols - c0 : 16);
            const __mmask16 cm = lanes16(nc);
            __m512i b[16]; /* the bits moved as dwords: exact */
            for (int i = 0; i < 16; i++)
                b[i] = i < nr ? _mm512_maskz_loadu_epi32(cm, src + (r0 + i) * lds + c0)
                              : _mm512_setzero_si512();
            x86_transpose16x16(b);
            for (int c = 0; c < nc; c++)
                _mm512_mask_storeu_epi32(dst + (c0 + c) * ldd + r0, rm, b[c]);
        }
    }
}

/* mm_round_bf16, 16 at a time: the same integer rounding, so the same bits. */
T512 void avx512_round_bf16(const float *x, int64_t n, float *dst) {
    const __m512i half = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1);
    const __m512i top = _mm512_set1_epi32((int)0xffff0000u);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = lanes16(n - i);
        __m512i u = _mm512_maskz_loadu_epi32(m, x + i);
        __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
        u = _mm512_add_epi32(u, _mm512_add_epi32(half, odd));
        _mm512_mask_storeu_epi32(dst + i, m, _mm512_and_si512(u, top));
    }
}

/* 16-bit float rows [0, np) (np <= 48) x k [0, kc) of w (BF16 or F16, ldw
 * elements per row) widened to f32 columns: dst[k·48 + r].  One gather takes
 * a k pair of 16 rows: a BF16 is the top half of an f32 (a shift or a mask
 * widens it), an F16 goes through vcvtph2ps. */
T512 void avx512_pack_f32_panel(bool f16, const uint16_t *w, int64_t ldw, int64_t np, int64_t kc,
                                float *dst) {
    const __m512i rows = lane_offsets(ldw * 2);
    const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
    for (int64_t r0 = 0; r0 < np; r0 += 16) {
        const __mmask16 m = lanes16(np - r0);
        const uint16_t *base = w + r0 * ldw;
        float *d = dst + r0;
        int64_t k = 0;
        for (; k + 2 <= kc; k += 2, d += 2 * MM_BC_NP) {
            __m512i g = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, rows, base + k, 1);
            if (f16) {
                _mm512_storeu_ps(d, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(g)));
                g = _mm512_srli_epi32(g, 16);
                _mm512_storeu_ps(d + MM_BC_NP, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(g)));
            } else {
                _mm512_storeu_si512(d, _mm512_slli_epi32(g, 16));
                _mm512_storeu_si512(d + MM_BC_NP, _mm512_and_si512(g, hi));
            }
        }
        if (k < kc) /* odd kc: the last k alone (16-bit loads, no read past the row) */
            for (int i = 0; i < 16; i++) {
                const uint16_t h = i < np - r0 ? base[i * ldw + k] : 0;
                d[i] = f16 ? clef_f16_to_f32(h) : clef_bf16_to_f32(h);
            }
    }
}

/* ==== activations ============================================================= */

T512BF void avx512_act_bf16(const float *x, int64_t in, int64_t t0, int64_t t1, uint16_t *dst) {
    for (int64_t t = t0; t < t1; t++) {
        const float *xr = x + t * in;
        uint16_t *d = dst + t * in;
        for (int64_t i = 0; i < in; i += 32) {
            __m512 lo = _mm512_maskz_loadu_ps(lanes16(in - i), xr + i);
            __m512 hi = _mm512_maskz_loadu_ps(lanes16(in - i - 16), xr + i + 16);
            __m512i h = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
            _mm512_mask_storeu_epi16(d + i, lanes32(in - i), h);
        }
    }
}

/* One block of 32: q = round(x/d), d = max|x|/127 (llama.cpp's Q8_0 rule:
 * quantize with 1/d, keep d, for Q8_0 weights rounded through f16).
 * *sum: Σq.  Returns the d the dots use. */
INLINE T512 float quant32(const float *x, bool f16_scale, int8_t *q, int32_t *sum) {
    __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
    __m512 a = _mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1));
    float amax = _mm512_reduce_max_ps(a);
    float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, _mm512_set1_ps(id)));
    __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, _mm512_set1_ps(id)));
    _mm_storeu_si128((__m128i *)q, _mm512_cvtsepi32_epi8(q0));
    _mm_storeu_si128((__m128i *)(q + 16), _mm512_cvtsepi32_epi8(q1));
    *sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
    return f16_scale ? clef_f16_to_f32(clef_f32_to_f16(d)) : d;
}

/* The horizontal reductions (max, or add as int32) of v[0..16) as one
 * vector, lane b from v[b]: four levels that each halve the partials of
 * pairs, 45 uops where 16 separate reductions take about 130. */
INLINE T512 __m512i reduce16(const bool add, __m512i v[16]) {
    static const int32_t idx[4][2][16] = {
        {{0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23},
         {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31}},
        {{0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27},
         {4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31}},
        {{0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29},
         {2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31}},
        {{0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30},
         {1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31}},
    };
    for (int lv = 0, n = 16; lv < 4; lv++, n /= 2) {
        const __m512i i1 = _mm512_loadu_si512(idx[lv][0]), i2 = _mm512_loadu_si512(idx[lv][1]);
        for (int k = 0; k < n / 2; k++) {
            __m512i a = _mm512_permutex2var_epi32(v[2 * k], i1, v[2 * k + 1]);
            __m512i b = _mm512_permutex2var_epi32(v[2 * k], i2, v[2 * k + 1]);
            v[k] = add ? _mm512_add_epi32(a, b)
                       : _mm512_castps_si512(_mm512_max_ps(_mm512_castsi512_ps(a),
                                                           _mm512_castsi512_ps(b)));
        }
    }
    return v[0];
}

/* 256 values with one scale (llama.cpp's Q8_K blocks): q, and the Σq of
 * each 16 as a vector; *d the scale. */
INLINE T512 __m512i quant256(const float *x, int8_t *q, float *d) {
    __m512 a = _mm512_setzero_ps();
    for (int v = 0; v < 16; v++) a = _mm512_max_ps(a, _mm512_abs_ps(_mm512_loadu_ps(x + 16 * v)));
    const float amax = _mm512_reduce_max_ps(a);
    *d = amax / 127.0f;
    const __m512 id = _mm512_set1_ps(*d != 0.0f ? 1.0f / *d : 0.0f);
    __m512i qi[16];
    for (int v = 0; v < 16; v++) {
        qi[v] = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + 16 * v), id));
        _mm_storeu_si128((__m128i *)(q + 16 * v), _mm512_cvtsepi32_epi8(qi[v]));
    }
    return reduce16(true, qi);
}

/* Per 256 (kind->ab 256): dx one d per 256; mb per weight block −off·Σq
 * (sym) or Σq as f32 (the tile applies d once per 256). */
T512 static void act_i8_256(const mm_i8_kind *kind, const float *x, int64_t in, int64_t t0,
                            int64_t t1, int8_t *q, float *dx, void *mb) {
    const int64_t nsb = in / 256, nbk = in / kind->bk, per_sb = 256 / kind->bk;
    const __mmask16 m = lanes16(per_sb);
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 0, 0, 0, 0, 0, 0, 0, 0);
    for (int64_t t = t0; t < t1; t++)
        for (int64_t sb = 0; sb < nsb; sb++) {
            __m512i s = quant256(x + t * in + 256 * sb, q + t * in + 256 * sb, &dx[t * nsb + sb]);
            if (kind->bk == 32) /* the sums of 16 in pairs: one per block of 32 */
                s = _mm512_add_epi32(_mm512_permutexvar_epi32(even, s),
                                     _mm512_permutexvar_epi32(odd, s));
            const int64_t at = t * nbk + sb * per_sb;
            if (kind->sym)
                _mm512_mask_storeu_epi32((int32_t *)mb + at, m,
                                         _mm512_mullo_epi32(s, _mm512_set1_epi32(-kind->off)));
            else _mm512_mask_storeu_ps((float *)mb + at, m, _mm512_cvtepi32_ps(s));
        }
}

/* Sixteen blocks of 32 as quant32 makes them (Q8_0's weights: bk 32,
 * symmetric): dx[0..16) and mb[0..16) = −off·Σq of each. */
INLINE T512 void quant32x16(const mm_i8_kind *kind, const float *x, int8_t *q, float *dx,
                            int32_t *mb) {
    __m512i v[16];
    for (int b = 0; b < 16; b++) {
        __m512 a0 = _mm512_abs_ps(_mm512_loadu_ps(x + 32 * b));
        __m512 a1 = _mm512_abs_ps(_mm512_loadu_ps(x + 32 * b + 16));
        v[b] = _mm512_castps_si512(_mm512_max_ps(a0, a1));
    }
    const __m512 amax = _mm512_castsi512_ps(reduce16(false, v));
    const __m512 d = _mm512_div_ps(amax, _mm512_set1_ps(127.0f));
    const __mmask16 nz = _mm512_cmp_ps_mask(d, _mm512_setzero_ps(), _CMP_NEQ_OQ);
    _Alignas(64) float id[16];
    _mm512_store_ps(id, _mm512_maskz_div_ps(nz, _mm512_set1_ps(1.0f), d));
    __m512 dd = d;
    if (kind->f16_scale) dd = _mm512_cvtph_ps(_mm512_cvtps_ph(d, _MM_FROUND_TO_NEAREST_INT));
    _mm512_storeu_ps(dx, dd);
    for (int b = 0; b < 16; b++) {
        const __m512 ib = _mm512_set1_ps(id[b]);
        __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + 32 * b), ib));
        __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + 32 * b + 16), ib));
        _mm_storeu_si128((__m128i *)(q + 32 * b), _mm512_cvtsepi32_epi8(q0));
        _mm_storeu_si128((__m128i *)(q + 32 * b + 16), _mm512_cvtsepi32_epi8(q1));
        v[b] = _mm512_add_epi32(q0, q1);
    }
    const __m512i sum = reduce16(true, v);
    _mm512_storeu_si512(mb, _mm512_mullo_epi32(sum, _mm512_set1_epi32(-kind->off)));
}

T512 void avx512_act_i8(const mm_i8_kind *kind, const float *x, int64_t in, int64_t t0, int64_t t1,
                        int8_t *q, float *dx, void *mb) {
    if (kind->ab == 256) {
        act_i8_256(kind, x, in, t0, t1, q, dx, mb);
        return;
    }
    /* per 32: Q8_0's (bk 32, symmetric), sixteen blocks at a time */
    const int64_t nb = in / 32;
    int32_t *mi = mb;
    for (int64_t t = t0; t < t1; t++) {
        int64_t b = 0;
        for (; b + 16 <= nb; b += 16)
            quant32x16(kind, x + t * in + 32 * b, q + t * in + 32 * b, dx + t * nb + b,
                       mi + t * nb + b);
        for (; b < nb; b++) {
            int32_t s;
            dx[t * nb + b] = quant32(x + t * in + 32 * b, kind->f16_scale, q + t * in + 32 * b, &s);
            mi[t * nb + b] = -kind->off * s;
        }
    }
}

/* ==== int8 (VNNI) ================================================================ */

enum { IM = MM_I8_RM, IG = MM_I8_G };

/* 4 tokens x 48 rows over nblk weight blocks.  Per block the integer dots
 * accumulate exactly (|Σ| < 2^21), then one scale step in f32:
 *   nsb 1 (one activation scale per block, Q8_0):
 *     facc += f32(isum)·(s·dx)
 *   nsb > 1 (one per nsb blocks, the K-quants' 256):
 *     g += f32(isum)·s [+ m·Σq for asymmetric types], and per nsb blocks
 *     facc += g·dx, g = 0.
 * That saves a multiply per block, and per 256 facc is updated in memory
 * (L1), as the 12 g registers leave no room for it. */
INLINE T512VNNI void i8_tile(const int bk, const bool sym, const int nsb, int64_t nblk,
                             const int8_t *A, int64_t lda, const float *dx, int64_t ldx,
                             const void *mb, int64_t ldm, int mr, const uint8_t *B, int nc,
                             float *C, int64_t ldc, bool add, mm_pf_cursor *pf) {
    const mm_i8_rows r = mm_i8_rows_at(mr, A, lda, dx, ldx, mb, ldm);
    const int8_t *const *a = r.a;
    const float *const *d = r.d, *const *mf = r.mf;
    const int32_t *const *mi = r.mi;
    __m512 f[IM][3];
#pragma GCC unroll 4
    for (int i = 0; i < IM; i++)
#pragma GCC unroll 3
        for (int j = 0; j < 3; j++) f[i][j] = _mm512_setzero_ps();
    _Alignas(64) float fm[IM][IG]; /* nsb > 1: facc */
    if (nsb > 1) memset(fm, 0, sizeof fm);
    for (int64_t b = 0; b < nblk; b++) {
        if (pf) mm_pf_step(pf);
        __m512i acc[IM][3];
#pragma GCC unroll 4
        for (int i = 0; i < IM; i++) {
            __m512i z = sym ? _mm512_set1_epi32(mi[i][b]) : _mm512_setzero_si512();
#pragma GCC unroll 3
            for (int j = 0; j < 3; j++) acc[i][j] = z;
        }
        const int64_t ab = b * bk;
#pragma GCC unroll 8
        for (int kq = 0; kq < bk / 4; kq++, B += 3 * 64) {
            __m512i w0 = _mm512_load_si512(B), w1 = _mm512_load_si512(B + 64),
                    w2 = _mm512_load_si512(B + 128);
#pragma GCC unroll 4
            for (int i = 0; i < IM; i++)
            {
                /* one broadcast for three dots: cheaper here than three
                 * {1to16} memory operands (load ports, not ALUs, limit) */
                __m512i xb = _mm512_broadcastd_epi32(_mm_loadu_si32(a[i] + ab + 4 * kq));
                acc[i][0] = _mm512_dpbusd_epi32(acc[i][0], w0, xb);
                acc[i][1] = _mm512_dpbusd_epi32(acc[i][1], w1, xb);
                acc[i][2] = _mm512_dpbusd_epi32(acc[i][2], w2, xb);
            }
        }
        const float *s = (const float *)B, *m = s + IG;
        B += 2 * IG * sizeof(float);
#pragma GCC unroll 4
        for (int i = 0; i < IM; i++) {
            __m512 dv = _mm512_set1_ps(d[i][nsb > 1 ? 0 : b]);
#pragma GCC unroll 3
            for (int j = 0; j < 3; j++) {
                __m512 sv = _mm512_load_ps(s + 16 * j);
                __m512 sd = nsb > 1 ? sv : _mm512_mul_ps(sv, dv);
                f[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[i][j]), sd, f[i][j]);
                if (!sym) f[i][j] = _mm512_fmadd_ps(_mm512_load_ps(m + 16 * j), _mm512_set1_ps(mf[i][b]), f[i][j]);
            }
        }
        if (nsb > 1 && (b + 1) % nsb == 0) { /* a super-block done: facc += g·dx */
#pragma GCC unroll 4
            for (int i = 0; i < IM; i++) {
                __m512 dv = _mm512_set1_ps(d[i][b / nsb]);
#pragma GCC unroll 3
                for (int j = 0; j < 3; j++) {
                    float *p = &fm[i][16 * j];
                    _mm512_store_ps(p, _mm512_fmadd_ps(f[i][j], dv, _mm512_load_ps(p)));
                    f[i][j] = _mm512_setzero_ps();
                }
            }
        }
    }
    if (nsb > 1)
#pragma GCC unroll 4
        for (int i = 0; i < IM; i++)
#pragma GCC unroll 3
            for (int j = 0; j < 3; j++) f[i][j] = _mm512_load_ps(&fm[i][16 * j]);
    const __mmask16 m0 = lanes16(nc), m1 = lanes16(nc - 16), m2 = lanes16(nc - 32);
#pragma GCC unroll 4
    for (int i = 0; i < IM; i++) {
        if (i >= mr) break;
        float *p = C + i * ldc;
        __m512 v0 = f[i][0], v1 = f[i][1], v2 = f[i][2];
        if (add) {
            v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, p));
            v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, p + 16));
            v2 = _mm512_add_ps(v2, _mm512_maskz_loadu_ps(m2, p + 32));
        }
        _mm512_mask_storeu_ps(p, m0, v0);
        _mm512_mask_storeu_ps(p + 16, m1, v1);
        _mm512_mask_storeu_ps(p + 32, m2, v2);
    }
}

#define I8_TILE_ARGS int64_t nblk, const int8_t *A, int64_t lda, const float *dx, int64_t ldx, \
    const void *mb, int64_t ldm, int mr, const uint8_t *B, int nc, float *C, int64_t ldc,       \
    bool add, mm_pf_cursor *pf
#define I8_TILE_PASS nblk, A, lda, dx, ldx, mb, ldm, mr, B, nc, C, ldc, add, pf
/* Q8_0 (activations per 32); Q4_K / Q5_K and Q6_K (per 256) */
T512VNNI static void i8_tile_32s(I8_TILE_ARGS) { i8_tile(32, true, 1, I8_TILE_PASS); }
T512VNNI static void i8_tile_32a(I8_TILE_ARGS) { i8_tile(32, false, 8, I8_TILE_PASS); }
T512VNNI static void i8_tile_16s(I8_TILE_ARGS) { i8_tile(16, true, 16, I8_TILE_PASS); }

T512VNNI void avx512_i8_panel(const mm_i8_kind *kind, const mm_i8_act *a, int64_t T, int64_t k0,
                              int64_t kc, const uint8_t *panel, int64_t np, float *y, int64_t ldy,
                              bool add, const mm_prefetch *next) {
    void (*tile)(I8_TILE_ARGS) = kind->bk == 16 ? i8_tile_16s : kind->sym ? i8_tile_32s : i8_tile_32a;
    const int64_t nblk = kc / kind->bk, ldx = a->ld / kind->ab, ldm = a->ld / kind->bk;
    const size_t gbytes = mm_i8_group_bytes(kind, kc);
    /* the lines spread over every block of every tile call */
    mm_pf_cursor pf = mm_pf_start(next, (T + IM - 1) / IM * ((np + IG - 1) / IG) * nblk);
    for (int64_t t = 0; t < T; t += IM) {
        int mr = (int)(T - t < IM ? T - t : IM);
        const int8_t *A = a->q + t * a->ld + k0;
        const float *dx = a->dx + t * ldx + k0 / kind->ab;
        const void *mb = (const char *)a->mb + (size_t)(t * ldm + k0 / kind->bk) * 4;
        for (int64_t g = 0; g * IG < np; g++) {
            int nc = (int)(np - g * IG < IG ? np - g * IG : IG);
            tile(nblk, A, a->ld, dx, ldx, mb, ldm, mr, panel + g * gbytes, nc, y + t * ldy + g * IG,
                 ldy, add, pf.at.rows > 0 ? &pf : NULL);
        }
    }
}

/* c[k] = dword k of rows r[0..16) for a 16 x 8 dword block (r as ymm). */
INLINE T512 void transpose16x8(const __m256i r[16], __m512i c[8]) {
    __m512i z[8], t[8], u[8];
    for (int i = 0; i < 8; i++) z[i] = _mm512_inserti64x4(_mm512_castsi256_si512(r[i]), r[i + 8], 1);
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm512_unpacklo_epi32(z[i], z[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(z[i], z[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        u[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        u[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        u[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    const __m512i lo = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13);
    const __m512i hi = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
    for (int i = 0; i < 4; i++) {
        c[i] = _mm512_permutex2var_epi64(u[i], lo, u[i + 4]);
        c[i + 4] = _mm512_permutex2var_epi64(u[i], hi, u[i + 4]);
    }
}

/* Q8_0 panel: 16 rows at a time, one block: quants made unsigned (^0x80)
 * and transposed to the group layout in registers. */
T512 static void pack_q8_0(const mm_i8_kind *kind, const mm_weight *w, int64_t r0, int64_t np,
                           int64_t k0, int64_t kc, uint8_t *dst) {
    const int64_t nblk = kc / 32, groups = (np + IG - 1) / IG;
    const size_t bbytes = 32 * IG + 2 * IG * sizeof(float);
    /* unsigned for vpdpbusd (q + 128, m = −128·s); as stored for TDPBSSD */
    const __m256i flip = _mm256_set1_epi8(kind->signed_q ? 0 : (char)0x80);
    const float mscale = kind->signed_q ? 0.0f : -128.0f;
    const __m512i idx = lane_offsets((int64_t)w->row_bytes);
    for (int64_t g = 0; g < groups; g++) {
        uint8_t *gp = dst + g * nblk * bbytes;
        for (int sg = 0; sg < IG / 16; sg++) {
            const uint8_t *rows[16];
            for (int i = 0; i < 16; i++) {
                int64_t row = g * IG + sg * 16 + i;
                rows[i] = row < np ? (const uint8_t *)w->data + (size_t)(r0 + row) * w->row_bytes +
                                         (size_t)(k0 / 32) * 34
                                   : NULL;
            }
            const __mmask16 valid = lanes16(np - (g * IG + sg * 16));
            for (int64_t b = 0; b < nblk; b++) {
                __m256i r[16];
                for (int i = 0; i < 16; i++)
                    r[i] = rows[i] ? _mm256_xor_si256(_mm256_loadu_si256(
                                                          (const __m256i *)(rows[i] + b * 34 + 2)),
                                                      flip)
                                   : _mm256_setzero_si256();
                __m512i c[8];
                transpose16x8(r, c);
                uint8_t *bp = gp + b * bbytes;
                for (int kq = 0; kq < 8; kq++) _mm512_store_si512(bp + kq * 192 + sg * 64, c[kq]);
                /* the 16 rows' f16 d in one gather (a block's first 4 bytes): built
                 * from 16 narrow stores, the vector load stalled on forwarding */
                const __m512i dg =
                    rows[0] ? _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), valid, idx,
                                                          rows[0] + b * 34, 1)
                            : _mm512_setzero_si512();
                __m512 sv = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dg));
                float *sp = (float *)(bp + 32 * IG);
                _mm512_store_ps(sp + sg * 16, sv);
                _mm512_store_ps(sp + IG + sg * 16, _mm512_mul_ps(sv, _mm512_set1_ps(mscale)));
            }
        }
    }
}

/* 16 rows' next 32 quants (unsigned bytes, k consecutive) into the group
 * layout: one block of 32 (bk 32) or two of 16 (bk 16) starting at block
 * b; sg: which 16 rows of the 48. */
INLINE T512 void store_rows32(const __m256i r[16], int bk, uint8_t *gp, size_t bbytes, int64_t b, int sg) {
    __m512i c[8];
    transpose16x8(r, c);
    for (int i = 0; i < 8; i++) {
        int64_t blk = b + i / (bk / 4);
        int kq = i % (bk / 4);
        _mm512_store_si512(gp + blk * bbytes + kq * 192 + sg * 64, c[i]);
    }
}

/* Byte j (0..3) of every lane. */
INLINE T512 __m512i byte_of(__m512i v, int j) {
    return _mm512_and_si512(_mm512_srli_epi32(v, 8 * j), _mm512_set1_epi32(0xff));
}

/* The per-block s and m (Q4_K, Q5_K: d·sc and −dmin·mn; Q6_K: d·sc and
 * −32·s) of 16 rows' super-blocks at once, at base + i·row_bytes for the
 * rows in `valid` (others 0), as the portable dequantizer forms them.  s
 * and m of sub-block j go to the group's block b0 + j: gp + (b0 + j)·bbytes
 * + bk·IG, at row sg·16 (s, then m IG floats on). */
INLINE T512 void kq_scales16(uint32_t type, const uint8_t *base, int64_t row_bytes,
                             __mmask16 valid, uint8_t *gp, size_t bbytes, int bk, int64_t b0,
                             int sg) {
    const __m512i idx = lane_offsets(row_bytes);
    const __m512i z = _mm512_setzero_si512();
#define GATHER(off) _mm512_mask_i32gather_epi32(z, valid, idx, base + (off), 1)
    float *sp0 = (float *)(gp + b0 * bbytes + (size_t)bk * IG) + sg * 16;
    if (type == CLEF_DTYPE_Q6_K) { /* int8 scales[16] at 192, f16 d at 208 (the last 2 bytes) */
        const __m512i d2 = _mm512_srli_epi32(GATHER(206), 16); /* no read past the block */
        const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(d2));
        for (int q = 0; q < 4; q++) {
            const __m512i w = GATHER(192 + 4 * q);
            for (int b = 0; b < 4; b++) {
                /* the byte's sign: shift it to the top, then arithmetically down */
                __m512i sc = _mm512_srai_epi32(_mm512_slli_epi32(w, 24 - 8 * b), 24);
                __m512 sv = _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc));
                float *sp = sp0 + (4 * q + b) * (int64_t)(bbytes / sizeof(float));
                _mm512_storeu_ps(sp, sv);
                _mm512_storeu_ps(sp + IG, _mm512_mul_ps(_mm512_set1_ps(-32.0f), sv));
            }
        }
        return;
    }
    /* Q4_K / Q5_K: f16 d, dmin; 12 bytes of 6-bit scales and mins at 4 */
    const __m512i dd = GATHER(0), w0 = GATHER(4), w1 = GATHER(8), w2 = GATHER(12);
#undef GATHER
    const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dd));
    const __m512 ndmin = _mm512_sub_ps(_mm512_setzero_ps(),
                                       _mm512_cvtph_ps(_mm512_cvtepi32_epi16(
                                           _mm512_srli_epi32(dd, 16))));
    const __m512i m6 = _mm512_set1_epi32(63), m4 = _mm512_set1_epi32(15);
    for (int j = 0; j < 8; j++) {
        __m512i sc, mn; /* clef_k_scale_min */
        if (j < 4) {
            sc = _mm512_and_si512(byte_of(w0, j), m6);
            mn = _mm512_and_si512(byte_of(w1, j), m6);
        } else {
            const __m512i lo = byte_of(w2, j - 4);
            sc = _mm512_or_si512(_mm512_and_si512(lo, m4),
                                 _mm512_slli_epi32(_mm512_srli_epi32(byte_of(w0, j - 4), 6), 4));
            mn = _mm512_or_si512(_mm512_srli_epi32(lo, 4),
                                 _mm512_slli_epi32(_mm512_srli_epi32(byte_of(w1, j - 4), 6), 4));
        }
        float *sp = sp0 + j * (int64_t)(bbytes / sizeof(float));
        _mm512_storeu_ps(sp, _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc)));
        _mm512_storeu_ps(sp + IG, _mm512_mul_ps(ndmin, _mm512_cvtepi32_ps(mn)));
    }
}

/* Q4_K / Q5_K / Q6_K panel, 16 rows at a time.  Per 256-element block the
 * 16 rows' scales are decoded together (kq_scales16: decoded row by row
 * they took a fifth of a 128-token Q4_K product) and the quants are read 32
 * at a time (kquant_x86.h), then transposed like Q8_0's. */
T512 static void pack_kquant(const mm_i8_kind *kind, const mm_weight *w, int64_t r0, int64_t np,
                             int64_t k0, int64_t kc, uint8_t *dst) {
    const int bk = kind->bk;
    const int64_t nsb = kc / 256, nblk = kc / bk, groups = (np + IG - 1) / IG;
    const size_t bbytes = (size_t)(bk * IG + 2 * IG * (int)sizeof(float));
    const size_t tsz = clef_dtype_get(w->type)->type_size;
    for (int64_t g = 0; g < groups; g++) {
        uint8_t *gp = dst + g * nblk * bbytes;
        for (int sg = 0; sg < IG / 16; sg++) {
            const uint8_t *rows[16];
            for (int i = 0; i < 16; i++) {
                int64_t row = g * IG + sg * 16 + i;
                rows[i] = row < np ? (const uint8_t *)w->data + (size_t)(r0 + row) * w->row_bytes +
                                         (size_t)(k0 / 256) * tsz
                                   : NULL;
            }
            for (int64_t sb = 0; sb < nsb; sb++) {
                const int64_t b0 = sb * (256 / bk); /* first weight block of this super-block */
                if (rows[0])
                    kq_scales16(w->type, rows[0] + sb * tsz, (int64_t)w->row_bytes,
                                lanes16(np - (g * IG + sg * 16)), gp, bbytes, bk, b0, sg);
                else /* no row of this subgroup exists: zero scales */
                    for (int j = 0; j < 256 / bk; j++) {
                        float *sp = (float *)(gp + (b0 + j) * bbytes + bk * IG) + sg * 16;
                        memset(sp, 0, 16 * sizeof *sp);
                        memset(sp + IG, 0, 16 * sizeof *sp);
                    }
                __m256i r[16];
                if (w->type != CLEF_DTYPE_Q6_K) {
                    const bool five = w->type == CLEF_DTYPE_Q5_K;
                    for (int k = 0; k < 4; k++) {
                        __m256i hi[16];
                        for (int i = 0; i < 16; i++) {
                            __m256i q[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
                            if (rows[i]) kq_quants45(five, rows[i] + sb * tsz, k, q);
                            r[i] = q[0];
                            hi[i] = q[1];
                        }
                        store_rows32(r, bk, gp, bbytes, b0 + 2 * k, sg);
                        store_rows32(hi, bk, gp, bbytes, b0 + 2 * k + 1, sg);
                    }
                } else {
                    /* Q6_K: per half of 128, four runs of 32 (= two 16-blocks each) */
                    for (int half = 0; half < 2; half++) {
                        __m256i q1[16], q2[16], q3[16];
                        for (int i = 0; i < 16; i++) {
                            __m256i lo[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
                            __m256i up[2] = {lo[0], lo[1]};
                            if (rows[i]) {
                                kq_quants6(rows[i] + sb * tsz, 2 * half, 0, lo);
                                kq_quants6(rows[i] + sb * tsz, 2 * half + 1, 0, up);
                            }
                            r[i] = lo[0];
                            q1[i] = lo[1];
                            q2[i] = up[0];
                            q3[i] = up[1];
                        }
                        const int64_t hb = b0 + 8 * half; /* 16-blocks of this half */
                        store_rows32(r, bk, gp, bbytes, hb + 0, sg);
                        store_rows32(q1, bk, gp, bbytes, hb + 2, sg);
                        store_rows32(q2, bk, gp, bbytes, hb + 4, sg);
                        store_rows32(q3, bk, gp, bbytes, hb + 6, sg);
                    }
                }
            }
        }
    }
}

/* The panel packers by type (is_i8_type in mm_fast.c admits exactly these). */
T512 void avx512_pack_i8(const mm_i8_kind *kind, const mm_weight *w, int64_t r0, int64_t np,
                         int64_t k0, int64_t kc, uint8_t *dst) {
    if (w->type == CLEF_DTYPE_Q8_0) pack_q8_0(kind, w, r0, np, k0, kc, dst);
    else pack_kquant(kind, w, r0, np, k0, kc, dst);
}

/* ==== elementwise ============================================================= */

/* e^x: n = round(x·log2 e), r = x − n·ln 2 (two-part), Cephes' degree-6
 * polynomial, then ·2^n by vscalefps (which underflows gradually). */
INLINE T512 __m512 exp16(__m512 x) {
    x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.72283f)), _mm512_set1_ps(-104.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504089f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    __m512 y = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(y, n);
}

/* 1 / (1 + e^−x): a 14-bit reciprocal and one Newton step (a division
 * costs as much as the rest of the function). */
INLINE T512 __m512 sigmoid16(__m512 x) {
    __m512 one = _mm512_set1_ps(1.0f);
    __m512 d = _mm512_add_ps(one, exp16(_mm512_sub_ps(_mm512_setzero_ps(), x)));
    __m512 r = _mm512_rcp14_ps(d);
    return _mm512_fmadd_ps(r, _mm512_fnmadd_ps(d, r, one), r);
}

T512 void avx512_exp(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = lanes16(n - i);
        _mm512_mask_storeu_ps(y + i, m, exp16(_mm512_maskz_loadu_ps(m, x + i)));
    }
}

T512 void avx512_sigmoid(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = lanes16(n - i);
        _mm512_mask_storeu_ps(x + i, m, sigmoid16(_mm512_maskz_loadu_ps(m, x + i)));
    }
}

T512 void avx512_silu_mul(float *x, const float *g, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = lanes16(n - i);
        __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        __m512 r = _mm512_mul_ps(_mm512_mul_ps(v, sigmoid16(v)), _mm512_maskz_loadu_ps(m, g + i));
        _mm512_mask_storeu_ps(x + i, m, r);
    }
}

T512 void avx512_mul_silu(float *x, const float *g, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = lanes16(n - i);
        __m512 v = _mm512_maskz_loadu_ps(m, g + i);
        __m512 r = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), _mm512_mul_ps(v, sigmoid16(v)));
        _mm512_mask_storeu_ps(x + i, m, r);
    }
}

T512 void avx512_mul_sigmoid(float *x, const float *g, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = lanes16(n - i);
        __m512 r = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), sigmoid16(_mm512_maskz_loadu_ps(m, g + i)));
        _mm512_mask_storeu_ps(x + i, m, r);
    }
}

/* Σ_{k ≥ first} hist_k·w_k for 16 channels, product then sum, each rounded:
 * the reference's order. */
INLINE T512 __m512 conv16(const float *hist, const float *wt, int64_t ld, int first, int K,
                          __mmask16 m) {
    __m512 acc = _mm512_setzero_ps();
    for (int k = first; k < K; k++)
        acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, hist + k * ld),
                                               _mm512_maskz_loadu_ps(m, wt + k * ld)));
    return acc;
}

T512 void avx512_conv_silu_row(const float *hist, const float *wt, int64_t ld, int first, int K,
                               float *o, int64_t n) {
    int64_t i = 0;
    /* four vectors at a time: each one's SiLU is a chain of some twenty
     * dependent steps, and one chain at a time left the core waiting */
    for (; i + 64 <= n; i += 64) {
        __m512 a[4];
        for (int u = 0; u < 4; u++)
            a[u] = conv16(hist + i + 16 * u, wt + i + 16 * u, ld, first, K, 0xFFFF);
        for (int u = 0; u < 4; u++)
            _mm512_storeu_ps(o + i + 16 * u, _mm512_mul_ps(a[u], sigmoid16(a[u])));
    }
    for (; i < n; i += 16) {
        const __mmask16 m = lanes16(n - i);
        __m512 acc = conv16(hist + i, wt + i, ld, first, K, m);
        _mm512_mask_storeu_ps(o + i, m, _mm512_mul_ps(acc, sigmoid16(acc)));
    }
}

/* Σ x² with each square rounded to f32 (as the reference), summed in double. */
INLINE T512 double sumsq(const float *x, int64_t n) {
    __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
    for (int64_t i = 0; i < n; i += 16) {
        __m512 v = _mm512_maskz_loadu_ps(lanes16(n - i), x + i);
        __m512 sq = _mm512_mul_ps(v, v);
        a0 = _mm512_add_pd(a0, _mm512_cvtps_pd(_mm512_castps512_ps256(sq)));
        a1 = _mm512_add_pd(a1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(sq), 1))));
    }
    return _mm512_reduce_add_pd(_mm512_add_pd(a0, a1));
}

T512 void avx512_rmsnorm(float *y, const float *x, const float *w, int64_t n, int64_t rows, float eps) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * n;
        float *yr = y + r * n;
        __m512 sc = _mm512_set1_ps(1.0f / sqrtf((float)(sumsq(xr, n) / (double)n) + eps));
        for (int64_t i = 0; i < n; i += 16) {
            __mmask16 m = lanes16(n - i);
            __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, xr + i), sc),
                                     _mm512_maskz_loadu_ps(m, w + i));
            _mm512_mask_storeu_ps(yr + i, m, v);
        }
    }
}

T512 void avx512_l2norm(float *x, int64_t n, int64_t rows, float eps) {
    for (int64_t r = 0; r < rows; r++) {
        float *xr = x + r * n;
        __m512 sc = _mm512_set1_ps(1.0f / fmaxf(sqrtf((float)sumsq(xr, n)), eps));
        for (int64_t i = 0; i < n; i += 16) {
            __mmask16 m = lanes16(n - i);
            _mm512_mask_storeu_ps(xr + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, xr + i), sc));
        }
    }
}

/* ==== peak loops ================================================================ */

#define R12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
/* Keeps the chains in registers and distinct (the compiler may not merge
 * identical chains or drop the loop). */
#define KEEP(v) __asm__ volatile("" : "+v"(v));

T512 static double peak_f32(int64_t iters) {
    __m512 b = _mm512_set1_ps(1.0000001f), c = _mm512_set1_ps(1e-7f);
#define DF(i) __m512 a##i = _mm512_set1_ps((float)(i));
    R12(DF)
    for (int64_t k = 0; k < iters; k++) {
#define FF(i) a##i = _mm512_fmadd_ps(a##i, b, c); KEEP(a##i)
        R12(FF)
    }
    float s = 0;
#define SF(i) s += _mm512_reduce_add_ps(a##i);
    R12(SF)
    return (double)iters * 12 * 32 + (s == 12345.678f ? 1 : 0);
}

T512BF static double peak_bf16(int64_t iters) {
    __m512bh b = (__m512bh)_mm512_set1_epi16(0x3f80), c = (__m512bh)_mm512_set1_epi16(0x3380);
    R12(DF)
    for (int64_t k = 0; k < iters; k++) {
#define FB(i) a##i = _mm512_dpbf16_ps(a##i, b, c); KEEP(a##i)
        R12(FB)
    }
    float s = 0;
    R12(SF)
    return (double)iters * 12 * 64 + (s == 12345.678f ? 1 : 0);
}

T512VNNI static double peak_i8(int64_t iters) {
    __m512i b = _mm512_set1_epi8(1), c = _mm512_set1_epi8(1);
#define DI(i) __m512i a##i = _mm512_set1_epi32(i);
    R12(DI)
    for (int64_t k = 0; k < iters; k++) {
#define FI(i) a##i = _mm512_dpbusd_epi32(a##i, b, c); KEEP(a##i)
        R12(FI)
    }
    long s = 0;
#define SI(i) s += _mm512_reduce_add_epi32(a##i);
    R12(SI)
    return (double)iters * 12 * 128 + (s == 123456789 ? 1 : 0);
}

double avx512_peak(int kind, int64_t iters) {
    return kind == 2 ? peak_i8(iters) : kind == 1 ? peak_bf16(iters) : peak_f32(iters);
}

#else /* not x86-64: never called (cpu_choose offers only `ref`) */

void avx512_dot_f32(int64_t kc, const float *x, int64_t ldx, int64_t T, const float *w,
                    int64_t ldw, int64_t np, float *y, int64_t ldy, bool add) {}
void avx512_dot_w16(bool f16, int64_t kc, const float *x, int64_t ldx, int64_t T,
                    const uint16_t *w, int64_t ldw, int64_t np, float *y, int64_t ldy, bool add) {}
void avx512_dot_bf16(int64_t kc, const uint16_t *x, int64_t ldx, int64_t T, const uint16_t *w,
                     int64_t ldw, int64_t np, float *y, int64_t ldy, bool add) {}
void avx512_gemm_nn(bool fold, int64_t m, int64_t n, int64_t k, const float *A, int64_t rsa,
                    int64_t csa, const float *B, int64_t ldb, float *C, int64_t ldc, bool add) {}
void avx512_transpose(int64_t rows, int64_t cols, const float *src, int64_t lds, float *dst,
                      int64_t ldd) {}
void avx512_pack_f32_panel(bool f16, const uint16_t *w, int64_t ldw, int64_t np, int64_t kc,
                           float *dst) {}
void avx512_round_bf16(const float *x, int64_t n, float *dst) {}
void avx512_act_bf16(const float *x, int64_t in, int64_t t0, int64_t t1, uint16_t *dst) {}
void avx512_act_i8(const mm_i8_kind *kind, const float *x, int64_t in, int64_t t0, int64_t t1,
                   int8_t *q, float *dx, void *mb) {}
void avx512_pack_i8(const mm_i8_kind *kind, const mm_weight *w, int64_t r0, int64_t np,
                    int64_t k0, int64_t kc, uint8_t *dst) {}
void avx512_i8_panel(const mm_i8_kind *kind, const mm_i8_act *a, int64_t T, int64_t k0,
                     int64_t kc, const uint8_t *panel, int64_t np, float *y, int64_t ldy,
                     bool add, const mm_prefetch *pf) {}
void avx512_exp(const float *x, float *y, int64_t n) {}
void avx512_silu_mul(float *x, const float *g, int64_t n) {}
void avx512_mul_silu(float *x, const float *g, int64_t n) {}
void avx512_mul_sigmoid(float *x, const float *g, int64_t n) {}
void avx512_sigmoid(float *x, int64_t n) {}
void avx512_conv_silu_row(const float *hist, const float *wt, int64_t ld, int first, int K,
                          float *o, int64_t n) {}
void avx512_rmsnorm(float *y, const float *x, const float *w, int64_t n, int64_t rows, float eps) {}
void avx512_l2norm(float *x, int64_t n, int64_t rows, float eps) {}
double avx512_peak(int kind, int64_t iters) { return 0; }
#endif
