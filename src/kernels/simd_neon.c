/*
 * kernels/simd_neon.c — the AArch64 Advanced SIMD (NEON) kernels behind
 * kernels/simd.h: the dot-form f32 micro-kernel (6 tokens x 4 rows, 4 k per
 * step) and the broadcast-form f32 GEMM (6 x 16), the two shapes every
 * dense product of the backbone, attention and the delta rule is built on
 * (BF16 weights reach the dot form as f32 rows, as on avx2); and, where
 * the CPU has the ARMv8.2 dot product, the int8 path for quantized
 * weights: activations quantized as on avx512, weights packed into the
 * same I8 groups (signed: SDOT multiplies int8 by int8) and a 4-token x
 * 12-row SDOT tile; the elementwise ops (exp, sigmoid, the SiLU products,
 * RMS and L2 norms) as on avx2.  32 vector registers of 4 lanes: 24 accumulators, the
 * rest operands.  NEON is part of every AArch64 CPU, so no run-time check
 * is needed for it; the SDOT functions carry their own target attribute
 * and run only when cpu_detect saw HWCAP_ASIMDDP.  Off AArch64 the
 * definitions have empty bodies and are never called.
 */
#include "kernels/simd.h"

#if defined(__aarch64__)
#include <arm_neon.h>
#include <math.h>
#include <string.h>

#include "core/dtype.h"
#include "kernels/dequant.h"

#define INLINE static inline __attribute__((always_inline))
#define TDOT __attribute__((target("arch=armv8.2-a+dotprod")))
#define TMM __attribute__((target("arch=armv8.2-a+dotprod+i8mm")))
#define TBF16 __attribute__((target("arch=armv8.2-a+fp16+bf16")))

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

