/*
 * kernels/dequant.c — reference f16/bf16 conversion and row dequantization.
 *
 * Plain scalar C, written for clarity: these are the arbiter that faster
 * paths are tested against.  Source bytes are read one byte at a time, so a
 * row may start at any address (Q8_0 blocks are 34 bytes and never aligned).
 */
#include "kernels/dequant.h"

#include <string.h>

#include "core/dtype.h"

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float clef_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | mant << 13); /* inf / NaN */
    if (exp == 0) {
        if (mant == 0) return bits_f32(sign);
        /* Subnormal: mant * 2^-24, exact in f32. */
        float v = (float)mant * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    return bits_f32(sign | (exp + 112) << 23 | mant << 13);
}

uint16_t clef_f32_to_f16(float f) {
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t a = x & 0x7fffffffu;
    if (a >= 0x7f800000u) /* inf stays inf; NaN stays a quiet NaN */
        return sign | (a > 0x7f800000u ? (uint16_t)(0x7e00 | ((a >> 13) & 0x3ff)) : 0x7c00);
    if (a >= 0x477ff000u) return sign | 0x7c00; /* ≥ 65520 rounds to inf */
    if (a < 0x38800000u) {                       /* below 2^-14: subnormal or zero */
        uint32_t e = a >> 23;
        uint32_t shift = 126 - e;                /* value * 2^24 = m >> shift */
        if (shift > 24) return sign;             /* < half the smallest subnormal */
        uint32_t m = (a & 0x7fffffu) | 0x800000u;
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return sign | (uint16_t)r;
    }
    uint32_t h = ((a >> 23) - 112) << 10 | ((a >> 13) & 0x3ff);
    uint32_t rem = a & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++; /* a carry bumps the exponent */
    return sign | (uint16_t)h;
}

float clef_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t clef_f32_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}

static uint16_t load_u16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
float clef_load_f16(const uint8_t *p) { return clef_f16_to_f32(load_u16(p)); }

/* Q8_0 block (34 bytes): f16 d; int8 q[32].  x[i] = d * q[i]. */
static void dq_q8_0(const uint8_t *b, float *y) {
    float d = clef_load_f16(b);
    for (int i = 0; i < 32; i++) y[i] = d * (float)(int8_t)b[2 + i];
}

/* Pairs 0..3 are the low 6 bits of bytes 0..3 / 4..7; pairs 4..7 take their
 * low nibble from bytes 8..11 and their top 2 bits from bytes 0..7. */
void clef_k_scale_min(const uint8_t *s, int j, uint8_t *sc, uint8_t *mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (uint8_t)((s[j + 4] & 0xf) | (s[j - 4] >> 6) << 4);
        *mn = (uint8_t)((s[j + 4] >> 4) | (s[j] >> 6) << 4);
    }
}

/* Q4_K block (144 bytes): f16 d, dmin; u8 scales[12]; u8 qs[128].  Each
 * 64 values use 32 qs bytes: sub-block 2k from the low nibbles, 2k+1 from
 * the high nibbles.  Q5_K block (176 bytes): the same with u8 qh[32] of
 * fifth bits before qs: sub-block j's value l takes bit j of qh[l].
 * Q6_K block (210 bytes): u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d.
 * Each half (128 values) uses 64 ql and 32 qh bytes: value 32g + l (g =
 * 0..3) has its low nibble from ql[l + 32(g&1)] (the high one when g >= 2)
 * and its top 2 bits from qh[l] bits 2g..2g+1. */
static void unpack_q45_k(bool five, const uint8_t *b, clef_kq_parts *o) {
    o->d = clef_load_f16(b);
    o->dmin = clef_load_f16(b + 2);
    for (int j = 0; j < 8; j++) {
        uint8_t sc, mn;
        clef_k_scale_min(b + 4, j, &sc, &mn);
        o->sc[j] = (int8_t)sc;
        o->mn[j] = mn;
    }
    const uint8_t *qh = b + 16, *qs = five ? b + 48 : b + 16;
    for (int k = 0; k < 4; k++, qs += 32)
        for (int l = 0; l < 32; l++) {
            int h0 = five ? (qh[l] >> (2 * k) & 1) << 4 : 0;
            int h1 = five ? (qh[l] >> (2 * k + 1) & 1) << 4 : 0;
            o->q[64 * k + l] = (uint8_t)((qs[l] & 0xf) | h0);
            o->q[64 * k + 32 + l] = (uint8_t)((qs[l] >> 4) | h1);
        }
}

