/*
 * tests/test_kernels.c — the compute kernels against straightforward
 * double-precision versions written here.
 *
 * matmul: every weight type (random blocks with sane scales), shapes that
 * leave tails in rows (37), tokens (70 > the 64-token tile) and the
 * reduction (2304 = 1024+1024+256), on 1 and 3 threads.  Reference: the row
 * dequantized by clef_dequantize_row (the arbiter), dotted in double.
 * Tolerance: |y − ref| ≤ 1e-5·Σ|x_i·w_i| + 1e-6 (f32 accumulation).
 * rope / conv / delta rule / attention: the equations of
 * ../shared/spec/qwen35-backbone.md in double, with several sequences and
 * chunked calls that carry state.
 */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/dtype.h"
#include "core/threadpool.h"
#include "kernels/attention.h"
#include "kernels/dequant.h"
#include "kernels/gdn.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"

/* ---- deterministic random numbers ---- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd_u32(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}
static float rnd_uniform(float lo, float hi) { return lo + (hi - lo) * (float)(rnd_u32() & 0xffffff) / 16777216.0f; }
static void rnd_fill(float *x, int64_t n, float lo, float hi) {
    for (int64_t i = 0; i < n; i++) x[i] = rnd_uniform(lo, hi);
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
    int64_t blocks = in / info->block_size * out;
    for (int64_t b = 0; b < blocks; b++) {
        uint8_t *blk = w + b * info->type_size;
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
    *row_bytes = (size_t)rb;
    return w;
}

static void check_matmul_type(uint32_t type, int64_t in, int64_t out, int64_t T, tp_pool *pool3) {
    size_t rb;
    uint8_t *wd = make_weight(type, in, out, &rb);
    mm_weight w;
    assert_true(mm_weight_init(&w, type, wd, in, out));
    assert_int_equal(w.row_bytes, rb);
    float *x = malloc((size_t)(T * in) * sizeof *x), *y1 = malloc((size_t)(T * out) * sizeof *y1);
    float *y3 = malloc((size_t)(T * out) * sizeof *y3), *row = malloc((size_t)in * sizeof *row);
    float *row2 = malloc((size_t)in * sizeof *row2);
    rnd_fill(x, T * in, -1, 1);
    mm_matmul(NULL, &w, x, y1, T);
    mm_matmul(pool3, &w, x, y3, T);
    double worst = 0.0;
    for (int64_t r = 0; r < out; r++) {
        assert_true(clef_dequantize_row(type, wd + (size_t)r * rb, row, in));
        mm_get_row(&w, r, row2);
        assert_memory_equal(row, row2, (size_t)in * sizeof *row);
        for (int64_t t = 0; t < T; t++) {
            double ref = 0.0, mag = 0.0;
            for (int64_t i = 0; i < in; i++) {
                ref += (double)x[t * in + i] * row[i];
                mag += fabs((double)x[t * in + i] * row[i]);
            }
            double d = fabs(y1[t * out + r] - ref);
            double tol = 1e-5 * mag + 1e-6;
            if (!(d <= tol))
                fail_msg("%s [%lld x %lld] T=%lld: y[%lld,%lld] = %.9g, reference %.9g",
                         clef_dtype_get(type)->name, (long long)out, (long long)in, (long long)T,
                         (long long)t, (long long)r, y1[t * out + r], ref);
            worst = d / (mag + 1e-30) > worst ? d / (mag + 1e-30) : worst;
        }
    }
    /* the thread count does not change a single bit */
    assert_memory_equal(y1, y3, (size_t)(T * out) * sizeof *y1);
    printf("[kernels] matmul %-4s [%lld -> %lld] T=%lld: max |d|/sum|xw| %.3g\n", clef_dtype_get(type)->name,
           (long long)in, (long long)out, (long long)T, worst);
    free(wd);
    free(x);
    free(y1);
    free(y3);
    free(row);
    free(row2);
}