void neon_widen_w16(bool f16, const uint16_t *w, int64_t ldw, int64_t nr, int64_t kc, float *dst,
                    int64_t ldd) {
    for (int64_t r = 0; r < nr; r++) {
        const uint16_t *src = w + r * ldw;
        float *d = dst + r * ldd;
        int64_t k = 0;
        for (; k + 4 <= kc; k += 4) {
            const uint16x4_t h = vld1_u16(src + k);
            vst1q_f32(d + k, f16 ? vcvt_f32_f16(vreinterpret_f16_u16(h))
                                 : vreinterpretq_f32_u32(vshll_n_u16(h, 16))); /* BF16: the top half */
        }
        for (; k < kc; k++) d[k] = f16 ? clef_f16_to_f32(src[k]) : clef_bf16_to_f32(src[k]);
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

/* ==== BF16 (BFDOT) ============================================================= */

/* mm_round_bf16's rounding (to nearest even at bit 16) of 4 values: their
 * top halves. */
INLINE uint16x4_t round_bf16x4(float32x4_t v) {
    const uint32x4_t u = vreinterpretq_u32_f32(v);
    const uint32x4_t odd = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
    return vshrn_n_u32(vaddq_u32(u, vaddq_u32(vdupq_n_u32(0x7fff), odd)), 16);
}

void neon_act_bf16(const float *x, int64_t in, int64_t t0, int64_t t1, uint16_t *dst) {
    for (int64_t t = t0; t < t1; t++) {
        const float *xr = x + t * in;
        uint16_t *d = dst + t * in;
        int64_t i = 0;
        for (; i + 4 <= in; i += 4) vst1_u16(d + i, round_bf16x4(vld1q_f32(xr + i)));
        for (; i < in; i++) { /* the in % 4 tail */
            float r;
            mm_round_bf16(xr + i, 1, &r);
            uint32_t u;
            memcpy(&u, &r, 4);
            d[i] = (uint16_t)(u >> 16);
        }
    }
}

/* dot_tile on BF16 rows: BFDOT sums pairs of BF16 products into each f32
 * lane, 8 k per step, twice FMLA's multiply-adds. */
INLINE TBF16 void dot_tile_bf16(int64_t k, const uint16_t *A, int64_t lda, int mr,
                                const uint16_t *B, int64_t ldb, int nr, float *C, int64_t ldc,
                                bool add) {
    float32x4_t c[NDM][NDN];
    const uint16_t *a[NDM], *b[NDN];
#pragma GCC unroll 6
    for (int i = 0; i < NDM; i++) {
        a[i] = A + (i < mr ? i : mr - 1) * lda; /* past mr: computed, not stored */
#pragma GCC unroll 4
        for (int j = 0; j < NDN; j++) c[i][j] = vdupq_n_f32(0.0f);
    }
#pragma GCC unroll 4
    for (int j = 0; j < NDN; j++) b[j] = B + (j < nr ? j : nr - 1) * ldb;
    int64_t kk = 0;
    for (; kk + 8 <= k; kk += 8) {
        bfloat16x8_t w[NDN];
#pragma GCC unroll 4
        for (int j = 0; j < NDN; j++) w[j] = vreinterpretq_bf16_u16(vld1q_u16(b[j] + kk));
#pragma GCC unroll 6
        for (int i = 0; i < NDM; i++) {
            const bfloat16x8_t x = vreinterpretq_bf16_u16(vld1q_u16(a[i] + kk));
#pragma GCC unroll 4
            for (int j = 0; j < NDN; j++) c[i][j] = vbfdotq_f32(c[i][j], x, w[j]);
        }
    }
    for (int i = 0; i < mr; i++) {
        float s[NDN];
        vst1q_f32(s, hsum4(c[i][0], c[i][1], c[i][2], c[i][3]));
        for (int64_t t = kk; t < k; t++) /* the k % 8 tail */
            for (int j = 0; j < NDN; j++)
                s[j] = fmaf(clef_bf16_to_f32(a[i][t]), clef_bf16_to_f32(b[j][t]), s[j]);
        float *p = C + i * ldc;
        for (int j = 0; j < nr; j++) p[j] = add ? p[j] + s[j] : s[j];
    }
}

TBF16 void neon_dot_bf16(int64_t kc, const uint16_t *x, int64_t ldx, int64_t T, const uint16_t *w,
                         int64_t ldw, int64_t np, float *y, int64_t ldy, bool add) {
    for (int64_t t = 0; t < T; t += NDM) {
        const int mr = (int)(T - t < NDM ? T - t : NDM);
        for (int64_t r = 0; r < np; r += NDN) {
            const int nr = (int)(np - r < NDN ? np - r : NDN);
            dot_tile_bf16(kc, x + t * ldx, ldx, mr, w + r * ldw, ldw, nr, y + t * ldy + r, ldy, add);
        }
    }
}

/* ==== int8 (SDOT) ============================================================== */

enum { IG = MM_I8_G, IM = 4, IV = 3, IC = 4 * IV }; /* tile: IM tokens x IC rows */

/* n values (a multiple of 16) with one scale, llama.cpp's rule as on
 * avx512: d = max|x|/127, q = x·(1/d) rounded to nearest even and
 * saturated; sums[i] = Σq of values [16i, 16i+16).  Returns d. */
static float quant_block(const float *x, int n, int8_t *q, int32_t *sums) {
    float32x4_t a = vdupq_n_f32(0.0f);
    for (int i = 0; i < n; i += 4) a = vmaxq_f32(a, vabsq_f32(vld1q_f32(x + i)));
    const float d = vmaxvq_f32(a) / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int i = 0; i < n; i += 16) {
        int32x4_t v[4];
        for (int u = 0; u < 4; u++) v[u] = vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + i + 4 * u), id));
        const int16x8_t h0 = vcombine_s16(vqmovn_s32(v[0]), vqmovn_s32(v[1]));
        const int16x8_t h1 = vcombine_s16(vqmovn_s32(v[2]), vqmovn_s32(v[3]));
        vst1q_s8(q + i, vcombine_s8(vqmovn_s16(h0), vqmovn_s16(h1)));
        sums[i / 16] = vaddvq_s32(vaddq_s32(vaddq_s32(v[0], v[1]), vaddq_s32(v[2], v[3])));
    }
    return d;
}

void neon_act_i8(const mm_i8_kind *kind, const float *x, int64_t in, int64_t t0, int64_t t1,
                 int8_t *q, float *dx, void *mb) {
    mm_act_i8_by_blocks(quant_block, kind, x, in, t0, t1, q, dx, mb);
}

/* acc[i][v] += the dots of k-quad l of x[i] (16 bytes: 4 quads) with the
 * 4 rows of each w[v] (SDOT by element; the lane must be an immediate). */
