/*
 * tests/test_decide.c — clef_decide end to end against the clef-tiny oracle.
 *
 * For each weight variant (F32, BF16, Q8_0) and each case of
 * ../shared/oracle/clef-tiny/cases.jsonl (request text verbatim), the whole
 * pipeline runs: validation, encoding, backbone, head, answers.  The
 * expectations and tolerances are the oracle README's:
 *   F32  → top-level logits/probs: |Δlogit| ≤ 1e-4, |Δp| ≤ 2e-5
 *   BF16 → top-level (F32) logits/probs, any kernels: 0.1 / 0.02
 *   Q8_0 → top-level (F32) logits/probs, any kernels: 0.5 / 0.05
 * and, with the reference kernels (CLEF_CPU=ref: f32 activations on the
 * dequantized weights), the tight F32 tolerances against
 * variants.<type>.dequantized_f64.  Answers are checked with the README's
 * derived tolerances (confidence 2·tol_p, score n(n−1)·tol_p, ...).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clef.h"
#include "testutil.h"

#define TINY ORACLE_DIR "/clef-tiny/"

typedef struct tolerance {
    double logit, p;
} tolerance;

typedef struct oracle_case {
    const char *raw_request;  /* points into the cases line buffer */
    size_t raw_len;
    int max_length;
    json_t *expected;         /* the expected.jsonl line */
} oracle_case;

typedef struct oracle_set {
    char *cases_text;
    json_t *expected[32];
    oracle_case cases[32];
    size_t n;
} oracle_set;

/* The request text of a cases.jsonl line, byte for byte: everything after
 * `"request":` up to the line's final `}`. */
static int split_case_line(char *line, oracle_case *c) {
    char *r = strstr(line, "\"request\":");
    char *m = strstr(line, "\"max_length\":");
    if (!r || !m) return -1;
    c->max_length = atoi(m + strlen("\"max_length\":"));
    c->raw_request = r + strlen("\"request\":");
    char *end = line + strlen(line);
    while (end > c->raw_request && end[-1] != '}') end--;
    c->raw_len = (size_t)(end - 1 - c->raw_request);
    return 0;
}

static int load_oracle(void **state) {
    oracle_set *s = calloc(1, sizeof *s);
    s->cases_text = tu_read_file(TINY "cases.jsonl", NULL);
    char *exp_text = tu_read_file(TINY "expected.jsonl", NULL);
    if (!s->cases_text || !exp_text) return -1;
    char *save = NULL;
    for (char *line = strtok_r(s->cases_text, "\n", &save); line && s->n < 32;
         line = strtok_r(NULL, "\n", &save)) {
        if (split_case_line(line, &s->cases[s->n]) == 0) s->n++;
    }
    size_t k = 0;
    for (char *line = strtok_r(exp_text, "\n", &save); line && k < s->n;
         line = strtok_r(NULL, "\n", &save)) {
        json_error_t je;
        s->expected[k] = json_loads(line, 0, &je);
        s->cases[k].expected = s->expected[k];
        if (!s->expected[k]) return -1;
        k++;
    }
    free(exp_text);
    if (k != s->n || s->n < 18) return -1;
    *state = s;
    return 0;
}

static int free_oracle(void **state) {
    oracle_set *s = *state;
    for (size_t i = 0; i < s->n; i++) json_decref(s->expected[i]);
    free(s->cases_text);
    free(s);
    return 0;
}

typedef struct maxdiff {
    double logit, p;
} maxdiff;

static double num(const json_t *v) { return json_number_value(v); }

