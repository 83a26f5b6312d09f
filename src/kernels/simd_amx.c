/*
 * kernels/simd_amx.c — the AMX (tile) kernels behind kernels/simd.h: BF16
 * weights on TDPBF16PS, Q8_0 on TDPBSSD, the K-quants in planes on
 * TDPBSUD / TDPBSSD, the repacking they need, and the tile peak loop.
 *
 * Orientation.  A tiles are activation rows (16 tokens x 64 bytes of k); B
 * tiles are weight rows in the "VNNI" layout the instructions want (per 4
 * bytes of k, 16 output rows side by side); C tiles are [16 tokens][16 rows].
 *   BF16:  A from activations repacked as contiguous 1 KiB tiles
 *          (amx_act_bf16), B = [16 k-pairs][16 rows][2 bf16] (amx_pack_bf16,
 *          per call); C accumulates over MM_AMX_KB blocks of 32 k, then in
 *          f32 scratch, and goes to y once all of k is done.
 *   Q8_0:  A = the int8 activation rows in place; B = the packed I8 group
 *          of simd.h (quants signed), whose [8][48][4] quants are already
 *          that layout for each 16 of the 48 rows.  One scale per block of
 *          32 on both sides, so each block's integer C tile is stored and
 *          scaled into f32 accumulators with AVX-512; the stores and that
 *          scaling, not the tile unit, bound the kernel.
 *   K-quants: byte planes of quant times scale digit, a whole super-block
 *          of 256 per chain of products, activations per 256 (simd.h).
 *
 * Tile state is per thread: every entry point loads its configuration
 * (LDTILECFG) first, so a pool thread may run any of them in any order.
 * Each function carries its target attribute, like simd_avx512.c, so the
 * file builds with baseline flags and nothing here runs unless cpu_choose
 * picked amx (which asked Linux for the tile permission).
 */
#include "kernels/simd.h"

#include "core/dtype.h"
#include "kernels/dequant.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <string.h>

#include "kernels/kquant_x86.h"
#include "kernels/transpose_x86.h"

#define TAMX                                                                           \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,"            \
                          "amx-tile,amx-bf16,amx-int8")))
#define INLINE static inline __attribute__((always_inline))
/* The tile-load macros do not tell the compiler they read memory: plain
 * stores before one must be made visible first. */
#define MEM_BARRIER() __asm__ volatile("" ::: "memory")

/* The LDTILECFG operand (Intel SDM vol. 1, 18.2): palette 1; per tile its
 * bytes per row and its rows. */
typedef struct amx_cfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_cfg;

/* Tiles 0..7 all 16 rows x 64 bytes, except for the int8 kernel's A tiles
 * (0, 3: colsb_a bytes) and B tiles (1, 4: rows_b rows). */
TAMX static void amx_configure(int colsb_a, int rows_b) {
    amx_cfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int i = 0; i < 8; i++) {
        c.colsb[i] = 64;
        c.rows[i] = 16;
    }
    c.colsb[0] = c.colsb[3] = (uint16_t)colsb_a;
    c.rows[1] = c.rows[4] = (uint8_t)rows_b;
    MEM_BARRIER();
    _tile_loadconfig(&c);
}

INLINE TAMX __mmask16 lanes16(int64_t n) {
    return n <= 0 ? 0 : n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1);
}

/* ==== BF16 ================================================================== */

/* Row groups in a packed BF16 panel of np rows: a whole number of pairs. */
INLINE int64_t bf16_groups(int64_t np) { return (np + 31) / 32 * 2; }

TAMX void amx_pack_bf16(const mm_weight *w, int64_t r0, int64_t np, int64_t k0, int64_t kc,
                        uint16_t *dst) {
    const int64_t nkb = kc / 32, nsg = bf16_groups(np);
    for (int64_t sg = 0; sg < nsg; sg++) {
        const uint16_t *rows[16];
        for (int i = 0; i < 16; i++) {
            int64_t row = sg * 16 + i;
            rows[i] = row < np ? (const uint16_t *)((const uint8_t *)w->data +
                                                    (size_t)(r0 + row) * w->row_bytes) + k0
                               : NULL;
        }
        for (int64_t kb = 0; kb < nkb; kb++) {
            __m512i r[16];
            for (int i = 0; i < 16; i++)
                r[i] = rows[i] ? _mm512_loadu_si512(rows[i] + 32 * kb) : _mm512_setzero_si512();
            x86_transpose16x16(r);
            uint16_t *tile = dst + (size_t)(kb * nsg + sg) * 512;
            for (int j = 0; j < 16; j++) _mm512_store_si512(tile + 32 * j, r[j]);
        }
    }
}