#define SDOT_QUAD(l)                                                                        \
    do {                                                                                    \
        const int8_t *wp = (const int8_t *)bp + (size_t)(4 * k16 + (l)) * 4 * IG;           \
        int8x16_t w[IV];                                                                    \
        _Pragma("GCC unroll 3") for (int v = 0; v < IV; v++) w[v] = vld1q_s8(wp + 16 * v);  \
        _Pragma("GCC unroll 4") for (int i = 0; i < IM; i++)                                \
            _Pragma("GCC unroll 3") for (int v = 0; v < IV; v++)                            \
                acc[i][v] = vdotq_laneq_s32(acc[i][v], w[v], xv[i], (l));                   \
    } while (0)

/* IM tokens x IC rows over nblk weight blocks, avx512's i8_tile on SDOT:
 * per block the integer dots accumulate exactly, then one f32 scale step
 * (nsb 1: f += isum·(s·dx); nsb > 1: g += isum·s [+ m·Σq], and per nsb
 * blocks fm += g·dx in memory).  corr: the m term, 0 none (Q8_0 signed),
 * 1 the integer −off·Σq added before the dots (Q6_K), 2 f32 m·Σq (Q4_K,
 * Q5_K).  B: the group at this tile's first row (the block's s and m are
 * then bk·IG bytes on, at the same row). */
INLINE TDOT void i8_tile(const int bk, const int corr, const int nsb, int64_t nblk,
                         const int8_t *A, int64_t lda, const float *dx, int64_t ldx,
                         const void *mb, int64_t ldm, int mr, const uint8_t *B, size_t bbytes,
                         int nc, float *C, int64_t ldc, bool add) {
    const mm_i8_rows r = mm_i8_rows_at(mr, A, lda, dx, ldx, mb, ldm);
    const int8_t *const *a = r.a;
    const float *const *d = r.d, *const *mf = r.mf;
    const int32_t *const *mi = r.mi;
    float32x4_t f[IM][IV];
#pragma GCC unroll 4
    for (int i = 0; i < IM; i++)
#pragma GCC unroll 3
        for (int v = 0; v < IV; v++) f[i][v] = vdupq_n_f32(0.0f);
    float fm[IM][IC]; /* nsb > 1: the finished super-blocks */
    if (nsb > 1) memset(fm, 0, sizeof fm);
    for (int64_t b = 0; b < nblk; b++) {
        const uint8_t *bp = B + (size_t)b * bbytes;
        int32x4_t acc[IM][IV];
#pragma GCC unroll 4
        for (int i = 0; i < IM; i++)
#pragma GCC unroll 3
            for (int v = 0; v < IV; v++) acc[i][v] = vdupq_n_s32(corr == 1 ? mi[i][b] : 0);
        for (int k16 = 0; k16 < bk / 16; k16++) {
            int8x16_t xv[IM];
#pragma GCC unroll 4
            for (int i = 0; i < IM; i++) xv[i] = vld1q_s8(a[i] + b * bk + 16 * k16);
            SDOT_QUAD(0);
            SDOT_QUAD(1);
            SDOT_QUAD(2);
            SDOT_QUAD(3);
        }
        const float *s = (const float *)(bp + (size_t)bk * IG), *m = s + IG;
#pragma GCC unroll 4
        for (int i = 0; i < IM; i++)
#pragma GCC unroll 3
            for (int v = 0; v < IV; v++) {
                const float32x4_t sv = vld1q_f32(s + 4 * v);
                const float32x4_t sd = nsb > 1 ? sv : vmulq_n_f32(sv, d[i][b]);
                f[i][v] = vfmaq_f32(f[i][v], vcvtq_f32_s32(acc[i][v]), sd);
                if (corr == 2) f[i][v] = vfmaq_n_f32(f[i][v], vld1q_f32(m + 4 * v), mf[i][b]);
            }
        if (nsb > 1 && (b + 1) % nsb == 0) /* a super-block done: fm += g·dx */
#pragma GCC unroll 4
            for (int i = 0; i < IM; i++)
#pragma GCC unroll 3
                for (int v = 0; v < IV; v++) {
                    float *p = &fm[i][4 * v];
                    vst1q_f32(p, vfmaq_n_f32(vld1q_f32(p), f[i][v], d[i][b / nsb]));
                    f[i][v] = vdupq_n_f32(0.0f);
                }
    }
    for (int i = 0; i < mr; i++) {
        float *p = C + i * ldc;
        for (int v = 0; v < IV && 4 * v < nc; v++) {
            float o[4];
            vst1q_f32(o, nsb > 1 ? vld1q_f32(&fm[i][4 * v]) : f[i][v]);
            const int n = nc - 4 * v < 4 ? nc - 4 * v : 4;
            for (int l = 0; l < n; l++) p[4 * v + l] = add ? p[4 * v + l] + o[l] : o[l];
        }
    }
}

