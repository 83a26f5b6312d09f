/*
 * tests/test_kernels_simd.c — every kernel path against the reference
 * arithmetic, on random matrices of every weight type.
 *
 * Paths: ref, avx2, avx512 (and its sub-variants with BF16 / VNNI switched
 * off, so the fallbacks run on a CPU that has them), amx — each one only
 * where this CPU can run it (skipped paths are printed).  The expected value
 * is computed here in double from the rows clef_dequantize_row gives (the
 * arbiter) and from the activations each precision is specified to use:
 *   f32   x as given                       |Δ| ≤ 1e-5·Σ|x·w| + 1e-6
 *   bf16  x rounded to BF16 (RNE)          |Δ| ≤ 1e-5·Σ|x'·w| + 1e-6
 *   int8  x quantized per 32 (per 256 for the K-quants on amx): d = max|x|/127
 *         (rounded through f16 for Q8_0 weights), q = rne(x·(1/d))
 *                                          |Δ| ≤ 1e-5·Σ|d·q·w| + 1e-6
 * and, for bf16 / int8, against unrounded x within the bound the rounding
 * itself allows (|x − x'| ≤ 2^-9|x|; |x − d·q| ≤ d/2 per element).
 * Results must not depend on the thread count (1 vs 3 threads, bitwise).
 * mm_gemm_nn / mm_gemm_nt: against double loops, with transposed strides.
 * mm_transpose: exact, padding untouched, on shapes with partial 16 x 16 blocks.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/cpu.h"
#include "core/dtype.h"
#include "core/threadpool.h"
#include "kernels/dequant.h"
#include "kernels/matmul.h"

/* ---- deterministic random numbers ---- */

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static uint32_t rnd_u32(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}
static float rnd_uniform(float lo, float hi) {
    return lo + (hi - lo) * (float)(rnd_u32() & 0xffffff) / 16777216.0f;
}

static void put_f16(uint8_t *p, float v) {
    uint16_t h = clef_f32_to_f16(v);
    memcpy(p, &h, 2);
}

/* Random stored rows of `type`: quant bytes random, block scales sane. */
static uint8_t *make_weight(uint32_t type, int64_t in, int64_t out, size_t *row_bytes) {
    const clef_dtype_info *info = clef_dtype_get(type);
    uint64_t rb;
    assert_true(clef_dtype_row_bytes(type, (uint64_t)in, &rb));
    uint8_t *w = malloc((size_t)(rb * (uint64_t)out));
    for (uint64_t i = 0; i < rb * (uint64_t)out; i++) w[i] = (uint8_t)rnd_u32();
    /* rows are whole numbers of blocks */
    for (int64_t r = 0; r < out; r++) {
        for (int64_t b = 0; b < in / (int64_t)info->block_size; b++) {
            uint8_t *blk = w + (size_t)r * rb + (size_t)b * info->type_size;
            switch (type) {
            case CLEF_DTYPE_F32: {
                float v = rnd_uniform(-1, 1);
                memcpy(blk, &v, 4);
                break;
            }
            case CLEF_DTYPE_F16: put_f16(blk, rnd_uniform(-1, 1)); break;
            case CLEF_DTYPE_BF16: {
                uint16_t h = clef_f32_to_bf16(rnd_uniform(-1, 1));
                memcpy(blk, &h, 2);
                break;
            }
            case CLEF_DTYPE_Q8_0: put_f16(blk, rnd_uniform(0.001f, 0.02f)); break;
            case CLEF_DTYPE_Q4_K:
            case CLEF_DTYPE_Q5_K:
                put_f16(blk, rnd_uniform(0.001f, 0.01f));
                put_f16(blk + 2, rnd_uniform(0.001f, 0.01f));
                break;
            case CLEF_DTYPE_Q6_K: put_f16(blk + 208, rnd_uniform(0.0005f, 0.005f)); break;
            default: fail_msg("no generator for type %u", type);
            }
        }
    }
    *row_bytes = (size_t)rb;
    return w;
}

/* ---- the activations each precision is specified to use ---- */

static float round_bf16(float x) { return clef_bf16_to_f32(clef_f32_to_bf16(x)); }