/* C tiles 4..7: the 32 x 32 block at c (32 floats per row), as four 16 x 16. */
INLINE TAMX void c_load(const float *c) {
    MEM_BARRIER();
    _tile_loadd(4, c, 128);
    _tile_loadd(5, c + 16, 128);
    _tile_loadd(6, c + 512, 128);
    _tile_loadd(7, c + 528, 128);
}
INLINE TAMX void c_store(float *c) {
    _tile_stored(4, c, 128);
    _tile_stored(5, c + 16, 128);
    _tile_stored(6, c + 512, 128);
    _tile_stored(7, c + 528, 128);
}

TAMX void amx_act_bf16(const float *x, int64_t in, int64_t T, int64_t t0, int64_t t1,
                       uint16_t *dst) {
    const int64_t nkb = in / 32;
    for (int64_t t = t0; t < t1; t++) {
        uint16_t *d = dst + ((t / 16) * nkb * 16 + t % 16) * 32;
        for (int64_t kb = 0; kb < nkb; kb++, d += 512) {
            __m512i h = _mm512_setzero_si512();
            if (t < T) {
                const float *xr = x + t * in + 32 * kb;
                h = (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(xr + 16), _mm512_loadu_ps(xr));
            }
            _mm512_store_si512(d, h);
        }
    }
}

/* C (tiles 4..7) += 32 tokens x 32 rows over nkb blocks of 32 k: A tiles
 * from the two token groups at a0, a1 (next block 512 elements on), B from
 * the panel at b (next block 1024 on). */
INLINE TAMX void bf16_block(int64_t nkb, const uint16_t *a0, const uint16_t *a1,
                            const uint16_t *b) {
    for (int64_t kb = 0; kb < nkb; kb++, a0 += 512, a1 += 512, b += 1024) {
        _tile_loadd(0, a0, 64);
        _tile_loadd(1, a1, 64);
        _tile_loadd(2, b, 64);
        _tile_loadd(3, b + 512, 64);
        _tile_dpbf16ps(4, 0, 2);
        _tile_dpbf16ps(5, 0, 3);
        _tile_dpbf16ps(6, 1, 2);
        _tile_dpbf16ps(7, 1, 3);
    }
}

/* acc rows [0, nt) -> y rows, columns < np. */
INLINE TAMX void bf16_put(const float *acc, int64_t nt, int64_t np, float *y, int64_t ldy) {
    const __mmask16 m0 = lanes16(np), m1 = lanes16(np - 16);
    for (int64_t i = 0; i < nt; i++) {
        const float *c = acc + (i / 32) * 1024 + (i % 32) * 32;
        _mm512_mask_storeu_ps(y + i * ldy, m0, _mm512_load_ps(c));
        _mm512_mask_storeu_ps(y + i * ldy + 16, m1, _mm512_load_ps(c + 16));
    }
}

TAMX void amx_bf16_panel(int64_t K, const uint16_t *xp, int64_t T, const uint16_t *panel,
                         int64_t np, float *y, int64_t ldy, float *acc) {
    amx_configure(64, 16);
    const int64_t nkb = K / 32;
    for (int64_t tc = 0; tc < T; tc += MM_AMX_TT) {
        const int64_t nt = T - tc < MM_AMX_TT ? T - tc : MM_AMX_TT;
        for (int64_t kb0 = 0; kb0 < nkb; kb0 += MM_AMX_KB) {
            const int64_t kbn = nkb - kb0 < MM_AMX_KB ? nkb - kb0 : MM_AMX_KB;
            for (int64_t g = 0; g * 32 < nt; g++) {
                float *c = acc + g * 1024;
                if (kb0 > 0) {
                    c_load(c);
                } else {
                    _tile_zero(4);
                    _tile_zero(5);
                    _tile_zero(6);
                    _tile_zero(7);
                }
                const uint16_t *a0 = xp + ((tc / 16 + 2 * g) * nkb + kb0) * 512;
                bf16_block(kbn, a0, a0 + nkb * 512, panel + kb0 * 1024);
                c_store(c);
            }
        }
        bf16_put(acc, nt, np, y + tc * ldy, ldy);
    }
}

