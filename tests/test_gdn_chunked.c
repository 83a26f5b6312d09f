/*
 * tests/test_gdn_chunked.c — the chunked gated delta rule (and the
 * vectorised conv) against the sequential reference kernels.
 *
 * For every path this CPU runs: gdn_delta_rule_ex vs gdn_delta_rule (the
 * sequential f32 arbiter) and vs a double-precision recurrence written here,
 * on batches that hold several sequences (resets at pos 0 inside a call and
 * inside a 64-token chunk), calls of several sizes that carry the state S,
 * a sequence that continues from a position that is not a chunk multiple,
 * strong and weak decay, and head sizes 16 x 8 and 128 x 128.
 * Tolerance: |Δo| ≤ 2e-5·(1 + |o|) and |ΔS| ≤ 2e-5·(1 + |S|) — f32 rounding of
 * two summation orders (measured ~1e-6).
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
#include "kernels/gdn.h"
#include "kernels/ops.h"

static uint64_t rng_state = 0x853C49E6748FEA9Bull;
static float rnd_uniform(float lo, float hi) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return lo + (hi - lo) * (float)((rng_state >> 16) & 0xffffff) / 16777216.0f;
}

typedef struct shape {
    int N, Hk, Hv, Dk, Dv;
    float decay;         /* scale of the log decays: larger = faster forgetting */
    int start;           /* position of the first token (a continued sequence)  */
    int split;           /* tokens >= split start a second sequence at pos 0    */
} shape;

/* The recurrence of the spec in double: S ← e^g S; δ = β(v − Sᵀk); S += kδᵀ; o = Sᵀq/√Dk.
 * S0 (or NULL: zero) is the state before token 0; Sout the state at the end. */
static void ref_delta(const shape *sh, const float *qkv, int ld, const float *g, const float *beta,
                      const int32_t *pos, const float *S0, double *o, double *Sout) {
    const int Dk = sh->Dk, Dv = sh->Dv, Hk = sh->Hk, Hv = sh->Hv;
    for (int h = 0; h < Hv; h++) {
        double *S = Sout + (size_t)h * Dk * Dv;
        for (int i = 0; i < Dk * Dv; i++) S[i] = S0 ? S0[(size_t)h * Dk * Dv + i] : 0.0;
        for (int t = 0; t < sh->N; t++) {
            const float *qt = qkv + t * ld + (h % Hk) * Dk, *kt = qt + Hk * Dk;
            const float *vt = qkv + t * ld + 2 * Hk * Dk + h * Dv;
            if (pos[t] == 0) memset(S, 0, sizeof *S * (size_t)Dk * Dv);
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
}

static double rel_err(const float *got, const double *want, size_t n) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(got[i] - want[i]) / (1.0 + fabs(want[i]));
        if (!(d <= worst)) worst = d;
    }
    return worst;
}

static void check_shape(cpu_path path, const shape *sh, const int *calls, int n_calls, tp_pool *pool) {
    const cpu_target tg = tu_cpu_target(path);
    const int N = sh->N, Hk = sh->Hk, Hv = sh->Hv, Dk = sh->Dk, Dv = sh->Dv;
    const int ld = 2 * Hk * Dk + Hv * Dv;
    const size_t ns = (size_t)Hv * Dk * Dv, no = (size_t)N * Hv * Dv;
    int32_t *pos = malloc(sizeof *pos * (size_t)N);
    for (int t = 0; t < N; t++) pos[t] = t < sh->split ? sh->start + t : t - sh->split;
    float *qkv = malloc(sizeof(float) * (size_t)N * ld), *g = malloc(sizeof(float) * (size_t)N * Hv);
    float *beta = malloc(sizeof(float) * (size_t)N * Hv);
    for (int i = 0; i < N * ld; i++) qkv[i] = rnd_uniform(-1, 1);
    for (int t = 0; t < N; t++) op_l2norm(qkv + t * ld, Dk, 2 * Hk, 1e-6f);
    for (int i = 0; i < N * Hv; i++) {
        g[i] = -op_softplus1(rnd_uniform(-4, 1)) * rnd_uniform(0.05f, 1.0f) * sh->decay;
        beta[i] = op_sigmoid1(rnd_uniform(-3, 3));
    }
    float *S0 = malloc(sizeof(float) * ns), *Sf = malloc(sizeof(float) * ns), *Ss = malloc(sizeof(float) * ns);
    for (size_t i = 0; i < ns; i++) S0[i] = sh->start ? rnd_uniform(-0.5f, 0.5f) : NAN; /* NaN: must be reset */
    memcpy(Sf, S0, sizeof(float) * ns);
    memcpy(Ss, S0, sizeof(float) * ns);
    float *of = malloc(sizeof(float) * no), *os = malloc(sizeof(float) * no);
    double *ref = malloc(sizeof(double) * no), *Sref = malloc(sizeof(double) * ns);
    const float *q = qkv, *k = qkv + Hk * Dk, *v = qkv + 2 * Hk * Dk;
    for (int c0 = 0, ci = 0; c0 < N; ci++) {
        int T = calls[ci % n_calls] < N - c0 ? calls[ci % n_calls] : N - c0;
        gdn_delta_rule_ex(&tg, pool, q + c0 * ld, k + c0 * ld, v + c0 * ld, ld, g + c0 * Hv,
                          beta + c0 * Hv, pos + c0, T, Hk, Hv, Dk, Dv, Sf, of + (size_t)c0 * Hv * Dv);
        gdn_delta_rule(pool, q + c0 * ld, k + c0 * ld, v + c0 * ld, ld, g + c0 * Hv, beta + c0 * Hv,
                       pos + c0, T, Hk, Hv, Dk, Dv, Ss, os + (size_t)c0 * Hv * Dv);
        c0 += T;
    }
    ref_delta(sh, qkv, ld, g, beta, pos, sh->start ? S0 : NULL, ref, Sref);
    double eo = rel_err(of, ref, no), es = rel_err(Sf, Sref, ns), eseq = rel_err(os, ref, no);
    double dfs = 0;
    for (size_t i = 0; i < no; i++) {
        double d = fabs((double)of[i] - os[i]) / (1.0 + fabs((double)os[i]));
        if (!(d <= dfs)) dfs = d;
    }
    printf("[gdn] %-6s N=%d Dk=%d Dv=%d decay %.1f start %d calls %d..: o vs f64 %.2g, S %.2g; "
           "sequential f32 vs f64 %.2g; chunked vs sequential %.2g\n",
           cpu_path_name(path), N, Dk, Dv, sh->decay, sh->start, calls[0], eo, es, eseq, dfs);
    if (!(eo <= 2e-5) || !(es <= 2e-5) || !(dfs <= 2e-5))
        fail_msg("%s: chunked delta rule off by %g (o) / %g (S) / %g (vs sequential)", cpu_path_name(path),
                 eo, es, dfs);
    free(pos); free(qkv); free(g); free(beta); free(S0); free(Sf); free(Ss);
    free(of); free(os); free(ref); free(Sref);
}