#define I8_TILE_ARGS int64_t nblk, const int8_t *A, int64_t lda, const float *dx, int64_t ldx, \
    const void *mb, int64_t ldm, int mr, const uint8_t *B, size_t bbytes, int nc, float *C,    \
    int64_t ldc, bool add
#define I8_TILE_PASS nblk, A, lda, dx, ldx, mb, ldm, mr, B, bbytes, nc, C, ldc, add
/* Q8_0 (signed, per-32 activations); Q4_K / Q5_K and Q6_K (per 256) */
TDOT static void i8_tile_q8(I8_TILE_ARGS) { i8_tile(32, 0, 1, I8_TILE_PASS); }
TDOT static void i8_tile_q45(I8_TILE_ARGS) { i8_tile(32, 2, 8, I8_TILE_PASS); }
TDOT static void i8_tile_q6(I8_TILE_ARGS) { i8_tile(16, 1, 16, I8_TILE_PASS); }

/* ==== int8 (SMMLA) ============================================================= */

/* {lo, lo, hi, hi}: a value per token of a token pair, for SMMLA's 2 x 2
 * result lanes (t0r0, t0r1, t1r0, t1r1). */
INLINE float32x4_t pair_f32(float lo, float hi) { return vcombine_f32(vdup_n_f32(lo), vdup_n_f32(hi)); }
/* {p[0], p[1], p[0], p[1]}: a value per row of a row pair. */
INLINE float32x4_t rows_f32(const float *p) { return vcombine_f32(vld1_f32(p), vld1_f32(p)); }

/* i8_tile's contract on SMMLA: 2 token pairs x 6 row pairs, each a 2 x 2
 * int32 block (a product of 2 x 8 tokens' and 2 x 8 rows' bytes, 32 MACs
 * to SDOT's 16), on panels packed in runs of 8 (kind->k8).  G: the group;
 * c0: the tile's first row in it (its runs sit 8·c0 bytes into each k-octet,
 * its s and m c0 floats in). */