/* Compare one question's explain logits and answer with the oracle. */
static void check_question(const json_t *eq, const json_t *gq, const json_t *exp_ans,
                           const json_t *got_ans, const json_t *exp_logits,
                           const json_t *exp_probs, tolerance tol, maxdiff *md) {
    const json_t *glogits = json_object_get(gq, "logits");
    size_t n = json_array_size(exp_logits);
    assert_int_equal(json_array_size(glogits), n);
    double margin = num(json_object_get(eq, "top2_margin"));
    /* Probabilities from the got logits (float64 softmax) vs oracle probs. */
    double mx = -INFINITY, z = 0;
    for (size_t i = 0; i < n; i++) mx = fmax(mx, num(json_array_get(glogits, i)));
    for (size_t i = 0; i < n; i++) z += exp(num(json_array_get(glogits, i)) - mx);
    for (size_t i = 0; i < n; i++) {
        double dl = fabs(num(json_array_get(glogits, i)) - num(json_array_get(exp_logits, i)));
        double p = exp(num(json_array_get(glogits, i)) - mx) / z;
        double dp = fabs(p - num(json_array_get(exp_probs, i)));
        md->logit = fmax(md->logit, dl);
        md->p = fmax(md->p, dp);
        assert_true(dl <= tol.logit);
        assert_true(dp <= tol.p);
    }
    /* Answers are checked against the F32 response only; a variant's
     * expectations are logits and probabilities. */
    if (!exp_ans) return;
    const char *type = json_string_value(json_object_get(exp_ans, "type"));
    assert_string_equal(type, json_string_value(json_object_get(got_ans, "type")));
    if (!strcmp(type, "noul")) {
        assert_true(fabs(num(json_object_get(got_ans, "noul")) -
                         num(json_object_get(exp_ans, "noul"))) <= tol.p);
        assert_int_equal(json_object_size(got_ans), 2);
        return;
    }
    const json_t *ep = json_object_get(exp_ans, "probabilities");
    const json_t *gp = json_object_get(got_ans, "probabilities");
    assert_int_equal(json_object_size(ep), json_object_size(gp));
    /* Same keys in the same (request) order. */
    void *ei = json_object_iter((json_t *)ep), *gi = json_object_iter((json_t *)gp);
    for (; ei && gi; ei = json_object_iter_next((json_t *)ep, ei),
                     gi = json_object_iter_next((json_t *)gp, gi)) {
        assert_string_equal(json_object_iter_key(ei), json_object_iter_key(gi));
        assert_true(fabs(num(json_object_iter_value(ei)) - num(json_object_iter_value(gi))) <=
                    tol.p);
    }
    double nn = (double)n;
    if (!strcmp(type, "choice")) {
        if (margin > 2 * tol.p)
            assert_string_equal(json_string_value(json_object_get(exp_ans, "choice")),
                                json_string_value(json_object_get(got_ans, "choice")));
        assert_true(fabs(num(json_object_get(got_ans, "confidence")) -
                         num(json_object_get(exp_ans, "confidence"))) <= 2 * tol.p + 1e-12);
    } else {
        assert_true(fabs(num(json_object_get(got_ans, "score")) -
                         num(json_object_get(exp_ans, "score"))) <=
                    nn * (nn - 1) / 2 * tol.p * 2 + 1e-12);
        if (margin > 2 * tol.p)
            assert_true(fabs(num(json_object_get(got_ans, "confidence")) -
                             num(json_object_get(exp_ans, "confidence"))) <=
                        4 * (nn - 1) * tol.p + 1e-12);
        assert_true(json_equal(json_object_get(got_ans, "legend"),
                               json_object_get(exp_ans, "legend")));
    }
}

/* Run every case on one model file; `variant` NULL compares with the
 * top-level expectations, else with variants.<variant>.dequantized_f64. */
static void run_file(const oracle_set *s, const char *file, const char *variant,
                     tolerance tol) {
    clef_error err = {0};
    clef_model *model = NULL;
    clef_model_params mp = clef_model_default_params();
    mp.n_threads = 2;
    if (clef_model_load(file, &mp, &model, &err) != CLEF_OK) fail_msg("%s", err.message);
    maxdiff md = {0, 0};
    for (size_t c = 0; c < s->n; c++) {
        const oracle_case *oc = &s->cases[c];
        clef_decide_options o = clef_decide_default_options();
        o.max_length = oc->max_length;
        o.explain = true;
        clef_decide_result r;
        if (clef_decide(model, oc->raw_request, oc->raw_len, &o, &r, &err) != CLEF_OK)
            fail_msg("case %zu: %s", c, err.message);
        json_error_t je;
        json_t *got = json_loads(r.body, 0, &je);
        assert_non_null(got);
        const json_t *error = json_object_get(oc->expected, "error");
        if (error) {
            assert_int_equal(r.http_status, json_integer_value(json_object_get(error, "http_status")));
            assert_true(json_equal(got, json_object_get(error, "http_body")));
        } else {
            assert_int_equal(r.http_status, 200);
            const json_t *clef = json_object_get(got, "clef");
            assert_true(json_equal(json_object_get(clef, "input_ids"),
                                   json_object_get(oc->expected, "input_ids")));
            const json_t *resp = json_object_get(oc->expected, "response");
            assert_true(json_equal(json_object_get(got, "usage"), json_object_get(resp, "usage")));
            const json_t *eqs = json_object_get(oc->expected, "questions");
            const json_t *vq = NULL;
            if (variant)
                vq = json_object_get(json_object_get(json_object_get(oc->expected, "variants"),
                                                     variant), "dequantized_f64");
            for (size_t q = 0; q < json_array_size(eqs); q++) {
                const json_t *eq = json_array_get(eqs, q);
                const char *id = json_string_value(json_object_get(eq, "id"));
                const json_t *src = vq ? vq : eq;
                const json_t *lg = json_object_get(src, "logits"), *pr = json_object_get(src, "probs");
                if (vq) {
                    lg = json_array_get(lg, q);
                    pr = json_array_get(pr, q);
                }
                check_question(eq, json_array_get(json_object_get(clef, "questions"), q),
                               vq ? NULL : json_object_get(json_object_get(resp, "answers"), id),
                               json_object_get(json_object_get(got, "answers"), id), lg, pr, tol,
                               &md);
            }
        }
        json_decref(got);
        clef_decide_result_free(&r);
    }
    printf("# %s vs %s: max |dlogit| %.3g, max |dp| %.3g\n", file,
           variant ? variant : "F32 expectations", md.logit, md.p);
    clef_model_free(model);
}

