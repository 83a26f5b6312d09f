/*
 * kernels/quantize.c — reference f32 → F16/BF16/Q8_0/Q4_K/Q5_K/Q6_K rows.
 *
 * Written from the algorithms of llama.cpp's ggml-quants.c reference
 * quantizers (quantize_row_*_ref, make_qkx2_quants, make_qx_quants).  The
 * float expressions keep the reference's operation order, because a file is
 * only "the same quantization" if every rounding step agrees: for Q8_0 the
 * bytes are checked against llama-quantize's (tests/test_quantize_model.c).
 * Block layouts are those of kernels/dequant.h.
 */
#include "kernels/quantize.h"

#include <math.h>
#include <string.h>

#include "core/dtype.h"
#include "kernels/dequant.h"

/* Sub-blocks whose largest |x| is below this are all-zero (as ggml's GROUP_MAX_EPS). */
#define Q_GROUP_EPS 1e-15f

/* Round half to even for |f| < 2^22: adding 1.5·2^23 leaves the rounded
 * integer in the low mantissa bits.  Defined for every input (garbage, never
 * UB, for NaN or huge values), unlike a float-to-int cast. */
static int nearest_int(float f) {
    float v = f + 12582912.f;
    int32_t i;
    memcpy(&i, &v, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

static void put_f16(uint8_t *p, float f) {
    uint16_t h = clef_f32_to_f16(f);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}


static int imin(int a, int b) { return a < b ? a : b; }
static int imax(int a, int b) { return a > b ? a : b; }

/* ---- Q8_0 ------------------------------------------------------------------ */

/* Block (34 bytes): f16 d; int8 q[32].  d = amax/127 in f32 divides, the f16
 * copy is what the file keeps. */
static void q8_0_block(const float *x, uint8_t *b) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) {
        float a = fabsf(x[j]);
        amax = amax > a ? amax : a;
    }
    const float d = amax / 127;
    const float id = d ? 1.0f / d : 0.0f;
    put_f16(b, d);
    for (int j = 0; j < 32; j++) {
        float v = roundf(x[j] * id);
        if (!(v >= -128.0f && v <= 127.0f)) v = 0.0f; /* only for non-finite input */
        b[2 + j] = (uint8_t)(int8_t)v;
    }
}

/* ---- asymmetric fit (Q4_K, Q5_K) ------------------------------------------ */

/* Fit x[0..n) ≈ scale·L − the_min with L in [0, nmax], minimising the
 * w-weighted squared error.  Starts from the full-range grid, then tries
 * nstep+1 grid widths (rmin + rdelta·is + nmax)/(max − min), refitting
 * scale and min by weighted least squares on each rounding and keeping the
 * best.  The min is kept ≤ 0 (the_min ≥ 0), as the formats store −min.
 * Returns the scale; L gets the levels, Laux is scratch[n]. */
static float fit_scale_min(int n, int nmax, const float *x, const float *w, uint8_t *L,
                           float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep) {
    float min = x[0], max = x[0];
    float sum_w = w[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; ++i) {
        int l = nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)imax(0, imin(nmax, l));
        float diff = scale * L[i] + min - x[i];
        best_error += w[i] * (diff * diff);
    }
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            int l = imax(0, imin(nmax, nearest_int(iscale * (x[i] - min))));
            Laux[i] = (uint8_t)l;
            sum_l += w[i] * l;
            sum_l2 += w[i] * l * l;
            sum_xl += w[i] * l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (!(D > 0)) continue;
        float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
        float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
        if (this_min > 0) {
            this_min = 0;
            this_scale = sum_xl / sum_l2;
        }
        float cur_error = 0;
        for (int i = 0; i < n; ++i) {
            float diff = this_scale * Laux[i] + this_min - x[i];
            cur_error += w[i] * (diff * diff);
        }
        if (cur_error < best_error) {
            memcpy(L, Laux, (size_t)n);
            best_error = cur_error;
            scale = this_scale;
            min = this_min;
        }
    }
    *the_min = -min;
    return scale;
}

/* The 8 (scale, min) pairs of a Q4_K/Q5_K block as 6-bit codes in 12 bytes
 * (the layout clef_k_scale_min reads). */