INLINE TMM void i8mm_tile(const int bk, const int corr, const int nsb, int64_t nblk,
                          const int8_t *A, int64_t lda, const float *dx, int64_t ldx,
                          const void *mb, int64_t ldm, int mr, const uint8_t *G, int c0,
                          size_t bbytes, int nc, float *C, int64_t ldc, bool add) {
    enum { NP = IM / 2, RP = IC / 2 };
    const mm_i8_rows r = mm_i8_rows_at(mr, A, lda, dx, ldx, mb, ldm);
    const int8_t *const *a = r.a;
    const float *const *d = r.d, *const *mf = r.mf;
    const int32_t *const *mi = r.mi;
    float32x4_t f[NP][RP];
#pragma GCC unroll 2
    for (int p = 0; p < NP; p++)
#pragma GCC unroll 6
        for (int v = 0; v < RP; v++) f[p][v] = vdupq_n_f32(0.0f);
    float32x4_t fm[NP][RP]; /* nsb > 1: the finished super-blocks */
    if (nsb > 1) memset(fm, 0, sizeof fm);
    for (int64_t b = 0; b < nblk; b++) {
        const uint8_t *bp = G + (size_t)b * bbytes;
        int32x4_t acc[NP][RP];
#pragma GCC unroll 2
        for (int p = 0; p < NP; p++) {
            const int32x4_t z = corr == 1 ? vcombine_s32(vdup_n_s32(mi[2 * p][b]), vdup_n_s32(mi[2 * p + 1][b]))
                                          : vdupq_n_s32(0);
#pragma GCC unroll 6
            for (int v = 0; v < RP; v++) acc[p][v] = z;
        }
        for (int k16 = 0; k16 < bk / 16; k16++) {
            int8x16_t xv[NP][2]; /* per pair, k 0-7 and 8-15: [t0's 8 | t1's 8] */
#pragma GCC unroll 2
            for (int p = 0; p < NP; p++) {
                const int64x2_t lo = vreinterpretq_s64_s8(vld1q_s8(a[2 * p] + b * bk + 16 * k16));
                const int64x2_t hi = vreinterpretq_s64_s8(vld1q_s8(a[2 * p + 1] + b * bk + 16 * k16));
                xv[p][0] = vreinterpretq_s8_s64(vzip1q_s64(lo, hi));
                xv[p][1] = vreinterpretq_s8_s64(vzip2q_s64(lo, hi));
            }
#pragma GCC unroll 2
            for (int o = 0; o < 2; o++) {
                const int8_t *wp = (const int8_t *)bp + (size_t)(2 * k16 + o) * 8 * IG + 8 * c0;
#pragma GCC unroll 6
                for (int v = 0; v < RP; v++) {
                    const int8x16_t w = vld1q_s8(wp + 16 * v);
#pragma GCC unroll 2
                    for (int p = 0; p < NP; p++) acc[p][v] = vmmlaq_s32(acc[p][v], xv[p][o], w);
                }
            }
        }
        const float *s = (const float *)(bp + (size_t)bk * IG) + c0, *m = s + IG;
#pragma GCC unroll 2
        for (int p = 0; p < NP; p++) {
            const int bi = nsb > 1 ? 0 : (int)b;
            const float32x4_t dv = pair_f32(d[2 * p][bi], d[2 * p + 1][bi]);
            const float32x4_t mv = corr == 2 ? pair_f32(mf[2 * p][b], mf[2 * p + 1][b]) : dv;
#pragma GCC unroll 6
            for (int v = 0; v < RP; v++) {
                const float32x4_t sv = rows_f32(s + 2 * v);
                const float32x4_t sd = nsb > 1 ? sv : vmulq_f32(sv, dv);
                f[p][v] = vfmaq_f32(f[p][v], vcvtq_f32_s32(acc[p][v]), sd);
                if (corr == 2) f[p][v] = vfmaq_f32(f[p][v], rows_f32(m + 2 * v), mv);
            }
        }
        if (nsb > 1 && (b + 1) % nsb == 0) /* a super-block done: fm += g·dx */
#pragma GCC unroll 2
            for (int p = 0; p < NP; p++) {
                const float32x4_t dv = pair_f32(d[2 * p][b / nsb], d[2 * p + 1][b / nsb]);
#pragma GCC unroll 6
                for (int v = 0; v < RP; v++) {
                    fm[p][v] = vfmaq_f32(fm[p][v], f[p][v], dv);
                    f[p][v] = vdupq_n_f32(0.0f);
                }
            }
    }
    for (int i = 0; i < mr; i++) {
        float *out = C + i * ldc;
        for (int v = 0; v < RP && 2 * v < nc; v++) {
            float o[4];
            vst1q_f32(o, nsb > 1 ? fm[i / 2][v] : f[i / 2][v]);
            for (int l = 0; l < 2 && 2 * v + l < nc; l++) {
                const float y = o[2 * (i % 2) + l];
                out[2 * v + l] = add ? out[2 * v + l] + y : y;
            }
        }
    }
}

#define I8MM_TILE_ARGS int64_t nblk, const int8_t *A, int64_t lda, const float *dx, int64_t ldx, \
    const void *mb, int64_t ldm, int mr, const uint8_t *G, int c0, size_t bbytes, int nc,         \
    float *C, int64_t ldc, bool add
#define I8MM_TILE_PASS nblk, A, lda, dx, ldx, mb, ldm, mr, G, c0, bbytes, nc, C, ldc, add
TMM static void i8mm_tile_q8(I8MM_TILE_ARGS) { i8mm_tile(32, 0, 1, I8MM_TILE_PASS); }
TMM static void i8mm_tile_q45(I8MM_TILE_ARGS) { i8mm_tile(32, 2, 8, I8MM_TILE_PASS); }
TMM static void i8mm_tile_q6(I8MM_TILE_ARGS) { i8mm_tile(16, 1, 16, I8MM_TILE_PASS); }