/* Per block of bs (32, or 256 on the K-quant plane kernel): d and q as the
 * int8 path defines them; xq = d·q. */
static void quantize_i8(const float *x, int64_t n, int bs, bool f16_scale, float *xq,
                        float *half_d) {
    for (int64_t b = 0; b < n; b += bs) {
        float amax = 0.0f;
        for (int i = 0; i < bs; i++) amax = fmaxf(amax, fabsf(x[b + i]));
        float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        float dd = f16_scale ? clef_f16_to_f32(clef_f32_to_f16(d)) : d;
        for (int i = 0; i < bs; i++) {
            float q = nearbyintf(x[b + i] * id);
            xq[b + i] = dd * q;
            /* |x − dd·q| ≤ |x − d·q| + |d − dd|·|q| ≤ d/2 + 127|d − dd| */
            half_d[b + i] = d / 2.0f + 127.0f * fabsf(d - dd);
        }
    }
}

typedef struct path_case {
    const char *label;
    cpu_target tg;
} path_case;

/* The targets this CPU can run, including avx512 with BF16/VNNI off. */
static int usable_targets(path_case *out) {
    cpu_features f;
    cpu_detect(&f);
    int n = 0;
    out[n++] = (path_case){"ref", {.path = CPU_PATH_REF}};
    clef_error err = {0};
    if (cpu_path_supported(&f, CPU_PATH_AVX2)) out[n++] = (path_case){"avx2", {.path = CPU_PATH_AVX2}};
    else printf("[simd] skip avx2: not supported here\n");
    /* the ymm vpdpbusd kernels, in the encoding this CPU has (EVEX on an
     * AVX-512 machine without AVX-VNNI) */
    cpu_target vnni;
    if (cpu_choose("avx2+vnni", &f, &vnni, &err) == CLEF_OK)
        out[n++] = (path_case){vnni.vnni_evex ? "avx2+vnni (EVEX)" : "avx2+vnni", vnni};
    else printf("[simd] skip avx2+vnni: no vpdpbusd on ymm here\n");
    if (cpu_path_supported(&f, CPU_PATH_NEON)) {
        out[n++] = (path_case){"neon (no dot)", {.path = CPU_PATH_NEON}};
        if (f.neon_dot) out[n++] = (path_case){"neon+dot", {.path = CPU_PATH_NEON, .dot = true}};
        else printf("[simd] skip neon+dot: no SDOT here\n");
        if (f.neon_dot && f.neon_i8mm)
            out[n++] = (path_case){"neon+dot+i8mm", {.path = CPU_PATH_NEON, .dot = true, .i8mm = true}};
        else printf("[simd] skip neon+dot+i8mm: no SMMLA here\n");
        if (f.neon_bf16) out[n++] = (path_case){"neon+bf16", {.path = CPU_PATH_NEON, .bf16 = true}};
        else printf("[simd] skip neon+bf16: no BFDOT here\n");
    } else {
        printf("[simd] skip neon: not supported here\n");
    }
    if (cpu_path_supported(&f, CPU_PATH_AVX512)) {
        /* both broadcast forms, BF16 both widened to f32 and on vdpbf16ps,
         * whichever this CPU's own choice is */
        out[n++] = (path_case){"avx512 (no bf16, no vnni)", {.path = CPU_PATH_AVX512}};
        out[n++] = (path_case){"avx512 (folded broadcasts)",
                               {.path = CPU_PATH_AVX512, .bf16 = f.avx512bf16,
                                .vnni = f.avx512vnni, .bcast_fold = true}};
        out[n++] = (path_case){"avx512 (vnni, BF16 widened)",
                               {.path = CPU_PATH_AVX512, .vnni = f.avx512vnni}};
    } else {
        printf("[simd] skip avx512: not supported here\n");
    }
    cpu_target amx;
    if (cpu_path_supported(&f, CPU_PATH_AMX) && cpu_choose("amx", &f, &amx, &err) == CLEF_OK)
        out[n++] = (path_case){"amx", amx};
    else printf("[simd] skip amx: not supported here\n");
    return n;
}

/* ---- matmul ---- */

