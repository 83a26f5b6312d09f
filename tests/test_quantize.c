/*
 * tests/test_quantize.c — the row quantizers (kernels/quantize.h) against
 * the dequantizers (kernels/dequant.h, tested on hand-built blocks).
 *
 *   - Blocks built to be exactly representable (power-of-two d, integer
 *     codes that touch both ends of the grid) come back bit for bit, and
 *     their d / scale bytes are the ones the construction implies.
 *   - Q8_0 error bound, derived: q = round(x/d) with d = amax/127 in f32
 *     leaves |x − d·q| ≤ d/2; the file keeps f16(d), off by at most
 *     2^-11·d, times |q| ≤ 127: |x − x̂| ≤ d·(1/2 + 127·2^-11) (+ f32 ulps).
 *   - K-quant error on Gaussian data: rounding to a grid of step s leaves a
 *     uniform error of RMS s/√12.  With σ = 1: Q4_K s ≈ range/15 ≈ 4.1/15
 *     (32 samples span ~4.1σ) → 0.079; Q5_K s ≈ 4.1/31 → 0.038; Q6_K
 *     s ≈ amax16/32 ≈ 1.77/32 → 0.016.  The bounds below allow ~30% for the
 *     6-bit/8-bit scale rounding; a packing error is off by whole steps.
 *   - Requantizing a dequantized Q8_0 row gives the same bytes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "kernels/dequant.h"
#include "kernels/quantize.h"

/* ---- data ------------------------------------------------------------------ */

static uint64_t lcg_state;