void neon_i8_panel(const mm_i8_kind *kind, const mm_i8_act *a, int64_t T, int64_t k0,
                   int64_t kc, const uint8_t *panel, int64_t np, float *y, int64_t ldy,
                   bool add, const mm_prefetch *pf) {
    (void)pf; /* the hardware prefetcher's, for now */
    void (*tile)(I8_TILE_ARGS) = kind->bk == 16 ? i8_tile_q6 : kind->sym ? i8_tile_q8 : i8_tile_q45;
    void (*mm)(I8MM_TILE_ARGS) = kind->bk == 16 ? i8mm_tile_q6 : kind->sym ? i8mm_tile_q8 : i8mm_tile_q45;
    const int64_t nblk = kc / kind->bk, ldx = a->ld / kind->ab, ldm = a->ld / kind->bk;
    const size_t gbytes = mm_i8_group_bytes(kind, kc), bbytes = gbytes / (size_t)nblk;
    for (int64_t t = 0; t < T; t += IM) {
        const int mr = (int)(T - t < IM ? T - t : IM);
        const int8_t *A = a->q + t * a->ld + k0;
        const float *dx = a->dx + t * ldx + k0 / kind->ab;
        const void *mb = (const char *)a->mb + (size_t)(t * ldm + k0 / kind->bk) * 4;
        for (int64_t g = 0; g * IG < np; g++) {
            const int64_t rows = np - g * IG < IG ? np - g * IG : IG;
            const uint8_t *G = panel + g * gbytes;
            float *yg = y + t * ldy + g * IG;
            for (int c0 = 0; c0 < rows; c0 += IC) {
                const int nc = (int)(rows - c0 < IC ? rows - c0 : IC);
                if (kind->k8)
                    mm(nblk, A, a->ld, dx, ldx, mb, ldm, mr, G, c0, bbytes, nc, yg + c0, ldy, add);
                else
                    tile(nblk, A, a->ld, dx, ldx, mb, ldm, mr, G + 4 * (size_t)c0, bbytes, nc,
                         yg + c0, ldy, add);
            }
        }
    }
}

/* ==== elementwise ============================================================== */

/* The first n values at p (n < 4: the rest zero), and the store of the
 * first n lanes: the tails of the maps below. */
INLINE float32x4_t load_n(const float *p, int64_t n) {
    if (n >= 4) return vld1q_f32(p);
    float t[4] = {0};
    memcpy(t, p, (size_t)n * sizeof *t);
    return vld1q_f32(t);
}
INLINE void store_n(float *p, float32x4_t v, int64_t n) {
    if (n >= 4) {
        vst1q_f32(p, v);
        return;
    }
    float t[4];
    vst1q_f32(t, v);
    memcpy(p, t, (size_t)n * sizeof *t);
}

/* e^x as in simd_avx2.c: n = round(x·log2 e), r = x − n·ln 2 (two-part),
 * Cephes' degree-6 polynomial, 2^n as two normal factors; inputs below
 * −87.3 (results under FLT_MIN) give 0. */
INLINE float32x4_t exp4(float32x4_t x) {
    const uint32x4_t tiny = vcltq_f32(x, vdupq_n_f32(-87.33654f));
    x = vmaxq_f32(vminq_f32(x, vdupq_n_f32(88.72283f)), vdupq_n_f32(-87.33654f));
    const float32x4_t n = vrndnq_f32(vmulq_n_f32(x, 1.44269504089f));
    float32x4_t r = vfmsq_f32(x, n, vdupq_n_f32(0.693359375f));
    r = vfmsq_f32(r, n, vdupq_n_f32(-2.12194440e-4f));
    float32x4_t p = vdupq_n_f32(1.9875691500e-4f);
    p = vfmaq_f32(vdupq_n_f32(1.3981999507e-3f), p, r);
    p = vfmaq_f32(vdupq_n_f32(8.3334519073e-3f), p, r);
    p = vfmaq_f32(vdupq_n_f32(4.1665795894e-2f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.6666665459e-1f), p, r);
    p = vfmaq_f32(vdupq_n_f32(5.0000001201e-1f), p, r);
    float32x4_t y = vaddq_f32(vfmaq_f32(r, p, vmulq_f32(r, r)), vdupq_n_f32(1.0f));
    const int32x4_t ni = vcvtq_s32_f32(n);
    const int32x4_t h = vshrq_n_s32(ni, 1), l = vsubq_s32(ni, h);
    const float32x4_t s1 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(h, vdupq_n_s32(127)), 23));
    const float32x4_t s2 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(l, vdupq_n_s32(127)), 23));
    y = vmulq_f32(vmulq_f32(y, s1), s2);
    return vreinterpretq_f32_u32(vbicq_u32(vreinterpretq_u32_f32(y), tiny));
}

/* 1 / (1 + e^−x) (AArch64 divides vectors exactly). */
INLINE float32x4_t sigmoid4(float32x4_t x) {
    const float32x4_t one = vdupq_n_f32(1.0f);
    return vdivq_f32(one, vaddq_f32(one, exp4(vnegq_f32(x))));
}