/* ==== Q8_0 on packed I8 groups ================================================= */

enum { IG = MM_I8_G, I8_BK = 32, I8_BLK = 16 };

/* One block's scale step for 16 tokens (row i: token i of the group):
 * f[i] += f32(C_i)·(s·dx_i), dx the block's 16 transposed token scales. */
INLINE TAMX void i8_scale(__m512 f[16], const int32_t *c, const float *sv, const float *dx) {
    const __m512 s = _mm512_load_ps(sv);
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) {
        __m512 sd = _mm512_mul_ps(s, _mm512_set1_ps(dx[i]));
        f[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c + 16 * i)), sd, f[i]);
    }
}

/* Phase 1 of i8_tile16: the integer dots of nblk blocks, 16 tokens x one
 * 16-row subgroup, out to c[b][16][16].  Four C tiles rotate (2, 5, 6, 7)
 * and a block's tile is stored only after the next three products are
 * issued: TILESTORED waits for its product, so storing at once would stall
 * the pipeline for the product's whole latency.  A/B pairs alternate
 * between tiles 0/1 and 3/4. */
#define I8_DOT(TA, TB, TC, b)                                                                    \
    do {                                                                                         \
        _tile_loadd(TA, aq + (b) * I8_BK, lda);                                                  \
        _tile_loadd(TB, bq + (size_t)(b) * bbytes, 4 * IG);                                      \
        _tile_zero(TC);                                                                          \
        _tile_dpbssd(TC, TA, TB);                                                                \
    } while (0)
INLINE TAMX void i8_dots(int64_t nblk, const int8_t *aq, int64_t lda, const uint8_t *bq,
                         size_t bbytes, int32_t *c) {
    int64_t b = 0;
    for (; b + 4 <= nblk; b += 4) {
        I8_DOT(0, 1, 2, b);
        if (b > 0) _tile_stored(5, c + (b - 3) * 256, 64);
        I8_DOT(3, 4, 5, b + 1);
        if (b > 0) _tile_stored(6, c + (b - 2) * 256, 64);
        I8_DOT(0, 1, 6, b + 2);
        if (b > 0) _tile_stored(7, c + (b - 1) * 256, 64);
        I8_DOT(3, 4, 7, b + 3);
        _tile_stored(2, c + b * 256, 64);
    }
    if (b > 0) {
        _tile_stored(5, c + (b - 3) * 256, 64);
        _tile_stored(6, c + (b - 2) * 256, 64);
        _tile_stored(7, c + (b - 1) * 256, 64);
    }
    for (; b < nblk; b++) { /* fewer than four blocks left */
        I8_DOT(0, 1, 2, b);
        _tile_stored(2, c + b * 256, 64);
    }
}

/* 16 tokens (quants at aq, lda apart; scales dxT of their group) x
 * subgroup sg of the packed group gp, over nblk blocks; writes y rows < mr,
 * columns < nc.  Per I8_BLK blocks the tile work first (into a 16 KiB
 * stack buffer), then the scaling, the 16 accumulators in registers. */
INLINE TAMX void i8_tile16(int64_t nblk, const int8_t *aq, int64_t lda, const float *dxT,
                           const uint8_t *gp, int sg, int mr, int nc, float *y, int64_t ldy,
                           bool add) {
    const size_t bbytes = (size_t)(I8_BK * IG + 2 * IG * (int)sizeof(float));
    int32_t c[I8_BLK * 256] __attribute__((aligned(64)));
    __m512 f[16];
    for (int i = 0; i < 16; i++) f[i] = _mm512_setzero_ps();
    for (int64_t b0 = 0; b0 < nblk; b0 += I8_BLK) {
        const int64_t nb = nblk - b0 < I8_BLK ? nblk - b0 : I8_BLK;
        i8_dots(nb, aq + b0 * I8_BK, lda, gp + (size_t)b0 * bbytes + sg * 64, bbytes, c);
        MEM_BARRIER();
        for (int64_t b = 0; b < nb; b++) {
            const float *sv =
                (const float *)(gp + (size_t)(b0 + b) * bbytes + I8_BK * IG) + sg * 16;
            i8_scale(f, c + b * 256, sv, dxT + (b0 + b) * 16);
        }
    }
    const __mmask16 cm = lanes16(nc);
    for (int i = 0; i < mr; i++) {
        float *p = y + i * ldy;
        __m512 v = f[i];
        if (add) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(cm, p));
        _mm512_mask_storeu_ps(p, cm, v);
    }
}