/* The product of the rows wd (rb bytes each) and x on one path, with one
 * thread and with three, against the double product of the dequantized
 * rows and the activations the path's precision specifies. */
static void check_product(const path_case *pc, uint32_t type, uint8_t *wd, size_t rb,
                          const float *x, int64_t in, int64_t out, int64_t T, tp_pool *pool3) {
    mm_weight w;
    assert_true(mm_weight_init(&w, type, wd, in, out));
    const char *prec = mm_precision(&pc->tg, &w);
    float *xs = malloc((size_t)(T * in) * sizeof *xs);
    float *slack = malloc((size_t)(T * in) * sizeof *slack);
    float *y1 = malloc((size_t)(T * out) * sizeof *y1), *y3 = malloc((size_t)(T * out) * sizeof *y3);
    float *row = malloc((size_t)in * sizeof *row);
    for (int64_t t = 0; t < T; t++) {
        const float *xt = x + t * in;
        if (!strcmp(prec, "int8")) {
            quantize_i8(xt, in, mm_act_block(&pc->tg, &w), type == CLEF_DTYPE_Q8_0, xs + t * in,
                        slack + t * in);
        } else {
            for (int64_t i = 0; i < in; i++) {
                xs[t * in + i] = !strcmp(prec, "bf16") ? round_bf16(xt[i]) : xt[i];
                slack[t * in + i] = fabsf(xt[i] - xs[t * in + i]);
            }
        }
    }
    mm_workspace ws = {0};
    mm_matmul_ex(&pc->tg, NULL, &w, x, y1, T, &ws);
    mm_matmul_ex(&pc->tg, pool3, &w, x, y3, T, NULL);
    double worst = 0.0;
    for (int64_t r = 0; r < out; r++) {
        assert_true(clef_dequantize_row(type, wd + (size_t)r * rb, row, in));
        for (int64_t t = 0; t < T; t++) {
            double ref = 0.0, mag = 0.0, exact = 0.0, bound = 0.0;
            for (int64_t i = 0; i < in; i++) {
                ref += (double)xs[t * in + i] * row[i];
                mag += fabs((double)xs[t * in + i] * row[i]);
                exact += (double)x[t * in + i] * row[i];
                bound += (double)slack[t * in + i] * fabs((double)row[i]);
            }
            double got = y1[t * out + r], d = fabs(got - ref), tol = 1e-5 * mag + 1e-6;
            if (!(d <= tol))
                fail_msg("%s %s [%lld -> %lld] T=%lld (%s): y[%lld,%lld] = %.9g, expected %.9g (tol %.3g)",
                         pc->label, clef_dtype_get(type)->name, (long long)in, (long long)out,
                         (long long)T, prec, (long long)t, (long long)r, got, ref, tol);
            if (!(fabs(got - exact) <= bound + tol))
                fail_msg("%s %s: y[%lld,%lld] = %.9g is %.3g from the unrounded product (rounding allows %.3g)",
                         pc->label, clef_dtype_get(type)->name, (long long)t, (long long)r, got,
                         fabs(got - exact), bound + tol);
            worst = d / (mag + 1e-30) > worst ? d / (mag + 1e-30) : worst;
        }
    }
    assert_memory_equal(y1, y3, (size_t)(T * out) * sizeof *y1);
    printf("[simd] %-26s %-4s [%4lld -> %3lld] T=%-3lld %-4s max |d|/sum|xw| %.3g\n", pc->label,
           clef_dtype_get(type)->name, (long long)in, (long long)out, (long long)T, prec, worst);
    mm_workspace_free(&ws);
    free(xs);
    free(slack);
    free(y1);
    free(y3);
    free(row);
}

static void check_one(const path_case *pc, uint32_t type, int64_t in, int64_t out, int64_t T,
                      tp_pool *pool3) {
    size_t rb;
    uint8_t *wd = make_weight(type, in, out, &rb);
    float *x = malloc((size_t)(T * in) * sizeof *x);
    for (int64_t i = 0; i < T * in; i++) x[i] = rnd_uniform(-1, 1) * (i % 97 == 0 ? 8.0f : 1.0f);
    check_product(pc, type, wd, rb, x, in, out, T, pool3);
    free(wd);
    free(x);
}