void neon_exp(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i += 4) store_n(y + i, exp4(load_n(x + i, n - i)), n - i);
}
void neon_sigmoid(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i += 4) store_n(x + i, sigmoid4(load_n(x + i, n - i)), n - i);
}
void neon_silu_mul(float *x, const float *g, int64_t n) {
    for (int64_t i = 0; i < n; i += 4) {
        const float32x4_t v = load_n(x + i, n - i);
        store_n(x + i, vmulq_f32(vmulq_f32(v, sigmoid4(v)), load_n(g + i, n - i)), n - i);
    }
}
void neon_mul_silu(float *x, const float *g, int64_t n) {
    for (int64_t i = 0; i < n; i += 4) {
        const float32x4_t v = load_n(g + i, n - i);
        store_n(x + i, vmulq_f32(load_n(x + i, n - i), vmulq_f32(v, sigmoid4(v))), n - i);
    }
}
void neon_mul_sigmoid(float *x, const float *g, int64_t n) {
    for (int64_t i = 0; i < n; i += 4)
        store_n(x + i, vmulq_f32(load_n(x + i, n - i), sigmoid4(load_n(g + i, n - i))), n - i);
}

/* Σ_{k ≥ first} hist_k·w_k for 4 channels (the first n of them), product
 * then sum, each rounded: the reference's order. */
INLINE float32x4_t conv4(const float *hist, const float *wt, int64_t ld, int first, int K,
                         int64_t n) {
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (int k = first; k < K; k++)
        acc = vaddq_f32(acc, vmulq_f32(load_n(hist + k * ld, n), load_n(wt + k * ld, n)));
    return acc;
}

void neon_conv_silu_row(const float *hist, const float *wt, int64_t ld, int first, int K,
                        float *o, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) { /* four chains: each SiLU is a long dependent one */
        float32x4_t a[4];
        for (int u = 0; u < 4; u++) a[u] = conv4(hist + i + 4 * u, wt + i + 4 * u, ld, first, K, 4);
        for (int u = 0; u < 4; u++) vst1q_f32(o + i + 4 * u, vmulq_f32(a[u], sigmoid4(a[u])));
    }
    for (; i < n; i += 4) {
        const float32x4_t a = conv4(hist + i, wt + i, ld, first, K, n - i);
        store_n(o + i, vmulq_f32(a, sigmoid4(a)), n - i);
    }
}

/* Σ x² with the squares in f32 and the sum in double (ggml's rounding). */
static double sumsq4(const float *x, int64_t n) {
    float64x2_t a0 = vdupq_n_f64(0.0), a1 = vdupq_n_f64(0.0);
    for (int64_t i = 0; i < n; i += 4) {
        const float32x4_t v = load_n(x + i, n - i), sq = vmulq_f32(v, v);
        a0 = vaddq_f64(a0, vcvt_f64_f32(vget_low_f32(sq)));
        a1 = vaddq_f64(a1, vcvt_high_f64_f32(sq));
    }
    return vaddvq_f64(vaddq_f64(a0, a1));
}

void neon_rmsnorm(float *y, const float *x, const float *w, int64_t n, int64_t rows, float eps) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * n;
        float *yr = y + r * n;
        const float sc = 1.0f / sqrtf((float)(sumsq4(xr, n) / (double)n) + eps);
        for (int64_t i = 0; i < n; i += 4)
            store_n(yr + i, vmulq_f32(vmulq_n_f32(load_n(xr + i, n - i), sc), load_n(w + i, n - i)),
                    n - i);
    }
}

void neon_l2norm(float *x, int64_t n, int64_t rows, float eps) {
    for (int64_t r = 0; r < rows; r++) {
        float *xr = x + r * n;
        const float sc = 1.0f / fmaxf(sqrtf((float)sumsq4(xr, n)), eps);
        for (int64_t i = 0; i < n; i += 4) store_n(xr + i, vmulq_n_f32(load_n(xr + i, n - i), sc), n - i);
    }
}

/* 12 independent chains of one instruction, as the x86 peak loops: kind 0
 * f32 FMA (a lane = 2 operations), 2 SDOT (a lane = 4 products = 8). */