static void test_matmul_types(void **state) {
    (void)state;
    tp_pool *pool;
    assert_int_equal(tp_create(3, &pool, NULL), CLEF_OK);
    const uint32_t types[] = {CLEF_DTYPE_F32, CLEF_DTYPE_F16, CLEF_DTYPE_BF16, CLEF_DTYPE_Q8_0,
                              CLEF_DTYPE_Q4_K, CLEF_DTYPE_Q5_K, CLEF_DTYPE_Q6_K};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        check_matmul_type(types[i], 2304, 37, 70, pool);
        check_matmul_type(types[i], 256, 5, 1, pool);
    }
    check_matmul_type(CLEF_DTYPE_Q8_0, 96, 130, 3, pool);
    check_matmul_type(CLEF_DTYPE_F32, 13, 9, 4, pool);
    tp_free(pool);
}

static void test_weight_init_refuses(void **state) {
    (void)state;
    mm_weight w;
    uint8_t buf[512] = {0};
    assert_false(mm_weight_init(&w, CLEF_DTYPE_Q4_0, buf, 32, 1));   /* not computable */
    assert_false(mm_weight_init(&w, CLEF_DTYPE_Q8_0, buf, 48, 1));   /* not a block multiple */
    assert_false(mm_weight_init(&w, CLEF_DTYPE_Q4_K, buf, 128, 1));
    assert_false(mm_weight_init(&w, 99, buf, 32, 1));
    assert_false(mm_weight_init(&w, CLEF_DTYPE_F32, buf, 0, 1));
    assert_true(mm_weight_init(&w, CLEF_DTYPE_Q8_0, buf, 64, 2));
    assert_int_equal(w.row_bytes, 68);
}

/* ---- small ops ---- */

static void test_norms_and_activations(void **state) {
    (void)state;
    enum { N = 48, R = 3 };
    float x[R * N], y[R * N], w[N], x2[R * N];
    rnd_fill(x, R * N, -3, 3);
    rnd_fill(w, N, 0.5f, 1.5f);
    x[5] = 0.0f;
    op_rmsnorm(y, x, w, N, R, 1e-6f);
    for (int r = 0; r < R; r++) {
        double ss = 0;
        for (int i = 0; i < N; i++) ss += (double)x[r * N + i] * x[r * N + i];
        double sc = 1.0 / sqrt(ss / N + 1e-6);
        for (int i = 0; i < N; i++) assert_float_equal(y[r * N + i], x[r * N + i] * sc * w[i], 1e-5);
    }
    memcpy(x2, x, sizeof x);
    op_l2norm(x2, N, R, 1e-6f);
    for (int r = 0; r < R; r++) {
        double ss = 0;
        for (int i = 0; i < N; i++) ss += (double)x[r * N + i] * x[r * N + i];
        for (int i = 0; i < N; i++) assert_float_equal(x2[r * N + i], x[r * N + i] / sqrt(ss), 1e-6);
    }
    float zero[4] = {0};
    op_l2norm(zero, 4, 1, 1e-6f); /* max(‖x‖, eps) keeps zeros finite */
    for (int i = 0; i < 4; i++) assert_float_equal(zero[i], 0.0f, 0);

    float a[6] = {-30, -2, 0, 1.5f, 19.5f, 25};
    float s[6], sp[6], si[6];
    memcpy(s, a, sizeof a);
    memcpy(sp, a, sizeof a);
    memcpy(si, a, sizeof a);
    op_sigmoid(s, 6);
    op_softplus(sp, 6);
    op_silu(si, 6);
    for (int i = 0; i < 6; i++) {
        double sg = 1.0 / (1.0 + exp(-(double)a[i]));
        assert_float_equal(s[i], sg, 1e-6);
        assert_float_equal(si[i], a[i] * sg, 1e-5);
        double ref = a[i] > 20 ? a[i] : log1p(exp((double)a[i]));
        assert_float_equal(sp[i], ref, 1e-5);
    }
    float sm[5] = {1000, 1001, 999, -5, 1001};
    op_softmax(sm, 5);
    double den = exp(-1) + 1 + exp(-2) + exp(-1006) + 1;
    assert_float_equal(sm[1], 1 / den, 1e-6);
    assert_float_equal(sm[0], exp(-1) / den, 1e-6);
}