/* The int16 sums' worst case: every quant and scale at its largest
 * magnitude (bytes 0xff; Q6_K scales −128, Q8_0 quants −128) and every
 * activation ±1, so each quantizes to ±127 and all products of a run have
 * one sign.  A saturating sum would be far from the reference. */
static void check_extreme(const path_case *pc, uint32_t type, float xv, tp_pool *pool3) {
    const int64_t in = 512, out = 37, T = 6;
    size_t rb;
    uint8_t *wd = make_weight(type, in, out, &rb); /* for its d fields */
    const clef_dtype_info *info = clef_dtype_get(type);
    for (int64_t b = 0; b < out * in / (int64_t)info->block_size; b++) {
        uint8_t *blk = wd + (size_t)b * info->type_size;
        switch (type) {
        case CLEF_DTYPE_Q8_0: memset(blk + 2, 0x80, 32); break;
        case CLEF_DTYPE_Q4_K:
        case CLEF_DTYPE_Q5_K: memset(blk + 4, 0xff, info->type_size - 4); break;
        case CLEF_DTYPE_Q6_K:
            memset(blk, 0xff, 192);
            memset(blk + 192, 0x80, 16);
            break;
        default: fail_msg("no extreme weights for type %u", type);
        }
    }
    float *x = malloc((size_t)(T * in) * sizeof *x);
    for (int64_t i = 0; i < T * in; i++) x[i] = xv;
    check_product(pc, type, wd, rb, x, in, out, T, pool3);
    free(wd);
    free(x);
}

/* 16-bit float weights marked f32_act (the decision head's): on every path
 * the product is that of the weights' f32 decoding with the same x, bit for
 * bit (widening is exact and the lanes sum in the f32 kernel's order), and
 * the precision is reported as f32. */
static void check_f32_act(const path_case *pc, uint32_t type, int64_t in, int64_t out, int64_t T,
                          tp_pool *pool) {
    size_t rb;
    uint8_t *wd = make_weight(type, in, out, &rb);
    float *wf = malloc((size_t)(in * out) * sizeof *wf);
    for (int64_t r = 0; r < out; r++)
        assert_true(clef_dequantize_row(type, wd + (size_t)r * rb, wf + r * in, in));
    mm_weight w16, w32;
    assert_true(mm_weight_init(&w16, type, wd, in, out));
    assert_true(mm_weight_init(&w32, CLEF_DTYPE_F32, wf, in, out));
    w16.f32_act = true;
    assert_string_equal(mm_precision(&pc->tg, &w16), "f32");
    float *x = malloc((size_t)(T * in) * sizeof *x);
    float *y16 = malloc((size_t)(T * out) * sizeof *y16);
    float *y32 = malloc((size_t)(T * out) * sizeof *y32);
    for (int64_t i = 0; i < T * in; i++) x[i] = rnd_uniform(-1, 1);
    mm_matmul_ex(&pc->tg, pool, &w16, x, y16, T, NULL);
    mm_matmul_ex(&pc->tg, pool, &w32, x, y32, T, NULL);
    assert_memory_equal(y16, y32, (size_t)(T * out) * sizeof *y16);
    printf("[simd] %-26s %-4s [%4lld -> %3lld] T=%-3lld f32 activations: the f32 decoding's bits\n",
           pc->label, clef_dtype_get(type)->name, (long long)in, (long long)out, (long long)T);
    free(wd);
    free(wf);
    free(x);
    free(y16);
    free(y32);
}