static void pack_scale_min(const uint8_t ls[8], const uint8_t lm[8], uint8_t s[12]) {
    for (int j = 0; j < 8; ++j) {
        if (j < 4) {
            s[j] = ls[j];
            s[j + 4] = lm[j];
        } else {
            s[j + 4] = (uint8_t)((ls[j] & 0xF) | (lm[j] & 0xF) << 4);
            s[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
            s[j] |= (uint8_t)((lm[j] >> 4) << 6);
        }
    }
}

static void unpack_scale_min(const uint8_t s[12], int j, int *sc, int *mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xF) | (s[j - 4] >> 6) << 4;
        *mn = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
    }
}

/* Shared by Q4_K (nmax 15) and Q5_K (nmax 31): fit the 8 sub-blocks of 32,
 * quantize their scales/mins to 6 bits against f16 d/dmin written at
 * b[0..4) and the codes at b[4..16), then re-round x on the final grid into
 * L[256].  The reference uses rmin/rdelta/nstep -1/0.1/20 (Q4_K) and
 * -0.5/0.1/15 (Q5_K). */
static void k_block_levels(const float *x, int nmax, float rmin, float rdelta, int nstep,
                           uint8_t *b, uint8_t L[256]) {
    float scales[8], mins[8], weights[32];
    uint8_t Laux[32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; ++j) {
        const float *xs = x + 32 * j;
        float sum_x2 = 0;
        for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
        float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; ++l) weights[l] = av_x + fabsf(xs[l]);
        scales[j] = fit_scale_min(32, nmax, xs, weights, L + 32 * j, &mins[j], Laux, rmin, rdelta,
                                  nstep);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    uint8_t ls[8], lm[8];
    for (int j = 0; j < 8; ++j) {
        /* uint8 wrap then clamp, as the reference (a negative fit becomes 63) */
        ls[j] = (uint8_t)imin(63, (uint8_t)nearest_int(inv_scale * scales[j]));
        lm[j] = (uint8_t)imin(63, (uint8_t)nearest_int(inv_min * mins[j]));
    }
    memset(b + 4, 0, 12);
    pack_scale_min(ls, lm, b + 4);
    put_f16(b, max_scale / 63.f);
    put_f16(b + 2, max_min / 63.f);
    const float d_all = clef_load_f16(b), dmin_all = clef_load_f16(b + 2);
    for (int j = 0; j < 8; ++j) {
        int sc, mn;
        unpack_scale_min(b + 4, j, &sc, &mn);
        const float d = d_all * sc;
        if (!d) continue; /* keeps the fit's levels, as the reference */
        const float dm = dmin_all * mn;
        for (int ii = 0; ii < 32; ++ii) {
            int l = nearest_int((x[32 * j + ii] + dm) / d);
            L[32 * j + ii] = (uint8_t)imax(0, imin(nmax, l));
        }
    }
}

/* Q4_K block (144 bytes): d, dmin, scales[12], qs[128]; each 64 elements
 * share 32 qs bytes, the first 32 in the low nibbles. */
static void q4_k_block(const float *x, uint8_t *b) {
    uint8_t L[256];
    k_block_levels(x, 15, -1.f, 0.1f, 20, b, L);
    uint8_t *q = b + 16;
    for (int j = 0; j < 256; j += 64, q += 32)
        for (int l = 0; l < 32; ++l) q[l] = (uint8_t)(L[j + l] | L[j + l + 32] << 4);
}

/* Q5_K block (176 bytes): d, dmin, scales[12], qh[32], qs[128]; the fifth
 * bit of sub-block j's element l is bit j of qh[l]. */
static void q5_k_block(const float *x, uint8_t *b) {
    uint8_t L[256];
    k_block_levels(x, 31, -0.5f, 0.1f, 15, b, L);
    uint8_t *qh = b + 16, *ql = b + 48;
    memset(qh, 0, 32);
    uint8_t m1 = 1, m2 = 2;
    for (int n = 0; n < 256; n += 64, ql += 32, m1 <<= 2, m2 <<= 2) {
        for (int j = 0; j < 32; ++j) {
            int l1 = L[n + j], l2 = L[n + j + 32];
            if (l1 > 15) {
                l1 -= 16;
                qh[j] |= m1;
            }
            if (l2 > 15) {
                l2 -= 16;
                qh[j] |= m2;
            }
            ql[j] = (uint8_t)(l1 | l2 << 4);
        }
    }
}

/* ---- symmetric fit (Q6_K) ---------------------------------------------------- */

/* Fit x[0..n) ≈ scale·(L − nmax), L − nmax in [−nmax, nmax−1], weights x²
 * (llama.cpp's make_qx_quants, rmse_type 1).  The grid is anchored so the
 * element of largest |x| lands on −nmax; 18 nearby widths are tried and the
 * one whose least-squares scale explains most weighted energy is kept. */