/* ---- rotary ---- */

/* Stream of pair i, written from the spec's description: pairs cycle
 * time, height, width; stream s owns the first sections[s] slots of its
 * cycle position, anything else (and the remainder of the period) is the
 * extra stream, whose text position is 0. */
static int ref_stream(const int sec[4], int i) {
    int total = sec[0] + sec[1] + sec[2] + sec[3];
    if (total == 0) return 0;
    int slot = i % total, s = slot % 3;
    return slot / 3 < sec[s] ? s : 3;
}

static void check_rope(int n_head, int D, int n_rot, const int sec[4]) {
    enum { T = 9 };
    int32_t pos[T] = {0, 1, 2, 3, 57, 58, 0, 1, 100};
    const float base = 1e7f;
    float *x = malloc(sizeof(float) * T * n_head * D), *y = malloc(sizeof(float) * T * n_head * D);
    rnd_fill(x, T * n_head * D, -1, 1);
    memcpy(y, x, sizeof(float) * T * n_head * D);
    op_rope_neox(y, T, n_head, D, n_rot, pos, base, sec);
    int half = n_rot / 2;
    for (int t = 0; t < T; t++)
        for (int h = 0; h < n_head; h++) {
            const float *xi = x + (t * n_head + h) * D;
            const float *yi = y + (t * n_head + h) * D;
            for (int d = n_rot; d < D; d++) assert_float_equal(yi[d], xi[d], 0);
            for (int i = 0; i < half; i++) {
                double p = ref_stream(sec, i) == 3 ? 0.0 : pos[t];
                double th = p * pow(base, -2.0 * i / n_rot);
                double r0 = xi[i] * cos(th) - xi[i + half] * sin(th);
                double r1 = xi[i] * sin(th) + xi[i + half] * cos(th);
                assert_float_equal(yi[i], r0, 5e-5);
                assert_float_equal(yi[i + half], r1, 5e-5);
            }
        }
    free(x);
    free(y);
}

static void test_rope(void **state) {
    (void)state;
    const int tiny[4] = {2, 1, 1, 0}, small[4] = {3, 3, 2, 0}, real[4] = {11, 11, 10, 0};
    const int gaps[4] = {1, 0, 0, 1}, plain[4] = {0, 0, 0, 0};
    check_rope(4, 32, 8, tiny);
    check_rope(1, 64, 16, small);
    check_rope(2, 256, 64, real);
    check_rope(3, 16, 8, gaps);   /* pairs 1 and 3 take the extra stream: unrotated */
    check_rope(2, 24, 24, plain); /* full-width plain NeoX */
    for (int i = 0; i < 32; i++) assert_int_equal(op_rope_pair_stream(real, i), ref_stream(real, i));
    assert_int_equal(op_rope_pair_stream(gaps, 1), 3);
}

/* ---- conv1d ---- */

/* Two sequences back to back (lengths 5 and 18), fed in chunks of `chunk`. */
static void check_conv(int chunk, tp_pool *pool) {
    enum { N = 23, C = 40, K = 4 };
    int32_t pos[N];
    for (int t = 0; t < N; t++) pos[t] = t < 5 ? t : t - 5;
    float *in = malloc(sizeof(float) * N * C), w[C * K], *out = malloc(sizeof(float) * N * C);
    float *hist = calloc((size_t)(K - 1 + chunk) * C, sizeof(float));
    rnd_fill(in, N * C, -2, 2);
    rnd_fill(w, C * K, -1, 1);
    for (int i = 0; i < (K - 1) * C; i++) hist[i] = NAN; /* history before any sequence is never read */
    for (int c0 = 0; c0 < N; c0 += chunk) {
        int T = N - c0 < chunk ? N - c0 : chunk;
        memcpy(hist + (K - 1) * C, in + c0 * C, sizeof(float) * T * C);
        gdn_conv1d_silu(pool, hist, w, pos + c0, T, C, K, out + c0 * C);
        gdn_conv_shift(hist, T, C, K);
    }
    for (int t = 0; t < N; t++)
        for (int ch = 0; ch < C; ch++) {
            double acc = 0;
            for (int k = 0; k < K; k++) {
                int src = t - (K - 1 - k); /* X = K−1 zero rows, then the sequence */
                if (src >= t - pos[t]) acc += (double)in[src * C + ch] * w[ch * K + k];
            }
            double ref = acc / (1.0 + exp(-acc));
            assert_float_equal(out[t * C + ch], ref, 1e-5);
        }
    free(in);
    free(out);
    free(hist);
}