static void test_matmul_paths(void **state) {
    (void)state;
    path_case pcs[12];
    int n = usable_targets(pcs);
    tp_pool *pool;
    assert_int_equal(tp_create(3, &pool, NULL), CLEF_OK);
    const uint32_t types[] = {CLEF_DTYPE_F32, CLEF_DTYPE_F16, CLEF_DTYPE_BF16, CLEF_DTYPE_Q8_0,
                              CLEF_DTYPE_Q4_K, CLEF_DTYPE_Q5_K, CLEF_DTYPE_Q6_K};
    for (int p = 0; p < n; p++) {
        for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
            /* k tails past two 1024 blocks; rows not a multiple of any tile */
            check_one(&pcs[p], types[i], 2304, 101, 13, pool);
            check_one(&pcs[p], types[i], 256, 5, 1, pool);
        }
        check_one(&pcs[p], CLEF_DTYPE_Q8_0, 96, 200, 70, pool);
        check_one(&pcs[p], CLEF_DTYPE_BF16, 4133, 9, 7, pool);  /* odd k, past 2048 */
        check_one(&pcs[p], CLEF_DTYPE_F32, 13, 9, 4, pool);
        check_one(&pcs[p], CLEF_DTYPE_BF16, 77, 50, 8, pool);
        /* tile paths: whole 32 x 32 blocks, k past one L1 slice (512),
         * more tokens than one accumulator block (512), tails of each */
        check_one(&pcs[p], CLEF_DTYPE_BF16, 1056, 96, 64, pool);
        check_one(&pcs[p], CLEF_DTYPE_BF16, 64, 40, 530, pool);
        /* widened F16 panels: odd k, whole 48-row panels, many tokens */
        check_one(&pcs[p], CLEF_DTYPE_F16, 77, 50, 8, pool);
        check_one(&pcs[p], CLEF_DTYPE_F16, 1056, 96, 200, pool);
        check_one(&pcs[p], CLEF_DTYPE_Q8_0, 1088, 64, 33, pool);
        check_one(&pcs[p], CLEF_DTYPE_Q6_K, 512, 50, 17, pool);
        /* k past the 4096 blocks of the vpmaddubsw panels */
        check_one(&pcs[p], CLEF_DTYPE_Q4_K, 4864, 20, 9, pool);
        check_one(&pcs[p], CLEF_DTYPE_Q6_K, 4352, 17, 5, pool);
        check_one(&pcs[p], CLEF_DTYPE_Q8_0, 4160, 19, 6, pool);
        /* the K-quant planes: token pairs with a part-filled second group,
         * k blocks of 1024 then 512, both 16-row subgroups and a 6-row tail */
        check_one(&pcs[p], CLEF_DTYPE_Q4_K, 2560, 70, 45, pool);
        check_one(&pcs[p], CLEF_DTYPE_Q5_K, 512, 33, 600, pool);
        const uint32_t i8types[] = {CLEF_DTYPE_Q8_0, CLEF_DTYPE_Q4_K, CLEF_DTYPE_Q5_K,
                                    CLEF_DTYPE_Q6_K};
        for (size_t i = 0; i < sizeof i8types / sizeof i8types[0]; i++) {
            check_extreme(&pcs[p], i8types[i], 1.0f, pool);
            check_extreme(&pcs[p], i8types[i], -1.0f, pool);
        }
        /* f32_act: k tails (77, 1033), a k block boundary, 1 to 14 tokens */
        const uint32_t w16[2] = {CLEF_DTYPE_BF16, CLEF_DTYPE_F16};
        for (int i = 0; i < 2; i++) {
            check_f32_act(&pcs[p], w16[i], 77, 50, 14, pool);
            check_f32_act(&pcs[p], w16[i], 1033, 101, 4, pool);
            check_f32_act(&pcs[p], w16[i], 64, 1024, 1, pool);
        }
    }
    tp_free(pool);
}

/* ---- small GEMMs ---- */

