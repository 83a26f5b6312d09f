/*
 * tests/test_kernels_oracle.c — every kernel path end to end on the
 * clef-tiny oracle (../shared/oracle/clef-tiny), with the README's
 * tolerances for what that path computes.
 *
 * Each path this CPU can run is forced with CLEF_CPU (set before the model
 * loads; the model reads it once).  Per file:
 *   F32    hidden states vs `hidden_f32` ≤ 1e-4 per element, logits/probs vs
 *          the top level ≤ 1e-4 / 2e-5 (every path computes f32 here)
 *   BF16   paths with BF16 activations (avx2, avx512): vs
 *          `variants.BF16.llama_cpp` ≤ 0.05 / 0.005;  ref (f32 activations on
 *          dequantized weights): vs `variants.BF16.dequantized_f64` ≤ 1e-4 / 2e-5
 *   Q8_0   paths with int8 activations (avx512 with VNNI): vs
 *          `variants.Q8_0.llama_cpp` ≤ 0.2 / 0.05;  others (f32 activations):
 *          vs `variants.Q8_0.dequantized_f64` ≤ 1e-4 / 2e-5
 * Probabilities are the float64 softmax of the explain logits per question.
 * Also `clef bench --json`'s fields and their consistency (not its speed).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "clef.h"
#include "core/cpu.h"
#include "testutil.h"

#define TINY ORACLE_DIR "/clef-tiny/"
#define MAX_CASES 32

typedef struct ocase {
    const char *req;        /* request text, verbatim (into text) */
    size_t len;
    int max_length;
    json_t *exp;            /* expected.jsonl line */
} ocase;

static char *cases_text;
static ocase cases[MAX_CASES];
static int n_cases;

static int setup(void **state) {
    (void)state;
    cases_text = tu_read_file(TINY "cases.jsonl", NULL);
    char *exp_text = tu_read_file(TINY "expected.jsonl", NULL);
    if (!cases_text || !exp_text) return -1;
    char *save = NULL;
    for (char *line = strtok_r(cases_text, "\n", &save); line && n_cases < MAX_CASES;
         line = strtok_r(NULL, "\n", &save)) {
        char *r = strstr(line, "\"request\":"), *m = strstr(line, "\"max_length\":");
        if (!r || !m) continue;
        ocase *c = &cases[n_cases++];
        c->max_length = atoi(m + strlen("\"max_length\":"));
        c->req = r + strlen("\"request\":");
        char *end = line + strlen(line);
        while (end > c->req && end[-1] != '}') end--;
        c->len = (size_t)(end - 1 - c->req);
    }
    int k = 0;
    for (char *line = strtok_r(exp_text, "\n", &save); line && k < n_cases;
         line = strtok_r(NULL, "\n", &save)) {
        json_error_t je;
        if (!(cases[k++].exp = json_loads(line, 0, &je))) return -1;
    }
    free(exp_text);
    return k == n_cases && n_cases >= 17 ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    for (int i = 0; i < n_cases; i++) json_decref(cases[i].exp);
    free(cases_text);
    return 0;
}

static clef_model *load(const char *path, const char *cpu) {
    setenv("CLEF_CPU", cpu, 1);
    clef_model_params p = clef_model_default_params();
    p.n_threads = 2;
    clef_model *m = NULL;
    clef_error err = {0};
    clef_status st = clef_model_load(path, &p, &m, &err);
    unsetenv("CLEF_CPU");
    if (st != CLEF_OK) fail_msg("CLEF_CPU=%s %s: %s", cpu, path, err.message);
    return m;
}

/* Max |Δlogit| and |Δp| of every question of every case against `which`:
 * NULL = the top-level expectations, else variants.<variant>.<which>. */