static void test_conv1d(void **state) {
    (void)state;
    tp_pool *pool;
    assert_int_equal(tp_create(2, &pool, NULL), CLEF_OK);
    const int chunks[] = {1, 2, 7, 23};
    for (size_t i = 0; i < 4; i++) check_conv(chunks[i], i % 2 ? pool : NULL);
    tp_free(pool);
}

/* ---- gated delta rule ---- */

static void ref_delta(const float *q, const float *k, const float *v, int ld, const float *g,
                      const float *beta, const int32_t *pos, int N, int Hk, int Hv, int Dk, int Dv,
                      double *o) {
    double *S = calloc((size_t)Dk * Dv, sizeof *S);
    for (int h = 0; h < Hv; h++) {
        int hk = h % Hk;
        for (int t = 0; t < N; t++) {
            const float *qt = q + t * ld + hk * Dk, *kt = k + t * ld + hk * Dk, *vt = v + t * ld + h * Dv;
            if (pos[t] == 0) memset(S, 0, sizeof *S * Dk * Dv);
            double dec = exp((double)g[t * Hv + h]), b = beta[t * Hv + h];
            for (int i = 0; i < Dk * Dv; i++) S[i] *= dec;
            for (int c = 0; c < Dv; c++) {
                double sk = 0;
                for (int i = 0; i < Dk; i++) sk += S[i * Dv + c] * kt[i];
                double delta = b * (vt[c] - sk);
                for (int i = 0; i < Dk; i++) S[i * Dv + c] += kt[i] * delta;
            }
            for (int c = 0; c < Dv; c++) {
                double acc = 0;
                for (int i = 0; i < Dk; i++) acc += S[i * Dv + c] * qt[i];
                o[(t * Hv + h) * Dv + c] = acc / sqrt((double)Dk);
            }
        }
    }
    free(S);
}

static void check_delta(int chunk, tp_pool *pool) {
    enum { N = 90, Hk = 2, Hv = 4, Dk = 16, Dv = 8 };
    const int ld = 2 * Hk * Dk + Hv * Dv;
    int32_t pos[N];
    for (int t = 0; t < N; t++) pos[t] = t < 70 ? t : t - 70; /* sequences of 70 and 20 */
    float *qkv = malloc(sizeof(float) * N * ld), g[N * Hv], beta[N * Hv];
    float *o = malloc(sizeof(float) * N * Hv * Dv), *S = malloc(sizeof(float) * Hv * Dk * Dv);
    double *ref = malloc(sizeof(double) * N * Hv * Dv);
    rnd_fill(qkv, N * ld, -1, 1);
    for (int t = 0; t < N; t++) op_l2norm(qkv + t * ld, Dk, 2 * Hk, 1e-6f);
    for (int i = 0; i < N * Hv; i++) {
        g[i] = -op_softplus1(rnd_uniform(-4, 1)) * rnd_uniform(0.1f, 2);
        beta[i] = op_sigmoid1(rnd_uniform(-3, 3));
    }
    for (int i = 0; i < Hv * Dk * Dv; i++) S[i] = NAN; /* reset at pos 0 must clear it */
    const float *q = qkv, *k = qkv + Hk * Dk, *v = qkv + 2 * Hk * Dk;
    for (int c0 = 0; c0 < N; c0 += chunk) {
        int T = N - c0 < chunk ? N - c0 : chunk;
        gdn_delta_rule(pool, q + c0 * ld, k + c0 * ld, v + c0 * ld, ld, g + c0 * Hv, beta + c0 * Hv,
                       pos + c0, T, Hk, Hv, Dk, Dv, S, o + c0 * Hv * Dv);
    }
    ref_delta(q, k, v, ld, g, beta, pos, N, Hk, Hv, Dk, Dv, ref);
    double worst = 0;
    for (int i = 0; i < N * Hv * Dv; i++) {
        double d = fabs(o[i] - ref[i]);
        if (!(d <= 1e-5)) fail_msg("delta rule chunk %d: o[%d] = %.9g, reference %.9g", chunk, i, o[i], ref[i]);
        worst = d > worst ? d : worst;
    }
    printf("[kernels] delta rule chunk %d: max |d| %.3g\n", chunk, worst);
    free(qkv);
    free(o);
    free(S);
    free(ref);
}