TAMX void amx_i8_panel(const mm_i8_kind *kind, const mm_i8_act *a, int64_t T, int64_t k0,
                       int64_t kc, const uint8_t *panel, int64_t np, float *y, int64_t ldy,
                       bool add) {
    (void)kind; /* Q8_0 packed signed: the only kind on this path (simd.h) */
    /* tiles 0 and 3: A (16 x 32 bytes); 1 and 4: B (8 rows); 2, 5-7: C */
    amx_configure(I8_BK, I8_BK / 4);
    const int64_t nblk = kc / I8_BK, nbt = a->ld / I8_BK;
    const size_t gbytes = (size_t)nblk * (size_t)(I8_BK * IG + 2 * IG * (int)sizeof(float));
    for (int64_t t = 0; t < T; t += 16) {
        const int mr = (int)(T - t < 16 ? T - t : 16);
        const float *dxT = a->dxT + ((t / 16) * nbt + k0 / I8_BK) * 16;
        for (int64_t r = 0; r < np; r += 16) {
            const int nc = (int)(np - r < 16 ? np - r : 16);
            i8_tile16(nblk, a->q + t * a->ld + k0, a->ld, dxT, panel + (size_t)(r / IG) * gbytes,
                      (int)(r % IG) / 16, mr, nc, y + t * ldy + r, ldy, add);
        }
    }
}

/* ==== K-quants in planes (simd.h) ============================================= */

enum { KQ_PLANE = 4096 }; /* one plane of a super-block: 4 B tiles of 64 k */

/* The layout of one type's records. */
typedef struct kq_form {
    int planes;       /* 2 (Q4_K, Q5_K: q·hi, q·lo) or 4 (Q6_K: q'·c_i)       */
    int shift[4];     /* plane i counts 2^shift[i] times                     */
    bool sgn;         /* signed planes (TDPBSSD) rather than unsigned        */
    bool mins;        /* a min term (Q4_K, Q5_K)                             */
    size_t rec;       /* record bytes                                        */
} kq_form;

INLINE kq_form kq_form_of(uint32_t type) {
    if (!mm_kq_has_mins(type)) /* Q6_K */
        return (kq_form){4, {0, 2, 4, 6}, true, false, mm_kq_rec_bytes(type)};
    return (kq_form){2, {3, 0, 0, 0}, false, true, mm_kq_rec_bytes(type)};
}

TAMX void amx_act_kq(const float *x, int64_t in, int64_t T, int64_t t0, int64_t t1, int8_t *q,
                     float *dT, float *bsT) {
    const int64_t nsb = in / 256, n32 = in / 32;
    for (int64_t t = t0; t < t1; t++) {
        int8_t *qr = q + t * in;
        float *dt = dT + (t / 16) * nsb * 16 + t % 16;
        float *bt = bsT ? bsT + (t / 16) * n32 * 16 + t % 16 : NULL;
        if (t >= T) {
            memset(qr, 0, (size_t)in);
            for (int64_t s = 0; s < nsb; s++) dt[s * 16] = 0.0f;
            for (int64_t b = 0; bt && b < n32; b++) bt[b * 16] = 0.0f;
            continue;
        }
        for (int64_t s = 0; s < nsb; s++) {
            const float *xs = x + t * in + 256 * s;
            __m512 a = _mm512_setzero_ps();
            for (int i = 0; i < 256; i += 16)
                a = _mm512_max_ps(a, _mm512_abs_ps(_mm512_loadu_ps(xs + i)));
            const float d = _mm512_reduce_max_ps(a) / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
            dt[s * 16] = d;
            for (int j = 0; j < 8; j++) {
                const __m512 v = _mm512_set1_ps(id);
                __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xs + 32 * j), v));
                __m512i q1 =
                    _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xs + 32 * j + 16), v));
                _mm_storeu_si128((__m128i *)(qr + 256 * s + 32 * j), _mm512_cvtsepi32_epi8(q0));
                _mm_storeu_si128((__m128i *)(qr + 256 * s + 32 * j + 16),
                                 _mm512_cvtsepi32_epi8(q1));
                if (bt)
                    bt[(s * 8 + j) * 16] =
                        d * (float)_mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
            }
        }
    }
}

