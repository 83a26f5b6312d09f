/*
 * tests/test_kernels_attention.c — attn_causal_ex and the vectorised
 * elementwise ops on every path this CPU runs, against double references.
 *
 * Attention: three sequences in one buffer, query chunks of several sizes (each call sees keys written so far),
 * GQA groups 1, 2 and 4, head sizes 24, 64 and 256, keys spanning several
 * 64-key blocks.  |Δ| ≤ 1e-5 per element (inputs O(1)).  A query's output
 * must not depend on the call it came in: chunked calls equal one call
 * bit for bit.
 * Ops: rmsnorm / l2norm / sigmoid / silu products / exp within a few ulp
 * of the double formulas.
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
#include "testutil.h"
#include "core/threadpool.h"
#include "kernels/attention.h"
#include "kernels/ops.h"

static uint64_t rng_state = 0xDA942042E4DD58B5ull;
static float rnd_uniform(float lo, float hi) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return lo + (hi - lo) * (float)((rng_state >> 16) & 0xffffff) / 16777216.0f;
}

typedef struct attn_shape {
    int N, H, Hkv, D;
} attn_shape;

static void check_attention(cpu_path path, const attn_shape *sh, int chunk, tp_pool *pool) {
    const cpu_target tg = tu_cpu_target(path);
    const int N = sh->N, H = sh->H, Hkv = sh->Hkv, D = sh->D, group = H / Hkv;
    int32_t *pos = malloc(sizeof *pos * (size_t)N);
    /* three sequences end to end, each starting at pos 0 in the buffer */
    int s1 = N * 2 / 3, s2 = N * 5 / 6;
    for (int t = 0; t < N; t++) pos[t] = t < s1 ? t : t < s2 ? t - s1 : t - s2;
    const float scale = 1.0f / sqrtf((float)D);
    size_t nq = (size_t)N * H * D, nk = (size_t)N * Hkv * D;
    float *q = malloc(sizeof(float) * nq), *k = malloc(sizeof(float) * nk), *v = malloc(sizeof(float) * nk);
    float *o = malloc(sizeof(float) * nq), *o1 = malloc(sizeof(float) * nq);
    double *s = malloc(sizeof(double) * (size_t)N);
    for (size_t i = 0; i < nq; i++) q[i] = rnd_uniform(-2, 2);
    for (size_t i = 0; i < nk; i++) k[i] = rnd_uniform(-2, 2);
    for (size_t i = 0; i < nk; i++) v[i] = rnd_uniform(-1, 1);
    for (int c0 = 0; c0 < N; c0 += chunk) {
        int T = N - c0 < chunk ? N - c0 : chunk;
        attn_causal_ex(&tg, pool, q + (size_t)c0 * H * D, k, v, pos + c0, c0, T, H, Hkv, D, scale,
                       o + (size_t)c0 * H * D);
    }
    attn_causal_ex(&tg, NULL, q, k, v, pos, 0, N, H, Hkv, D, scale, o1);
    assert_memory_equal(o, o1, sizeof(float) * nq);
    double worst = 0;
    for (int t = 0; t < N; t++)
        for (int h = 0; h < H; h++) {
            int kh = h / group, j0 = t - pos[t];
            double mx = -INFINITY, den = 0;
            for (int j = j0; j <= t; j++) {
                double acc = 0;
                for (int d = 0; d < D; d++)
                    acc += (double)q[((size_t)t * H + h) * D + d] * k[((size_t)j * Hkv + kh) * D + d];
                s[j] = acc * scale;
                mx = s[j] > mx ? s[j] : mx;
            }
            for (int j = j0; j <= t; j++) den += exp(s[j] - mx);
            for (int d = 0; d < D; d++) {
                double acc = 0;
                for (int j = j0; j <= t; j++) acc += exp(s[j] - mx) / den * v[((size_t)j * Hkv + kh) * D + d];
                double diff = fabs(o[((size_t)t * H + h) * D + d] - acc);
                if (!(diff <= 1e-5))
                    fail_msg("%s attention D=%d chunk %d: t %d h %d d %d: %.9g vs %.9g", cpu_path_name(path), D,
                             chunk, t, h, d, o[((size_t)t * H + h) * D + d], acc);
                worst = diff > worst ? diff : worst;
            }
        }
    printf("[attn] %-6s N=%d H=%d Hkv=%d D=%d chunk %d: max |d| %.3g\n", cpu_path_name(path), N, H, Hkv,
           D, chunk, worst);
    free(pos); free(q); free(k); free(v); free(o); free(o1); free(s);
}

static void test_attention_paths(void **state) {
    (void)state;
    tp_pool *pool;
    assert_int_equal(tp_create(3, &pool, NULL), CLEF_OK);
    cpu_path paths[CPU_PATH_COUNT];
    int np = tu_cpu_paths(paths);
    const attn_shape a = {160, 4, 2, 24}, b = {200, 8, 2, 64}, c = {150, 2, 2, 256}, d = {90, 4, 1, 17};
    for (int i = 0; i < np; i++) {
        check_attention(paths[i], &a, 160, NULL);
        check_attention(paths[i], &a, 33, pool);
        check_attention(paths[i], &b, 70, pool);
        check_attention(paths[i], &c, 1, pool);
        check_attention(paths[i], &d, 40, pool);
    }
    tp_free(pool);
}