static void test_delta_rule(void **state) {
    (void)state;
    tp_pool *pool;
    assert_int_equal(tp_create(3, &pool, NULL), CLEF_OK);
    check_delta(90, NULL);
    check_delta(13, pool);
    check_delta(1, pool);
    tp_free(pool);
}

/* ---- attention ---- */

static void check_attention(int chunk, tp_pool *pool) {
    enum { N = 160, H = 4, Hkv = 2, D = 24 };
    int32_t pos[N];
    for (int t = 0; t < N; t++) pos[t] = t < 150 ? t : t - 150; /* 150 (> 2 key blocks) and 10 */
    const float scale = 1.0f / sqrtf((float)D);
    float *q = malloc(sizeof(float) * N * H * D), *k = malloc(sizeof(float) * N * Hkv * D);
    float *v = malloc(sizeof(float) * N * Hkv * D), *o = malloc(sizeof(float) * N * H * D);
    double *s = malloc(sizeof(double) * N);
    rnd_fill(q, N * H * D, -2, 2);
    rnd_fill(k, N * Hkv * D, -2, 2);
    rnd_fill(v, N * Hkv * D, -1, 1);
    for (int c0 = 0; c0 < N; c0 += chunk) {
        int T = N - c0 < chunk ? N - c0 : chunk;
        attn_causal(pool, q + c0 * H * D, k, v, pos + c0, c0, T, H, Hkv, D, scale, o + c0 * H * D);
    }
    double worst = 0;
    for (int t = 0; t < N; t++)
        for (int h = 0; h < H; h++) {
            int kh = h / (H / Hkv), j0 = t - pos[t];
            double mx = -INFINITY, den = 0;
            for (int j = j0; j <= t; j++) {
                double acc = 0;
                for (int d = 0; d < D; d++) acc += (double)q[(t * H + h) * D + d] * k[(j * Hkv + kh) * D + d];
                s[j] = acc * scale;
                mx = s[j] > mx ? s[j] : mx;
            }
            for (int j = j0; j <= t; j++) den += exp(s[j] - mx);
            for (int d = 0; d < D; d++) {
                double acc = 0;
                for (int j = j0; j <= t; j++) acc += exp(s[j] - mx) / den * v[(j * Hkv + kh) * D + d];
                double diff = fabs(o[(t * H + h) * D + d] - acc);
                if (!(diff <= 1e-5)) fail_msg("attention chunk %d: t %d h %d d %d: %.9g vs %.9g", chunk, t, h, d,
                                              o[(t * H + h) * D + d], acc);
                worst = diff > worst ? diff : worst;
            }
        }
    printf("[kernels] attention chunk %d: max |d| %.3g\n", chunk, worst);
    free(q);
    free(k);
    free(v);
    free(o);
    free(s);
}

static void test_attention(void **state) {
    (void)state;
    tp_pool *pool;
    assert_int_equal(tp_create(3, &pool, NULL), CLEF_OK);
    check_attention(160, NULL);
    check_attention(33, pool);
    check_attention(1, pool);
    tp_free(pool);
}

/* ---- embedding ---- */