static void compare_logits(clef_model *m, const char *variant, const char *which, double *dl,
                           double *dp) {
    *dl = *dp = 0;
    for (int c = 0; c < n_cases; c++) {
        const json_t *eqs = json_object_get(cases[c].exp, "questions");
        if (!eqs) continue; /* the refused case */
        clef_decide_options o = clef_decide_default_options();
        o.max_length = cases[c].max_length;
        o.explain = true;
        clef_decide_result r;
        clef_error err = {0};
        if (clef_decide(m, cases[c].req, cases[c].len, &o, &r, &err) != CLEF_OK) fail_msg("%s", err.message);
        assert_int_equal(r.http_status, 200);
        json_error_t je;
        json_t *got = json_loads(r.body, 0, &je);
        const json_t *gqs = json_object_get(json_object_get(got, "clef"), "questions");
        const json_t *vq = which ? json_object_get(json_object_get(json_object_get(cases[c].exp, "variants"),
                                                                   variant), which) : NULL;
        for (size_t q = 0; q < json_array_size(eqs); q++) {
            const json_t *lg = vq ? json_array_get(json_object_get(vq, "logits"), q)
                                  : json_object_get(json_array_get(eqs, q), "logits");
            const json_t *pr = vq ? json_array_get(json_object_get(vq, "probs"), q)
                                  : json_object_get(json_array_get(eqs, q), "probs");
            const json_t *gl = json_object_get(json_array_get(gqs, q), "logits");
            size_t n = json_array_size(lg);
            assert_int_equal(json_array_size(gl), n);
            double mx = -INFINITY, z = 0;
            for (size_t i = 0; i < n; i++) mx = fmax(mx, json_number_value(json_array_get(gl, i)));
            for (size_t i = 0; i < n; i++) z += exp(json_number_value(json_array_get(gl, i)) - mx);
            for (size_t i = 0; i < n; i++) {
                double g = json_number_value(json_array_get(gl, i));
                *dl = fmax(*dl, fabs(g - json_number_value(json_array_get(lg, i))));
                *dp = fmax(*dp, fabs(exp(g - mx) / z - json_number_value(json_array_get(pr, i))));
            }
        }
        json_decref(got);
        clef_decide_result_free(&r);
    }
}

static double max_hidden_diff(clef_model *m) {
    double worst = 0;
    for (int c = 0; c < n_cases; c++) {
        const json_t *ids = json_object_get(cases[c].exp, "input_ids"), *hid = json_object_get(cases[c].exp, "hidden_f32");
        if (!ids || !hid) continue;
        size_t n = json_array_size(ids), E = (size_t)clef_model_n_embd(m);
        int32_t *v = malloc(n * sizeof *v);
        float *h = malloc(n * E * sizeof *h);
        for (size_t t = 0; t < n; t++) v[t] = (int32_t)json_integer_value(json_array_get(ids, t));
        clef_error err = {0};
        if (clef_forward(m, v, n, h, &err) != CLEF_OK) fail_msg("%s", err.message);
        for (size_t t = 0; t < n; t++)
            for (size_t e = 0; e < E; e++) {
                double d = fabs(h[t * E + e] - json_number_value(json_array_get(json_array_get(hid, t), e)));
                if (!(d <= worst)) worst = d;
            }
        free(v);
        free(h);
    }
    return worst;
}

typedef struct path_run {
    const char *cpu;
    bool bf16_act;   /* BF16 weights meet BF16-rounded activations */
    bool int8_act;   /* Q8_0 weights meet int8 activations         */
} path_run;

static int usable(path_run *out) {
    cpu_features f;
    cpu_detect(&f);
    int n = 0;
    out[n++] = (path_run){"ref", false, false};
    if (cpu_path_supported(&f, CPU_PATH_AVX2)) out[n++] = (path_run){"avx2", true, true};
    else printf("[oracle] skip avx2: not supported here\n");
    cpu_target t;
    clef_error err = {0};
    if (cpu_choose("avx2+vnni", &f, &t, &err) == CLEF_OK) out[n++] = (path_run){"avx2+vnni", true, true};
    else printf("[oracle] skip avx2+vnni: no vpdpbusd on ymm here\n");
    if (cpu_path_supported(&f, CPU_PATH_NEON)) out[n++] = (path_run){"neon", true, f.neon_dot};
    else printf("[oracle] skip neon: not supported here\n");
    if (cpu_path_supported(&f, CPU_PATH_AVX512)) out[n++] = (path_run){"avx512", true, true};
    else printf("[oracle] skip avx512: not supported here\n");
    if (cpu_path_supported(&f, CPU_PATH_AMX)) out[n++] = (path_run){"amx", true, true};
    else printf("[oracle] skip amx: not supported here\n");
    return n;
}