/* v·f per byte for f in [0, 8), f0 for the first 16 bytes and f1 for the
 * last (v ≤ 31: no carries past a byte), without branches: the scales of
 * real weights vary block to block. */
INLINE TAMX __m256i mul_small(__m256i v, int f0, int f1) {
#define KQ_BIT(b) _mm256_setr_m128i(_mm_set1_epi8((char)-((f0 >> (b)) & 1)), \
                                    _mm_set1_epi8((char)-((f1 >> (b)) & 1)))
    const __m256i v2 = _mm256_add_epi8(v, v), v4 = _mm256_add_epi8(v2, v2);
    __m256i r = _mm256_and_si256(v, KQ_BIT(0));
    r = _mm256_add_epi8(r, _mm256_and_si256(v2, KQ_BIT(1)));
    return _mm256_add_epi8(r, _mm256_and_si256(v4, KQ_BIT(2)));
#undef KQ_BIT
}

/* v·c per byte for Q6_K's digits c in [−2, 2] (c0 for the first 16 bytes,
 * c1 for the last): v or 2v by |c|, then the sign of c (VPSIGNB). */
INLINE TAMX __m256i mul_digit(__m256i v, __m256i v2, int c0, int c1) {
    const __m256i c = _mm256_setr_m128i(_mm_set1_epi8((char)c0), _mm_set1_epi8((char)c1));
    const __m256i two = _mm256_cmpeq_epi8(_mm256_abs_epi8(c), _mm256_set1_epi8(2));
    return _mm256_sign_epi8(_mm256_blendv_epi8(v, v2, two), c);
}

/* A Q6_K scale as four digits in [−2, 2]: sc = Σ_i 4^i·c_i. */
INLINE void kq_digits(int sc, int c[4]) {
    for (int i = 0; i < 3; i++) {
        c[i] = ((sc + 2) & 3) - 2;
        sc = (sc - c[i]) / 4;
    }
    c[3] = sc;
}

/* The scale side of a record: per row the digits of each 16-k group's
 * scale (dig[row][group][plane]), d, and (Q4_K, Q5_K) dmin·m_j into
 * mins[j][row]; zero for absent rows. */
INLINE void kq_record_scales(bool six, const uint8_t *const rows[16], int8_t dig[16][16][4],
                             float *d, float *mins) {
    for (int i = 0; i < 16; i++) {
        memset(dig[i], 0, sizeof dig[i]);
        d[i] = 0.0f;
        if (!six)
            for (int j = 0; j < 8; j++) mins[j * 16 + i] = 0.0f;
        if (!rows[i]) continue;
        if (six) {
            d[i] = clef_load_f16(rows[i] + 208);
            for (int g = 0; g < 16; g++) {
                int c[4];
                kq_digits(((const int8_t *)(rows[i] + 192))[g], c);
                for (int p = 0; p < 4; p++) dig[i][g][p] = (int8_t)c[p];
            }
            continue;
        }
        d[i] = clef_load_f16(rows[i]);
        const float dm = clef_load_f16(rows[i] + 2);
        for (int j = 0; j < 8; j++) {
            uint8_t sc, mn;
            clef_k_scale_min(rows[i] + 4, j, &sc, &mn);
            dig[i][2 * j][0] = dig[i][2 * j + 1][0] = (int8_t)(sc >> 3);
            dig[i][2 * j][1] = dig[i][2 * j + 1][1] = (int8_t)(sc & 7);
            mins[j * 16 + i] = dm * (float)mn;
        }
    }
}

/* One subgroup's record for one super-block: rows[i] the 16 rows' blocks
 * (NULL past the panel).  Plane p of a row in 64-k chunk c holds each quant
 * times its 32 (Q4_K/Q5_K: digit p of sc = 8·hi + lo) or 16 (Q6_K: base-4
 * digit p) scale's digit. */
