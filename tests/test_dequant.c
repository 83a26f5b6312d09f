/*
 * tests/test_dequant.c — f16/bf16 conversion and row dequantization on
 * blocks built byte by byte, with expected values worked out by hand from
 * the block layouts (the arithmetic is in the comments).  A second check per
 * K-quant evaluates each element straight from the format's definition
 * (element e -> its sub-block, its nibble, its high bits), written
 * independently of the kernel's loop structure.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "core/dtype.h"
#include "kernels/dequant.h"

static void put16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- f16 / bf16 ---------------------------------------------------------- */

static void test_f16_known_values(void **state) {
    (void)state;
    assert_true(clef_f16_to_f32(0x3c00) == 1.0f);
    assert_true(clef_f16_to_f32(0xc000) == -2.0f);
    assert_true(clef_f16_to_f32(0x7bff) == 65504.0f);           /* largest finite */
    assert_true(clef_f16_to_f32(0x0001) == ldexpf(1, -24));     /* smallest subnormal */
    assert_true(clef_f16_to_f32(0x03ff) == ldexpf(1023, -24));  /* largest subnormal */
    assert_true(clef_f16_to_f32(0x0400) == ldexpf(1, -14));     /* smallest normal */
    assert_true(clef_f16_to_f32(0x3555) == 0.333251953125f);    /* 1365/4096 */
    assert_true(isinf(clef_f16_to_f32(0x7c00)) && clef_f16_to_f32(0x7c00) > 0);
    assert_true(isinf(clef_f16_to_f32(0xfc00)) && clef_f16_to_f32(0xfc00) < 0);
    assert_true(isnan(clef_f16_to_f32(0x7e00)));
    assert_true(clef_f16_to_f32(0x8000) == 0.0f && signbit(clef_f16_to_f32(0x8000)));

    assert_int_equal(clef_f32_to_f16(1.0f), 0x3c00);
    assert_int_equal(clef_f32_to_f16(-2.0f), 0xc000);
    assert_int_equal(clef_f32_to_f16(0.1f), 0x2e66);          /* 0.0999755859375 */
    assert_int_equal(clef_f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(clef_f32_to_f16(65519.0f), 0x7bff);      /* below the 65520 midpoint */
    assert_int_equal(clef_f32_to_f16(65520.0f), 0x7c00);      /* tie goes to even: inf */
    assert_int_equal(clef_f32_to_f16(1e6f), 0x7c00);
    assert_int_equal(clef_f32_to_f16(-1e6f), 0xfc00);
    /* ties to even in the normal range: ulp(1) = 2^-10 */
    assert_int_equal(clef_f32_to_f16(1.0f + ldexpf(1, -11)), 0x3c00);     /* 1 + ulp/2 -> 1 */
    assert_int_equal(clef_f32_to_f16(1.0f + 3 * ldexpf(1, -11)), 0x3c02); /* 1 + 1.5ulp -> 1+2ulp */
    assert_int_equal(clef_f32_to_f16(1.0f + ldexpf(1, -11) + ldexpf(1, -20)), 0x3c01);
    assert_int_equal(clef_f32_to_f16(2047.5f), 0x6800);       /* 2047.5 -> 2048 (mantissa carries) */
    /* subnormals: units of 2^-24 */
    assert_int_equal(clef_f32_to_f16(ldexpf(1, -24)), 0x0001);
    assert_int_equal(clef_f32_to_f16(ldexpf(1, -25)), 0x0000);            /* 0.5 unit ties to 0 */
    assert_int_equal(clef_f32_to_f16(ldexpf(3, -26)), 0x0001);            /* 0.75 unit */
    assert_int_equal(clef_f32_to_f16(ldexpf(3, -25)), 0x0002);            /* 1.5 units ties to 2 */
    assert_int_equal(clef_f32_to_f16(ldexpf(1023, -24)), 0x03ff);
    assert_int_equal(clef_f32_to_f16(ldexpf(2047, -25)), 0x0400);         /* 1023.5 units -> normal */
    assert_int_equal(clef_f32_to_f16(1e-8f), 0x0000);
    assert_int_equal(clef_f32_to_f16(-1e-8f), 0x8000);
    assert_int_equal(clef_f32_to_f16(ldexpf(1, -14)), 0x0400);
    assert_int_equal(clef_f32_to_f16(bits_f32(0x7f800000u)), 0x7c00);
    assert_true(isnan(clef_f16_to_f32(clef_f32_to_f16(NAN))));
    assert_true(isnan(clef_f16_to_f32(clef_f32_to_f16(bits_f32(0x7f800001u))))); /* NaN stays NaN */
}

/* Every finite or infinite half converts to f32 and back unchanged. */
static void test_f16_all_round_trip(void **state) {
    (void)state;
    for (uint32_t h = 0; h <= 0xffff; h++) {
        float f = clef_f16_to_f32((uint16_t)h);
        if (isnan(f)) {
            assert_true((h & 0x7c00) == 0x7c00 && (h & 0x3ff));
            continue;
        }
        assert_int_equal(clef_f32_to_f16(f), h);
    }
}

static void test_bf16(void **state) {
    (void)state;
    assert_true(clef_bf16_to_f32(0x3f80) == 1.0f);
    assert_true(clef_bf16_to_f32(0xc040) == -3.0f);
    assert_int_equal(clef_f32_to_bf16(1.0f), 0x3f80);
    /* ulp(1) = 2^-7 */
    assert_int_equal(clef_f32_to_bf16(1.0f + ldexpf(1, -8)), 0x3f80);      /* tie -> even */
    assert_int_equal(clef_f32_to_bf16(1.0f + 3 * ldexpf(1, -8)), 0x3f82);  /* tie -> even */
    assert_int_equal(clef_f32_to_bf16(1.0f + ldexpf(1, -8) + ldexpf(1, -20)), 0x3f81);
    assert_int_equal(clef_f32_to_bf16(bits_f32(0x7f7fffffu)), 0x7f80);     /* FLT_MAX rounds to inf */
    assert_int_equal(clef_f32_to_bf16(bits_f32(0xff800000u)), 0xff80);
    uint16_t n = clef_f32_to_bf16(bits_f32(0x7f800001u)); /* low mantissa bits only */
    assert_true(isnan(clef_bf16_to_f32(n)));
    assert_true(n & 0x40); /* quiet */
    for (uint32_t h = 0; h <= 0xffff; h++) {
        float f = clef_bf16_to_f32((uint16_t)h);
        if (!isnan(f)) assert_int_equal(clef_f32_to_bf16(f), h);
    }
}

/* ---- plain rows ------------------------------------------------------------- */

static void test_plain_rows(void **state) {
    (void)state;
    float out[4];
    const float f32[4] = {1.5f, -2.0f, 0.0f, 3.25f};
    assert_true(clef_dequantize_row(CLEF_DTYPE_F32, f32, out, 4));
    assert_memory_equal(out, f32, sizeof f32);
    /* F16 bytes: 0x3c00 = 1, 0xc500 = -5 (exp 17, mantissa 1/4: -1.25*4), 0x0001 = 2^-24 */
    uint8_t h[7];
    put16(h + 1, 0x3c00);
    put16(h + 3, 0xc500);
    put16(h + 5, 0x0001);
    assert_true(clef_dequantize_row(CLEF_DTYPE_F16, h + 1, out, 3)); /* odd address */
    assert_true(out[0] == 1.0f && out[1] == -5.0f && out[2] == ldexpf(1, -24));
    /* BF16 bytes: 0x4049 = 3.140625 (1 + 0x49/128 = 1.5703125, times 2) */
    put16(h + 1, 0x4049);
    put16(h + 3, 0xbf80);
    assert_true(clef_dequantize_row(CLEF_DTYPE_BF16, h + 1, out, 2));
    assert_true(out[0] == 3.140625f && out[1] == -1.0f);
}

static void test_bad_arguments(void **state) {
    (void)state;
    uint8_t blk[256] = {0};
    float out[256];
    assert_false(clef_dequantize_row(CLEF_DTYPE_Q8_0, blk, out, 16));   /* not a block multiple */
    assert_false(clef_dequantize_row(CLEF_DTYPE_Q4_K, blk, out, 32));
    assert_false(clef_dequantize_row(CLEF_DTYPE_Q8_0, blk, out, -32));
    assert_false(clef_dequantize_row(CLEF_DTYPE_Q4_0, blk, out, 32));   /* named but not supported */
    assert_false(clef_dequantize_row(99, blk, out, 32));
    assert_false(clef_dequantize_row(CLEF_DTYPE_I32, blk, out, 4));
    assert_true(clef_dequantize_row(CLEF_DTYPE_Q8_0, blk, out, 0));
}

/* ---- Q8_0 ------------------------------------------------------------------ */

static void test_q8_0(void **state) {
    (void)state;
    /* Two blocks at an odd address (blocks are 34 bytes, never aligned). */
    uint8_t buf[1 + 68] = {0};
    uint8_t *b = buf + 1;
    put16(b, 0x3800);            /* d = 0.5 */
    b[2 + 0] = 1;                /* 0.5 * 1    =  0.5  */
    b[2 + 1] = (uint8_t)-3;      /* 0.5 * -3   = -1.5  */
    b[2 + 5] = (uint8_t)-128;    /* 0.5 * -128 = -64   */
    b[2 + 31] = 127;             /* 0.5 * 127  =  63.5 */
    put16(b + 34, 0xbc00);       /* d = -1 */
    b[34 + 2 + 0] = (uint8_t)-7; /* -1 * -7 = 7 */
    b[34 + 2 + 31] = 100;        /* -100 */
    float y[64];
    assert_true(clef_dequantize_row(CLEF_DTYPE_Q8_0, b, y, 64));
    assert_true(y[0] == 0.5f && y[1] == -1.5f && y[5] == -64.0f && y[31] == 63.5f);
    assert_true(y[2] == 0.0f && y[30] == 0.0f);
    assert_true(y[32] == 7.0f && y[63] == -100.0f && y[33] == 0.0f);
}

/* ---- Q4_K / Q5_K --------------------------------------------------------------- */

/* The 8 (scale, min) pairs used below, and their 12-byte packing:
 *   pairs 0..3: low 6 bits of bytes 0..3 (scale) and 4..7 (min);
 *   pairs 4..7: low nibble from bytes 8..11 (scale | min << 4), top 2 bits
 *               from bits 6..7 of bytes 0..3 (scale) and 4..7 (min). */
static const uint8_t k_sc[8] = {1, 3, 10, 63, 17, 4, 5, 6};
static const uint8_t k_mn[8] = {2, 0, 5, 63, 33, 0, 1, 2};
static const uint8_t k_scales[12] = {
    0x41, /* sc0 = 1,  top2(sc4 = 17 = 0b010001) = 1 -> 1 | 1<<6 */
    0x03, /* sc1 = 3,  top2(sc5 = 4) = 0 */
    0x0a, /* sc2 = 10 */
    0x3f, /* sc3 = 63 */
    0x82, /* mn0 = 2,  top2(mn4 = 33 = 0b100001) = 2 -> 2 | 2<<6 */
    0x00, /* mn1 = 0 */
    0x05, /* mn2 = 5 */
    0x3f, /* mn3 = 63 */
    0x11, /* sc4 low 1, mn4 low 1 */
    0x04, /* sc5 low 4, mn5 low 0 */
    0x15, /* sc6 low 5, mn6 low 1 */
    0x26, /* sc7 low 6, mn7 low 2 */
};

/* qs[l]: low nibble l%16, high nibble 15 - l%16. */
static void fill_qs(uint8_t *qs) {
    for (int l = 0; l < 128; l++) qs[l] = (uint8_t)((l % 16) | (15 - l % 16) << 4);
}

/* Element e from the definition: 64-element chunk k uses qs[32k..32k+32);
 * its first 32 outputs are sub-block 2k (low nibbles), the next 32 are
 * sub-block 2k+1 (high nibbles); Q5_K adds bit `sub` of qh[l] as bit 4. */
static float k_expect(const uint8_t *qs, const uint8_t *qh, int e, float d, float dmin) {
    int k = e / 64, within = e % 64, sub = 2 * k + within / 32, l = within % 32;
    int q = within < 32 ? qs[32 * k + l] & 0xf : qs[32 * k + l] >> 4;
    if (qh) q += 16 * ((qh[l] >> sub) & 1);
    return d * k_sc[sub] * (float)q - dmin * k_mn[sub];
}

static void test_q4_k(void **state) {
    (void)state;
    uint8_t b[144];
    put16(b, 0x3c00);     /* d = 1 */
    put16(b + 2, 0x3800); /* dmin = 0.5 */
    memcpy(b + 4, k_scales, 12);
    fill_qs(b + 16);
    float y[256];
    assert_true(clef_dequantize_row(CLEF_DTYPE_Q4_K, b, y, 256));
    /* y = d*sc*q - dmin*mn */
    assert_true(y[0] == -1.0f);   /* sub 0, q = qs[0]&15 = 0:  1*1*0 - 0.5*2 */
    assert_true(y[5] == 4.0f);    /* sub 0, q = 5:  5 - 1 */
    assert_true(y[40] == 21.0f);  /* sub 1, q = qs[8]>>4 = 7:  3*7 - 0 */
    assert_true(y[67] == 27.5f);  /* sub 2, q = qs[35]&15 = 3:  10*3 - 0.5*5 */
    assert_true(y[127] == -31.5f);/* sub 3, q = qs[63]>>4 = 0:  0 - 0.5*63 */
    assert_true(y[145] == 0.5f);  /* sub 4, q = qs[81]&15 = 1:  17*1 - 0.5*33 */
    assert_true(y[160] == 60.0f); /* sub 5, q = qs[64]>>4 = 15:  4*15 - 0 */
    assert_true(y[223] == 74.5f); /* sub 6, q = qs[127]&15 = 15:  5*15 - 0.5*1 */
    assert_true(y[232] == 41.0f); /* sub 7, q = qs[104]>>4 = 7:  6*7 - 0.5*2 */
    assert_true(y[255] == -1.0f); /* sub 7, q = qs[127]>>4 = 0:  0 - 1 */
    for (int e = 0; e < 256; e++) assert_true(y[e] == k_expect(b + 16, NULL, e, 1.0f, 0.5f));
}

static void test_q5_k(void **state) {
    (void)state;
    uint8_t b[176];
    put16(b, 0x3c00);     /* d = 1 */
    put16(b + 2, 0x3800); /* dmin = 0.5 */
    memcpy(b + 4, k_scales, 12);
    uint8_t *qh = b + 16;
    /* even l: bits 0,2,4,6 (sub-blocks 0,2,4,6 get +16); odd l: bits 1,3,5,7 */
    for (int l = 0; l < 32; l++) qh[l] = (l & 1) ? 0xaa : 0x55;
    fill_qs(b + 48);
    float y[256];
    assert_true(clef_dequantize_row(CLEF_DTYPE_Q5_K, b, y, 256));
    assert_true(y[0] == 15.0f);   /* sub 0, l 0: qh 0x55 bit0 = 1, q = 0+16:  16 - 1 */
    assert_true(y[1] == 0.0f);    /* sub 0, l 1: qh 0xaa bit0 = 0, q = 1:  1 - 1 */
    assert_true(y[40] == 21.0f);  /* sub 1, l 8: 0x55 bit1 = 0, q = 7:  3*7 */
    assert_true(y[41] == 66.0f);  /* sub 1, l 9: 0xaa bit1 = 1, q = (15-9)+16 = 22:  3*22 */
    assert_true(y[67] == 27.5f);  /* sub 2, l 3: 0xaa bit2 = 0, q = 3:  30 - 2.5 */
    assert_true(y[64] == -2.5f + 160.0f); /* sub 2, l 0: 0x55 bit2 = 1, q = 16:  10*16 - 2.5 */
    assert_true(y[255] == 95.0f); /* sub 7, l 31: 0xaa bit7 = 1, q = 0+16:  6*16 - 1 */
    for (int e = 0; e < 256; e++) assert_true(y[e] == k_expect(b + 48, qh, e, 1.0f, 0.5f));
}

/* ---- Q6_K ------------------------------------------------------------------------- */

/* Element e from the definition: half h = e/128 uses ql[64h..), qh[32h..),
 * scales[8h..); within it, group g = (e%128)/32 and l = e%32 take the low
 * (g < 2) or high (g >= 2) nibble of ql[l + 32*(g&1)], bits 2g..2g+1 of
 * qh[l] as bits 4..5, subtract 32, and scale by scales[l/16 + 2g]. */
static float q6_expect(const uint8_t *b, int e, float d) {
    int h = e / 128, g = (e % 128) / 32, l = e % 32;
    const uint8_t *ql = b + 64 * h, *qh = b + 128 + 32 * h;
    const int8_t *sc = (const int8_t *)(b + 192) + 8 * h;
    int lo = g < 2 ? ql[l + 32 * (g & 1)] & 0xf : ql[l + 32 * (g & 1)] >> 4;
    int q = (lo | ((qh[l] >> (2 * g)) & 3) << 4) - 32;
    return d * (float)sc[l / 16 + 2 * g] * (float)q;
}

static void test_q6_k(void **state) {
    (void)state;
    uint8_t b[1 + 210];
    uint8_t *p = b + 1; /* odd address */
    for (int i = 0; i < 128; i++) p[i] = (uint8_t)i;                /* ql */
    for (int i = 0; i < 64; i++) p[128 + i] = (uint8_t)(i * 37);     /* qh */
    for (int i = 0; i < 16; i++) p[192 + i] = (uint8_t)(int8_t)(i - 8); /* scales -8..7 */
    put16(p + 208, 0x3400);                                          /* d = 0.25 */
    float y[256];
    assert_true(clef_dequantize_row(CLEF_DTYPE_Q6_K, p, y, 256));
    /* e=0: ql[0]=0 low 0; qh[0]=0 bits0-1 0; q = -32; scale sc[0] = -8:  0.25*-8*-32 */
    assert_true(y[0] == 64.0f);
    /* e=33: g=1 l=1: ql[33] low = 1; qh[1]=37=0b00100101 bits2-3 = 1 -> q = 17-32 = -15;
     * scale sc[0+2] = -6:  0.25*-6*-15 */
    assert_true(y[33] == 22.5f);
    /* e=100: g=3 l=4: ql[36]=0x24 high = 2; qh[4]=148=0b10010100 bits6-7 = 2 -> q = 34-32 = 2;
     * scale sc[6] = -2:  0.25*-2*2 */
    assert_true(y[100] == -1.0f);
    /* e=212: half 1, g=2 l=20: ql[64+20]=84=0x54 high = 5; qh[32+20]=52*37%256=132=0b10000100
     * bits4-5 = 0 -> q = 5-32 = -27; scale sc[8+1+4] = 5:  0.25*5*-27 */
    assert_true(y[212] == -33.75f);
    /* e=255: half 1, g=3 l=31: ql[64+63]=127 high = 7; qh[63]=63*37%256=27=0b00011011
     * bits6-7 = 0 -> q = -25; scale sc[8+1+6] = 7:  0.25*7*-25 */
    assert_true(y[255] == -43.75f);
    for (int e = 0; e < 256; e++) assert_true(y[e] == q6_expect(p, e, 0.25f));
}

/* Several blocks in one row: each block uses its own bytes. */
static void test_multi_block_rows(void **state) {
    (void)state;
    uint8_t b[2 * 210] = {0};
    /* block 0: d = 1, all zero quants -> q = -32 everywhere, scales 0 -> 0 */
    put16(b + 208, 0x3c00);
    /* block 1: d = 2, scale[0] = 1, ql/qh zero -> first 16 outputs 2*1*-32 */
    b[210 + 192] = 1;
    put16(b + 210 + 208, 0x4000);
    float y[512];
    assert_true(clef_dequantize_row(CLEF_DTYPE_Q6_K, b, y, 512));
    for (int i = 0; i < 256; i++) assert_true(y[i] == 0.0f);
    for (int i = 256; i < 256 + 16; i++) assert_true(y[i] == -64.0f);
    assert_true(y[256 + 16] == 0.0f); /* scale[1] = 0 */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16_known_values), cmocka_unit_test(test_f16_all_round_trip),
        cmocka_unit_test(test_bf16),             cmocka_unit_test(test_plain_rows),
        cmocka_unit_test(test_bad_arguments),    cmocka_unit_test(test_q8_0),
        cmocka_unit_test(test_q4_k),             cmocka_unit_test(test_q5_k),
        cmocka_unit_test(test_q6_k),             cmocka_unit_test(test_multi_block_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