static void check_gemm(const path_case *pc, int64_t m, int64_t n, int64_t k, bool transA, bool nt,
                       bool add) {
    float *A = malloc((size_t)(m * k + 1) * sizeof *A), *B = malloc((size_t)(k * n + 1) * sizeof *B);
    float *C = malloc((size_t)(m * n + 1) * sizeof *C), *C0 = malloc((size_t)(m * n + 1) * sizeof *C0);
    for (int64_t i = 0; i < m * k; i++) A[i] = rnd_uniform(-1, 1);
    for (int64_t i = 0; i < k * n; i++) B[i] = rnd_uniform(-1, 1);
    for (int64_t i = 0; i < m * n; i++) C0[i] = C[i] = rnd_uniform(-1, 1);
    /* A(i,kk): row-major [m][k], or stored transposed [k][m]; B: [k][n], or [n][k] for nt */
    int64_t rsa = transA ? 1 : k, csa = transA ? m : 1;
    if (nt) mm_gemm_nt(&pc->tg, m, n, k, A, k, B, k, C, n, add);
    else mm_gemm_nn(&pc->tg, m, n, k, A, rsa, csa, B, n, C, n, add);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double ref = add ? C0[i * n + j] : 0.0, mag = fabs(ref);
            for (int64_t kk = 0; kk < k; kk++) {
                double a = nt ? A[i * k + kk] : A[i * rsa + kk * csa];
                double b = nt ? B[j * k + kk] : B[kk * n + j];
                ref += a * b;
                mag += fabs(a * b);
            }
            if (!(fabs(C[i * n + j] - ref) <= 1e-5 * mag + 1e-6))
                fail_msg("%s gemm_%s m=%lld n=%lld k=%lld%s: C[%lld,%lld] = %.9g, expected %.9g",
                         pc->label, nt ? "nt" : "nn", (long long)m, (long long)n, (long long)k,
                         transA ? " (Aᵀ)" : "", (long long)i, (long long)j, C[i * n + j], ref);
        }
    free(A);
    free(B);
    free(C);
    free(C0);
}

static void test_gemm_paths(void **state) {
    (void)state;
    path_case pcs[12];
    int n = usable_targets(pcs);
    const int64_t shapes[][3] = {{1, 1, 1}, {8, 48, 16}, {13, 130, 67}, {64, 128, 128}, {3, 5, 0}, {70, 17, 9}};
    for (int p = 0; p < n; p++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int v = 0; v < 6; v++)
                check_gemm(&pcs[p], shapes[s][0], shapes[s][1], shapes[s][2], v & 1, v >= 4, v & 2);
    printf("[simd] gemm nn/nt: %d paths x %zu shapes agree with double loops\n", n,
           sizeof shapes / sizeof shapes[0]);
}

/* ---- transpose ---- */

static void check_transpose(const path_case *pc, int64_t rows, int64_t cols) {
    /* strided source and destination: leading dimensions past the shape */
    const int64_t lds = cols + 3, ldd = rows + 5;
    float *src = malloc((size_t)(rows * lds + 1) * sizeof *src);
    float *dst = malloc((size_t)(cols * ldd + 1) * sizeof *dst);
    for (int64_t i = 0; i < rows * lds; i++) src[i] = rnd_uniform(-1, 1);
    for (int64_t i = 0; i < cols * ldd; i++) dst[i] = -7.0f; /* the padding must stay so */
    mm_transpose(&pc->tg, rows, cols, src, lds, dst, ldd);
    for (int64_t c = 0; c < cols; c++)
        for (int64_t r = 0; r < ldd; r++) {
            const float want = r < rows ? src[r * lds + c] : -7.0f;
            if (memcmp(&dst[c * ldd + r], &want, sizeof want) != 0)
                fail_msg("%s transpose %lldx%lld: dst[%lld][%lld] = %.9g, expected %.9g",
                         pc->label, (long long)rows, (long long)cols, (long long)c,
                         (long long)r, dst[c * ldd + r], want);
        }
    free(src);
    free(dst);
}