static void check(double dl, double dp, double tl, double tp, const char *what) {
    printf("[oracle] %-46s max |dlogit| %.3g (tol %g), max |dp| %.3g (tol %g)\n", what, dl, tl, dp, tp);
    if (!(dl <= tl) || !(dp <= tp)) fail_msg("%s: |dlogit| %g |dp| %g beyond %g / %g", what, dl, dp, tl, tp);
}

static void test_f32_file(void **state) {
    (void)state;
    path_run pr[6];
    int n = usable(pr);
    for (int i = 0; i < n; i++) {
        clef_model *m = load(TINY "clef-tiny-a-F32.gguf", pr[i].cpu);
        char what[96];
        double dh = max_hidden_diff(m), dl, dp;
        printf("[oracle] %s F32: max |dhidden| %.3g (tol 1e-4)\n", pr[i].cpu, dh);
        assert_true(dh <= 1e-4);
        compare_logits(m, NULL, NULL, &dl, &dp);
        snprintf(what, sizeof what, "%s F32 vs top level", pr[i].cpu);
        check(dl, dp, 1e-4, 2e-5, what);
        clef_model_free(m);
    }
}

static void test_bf16_file(void **state) {
    (void)state;
    path_run pr[6];
    int n = usable(pr);
    for (int i = 0; i < n; i++) {
        clef_model *m = load(TINY "clef-tiny-a-BF16.gguf", pr[i].cpu);
        clef_model_info info;
        clef_model_get_info(m, &info);
        assert_string_equal(info.precision, pr[i].bf16_act ? "bf16" : "f32");
        char what[96];
        double dl, dp;
        if (pr[i].bf16_act) {
            compare_logits(m, "BF16", "llama_cpp", &dl, &dp);
            snprintf(what, sizeof what, "%s BF16 (bf16 act.) vs variants.BF16.llama_cpp", pr[i].cpu);
            check(dl, dp, 0.05, 0.005, what);
        } else {
            compare_logits(m, "BF16", "dequantized_f64", &dl, &dp);
            snprintf(what, sizeof what, "%s BF16 (f32 act.) vs dequantized_f64", pr[i].cpu);
            check(dl, dp, 1e-4, 2e-5, what);
        }
        clef_model_free(m);
    }
}

static void test_q8_0_file(void **state) {
    (void)state;
    path_run pr[6];
    int n = usable(pr);
    for (int i = 0; i < n; i++) {
        clef_model *m = load(TINY "clef-tiny-a-Q8_0.gguf", pr[i].cpu);
        clef_model_info info;
        clef_model_get_info(m, &info);
        assert_string_equal(info.precision, pr[i].int8_act ? "int8" : "f32");
        char what[96];
        double dl, dp;
        if (pr[i].int8_act) {
            compare_logits(m, "Q8_0", "llama_cpp", &dl, &dp);
            snprintf(what, sizeof what, "%s Q8_0 (int8 act.) vs variants.Q8_0.llama_cpp", pr[i].cpu);
            check(dl, dp, 0.2, 0.05, what);
        } else {
            compare_logits(m, "Q8_0", "dequantized_f64", &dl, &dp);
            snprintf(what, sizeof what, "%s Q8_0 (f32 act.) vs dequantized_f64", pr[i].cpu);
            check(dl, dp, 1e-4, 2e-5, what);
        }
        clef_model_free(m);
    }
}