#define KEEP(v) __asm__ volatile("" : "+w"(v));
static double peak_fma(int64_t iters) {
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

TDOT static double peak_sdot(int64_t iters) {
    const int8x16_t b = vdupq_n_s8(1), c = vdupq_n_s8(-1);
    int32x4_t a[12];
    for (int i = 0; i < 12; i++) a[i] = vdupq_n_s32(i);
    for (int64_t it = 0; it < iters; it++) {
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) {
            a[i] = vdotq_s32(a[i], b, c);
            KEEP(a[i])
        }
    }
    int32_t s = 0;
    for (int i = 0; i < 12; i++) s += vgetq_lane_s32(a[i], 0);
    return (double)iters * 12 * 32 + (s == 12345 ? 1 : 0);
}

TMM static double peak_smmla(int64_t iters) {
    const int8x16_t b = vdupq_n_s8(1), c = vdupq_n_s8(-1);
    int32x4_t a[12];
    for (int i = 0; i < 12; i++) a[i] = vdupq_n_s32(i);
    for (int64_t it = 0; it < iters; it++) {
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) {
            a[i] = vmmlaq_s32(a[i], b, c);
            KEEP(a[i])
        }
    }
    int32_t s = 0;
    for (int i = 0; i < 12; i++) s += vgetq_lane_s32(a[i], 0);
    return (double)iters * 12 * 64 + (s == 12345 ? 1 : 0);
}

TBF16 static double peak_bfdot(int64_t iters) {
    const bfloat16x8_t b = vreinterpretq_bf16_u16(vdupq_n_u16(0x3f80)); /* 1.0 */
    float32x4_t a[12];
    for (int i = 0; i < 12; i++) a[i] = vdupq_n_f32((float)i);
    for (int64_t it = 0; it < iters; it++) {
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) {
            a[i] = vbfdotq_f32(a[i], b, b);
            KEEP(a[i])
        }
    }
    float s = 0;
    for (int i = 0; i < 12; i++) s += vgetq_lane_f32(a[i], 0);
    return (double)iters * 12 * 16 + (s == 12345.0f ? 1 : 0);
}

double neon_peak(int kind, int64_t iters) {
    switch (kind) {
    case 1: return peak_bfdot(iters);
    case 2: return peak_sdot(iters);
    case 3: return peak_smmla(iters);
    default: return peak_fma(iters);
    }
}

#else /* not AArch64: never called */
void neon_dot_f32(int64_t kc, const float *x, int64_t ldx, int64_t T, const float *w,
                  int64_t ldw, int64_t np, float *y, int64_t ldy, bool add) {}
void neon_widen_w16(bool f16, const uint16_t *w, int64_t ldw, int64_t nr, int64_t kc, float *dst,
                    int64_t ldd) {}
void neon_act_bf16(const float *x, int64_t in, int64_t t0, int64_t t1, uint16_t *dst) {}
void neon_dot_bf16(int64_t kc, const uint16_t *x, int64_t ldx, int64_t T, const uint16_t *w,
                   int64_t ldw, int64_t np, float *y, int64_t ldy, bool add) {}
void neon_gemm_nn(int64_t m, int64_t n, int64_t k, const float *A, int64_t rsa, int64_t csa,
                  const float *B, int64_t ldb, float *C, int64_t ldc, bool add) {}
double neon_peak(int kind, int64_t iters) { return 0; }
void neon_exp(const float *x, float *y, int64_t n) {}
void neon_sigmoid(float *x, int64_t n) {}
void neon_silu_mul(float *x, const float *g, int64_t n) {}
void neon_mul_silu(float *x, const float *g, int64_t n) {}
void neon_mul_sigmoid(float *x, const float *g, int64_t n) {}
void neon_conv_silu_row(const float *hist, const float *wt, int64_t ld, int first, int K,
                        float *o, int64_t n) {}
void neon_rmsnorm(float *y, const float *x, const float *w, int64_t n, int64_t rows, float eps) {}
void neon_l2norm(float *x, int64_t n, int64_t rows, float eps) {}
void neon_act_i8(const mm_i8_kind *kind, const float *x, int64_t in, int64_t t0, int64_t t1,
                 int8_t *q, float *dx, void *mb) {}
void neon_i8_panel(const mm_i8_kind *kind, const mm_i8_act *a, int64_t T, int64_t k0,
                   int64_t kc, const uint8_t *panel, int64_t np, float *y, int64_t ldy,
                   bool add, const mm_prefetch *pf) {}
#endif