static double lcg_unit(void) { /* (0, 1) */
    lcg_state = lcg_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return ((double)(lcg_state >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

static void fill_gauss(float *x, int n, float sigma, uint64_t seed) {
    lcg_state = seed;
    for (int i = 0; i < n; i++)
        x[i] = sigma * (float)(sqrt(-2 * log(lcg_unit())) * cos(6.283185307179586 * lcg_unit()));
}

static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

static size_t row_bytes(uint32_t type, int n) {
    uint64_t b = 0;
    assert_true(clef_dtype_row_bytes(type, (uint64_t)n, &b));
    return (size_t)b;
}

/* quantize then dequantize n elements */
static void round_trip(uint32_t type, const float *x, float *y, int n, uint8_t *q) {
    assert_true(clef_quantize_row(type, x, q, n));
    assert_true(clef_dequantize_row(type, q, y, n));
}

/* ---- exactly representable blocks ------------------------------------------------ */

static void test_q8_0_exact(void **state) {
    (void)state;
    float x[64], y[64];
    uint8_t q[68];
    /* d = 2^-4; codes span -127..127 with both ends present */
    for (int i = 0; i < 64; i++) {
        int code = i == 0 ? 127 : i == 1 ? -127 : i == 32 ? -127 : ((i * 37) % 255) - 127;
        x[i] = ldexpf((float)code, -4);
    }
    round_trip(CLEF_DTYPE_Q8_0, x, y, 64, q);
    assert_int_equal(get16(q), 0x2c00); /* f16 2^-4 */
    assert_int_equal((int8_t)q[2], 127);
    assert_int_equal((int8_t)q[3], -127);
    for (int i = 0; i < 64; i++) assert_true(y[i] == x[i]);
}

static void test_q8_0_zero_block(void **state) {
    (void)state;
    float x[32] = {0}, y[32];
    uint8_t q[34];
    memset(q, 0xff, sizeof q);
    round_trip(CLEF_DTYPE_Q8_0, x, y, 32, q);
    for (int i = 0; i < 34; i++) assert_int_equal(q[i], 0);
    for (int i = 0; i < 32; i++) assert_true(y[i] == 0.0f);
}

/* Q4_K / Q5_K: x = d·sc_j·q − dmin·m_j with d = 2^-6, dmin = 2^-7, every
 * sub-block holding both level 0 and level nmax, the largest sc and m 63. */
static void build_k_exact(int nmax, float x[256]) {
    static const int sc[8] = {63, 50, 33, 63, 12, 40, 7, 25};
    static const int mn[8] = {10, 63, 1, 30, 5, 63, 20, 2};
    for (int j = 0; j < 8; j++)
        for (int l = 0; l < 32; l++) {
            int code = (l * 7 + j) % (nmax + 1); /* 7 is coprime with 16 and 32: all levels */
            x[32 * j + l] = ldexpf((float)(sc[j] * code), -6) - ldexpf((float)mn[j], -7);
        }
}

static void check_k_exact(uint32_t type, int nmax) {
    float x[256], y[256];
    uint8_t q[176];
    build_k_exact(nmax, x);
    round_trip(type, x, y, 256, q);
    assert_int_equal(get16(q), 0x2400);     /* d    = 2^-6 */
    assert_int_equal(get16(q + 2), 0x2000); /* dmin = 2^-7 */
    assert_int_equal(q[4] & 63, 63);        /* sub-block 0: scale code 63 */
    assert_int_equal(q[8] & 63, 10);        /* ... and min code 10 */
    for (int i = 0; i < 256; i++) assert_true(y[i] == x[i]);
}

static void test_q4_k_exact(void **state) {
    (void)state;
    check_k_exact(CLEF_DTYPE_Q4_K, 15);
}

static void test_q5_k_exact(void **state) {
    (void)state;
    check_k_exact(CLEF_DTYPE_Q5_K, 31);
}

/* Q6_K: x = D·s_ib·q, D = 2^-10, s_0 = −128 the unique largest |s|, each
 * sub-block with one q = −32 (its largest |x|) and the rest in [−31, 31]. */
static void test_q6_k_exact(void **state) {
    (void)state;
    static const int s[16] = {-128, 100, -77, 3, 64, -1, 127, -127, 50, -20, 90, 11, -64, 33, 120, -99};
    float x[256], y[256];
    uint8_t q[210];
    for (int ib = 0; ib < 16; ib++)
        for (int l = 0; l < 16; l++) {
            int code = l == 0 ? -32 : ((l * 5 + ib) % 63) - 31;
            x[16 * ib + l] = ldexpf((float)(s[ib] * code), -10);
        }
    round_trip(CLEF_DTYPE_Q6_K, x, y, 256, q);
    assert_int_equal(get16(q + 208), 0x1400); /* f16 2^-10 */
    for (int ib = 0; ib < 16; ib++) assert_int_equal((int8_t)q[192 + ib], s[ib]);
    for (int i = 0; i < 256; i++) assert_true(y[i] == x[i]);
}

static void test_k_zero_blocks(void **state) {
    (void)state;
    float x[256] = {0}, y[256];
    uint8_t q[210];
    uint32_t types[] = {CLEF_DTYPE_Q4_K, CLEF_DTYPE_Q5_K, CLEF_DTYPE_Q6_K};
    for (int t = 0; t < 3; t++) {
        round_trip(types[t], x, y, 256, q);
        for (int i = 0; i < 256; i++) assert_true(y[i] == 0.0f);
    }
}

/* ---- error bounds ---------------------------------------------------------------- */

#define NG (256 * 512)

static void test_q8_0_error_bound(void **state) {
    (void)state;
    float *x = malloc(NG * sizeof *x), *y = malloc(NG * sizeof *y);
    uint8_t *q = malloc(row_bytes(CLEF_DTYPE_Q8_0, NG));
    fill_gauss(x, NG, 0.05f, 1);
    round_trip(CLEF_DTYPE_Q8_0, x, y, NG, q);
    double worst = 0;
    for (int b = 0; b < NG; b += 32) {
        float amax = 0;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[b + i]));
        double d = amax / 127.0;
        double bound = d * (0.5 + 127.0 / 2048.0) * (1 + 1e-5);
        for (int i = 0; i < 32; i++) {
            double e = fabs((double)x[b + i] - y[b + i]);
            assert_true(e <= bound);
            worst = fmax(worst, e / d);
        }
    }
    assert_true(worst > 0.45); /* the bound is nearly reached: rounding, not luck */
    free(x);
    free(y);
    free(q);
}

static void test_q8_0_requantize_stable(void **state) {
    (void)state;
    float *x = malloc(NG * sizeof *x), *y = malloc(NG * sizeof *y);
    size_t nb = row_bytes(CLEF_DTYPE_Q8_0, NG);
    uint8_t *q = malloc(nb), *q2 = malloc(nb);
    fill_gauss(x, NG, 3.0f, 2);
    round_trip(CLEF_DTYPE_Q8_0, x, y, NG, q);
    assert_true(clef_quantize_row(CLEF_DTYPE_Q8_0, y, q2, NG));
    assert_memory_equal(q, q2, nb);
    free(x);
    free(y);
    free(q);
    free(q2);
}

/* Relative RMS error over Gaussian data, and no element off by more than
 * two nominal steps of its sub-block. */
static void check_k_error(uint32_t type, int sub, double rel_rms_bound) {
    float *x = malloc(NG * sizeof *x), *y = malloc(NG * sizeof *y);
    uint8_t *q = malloc(row_bytes(type, NG));
    fill_gauss(x, NG, 0.05f, 3);
    round_trip(type, x, y, NG, q);
    double se = 0, sx = 0;
    for (int b = 0; b < NG; b += sub) {
        float mn = 0, mx = x[b], amax = 0;
        for (int i = 0; i < sub; i++) {
            mn = fminf(mn, x[b + i]);
            mx = fmaxf(mx, x[b + i]);
            amax = fmaxf(amax, fabsf(x[b + i]));
        }
        double step = type == CLEF_DTYPE_Q6_K ? amax / 32.0
                                              : (mx - mn) / (type == CLEF_DTYPE_Q4_K ? 15.0 : 31.0);
        for (int i = 0; i < sub; i++) {
            double e = (double)x[b + i] - y[b + i];
            assert_true(fabs(e) <= 2 * step);
            se += e * e;
            sx += (double)x[b + i] * x[b + i];
        }
    }
    double rel = sqrt(se / sx);
    print_message("# %s relative RMS error %.4f (bound %.3f)\n", clef_dtype_get(type)->name, rel,
                  rel_rms_bound);
    assert_true(rel <= rel_rms_bound);
    assert_true(rel >= rel_rms_bound / 3); /* really quantized at that width */
    free(x);
    free(y);
    free(q);
}

static void test_q4_k_error(void **state) {
    (void)state;
    check_k_error(CLEF_DTYPE_Q4_K, 32, 0.10);
}

static void test_q5_k_error(void **state) {
    (void)state;
    check_k_error(CLEF_DTYPE_Q5_K, 32, 0.05);
}

static void test_q6_k_error(void **state) {
    (void)state;
    check_k_error(CLEF_DTYPE_Q6_K, 16, 0.022);
}

/* ---- plain types and refusals ------------------------------------------------------- */

static void test_f16_bf16_rows(void **state) {
    (void)state;
    /* ties go to even; bytes little-endian */
    float x[4] = {1.0f + ldexpf(1, -11), 1.0f + 3 * ldexpf(1, -11), -2.0f, 1.0f + ldexpf(1, -8)};
    uint8_t h[8], b[8];
    assert_true(clef_quantize_row(CLEF_DTYPE_F16, x, h, 4));
    assert_true(clef_quantize_row(CLEF_DTYPE_BF16, x, b, 4));
    assert_int_equal(get16(h), 0x3c00);
    assert_int_equal(get16(h + 2), 0x3c02);
    assert_int_equal(get16(h + 4), 0xc000);
    assert_int_equal(get16(b + 4), 0xc000);
    assert_int_equal(get16(b + 6), 0x3f80); /* 1 + 2^-8 is a bf16 tie: down to 1 */
    float y[4];
    assert_true(clef_quantize_row(CLEF_DTYPE_F32, x, y, 4));
    assert_memory_equal(x, y, sizeof x);
}

static void test_refusals(void **state) {
    (void)state;
    float x[256] = {0};
    uint8_t q[300];
    assert_false(clef_quantize_row(CLEF_DTYPE_Q8_0, x, q, 31));
    assert_false(clef_quantize_row(CLEF_DTYPE_Q4_K, x, q, 128));
    assert_false(clef_quantize_row(CLEF_DTYPE_Q4_0, x, q, 32));
    assert_false(clef_quantize_row(999, x, q, 32));
    assert_false(clef_quantize_supported(CLEF_DTYPE_Q4_0));
    assert_true(clef_quantize_supported(CLEF_DTYPE_Q6_K));
}

/* Writes are byte-wise: an odd destination address is fine (ASan/UBSan). */
static void test_unaligned_destination(void **state) {
    (void)state;
    float x[256], y[256];
    uint8_t buf[212];
    fill_gauss(x, 256, 1.0f, 4);
    assert_true(clef_quantize_row(CLEF_DTYPE_Q6_K, x, buf + 1, 256));
    assert_true(clef_dequantize_row(CLEF_DTYPE_Q6_K, buf + 1, y, 256));
    for (int i = 0; i < 256; i++) assert_true(fabsf(x[i] - y[i]) < 0.2f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_q8_0_exact),
        cmocka_unit_test(test_q8_0_zero_block),
        cmocka_unit_test(test_q4_k_exact),
        cmocka_unit_test(test_q5_k_exact),
        cmocka_unit_test(test_q6_k_exact),
        cmocka_unit_test(test_k_zero_blocks),
        cmocka_unit_test(test_q8_0_error_bound),
        cmocka_unit_test(test_q8_0_requantize_stable),
        cmocka_unit_test(test_q4_k_error),
        cmocka_unit_test(test_q5_k_error),
        cmocka_unit_test(test_q6_k_error),
        cmocka_unit_test(test_f16_bf16_rows),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_unaligned_destination),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