static void test_f32(void **state) {
    run_file(*state, TINY "clef-tiny-a-F32.gguf", NULL, (tolerance){1e-4, 2e-5});
}

static void test_bf16_any_kernels(void **state) {
    run_file(*state, TINY "clef-tiny-a-BF16.gguf", NULL, (tolerance){0.1, 0.02});
}

static void test_q8_0_any_kernels(void **state) {
    run_file(*state, TINY "clef-tiny-a-Q8_0.gguf", NULL, (tolerance){0.5, 0.05});
}

/* The reference kernels keep activations in f32: the F32 tolerances hold
 * against exact math on the dequantized weights. */
static void test_reference_kernels_dequantized(void **state) {
    setenv("CLEF_CPU", "ref", 1);
    run_file(*state, TINY "clef-tiny-a-BF16.gguf", "BF16", (tolerance){1e-4, 2e-5});
    run_file(*state, TINY "clef-tiny-a-Q8_0.gguf", "Q8_0", (tolerance){1e-4, 2e-5});
    unsetenv("CLEF_CPU");
}

/* The CLI prints the server's body and tells success from refusal by its
 * exit status. */
static void test_cli(void **state) {
    (void)state;
    char cmd[1024];
    int st = -1;
    snprintf(cmd, sizeof cmd, "%s decide -m " TINY "clef-tiny-a-F32.gguf < examples/request.json",
             tu_clef_bin());
    char *out = tu_run(cmd, &st);
    assert_non_null(out);
    assert_int_equal(st, 0);
    json_error_t je;
    json_t *v = json_loads(out, 0, &je);
    assert_non_null(v);
    assert_int_equal(json_object_size(json_object_get(v, "answers")), 3);
    assert_string_equal(json_string_value(json_object_get(v, "model")), "clef-random-tiny-a");
    json_decref(v);
    free(out);

    snprintf(cmd, sizeof cmd,
             "echo '{\"model\":\"m\",\"state\":\"x\",\"questions\":{\"q\":{\"type\":\"poll\"}}}'"
             " | %s decide -m " TINY "clef-tiny-a-F32.gguf 2>/dev/null", tu_clef_bin());
    out = tu_run(cmd, &st);
    assert_int_equal(st, 1);
    assert_non_null(strstr(out, "Invalid request."));
    free(out);

    snprintf(cmd, sizeof cmd, "%s decide 2>/dev/null </dev/null", tu_clef_bin());
    out = tu_run(cmd, &st);
    assert_int_equal(st, 2);
    free(out);

    snprintf(cmd, sizeof cmd, "%s decide -m /nonexistent.gguf 2>&1 </dev/null", tu_clef_bin());
    out = tu_run(cmd, &st);
    assert_int_equal(st, 3);
    assert_non_null(strstr(out, "/nonexistent.gguf"));
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f32),
        cmocka_unit_test(test_bf16_any_kernels),
        cmocka_unit_test(test_q8_0_any_kernels),
        cmocka_unit_test(test_reference_kernels_dequantized),
        cmocka_unit_test(test_cli),
    };
    return cmocka_run_group_tests(tests, load_oracle, free_oracle);
}