/* A forced path the CPU cannot run, or an unknown one, refuses the load by name. */
static void test_forced_path_refusals(void **state) {
    (void)state;
    clef_model_params p = clef_model_default_params();
    clef_model *m = NULL;
    clef_error err = {0};
    setenv("CLEF_CPU", "sse9", 1);
    assert_int_equal(clef_model_load(TINY "clef-tiny-a-F32.gguf", &p, &m, &err), CLEF_ERR_INVALID_ARG);
    assert_non_null(strstr(err.message, "sse9"));
    assert_null(m);
    cpu_features f;
    cpu_detect(&f);
    if (!cpu_path_supported(&f, CPU_PATH_AMX)) {
        setenv("CLEF_CPU", "amx", 1);
        assert_int_equal(clef_model_load(TINY "clef-tiny-a-F32.gguf", &p, &m, &err), CLEF_ERR_UNSUPPORTED);
        assert_non_null(strstr(err.message, "amx"));
    }
    unsetenv("CLEF_CPU");
    assert_int_equal(clef_model_load(TINY "clef-tiny-a-F32.gguf", &p, &m, &err), CLEF_OK);
    clef_model_info info;
    clef_model_get_info(m, &info);
    printf("[oracle] default kernels: %s\n", info.kernels);
    assert_string_equal(info.weight_type, "F32");
    assert_true(info.matrix_params > 0 && info.matrix_bytes == 4 * info.matrix_params);
    clef_model_free(m);
}

/* `clef bench --json`: one object per prompt size with the documented
 * fields, consistent with each other (no speed is asserted). */
static void test_bench_cli(void **state) {
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "CLEF_CPU=ref %s bench -m " TINY "clef-tiny-a-BF16.gguf -p 7,40 -t 2 -r 2 --json "
             "--peak-seconds 0.05", tu_clef_bin());
    int status;
    char *out = tu_run(cmd, &status);
    assert_int_equal(status, 0);
    int lines = 0;
    const int64_t sizes[] = {7, 40};
    double last_peak = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n"), lines++) {
        json_error_t je;
        json_t *o = json_loads(line, 0, &je);
        if (!o) fail_msg("not JSON: %s", line);
        assert_true(lines < 2);
        assert_int_equal(json_integer_value(json_object_get(o, "n_tokens")), sizes[lines]);
        assert_int_equal(json_integer_value(json_object_get(o, "threads")), 2);
        assert_string_equal(json_string_value(json_object_get(o, "weight_type")), "BF16");
        assert_string_equal(json_string_value(json_object_get(o, "kernels")), "ref");
        assert_string_equal(json_string_value(json_object_get(o, "precision")), "f32");
        double tps = json_number_value(json_object_get(o, "tokens_per_second"));
        double sec = json_number_value(json_object_get(o, "seconds"));
        double gf = json_number_value(json_object_get(o, "gflops")), peak = json_number_value(json_object_get(o, "peak_gflops"));
        assert_true(tps > 0 && sec > 0 && gf > 0 && peak > 0);
        assert_true(peak >= last_peak); /* re-measured after each size, the higher kept */
        last_peak = peak;
        assert_true(fabs(tps * sec - (double)sizes[lines]) < 1e-3 * (double)sizes[lines]);
        assert_true(fabs(json_number_value(json_object_get(o, "peak_fraction")) - gf / peak) < 1e-3);
        assert_true(json_integer_value(json_object_get(o, "peak_rss_bytes")) > 0);
        const json_t *st = json_object_get(o, "stage_seconds");
        double sum = 0;
        const char *keys[] = {"matmul", "attention", "delta_rule", "other", "head"};
        for (int k = 0; k < 5; k++) {
            assert_true(json_is_number(json_object_get(st, keys[k])));
            sum += json_number_value(json_object_get(st, keys[k]));
        }
        assert_true(fabs(sum - sec) < 1e-5 + 1e-3 * sec);
        /* matmul FLOPs from the shapes: 2·in·out per token over the layer matrices */
        const json_t *fl = json_object_get(o, "flop");
        assert_true(json_number_value(json_object_get(fl, "matmul")) > 0);
        json_decref(o);
    }
    assert_int_equal(lines, 2);
    free(out);
    snprintf(cmd, sizeof cmd, "%s bench -m " TINY "clef-tiny-a-BF16.gguf -p 12,abc 2>&1", tu_clef_bin());
    out = tu_run(cmd, &status);
    assert_int_equal(status, 2);
    assert_non_null(strstr(out, "abc"));
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forced_path_refusals),
        cmocka_unit_test(test_f32_file),
        cmocka_unit_test(test_bf16_file),
        cmocka_unit_test(test_q8_0_file),
        cmocka_unit_test(test_bench_cli),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