static void test_delta_chunked(void **state) {
    (void)state;
    tp_pool *pool;
    assert_int_equal(tp_create(3, &pool, NULL), CLEF_OK);
    cpu_path paths[CPU_PATH_COUNT];
    int np = tu_cpu_paths(paths);
    const shape small = {.N = 300, .Hk = 2, .Hv = 4, .Dk = 16, .Dv = 8, .decay = 1, .start = 0, .split = 230};
    const shape fast = {.N = 150, .Hk = 2, .Hv = 4, .Dk = 16, .Dv = 8, .decay = 30, .start = 0, .split = 150};
    const shape cont = {.N = 200, .Hk = 1, .Hv = 2, .Dk = 32, .Dv = 48, .decay = 0.3f, .start = 41, .split = 170};
    const shape big = {.N = 160, .Hk = 1, .Hv = 2, .Dk = 128, .Dv = 128, .decay = 1, .start = 0, .split = 100};
    const int whole[] = {10000}, odd[] = {13, 77, 1}, ones[] = {1}, c512[] = {512};
    for (int i = 0; i < np; i++) {
        check_shape(paths[i], &small, whole, 1, pool);
        check_shape(paths[i], &small, odd, 3, NULL);
        check_shape(paths[i], &small, ones, 1, pool);
        check_shape(paths[i], &fast, whole, 1, pool);
        check_shape(paths[i], &cont, odd, 3, pool);
        check_shape(paths[i], &big, c512, 1, pool);
    }
    tp_free(pool);
}

/* The vectorised conv: same taps in the same order as gdn_conv1d_silu. */
static void test_conv_paths(void **state) {
    (void)state;
    enum { T = 37, C = 70, K = 4 };
    float hist[(K - 1 + T) * C], w[C * K], a[T * C], b[T * C];
    int32_t pos[T];
    for (int t = 0; t < T; t++) pos[t] = t < 20 ? t + 1 : t - 20; /* continued, then a new sequence */
    for (int i = 0; i < (K - 1 + T) * C; i++) hist[i] = rnd_uniform(-2, 2);
    for (int i = 0; i < C * K; i++) w[i] = rnd_uniform(-1, 1);
    cpu_path paths[CPU_PATH_COUNT];
    int np = tu_cpu_paths(paths);
    gdn_conv1d_silu(NULL, hist, w, pos, T, C, K, a);
    for (int i = 0; i < np; i++) {
        gdn_conv1d_silu_ex(paths[i], NULL, hist, w, pos, T, C, K, b);
        for (int j = 0; j < T * C; j++)
            if (!(fabsf(a[j] - b[j]) <= 1e-6f * (1 + fabsf(a[j]))))
                fail_msg("%s conv: out[%d] = %.9g, reference %.9g", cpu_path_name(paths[i]), j, b[j], a[j]);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv_paths),
        cmocka_unit_test(test_delta_chunked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