static void test_embed(void **state) {
    (void)state;
    size_t rb;
    uint8_t *wd = make_weight(CLEF_DTYPE_Q8_0, 64, 10, &rb);
    mm_weight w;
    assert_true(mm_weight_init(&w, CLEF_DTYPE_Q8_0, wd, 64, 10));
    int32_t ids[3] = {9, 0, 9};
    float out[3 * 64], row[64];
    op_embed(&w, ids, 3, out);
    for (int t = 0; t < 3; t++) {
        assert_true(clef_dequantize_row(CLEF_DTYPE_Q8_0, wd + (size_t)ids[t] * rb, row, 64));
        assert_memory_equal(out + t * 64, row, sizeof row);
    }
    free(wd);
}

/* ---- thread pool ---- */

typedef struct count_job {
    int64_t n;
    int64_t *hits;   /* [n] */
    int seen[TP_MAX_THREADS];
} count_job;

static void count_task(void *ctx, int ith, int nth) {
    count_job *j = ctx;
    int64_t b, e;
    tp_split(j->n, 4, ith, nth, &b, &e);
    for (int64_t i = b; i < e; i++) j->hits[i]++;
    j->seen[ith]++;
}

static void *hammer(void *arg) {
    tp_pool *pool = arg;
    for (int r = 0; r < 50; r++) {
        int64_t hits[101] = {0};
        count_job job = {.n = 101, .hits = hits};
        tp_run(pool, count_task, &job);
        for (int i = 0; i < 101; i++)
            if (hits[i] != 1) return (void *)1;
    }
    return NULL;
}

/* A denormal times one, on each thread: 0 where denormals are flushed. */
typedef struct denorm_job {
    volatile float tiny;
    float got[TP_MAX_THREADS];
} denorm_job;

static void denorm_task(void *ctx, int ith, int nth) {
    denorm_job *j = ctx;
    (void)nth;
    volatile float one = 1.0f;
    j->got[ith] = j->tiny * one;
}

/* Jobs run with denormals flushed on every thread; the caller's own mode
 * comes back after (x86-64 and aarch64 have the flag; elsewhere skipped). */
static void check_denormals_flushed(tp_pool *pool, int nth) {
#if defined(__x86_64__) || defined(__aarch64__)
    denorm_job j = {.tiny = 1e-40f};
    volatile float one = 1.0f;
    tp_run(pool, denorm_task, &j);
    for (int t = 0; t < nth; t++) assert_true(j.got[t] == 0.0f);
    assert_true(j.tiny * one != 0.0f); /* the caller's mode restored */
#else
    (void)pool;
    (void)nth;
#endif
}

static void test_threadpool(void **state) {
    (void)state;
    tp_pool *pool;
    assert_int_equal(tp_create(4, &pool, NULL), CLEF_OK);
    assert_int_equal(tp_size(pool), 4);
    assert_int_equal(tp_size(NULL), 1);
    int64_t hits[37] = {0};
    count_job job = {.n = 37, .hits = hits};
    tp_run(pool, count_task, &job);
    for (int i = 0; i < 37; i++) assert_int_equal(hits[i], 1);
    for (int t = 0; t < 4; t++) assert_int_equal(job.seen[t], 1);
    check_denormals_flushed(pool, 4);
    check_denormals_flushed(NULL, 1);
    /* two callers at once take turns */
    pthread_t a, b;
    void *ra, *rb;
    pthread_create(&a, NULL, hammer, pool);
    pthread_create(&b, NULL, hammer, pool);
    pthread_join(a, &ra);
    pthread_join(b, &rb);
    assert_null(ra);
    assert_null(rb);
    tp_free(pool);
    /* shares: contiguous, aligned, covering */
    int64_t b0, e0, next = 0;
    for (int i = 0; i < 5; i++) {
        tp_split(37, 8, i, 5, &b0, &e0);
        assert_int_equal(b0, next);
        assert_true(b0 % 8 == 0 || b0 == 37);
        next = e0;
    }
    assert_int_equal(next, 37);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul_types),
        cmocka_unit_test(test_weight_init_refuses),
        cmocka_unit_test(test_norms_and_activations),
        cmocka_unit_test(test_rope),
        cmocka_unit_test(test_conv1d),
        cmocka_unit_test(test_delta_rule),
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_embed),
        cmocka_unit_test(test_threadpool),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