INLINE TAMX void kq_pack_record(uint32_t type, const kq_form *fm, const uint8_t *const rows[16],
                                uint8_t *rec) {
    const bool six = type == CLEF_DTYPE_Q6_K, five = type == CLEF_DTYPE_Q5_K;
    int8_t dig[16][16][4];
    float *d = (float *)(rec + fm->planes * KQ_PLANE);
    kq_record_scales(six, rows, dig, d, d + 16);
    for (int c = 0; c < 4; c++) {
        __m512i pl[4][16];
        for (int i = 0; i < 16; i++) {
            __m256i q[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
            if (rows[i] && six) kq_quants6(rows[i], c, 32, q);
            else if (rows[i]) kq_quants45(five, rows[i], c, q);
            const int8_t *g = dig[i][4 * c]; /* the groups of 16 k: 4c .. 4c+3 */
            if (six) {
                const __m256i d0 = _mm256_add_epi8(q[0], q[0]), d1 = _mm256_add_epi8(q[1], q[1]);
                for (int p = 0; p < 4; p++)
                    pl[p][i] = _mm512_inserti64x4(
                        _mm512_castsi256_si512(mul_digit(q[0], d0, g[p], g[4 + p])),
                        mul_digit(q[1], d1, g[8 + p], g[12 + p]), 1);
            } else {
                for (int p = 0; p < 2; p++)
                    pl[p][i] =
                        _mm512_inserti64x4(_mm512_castsi256_si512(mul_small(q[0], g[p], g[4 + p])),
                                           mul_small(q[1], g[8 + p], g[12 + p]), 1);
            }
        }
        for (int p = 0; p < fm->planes; p++) {
            x86_transpose16x16(pl[p]);
            for (int r = 0; r < 16; r++)
                _mm512_store_si512(rec + p * KQ_PLANE + 1024 * c + 64 * r, pl[p][r]);
        }
    }
}

TAMX void amx_pack_kq(const mm_weight *w, int64_t r0, int64_t np, int64_t k0, int64_t kc,
                      uint8_t *dst) {
    const kq_form fm = kq_form_of(w->type);
    const size_t tsz = clef_dtype_get(w->type)->type_size;
    const int64_t nsb = kc / 256;
    for (int sg = 0; sg * 16 < np; sg++) {
        const uint8_t *base[16];
        for (int i = 0; i < 16; i++) {
            int64_t row = sg * 16 + i;
            base[i] = row < np ? (const uint8_t *)w->data + (size_t)(r0 + row) * w->row_bytes +
                                     (size_t)(k0 / 256) * tsz
                               : NULL;
        }
        for (int64_t s = 0; s < nsb; s++) {
            const uint8_t *rows[16];
            for (int i = 0; i < 16; i++) rows[i] = base[i] ? base[i] + s * tsz : NULL;
            kq_pack_record(w->type, &fm, rows, dst + (size_t)(sg * nsb + s) * fm.rec);
        }
    }
}

/* The integer dots of nsb super-blocks for ntg token groups (A tiles 0, 1)
 * x one subgroup, planes in pairs (B 2, 3): per pair four 64-k steps into
 * C tiles 4/5 (group 0) and 6/7 (group 1), then out to
 * c[s][pair][group][2][256]. */
#define KQ_DP(TC, TA, TB)                                                                        \
    do {                                                                                         \
        if (sgn) _tile_dpbssd(TC, TA, TB);                                                       \
        else _tile_dpbsud(TC, TA, TB);                                                           \
    } while (0)
INLINE TAMX void kq_dots(bool sgn, int planes, size_t recb, int ntg, int64_t nsb, const int8_t *aq,
                         int64_t lda, const uint8_t *rec, int32_t *c) {
    for (int64_t s = 0; s < nsb; s++, aq += 256, rec += recb)
        for (int pp = 0; pp < planes; pp += 2, c += 1024) {
            const uint8_t *b0 = rec + pp * KQ_PLANE, *b1 = b0 + KQ_PLANE;
            _tile_zero(4);
            _tile_zero(5);
            if (ntg > 1) {
                _tile_zero(6);
                _tile_zero(7);
            }
            for (int kk = 0; kk < 4; kk++) {
                _tile_loadd(0, aq + 64 * kk, lda);
                _tile_loadd(2, b0 + 1024 * kk, 64);
                _tile_loadd(3, b1 + 1024 * kk, 64);
                KQ_DP(4, 0, 2);
                KQ_DP(5, 0, 3);
                if (ntg > 1) {
                    _tile_loadd(1, aq + 16 * lda + 64 * kk, lda);
                    KQ_DP(6, 1, 2);
                    KQ_DP(7, 1, 3);
                }
            }
            _tile_stored(4, c, 64);
            _tile_stored(5, c + 256, 64);
            if (ntg > 1) {
                _tile_stored(6, c + 512, 64);
                _tile_stored(7, c + 768, 64);
            }
        }
}

/* f[i] += (Σ_p 2^shift_p·C_p)_i·(d·dx_i) [− Σ_j (dmin·m_j)·bs_j,i] for one
 * super-block of one token group: c its [pair][group][2][256] results. */
INLINE TAMX void kq_scale(const kq_form *fm, __m512 f[16], const int32_t *c, int g,
                          const uint8_t *rec, const float *dx, const float *bs) {
    const float *dv = (const float *)(rec + fm->planes * KQ_PLANE), *mins = dv + 16;
    const __m512 d = _mm512_load_ps(dv);
    __m512 m[8];
    if (fm->mins)
        for (int j = 0; j < 8; j++) m[j] = _mm512_load_ps(mins + 16 * j);
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) {
        __m512i v = _mm512_setzero_si512();
        for (int p = 0; p < fm->planes; p++) {
            const int32_t *cp = c + (p / 2) * 1024 + g * 512 + (p % 2) * 256 + 16 * i;
            v = _mm512_add_epi32(v,
                                 _mm512_slli_epi32(_mm512_load_si512(cp), (unsigned)fm->shift[p]));
        }
        __m512 acc =
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), _mm512_mul_ps(d, _mm512_set1_ps(dx[i])), f[i]);
        if (fm->mins)
            for (int j = 0; j < 8; j++)
                acc = _mm512_fnmadd_ps(m[j], _mm512_set1_ps(bs[16 * j + i]), acc);
        f[i] = acc;
    }
}