static void unpack_q6_k(const uint8_t *b, clef_kq_parts *o) {
    const uint8_t *ql = b, *qh = b + 128;
    memcpy(o->sc, b + 192, 16);
    memset(o->mn, 0, sizeof o->mn);
    o->d = clef_load_f16(b + 208);
    o->dmin = 0.0f;
    for (int half = 0; half < 2; half++, ql += 64, qh += 32) {
        uint8_t *q = o->q + 128 * half;
        for (int l = 0; l < 32; l++) {
            q[l] = (uint8_t)((ql[l] & 0xf) | (qh[l] & 3) << 4);
            q[l + 32] = (uint8_t)((ql[l + 32] & 0xf) | (qh[l] >> 2 & 3) << 4);
            q[l + 64] = (uint8_t)((ql[l] >> 4) | (qh[l] >> 4 & 3) << 4);
            q[l + 96] = (uint8_t)((ql[l + 32] >> 4) | (qh[l] >> 6 & 3) << 4);
        }
    }
}

bool clef_kq_unpack(uint32_t type, const uint8_t *block, clef_kq_parts *out) {
    switch (type) {
    case CLEF_DTYPE_Q4_K: unpack_q45_k(false, block, out); return true;
    case CLEF_DTYPE_Q5_K: unpack_q45_k(true, block, out); return true;
    case CLEF_DTYPE_Q6_K: unpack_q6_k(block, out); return true;
    default: return false;
    }
}

/* x = d·sc·q − dmin·mn per sub-block of 32 (Q4_K, Q5_K). */
static void dq_q45_k(bool five, const uint8_t *b, float *y) {
    clef_kq_parts k;
    unpack_q45_k(five, b, &k);
    for (int j = 0; j < 8; j++) {
        float dj = k.d * (float)k.sc[j], oj = k.dmin * (float)k.mn[j];
        for (int l = 0; l < 32; l++) y[32 * j + l] = dj * (float)k.q[32 * j + l] - oj;
    }
}

/* x = d·sc·(q − 32) per sub-block of 16 (Q6_K). */
static void dq_q6_k(const uint8_t *b, float *y) {
    clef_kq_parts k;
    unpack_q6_k(b, &k);
    for (int i = 0; i < 256; i++) y[i] = k.d * (float)k.sc[i / 16] * (float)(k.q[i] - 32);
}

bool clef_dequantize_row(uint32_t type, const void *src, float *dst, int64_t n) {
    const clef_dtype_info *info = clef_dtype_get(type);
    if (!info->name || n < 0 || n % info->block_size) return false;
    const uint8_t *p = src;
    int64_t blocks = n / info->block_size;
    switch (type) {
    case CLEF_DTYPE_F32:
        if (n) memcpy(dst, src, (size_t)n * sizeof(float));
        return true;
    case CLEF_DTYPE_F16:
        for (int64_t i = 0; i < n; i++) dst[i] = clef_load_f16(p + 2 * i);
        return true;
    case CLEF_DTYPE_BF16:
        for (int64_t i = 0; i < n; i++) dst[i] = clef_bf16_to_f32(load_u16(p + 2 * i));
        return true;
    case CLEF_DTYPE_Q8_0:
        for (int64_t i = 0; i < blocks; i++) dq_q8_0(p + 34 * i, dst + 32 * i);
        return true;
    case CLEF_DTYPE_Q4_K:
    case CLEF_DTYPE_Q5_K:
        for (int64_t i = 0; i < blocks; i++)
            dq_q45_k(type == CLEF_DTYPE_Q5_K, p + (size_t)info->type_size * i, dst + 256 * i);
        return true;
    case CLEF_DTYPE_Q6_K:
        for (int64_t i = 0; i < blocks; i++) dq_q6_k(p + 210 * i, dst + 256 * i);
        return true;
    default:
        return false;
    }
}