static float fit_scale_sym(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; ++i) {
        float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < Q_GROUP_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i])));
        L[i] = (int8_t)(l + nmax);
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; ++i) {
            int l = imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i])));
            float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; ++i)
                L[i] = (int8_t)(nmax + imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i]))));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* Q6_K block (210 bytes): ql[128], qh[64], int8 scales[16], f16 d.  The
 * sub-block of largest |scale| gets code −128, so d carries its sign. */
static void q6_k_block(const float *x, uint8_t *b) {
    int8_t L[256];
    float scales[16];
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < 16; ++ib) {
        const float scale = fit_scale_sym(16, 32, x + 16 * ib, L + 16 * ib);
        scales[ib] = scale;
        if (fabsf(scale) > max_abs_scale) {
            max_abs_scale = fabsf(scale);
            max_scale = scale;
        }
    }
    memset(b, 0, 210);
    if (max_abs_scale < Q_GROUP_EPS) return; /* all zero: d = +0 */
    int8_t *sc = (int8_t *)(b + 192);
    float iscale = -128.f / max_scale;
    put_f16(b + 208, 1 / iscale);
    for (int ib = 0; ib < 16; ++ib) sc[ib] = (int8_t)imin(127, nearest_int(iscale * scales[ib]));
    const float d_all = clef_load_f16(b + 208);
    for (int j = 0; j < 16; ++j) {
        float d = d_all * sc[j];
        if (!d) continue;
        for (int ii = 0; ii < 16; ++ii) {
            int l = imax(-32, imin(31, nearest_int(x[16 * j + ii] / d)));
            L[16 * j + ii] = (int8_t)(l + 32);
        }
    }
    uint8_t *ql = b, *qh = b + 128;
    for (int j = 0; j < 256; j += 128, ql += 64, qh += 32) {
        for (int l = 0; l < 32; ++l) {
            const uint8_t *u = (const uint8_t *)L + j + l; /* levels 0..63 */
            ql[l] = (uint8_t)((u[0] & 0xF) | (u[64] & 0xF) << 4);
            ql[l + 32] = (uint8_t)((u[32] & 0xF) | (u[96] & 0xF) << 4);
            qh[l] = (uint8_t)(u[0] >> 4 | (u[32] >> 4) << 2 | (u[64] >> 4) << 4 | (u[96] >> 4) << 6);
        }
    }
}

/* ---- rows ------------------------------------------------------------------- */

bool clef_quantize_supported(uint32_t type) {
    switch (type) {
    case CLEF_DTYPE_F32: case CLEF_DTYPE_F16: case CLEF_DTYPE_BF16: case CLEF_DTYPE_Q8_0:
    case CLEF_DTYPE_Q4_K: case CLEF_DTYPE_Q5_K: case CLEF_DTYPE_Q6_K:
        return true;
    default:
        return false;
    }
}

bool clef_quantize_row(uint32_t type, const float *src, void *dst, int64_t n) {
    const clef_dtype_info *info = clef_dtype_get(type);
    if (!clef_quantize_supported(type) || n < 0 || n % info->block_size) return false;
    uint8_t *p = dst;
    int64_t blocks = n / info->block_size;
    switch (type) {
    case CLEF_DTYPE_F32:
        if (n) memcpy(dst, src, (size_t)n * sizeof(float));
        return true;
    case CLEF_DTYPE_F16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = clef_f32_to_f16(src[i]);
            p[2 * i] = (uint8_t)h;
            p[2 * i + 1] = (uint8_t)(h >> 8);
        }
        return true;
    case CLEF_DTYPE_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = clef_f32_to_bf16(src[i]);
            p[2 * i] = (uint8_t)h;
            p[2 * i + 1] = (uint8_t)(h >> 8);
        }
        return true;
    case CLEF_DTYPE_Q8_0:
        for (int64_t i = 0; i < blocks; i++) q8_0_block(src + 32 * i, p + 34 * i);
        return true;
    case CLEF_DTYPE_Q4_K:
        for (int64_t i = 0; i < blocks; i++) q4_k_block(src + 256 * i, p + 144 * i);
        return true;
    case CLEF_DTYPE_Q5_K:
        for (int64_t i = 0; i < blocks; i++) q5_k_block(src + 256 * i, p + 176 * i);
        return true;
    case CLEF_DTYPE_Q6_K:
        for (int64_t i = 0; i < blocks; i++) q6_k_block(src + 256 * i, p + 210 * i);
        return true;
    default:
        return false;
    }
}
