/*
 * tests/test_qwen35_clef.c — the backbone of the tiny Clef model (arch
 * `clef`) against ../shared/oracle/clef-tiny/expected.jsonl.
 *
 * F32 file: every case's `hidden_f32` (llama.cpp result_norm) within 1e-4 per
 * element, the oracle README's F32 tolerance.  BF16 / Q8_0 files: this
 * runtime dequantizes weights exactly and keeps activations in f32, so their
 * hidden states differ from the F32 ones only by the weights' rounding; the
 * bounds below are loose (≈3-4x what was measured: BF16 0.026, Q8_0 0.091)
 * because random networks amplify weight noise — the head's logits against
 * `variants.*.dequantized_f64` check these paths precisely.  The quantized
 * files run all cases as one batch, the F32 file one case at a time.
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
#include "model/model.h"
#include "testutil.h"

#define F32_TOL 1e-4
#define BF16_TOL 0.1
#define Q8_0_TOL 0.3
#define MAX_CASES 32

typedef struct ccase {
    char id[64];
    int32_t *ids;
    int64_t n;
    float *hidden;      /* [n][E] expected (F32 file) */
} ccase;

static int n_cases;
static ccase cases[MAX_CASES];
static int n_embd;

static int read_cases(void **state) {
    (void)state;
    size_t len;
    char *text = tu_read_file(ORACLE_DIR "/clef-tiny/expected.jsonl", &len);
    if (!text) return -1;
    for (char *line = text, *nl; *line && n_cases < MAX_CASES; line = nl + 1) {
        nl = strchr(line, '\n');
        if (!nl) nl = line + strlen(line);
        json_t *root = json_loadb(line, (size_t)(nl - line), 0, NULL);
        json_t *ids = json_object_get(root, "input_ids"), *hid = json_object_get(root, "hidden_f32");
        if (root && ids && hid) {
            ccase *c = &cases[n_cases++];
            snprintf(c->id, sizeof c->id, "%s", json_string_value(json_object_get(root, "id")));
            c->n = (int64_t)json_array_size(ids);
            n_embd = (int)json_array_size(json_array_get(hid, 0));
            c->ids = malloc((size_t)c->n * sizeof *c->ids);
            c->hidden = malloc((size_t)(c->n * n_embd) * sizeof *c->hidden);
            for (int64_t t = 0; t < c->n; t++) {
                c->ids[t] = (int32_t)json_integer_value(json_array_get(ids, (size_t)t));
                json_t *row = json_array_get(hid, (size_t)t);
                for (int e = 0; e < n_embd; e++)
                    c->hidden[t * n_embd + e] = (float)json_number_value(json_array_get(row, (size_t)e));
            }
        }
        json_decref(root);
        if (!*nl) break;
    }
    free(text);
    return n_cases >= 17 ? 0 : -1;
}

static int free_cases(void **state) {
    (void)state;
    for (int i = 0; i < n_cases; i++) {
        free(cases[i].ids);
        free(cases[i].hidden);
    }
    return 0;
}

static clef_model *load(const char *file) {
    char path[256];
    snprintf(path, sizeof path, ORACLE_DIR "/clef-tiny/%s", file);
    clef_model_params p = clef_model_default_params();
    p.n_threads = 2;
    clef_model *m = NULL;
    clef_error err = {0};
    if (clef_model_load(path, &p, &m, &err) != CLEF_OK) fail_msg("load %s: %s", path, err.message);
    assert_string_equal(clef_model_arch(m), "clef");
    assert_int_equal(clef_model_n_embd(m), n_embd);
    return m;
}

static double max_abs_diff(const float *a, const float *b, int64_t n) {
    double m = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) m = d;
    }
    return m;
}

static void test_f32(void **state) {
    (void)state;
    clef_model *m = load("clef-tiny-a-F32.gguf");
    assert_false(model_backbone(m)->output_tied);
    double worst = 0.0;
    for (int i = 0; i < n_cases; i++) {
        ccase *c = &cases[i];
        float *h = malloc((size_t)(c->n * n_embd) * sizeof *h);
        clef_error err = {0};
        if (clef_forward(m, c->ids, (size_t)c->n, h, &err) != CLEF_OK) fail_msg("%s: %s", c->id, err.message);
        double d = max_abs_diff(h, c->hidden, c->n * n_embd);
        printf("[clef-tiny F32] %-28s T=%-5lld max|dhidden| %.3g\n", c->id, (long long)c->n, d);
        if (d > F32_TOL) fail_msg("%s: max |dhidden| %g > %g", c->id, d, F32_TOL);
        worst = d > worst ? d : worst;
        free(h);
    }
    printf("[clef-tiny F32] all cases: max|dhidden| %.3g (tolerance %g)\n", worst, F32_TOL);
    clef_model_free(m);
}

static void check_variant(const char *file, const char *label, double tol) {
    clef_model *m = load(file);
    qwen35_seq seqs[MAX_CASES];
    for (int i = 0; i < n_cases; i++)
        seqs[i] = (qwen35_seq){cases[i].ids, cases[i].n, malloc((size_t)(cases[i].n * n_embd) * sizeof(float))};
    clef_error err = {0};
    if (model_forward_batch(m, seqs, n_cases, &err) != CLEF_OK) fail_msg("%s: %s", label, err.message);
    double worst = 0.0, sum2 = 0.0;
    int64_t count = 0;
    for (int i = 0; i < n_cases; i++) {
        double d = max_abs_diff(seqs[i].hidden, cases[i].hidden, cases[i].n * n_embd);
        worst = d > worst ? d : worst;
        for (int64_t j = 0; j < cases[i].n * n_embd; j++) {
            double e = (double)seqs[i].hidden[j] - cases[i].hidden[j];
            sum2 += e * e;
        }
        count += cases[i].n * n_embd;
        free(seqs[i].hidden);
    }
    printf("[clef-tiny %s] vs F32 hidden: max|d| %.3g, rms %.3g (bound %g)\n", label, worst,
           sqrt(sum2 / (double)count), tol);
    assert_true(worst <= tol);
    assert_true(worst > 0.0); /* the file really holds other weights */
    clef_model_free(m);
}

static void test_bf16(void **state) {
    (void)state;
    check_variant("clef-tiny-a-BF16.gguf", "BF16", BF16_TOL);
}

static void test_q8_0(void **state) {
    (void)state;
    check_variant("clef-tiny-a-Q8_0.gguf", "Q8_0", Q8_0_TOL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f32),
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_q8_0),
    };
    return cmocka_run_group_tests(tests, read_cases, free_cases);
}