static void test_ops_paths(void **state) {
    (void)state;
    enum { R = 5, N = 203 };
    float x[R * N], w[N], g[R * N], y[R * N], e[R * N];
    for (int i = 0; i < R * N; i++) {
        x[i] = rnd_uniform(-12, 12);
        g[i] = rnd_uniform(-30, 30);
    }
    for (int i = 0; i < N; i++) w[i] = rnd_uniform(0.5f, 1.5f);
    cpu_path paths[CPU_PATH_COUNT];
    int np = tu_cpu_paths(paths);
    for (int p = 0; p < np; p++) {
        const cpu_path path = paths[p];
        op_rmsnorm_ex(path, NULL, y, x, w, N, R, 1e-6f);
        for (int r = 0; r < R; r++) {
            double ss = 0;
            for (int i = 0; i < N; i++) ss += (double)x[r * N + i] * x[r * N + i];
            double sc = 1.0 / sqrt(ss / N + 1e-6);
            for (int i = 0; i < N; i++) assert_true(fabs(y[r * N + i] - x[r * N + i] * sc * w[i]) <= 1e-6 * (1 + fabs(y[r * N + i])));
        }
        memcpy(y, x, sizeof y);
        op_l2norm_ex(path, NULL, y, N, R, 1e-6f);
        for (int r = 0; r < R; r++) {
            double ss = 0;
            for (int i = 0; i < N; i++) ss += (double)x[r * N + i] * x[r * N + i];
            for (int i = 0; i < N; i++) assert_true(fabs(y[r * N + i] - x[r * N + i] / sqrt(ss)) <= 1e-7);
        }
        /* exp over the whole range, incl. underflow and large arguments */
        for (int i = 0; i < R * N; i++) e[i] = (float)i / (R * N) * 200.0f - 110.0f;
        op_exp_ex(path, e, y, R * N);
        for (int i = 0; i < R * N; i++) {
            double want = exp((double)e[i]);
            if (want < 1.2e-38) assert_true(y[i] <= 1.2e-38f);
            else if (want > 3.4e38) continue;
            else if (!(fabs(y[i] - want) <= 3e-7 * want))
                fail_msg("%s exp(%.9g) = %.9g, want %.9g", cpu_path_name(path), e[i], y[i], want);
        }
        memcpy(y, x, sizeof y);
        op_sigmoid_ex(path, NULL, y, R * N);
        for (int i = 0; i < R * N; i++) assert_true(fabs(y[i] - 1 / (1 + exp(-(double)x[i]))) <= 3e-7);
        /* the sigmoid and SiLU over exp's whole range too, where e^−x
         * underflows or passes 2^127 */
        float ones[R * N];
        for (int i = 0; i < R * N; i++) ones[i] = 1.0f;
        memcpy(y, e, sizeof y);
        op_sigmoid_ex(path, NULL, y, R * N);
        for (int i = 0; i < R * N; i++)
            if (!(fabs(y[i] - 1 / (1 + exp(-(double)e[i]))) <= 3e-7))
                fail_msg("%s sigmoid(%.9g) = %.9g", cpu_path_name(path), e[i], y[i]);
        memcpy(y, e, sizeof y);
        op_silu_mul_ex(path, NULL, y, ones, R * N);
        for (int i = 0; i < R * N; i++) {
            double want = e[i] / (1 + exp(-(double)e[i]));
            if (!(fabs(y[i] - want) <= 5e-7 * (1 + fabs(want))))
                fail_msg("%s silu(%.9g) = %.9g, want %.9g", cpu_path_name(path), e[i], y[i], want);
        }
        memcpy(y, x, sizeof y);
        op_silu_mul_ex(path, NULL, y, g, R * N);
        for (int i = 0; i < R * N; i++) {
            double want = x[i] / (1 + exp(-(double)x[i])) * g[i];
            assert_true(fabs(y[i] - want) <= 5e-7 * (1 + fabs(want)));
        }
        memcpy(y, x, sizeof y);
        op_mul_silu_ex(path, NULL, y, g, R * N);
        for (int i = 0; i < R * N; i++) {
            double want = x[i] * g[i] / (1 + exp(-(double)g[i]));
            assert_true(fabs(y[i] - want) <= 5e-7 * (1 + fabs(want)));
        }
        memcpy(y, x, sizeof y);
        op_mul_sigmoid_ex(path, NULL, y, g, R * N);
        for (int i = 0; i < R * N; i++) {
            double want = x[i] / (1 + exp(-(double)g[i]));
            assert_true(fabs(y[i] - want) <= 5e-7 * (1 + fabs(want)));
        }
        printf("[ops] %s: rmsnorm, l2norm, exp, sigmoid, silu products agree\n", cpu_path_name(path));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ops_paths),
        cmocka_unit_test(test_attention_paths),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