enum { KQ_SB = 4 }; /* super-blocks per pass of two planes: 16 KiB of C */

/* The panel for constant (type): token pairs outer, so a pair's quants
 * serve all subgroups from L1. */
INLINE TAMX void kq_panel(uint32_t type, const mm_i8_act *a, int64_t T, int64_t k0, int64_t kc,
                          const uint8_t *panel, int64_t np, float *y, int64_t ldy, bool add) {
    const kq_form fm = kq_form_of(type);
    const int64_t nsb = kc / 256, in = a->ld, nsbt = in / 256, n32 = in / 32;
    const int64_t pass = KQ_SB * 2 / fm.planes; /* super-blocks per pass */
    int32_t c[KQ_SB * 1024] __attribute__((aligned(64)));
    for (int64_t t = 0; t < T; t += 32) {
        const int ntg = T - t > 16 ? 2 : 1;
        for (int sg = 0; sg * 16 < np; sg++) {
            const __mmask16 cm = lanes16(np - 16 * sg);
            const uint8_t *recs = panel + (size_t)sg * nsb * fm.rec;
            __m512 f[2][16];
            for (int g = 0; g < 2; g++)
                for (int i = 0; i < 16; i++) f[g][i] = _mm512_setzero_ps();
            for (int64_t s0 = 0; s0 < nsb; s0 += pass) {
                const int64_t ns = nsb - s0 < pass ? nsb - s0 : pass;
                kq_dots(fm.sgn, fm.planes, fm.rec, ntg, ns, a->q + t * in + k0 + 256 * s0, in,
                        recs + (size_t)s0 * fm.rec, c);
                MEM_BARRIER();
                for (int g = 0; g < ntg; g++) {
                    const int64_t tg = t / 16 + g;
                    for (int64_t s = 0; s < ns; s++) {
                        const int64_t sb = k0 / 256 + s0 + s; /* in the whole row */
                        kq_scale(&fm, f[g], c + s * (fm.planes / 2) * 1024, g,
                                 recs + (size_t)(s0 + s) * fm.rec, a->dxT + (tg * nsbt + sb) * 16,
                                 (const float *)a->mbT + (tg * n32 + sb * 8) * 16);
                    }
                }
            }
            for (int g = 0; g < ntg; g++)
                for (int i = 0; i < 16 && t + 16 * g + i < T; i++) {
                    float *p = y + (t + 16 * g + i) * ldy + 16 * sg;
                    __m512 v = f[g][i];
                    if (add) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(cm, p));
                    _mm512_mask_storeu_ps(p, cm, v);
                }
        }
    }
}
TAMX static void kq_panel_45(const mm_i8_act *a, int64_t T, int64_t k0, int64_t kc,
                             const uint8_t *panel, int64_t np, float *y, int64_t ldy, bool add) {
    kq_panel(CLEF_DTYPE_Q4_K, a, T, k0, kc, panel, np, y, ldy, add);
}
TAMX static void kq_panel_6(const mm_i8_act *a, int64_t T, int64_t k0, int64_t kc,
                            const uint8_t *panel, int64_t np, float *y, int64_t ldy, bool add) {
    kq_panel(CLEF_DTYPE_Q6_K, a, T, k0, kc, panel, np, y, ldy, add);
}