static void test_transpose_paths(void **state) {
    (void)state;
    path_case pcs[12];
    int n = usable_targets(pcs);
    const int64_t shapes[][2] = {{1, 1}, {16, 16}, {256, 128}, {17, 33}, {5, 300}, {129, 7}, {0, 4}};
    for (int p = 0; p < n; p++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            check_transpose(&pcs[p], shapes[s][0], shapes[s][1]);
    printf("[simd] transpose: %d paths x %zu shapes exact\n", n, sizeof shapes / sizeof shapes[0]);
}

/* ---- feature detection and the choice of path ---- */

static void test_cpu_choose(void **state) {
    (void)state;
    cpu_features f;
    cpu_detect(&f);
    cpu_target t;
    clef_error err = {0};
    assert_int_equal(cpu_choose("ref", &f, &t, &err), CLEF_OK);
    assert_int_equal(t.path, CPU_PATH_REF);
    assert_false(t.bf16 || t.vnni || t.amx);
    assert_int_equal(cpu_choose(NULL, &f, &t, &err), CLEF_OK);
    assert_true(cpu_path_supported(&f, t.path));
    printf("[simd] auto picks %s\n", cpu_target_name(&t));
    assert_int_equal(cpu_choose("neon9", &f, &t, &err), CLEF_ERR_INVALID_ARG);
    assert_non_null(strstr(err.message, "neon9"));
    /* a path the CPU lacks is refused by name; one it has is granted */
    cpu_features none;
    memset(&none, 0, sizeof none);
    assert_int_equal(cpu_choose("avx512", &none, &t, &err), CLEF_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.message, "avx512"));
    assert_int_equal(cpu_choose("amx", &none, &t, &err), CLEF_ERR_UNSUPPORTED);
    assert_int_equal(cpu_choose("auto", &none, &t, &err), CLEF_OK);
    assert_int_equal(t.path, CPU_PATH_REF);
    if (cpu_path_supported(&f, CPU_PATH_AVX2)) {
        assert_int_equal(cpu_choose("avx2", &f, &t, &err), CLEF_OK);
        assert_int_equal(t.path, CPU_PATH_AVX2);
        assert_false(t.bf16);
        /* vpdpbusd on ymm where the CPU has AVX-VNNI, and the name says so */
        assert_int_equal(t.vnni, f.avx_vnni);
        assert_false(t.vnni_evex);
        assert_string_equal(cpu_target_name(&t), f.avx_vnni ? "avx2+vnni" : "avx2");
        const bool ymm_dp = f.avx_vnni || (f.avx512vnni && f.avx512vl);
        assert_int_equal(cpu_choose("avx2+vnni", &f, &t, &err), ymm_dp ? CLEF_OK : CLEF_ERR_UNSUPPORTED);
        if (ymm_dp) {
            assert_int_equal(t.path, CPU_PATH_AVX2);
            assert_true(t.vnni);
            assert_int_equal(t.vnni_evex, !f.avx_vnni);
            assert_string_equal(cpu_target_name(&t), "avx2+vnni");
        }
    }
    assert_int_equal(cpu_choose("avx2+vnni", &none, &t, &err), CLEF_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.message, "avx2+vnni"));
    if (cpu_path_supported(&f, CPU_PATH_AVX512)) {
        assert_int_equal(cpu_choose("avx512", &f, &t, &err), CLEF_OK);
        /* vdpbf16ps and folded broadcasts are AMD's; Intel widens BF16 */
        assert_int_equal(t.bf16, f.avx512bf16 && f.amd);
        assert_int_equal(t.bcast_fold, f.amd);
        assert_int_equal(t.vnni, f.avx512vnni);
    }
    /* NEON is AArch64's and every AArch64 CPU has it: auto picks it there */
#if defined(__aarch64__)
    assert_true(f.neon);
    assert_int_equal(cpu_choose(NULL, &f, &t, &err), CLEF_OK);
    assert_int_equal(t.path, CPU_PATH_NEON);
    /* the int8 kernels where the CPU has SDOT, and the name says so */
    assert_int_equal(t.dot, f.neon_dot);
    assert_int_equal(t.i8mm, f.neon_dot && f.neon_i8mm);
    assert_int_equal(t.bf16, f.neon_bf16);
    char want[32];
    snprintf(want, sizeof want, "neon%s%s%s", t.dot ? "+dot" : "", t.i8mm ? "+i8mm" : "",
             t.bf16 ? "+bf16" : "");
    assert_string_equal(cpu_target_name(&t), want);
#else
    assert_false(f.neon || f.neon_dot || f.neon_i8mm || f.neon_bf16);
    assert_int_equal(cpu_choose("neon", &f, &t, &err), CLEF_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.message, "neon"));
#endif
    assert_string_equal(cpu_path_name(CPU_PATH_AVX512), "avx512");
    assert_string_equal(cpu_path_name(CPU_PATH_NEON), "neon");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_choose),
        cmocka_unit_test(test_gemm_paths),
        cmocka_unit_test(test_transpose_paths),
        cmocka_unit_test(test_matmul_paths),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