TAMX void amx_kq_panel(uint32_t type, const mm_i8_act *a, int64_t T, int64_t k0, int64_t kc,
                       const uint8_t *panel, int64_t np, float *y, int64_t ldy, bool add) {
    amx_configure(64, 16);
    if (type == CLEF_DTYPE_Q6_K) kq_panel_6(a, T, k0, kc, panel, np, y, ldy, add);
    else kq_panel_45(a, T, k0, kc, panel, np, y, ldy, add);
}

/* ==== peak ===================================================================== */

/* Four independent accumulator tiles on fixed inputs; returns operations
 * done (a 16 x 16 x 32 bf16 tile product = 16384, 16 x 16 x 64 int8 = 32768). */
TAMX double amx_peak(int kind, int64_t iters) {
    amx_configure(64, 16);
    static const uint8_t src[1024] __attribute__((aligned(64)));
    _tile_loadd(0, src, 64);
    _tile_loadd(1, src, 64);
    _tile_zero(4);
    _tile_zero(5);
    _tile_zero(6);
    _tile_zero(7);
    for (int64_t k = 0; k < iters; k++) {
        if (kind == 1) {
            _tile_dpbf16ps(4, 0, 1);
            _tile_dpbf16ps(5, 0, 1);
            _tile_dpbf16ps(6, 0, 1);
            _tile_dpbf16ps(7, 0, 1);
        } else {
            _tile_dpbsud(4, 0, 1);
            _tile_dpbsud(5, 0, 1);
            _tile_dpbsud(6, 0, 1);
            _tile_dpbsud(7, 0, 1);
        }
    }
    float sink[256] __attribute__((aligned(64)));
    _tile_stored(4, sink, 64);
    __asm__ volatile("" : : "m"(sink));
    _tile_release();
    return (double)iters * 4 * (kind == 1 ? 16384.0 : 32768.0);
}

#else /* not x86-64: never called (cpu_choose offers only `ref`) */

void amx_pack_bf16(const mm_weight *w, int64_t r0, int64_t np, int64_t k0, int64_t kc,
                   uint16_t *dst) {}
void amx_act_bf16(const float *x, int64_t in, int64_t T, int64_t t0, int64_t t1, uint16_t *dst) {}
void amx_bf16_panel(int64_t K, const uint16_t *xp, int64_t T, const uint16_t *panel, int64_t np,
                    float *y, int64_t ldy, float *acc) {}
void amx_i8_panel(const mm_i8_kind *kind, const mm_i8_act *a, int64_t T, int64_t k0, int64_t kc,
                  const uint8_t *panel, int64_t np, float *y, int64_t ldy, bool add) {}
double amx_peak(int kind, int64_t iters) { return 0; }
void amx_act_kq(const float *x, int64_t in, int64_t T, int64_t t0, int64_t t1, int8_t *q,
                float *dT, float *bsT) {}
void amx_pack_kq(const mm_weight *w, int64_t r0, int64_t np, int64_t k0, int64_t kc,
                 uint8_t *dst) {}
void amx_kq_panel(uint32_t type, const mm_i8_act *a, int64_t T, int64_t k0, int64_t kc,
                  const uint8_t *panel, int64_t np, float *y, int64_t ldy, bool add) {}

#endif
