/*
 * tests/test_qwen35.c — the Qwen3.5 backbone against llama.cpp's fp32 dumps
 * (../shared/oracle/qwen35/<model>.p<i>.json): every prompt's final-normed
 * hidden states within 1e-3 per element (the oracle README's tolerance) and
 * the same argmax of the last-token logits, computed here from one row of
 * output.weight (or token_embd when tied) per vocabulary entry.
 *
 * Also: the result must not depend on the chunk size (chunks smaller than
 * the conv kernel, than the prompt, of one token), on the thread count, or
 * on batching several prompts together; and bad inputs are refused.
 */
#include <glob.h>
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

#define HIDDEN_TOL 1e-3   /* oracle README: F32 implementation, every element */
#define LOGIT_TOL 1e-3    /* logits are |x| < 1; follows from HIDDEN_TOL      */
#define SAME_TOL 1e-5     /* one implementation run two ways (rounding only)  */

typedef struct oracle {
    char model[64];
    int32_t *ids;
    int64_t n;
    int n_embd;
    float *hidden;        /* [n][n_embd] */
    float *logits;        /* [n_vocab]   */
    int n_vocab;
    int argmax;
} oracle;

static void oracle_free(oracle *o) {
    free(o->ids);
    free(o->hidden);
    free(o->logits);
}

static void oracle_read(const char *path, oracle *o) {
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root) fail_msg("%s: %s", path, jerr.text);
    memset(o, 0, sizeof *o);
    snprintf(o->model, sizeof o->model, "%s", json_string_value(json_object_get(root, "model")));
    json_t *toks = json_object_get(root, "tokens"), *hid = json_object_get(root, "hidden");
    json_t *lg = json_object_get(root, "last_token_logits");
    o->n = (int64_t)json_array_size(toks);
    o->n_embd = (int)json_integer_value(json_object_get(root, "n_embd"));
    o->argmax = (int)json_integer_value(json_object_get(root, "last_token_argmax"));
    o->n_vocab = (int)json_array_size(lg);
    assert_true(o->n > 0 && o->n_embd > 0 && json_array_size(hid) == (size_t)o->n);
    o->ids = malloc((size_t)o->n * sizeof *o->ids);
    o->hidden = malloc((size_t)(o->n * o->n_embd) * sizeof *o->hidden);
    o->logits = malloc((size_t)o->n_vocab * sizeof *o->logits);
    for (int64_t t = 0; t < o->n; t++) {
        o->ids[t] = (int32_t)json_integer_value(json_array_get(toks, (size_t)t));
        json_t *row = json_array_get(hid, (size_t)t);
        assert_int_equal(json_array_size(row), o->n_embd);
        for (int e = 0; e < o->n_embd; e++)
            o->hidden[t * o->n_embd + e] = (float)json_number_value(json_array_get(row, (size_t)e));
    }
    for (int v = 0; v < o->n_vocab; v++) o->logits[v] = (float)json_number_value(json_array_get(lg, (size_t)v));
    json_decref(root);
}

static double max_abs_diff(const float *a, const float *b, int64_t n) {
    double m = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) m = d; /* NaN propagates as a failure */
    }
    return m;
}

static clef_model *load(const char *file, int n_threads) {
    char path[256];
    snprintf(path, sizeof path, ORACLE_DIR "/qwen35/%s", file);
    clef_model_params p = clef_model_default_params();
    p.n_threads = n_threads;
    clef_model *m = NULL;
    clef_error err = {0};
    if (clef_model_load(path, &p, &m, &err) != CLEF_OK) fail_msg("load %s: %s", path, err.message);
    return m;
}

/* Logits of one hidden row against every LM-head row, in double. */
static void last_logits(const clef_model *m, const float *h, double *logits) {
    const mm_weight *out = model_output(m);
    float *row = malloc((size_t)out->in * sizeof *row);
    for (int64_t v = 0; v < out->out; v++) {
        mm_get_row(out, v, row);
        double s = 0.0;
        for (int64_t e = 0; e < out->in; e++) s += (double)h[e] * row[e];
        logits[v] = s;
    }
    free(row);
}

static float *forward(clef_model *m, const oracle *o, int64_t chunk) {
    float *h = malloc((size_t)(o->n * o->n_embd) * sizeof *h);
    qwen35_seq seq = {o->ids, o->n, h};
    clef_error err = {0};
    clef_status st = qwen35_forward(model_backbone(m), model_pool(m), &seq, 1, chunk, &err);
    if (st != CLEF_OK) fail_msg("forward: %s", err.message);
    return h;
}

static void check_prompt(const char *path) {
    oracle o;
    oracle_read(path, &o);
    clef_model *m = load(o.model, 2);
    assert_int_equal(clef_model_n_embd(m), o.n_embd);
    assert_string_equal(clef_model_arch(m), "qwen35");

    float *h = malloc((size_t)(o.n * o.n_embd) * sizeof *h);
    clef_error err = {0};
    assert_int_equal(clef_forward(m, o.ids, (size_t)o.n, h, &err), CLEF_OK);
    double dh = max_abs_diff(h, o.hidden, o.n * o.n_embd);

    const mm_weight *out = model_output(m);
    assert_int_equal(out->out, o.n_vocab);
    double *lg = malloc((size_t)o.n_vocab * sizeof *lg);
    last_logits(m, h + (o.n - 1) * o.n_embd, lg);
    int arg = 0;
    double dl = 0.0;
    for (int v = 0; v < o.n_vocab; v++) {
        if (lg[v] > lg[arg]) arg = v;
        double d = fabs(lg[v] - o.logits[v]);
        if (!(d <= dl)) dl = d;
    }
    printf("[qwen35] %-22s T=%-4lld max|dhidden| %.3g  max|dlogit| %.3g  argmax %d (oracle %d)\n",
           strrchr(path, '/') + 1, (long long)o.n, dh, dl, arg, o.argmax);
    assert_true(dh <= HIDDEN_TOL);
    assert_true(dl <= LOGIT_TOL);
    assert_int_equal(arg, o.argmax);

    /* chunking: smaller than the conv kernel, uneven, one token */
    const int64_t chunks[] = {1, 3, 7, 64};
    for (size_t i = 0; i < sizeof chunks / sizeof chunks[0]; i++) {
        float *hc = forward(m, &o, chunks[i]);
        double d = max_abs_diff(hc, h, o.n * o.n_embd);
        if (d > SAME_TOL) fail_msg("chunk %lld moves hidden by %g", (long long)chunks[i], d);
        free(hc);
    }
    free(lg);
    free(h);
    clef_model_free(m);
    oracle_free(&o);
}

static void test_oracle_prompts(void **state) {
    (void)state;
    glob_t g;
    assert_int_equal(glob(ORACLE_DIR "/qwen35/*.p*.json", 0, NULL, &g), 0);
    assert_true(g.gl_pathc >= 5); /* tiny p0..p3, small p0 */
    for (size_t i = 0; i < g.gl_pathc; i++) check_prompt(g.gl_pathv[i]);
    globfree(&g);
}

/* Four prompts in one batch, with one thread and with three: each must
 * equal its own single-sequence run, and the oracle. */
static void test_batch_and_threads(void **state) {
    (void)state;
    oracle o[4];
    char path[256];
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, ORACLE_DIR "/qwen35/qwen35-tiny.p%d.json", i);
        oracle_read(path, &o[i]);
    }
    const int threads[] = {1, 3};
    for (size_t ti = 0; ti < 2; ti++) {
        clef_model *m = load("qwen35-tiny.gguf", threads[ti]);
        qwen35_seq seqs[4];
        for (int i = 0; i < 4; i++)
            seqs[i] = (qwen35_seq){o[i].ids, o[i].n, malloc((size_t)(o[i].n * o[i].n_embd) * sizeof(float))};
        clef_error err = {0};
        /* chunk 16 makes chunks straddle sequence boundaries */
        if (qwen35_forward(model_backbone(m), model_pool(m), seqs, 4, 16, &err) != CLEF_OK)
            fail_msg("batch forward: %s", err.message);
        for (int i = 0; i < 4; i++) {
            float *single = forward(m, &o[i], 0);
            double ds = max_abs_diff(seqs[i].hidden, single, o[i].n * o[i].n_embd);
            double dor = max_abs_diff(seqs[i].hidden, o[i].hidden, o[i].n * o[i].n_embd);
            printf("[qwen35] batch threads=%d seq %d: vs single %.3g, vs oracle %.3g\n", threads[ti], i, ds, dor);
            assert_true(ds <= SAME_TOL);
            assert_true(dor <= HIDDEN_TOL);
            free(single);
            free(seqs[i].hidden);
        }
        clef_model_free(m);
    }
    for (int i = 0; i < 4; i++) oracle_free(&o[i]);
}

static void test_bad_inputs(void **state) {
    (void)state;
    clef_model *m = load("qwen35-tiny.gguf", 1);
    float h[64 * 2];
    clef_error err = {0};
    int32_t bad[2] = {5, 959};
    assert_int_equal(clef_forward(m, bad, 2, h, &err), CLEF_ERR_INVALID_ARG);
    assert_non_null(strstr(err.message, "959"));
    int32_t neg[1] = {-1};
    assert_int_equal(clef_forward(m, neg, 1, h, &err), CLEF_ERR_INVALID_ARG);
    assert_int_equal(clef_forward(m, neg, 0, h, &err), CLEF_ERR_INVALID_ARG);
    int32_t *many = calloc(4097, sizeof *many);
    float *big = malloc(4097 * 64 * sizeof *big);
    assert_int_equal(clef_forward(m, many, 4097, big, &err), CLEF_ERR_TOO_LONG);
    free(many);
    free(big);
    clef_model_free(m);
}

static void test_model_info(void **state) {
    (void)state;
    clef_model *m = load("qwen35-small.gguf", 1);
    /* the generator named both files so */
    assert_string_equal(clef_model_name(m), "qwen35-random-tiny");
    assert_int_equal(clef_model_n_embd(m), 128);
    const qwen35_model *b = model_backbone(m);
    assert_false(b->output_tied);
    assert_int_equal(b->cfg.n_layer, 8);
    for (int il = 0; il < 8; il++) assert_int_equal(b->layers[il].recurrent, il != 3 && il != 7);
    assert_int_equal(b->cfg.n_rot, 16);
    assert_int_equal(b->cfg.rope_sections[0], 3);
    assert_int_equal(b->cfg.ssm_v_dim, 32);
    clef_model_free(m);
    m = load("qwen35-tiny.gguf", 1);
    assert_true(model_backbone(m)->output_tied);
    assert_ptr_equal(model_output(m)->data, model_backbone(m)->token_embd.data);
    clef_model_free(m);
}

static void test_load_errors(void **state) {
    (void)state;
    clef_model *m = NULL;
    clef_error err = {0};
    assert_int_not_equal(clef_model_load(ORACLE_DIR "/qwen35/missing.gguf", NULL, &m, &err), CLEF_OK);
    assert_null(m);
    assert_non_null(strstr(err.message, "missing.gguf"));
    /* a vocab-only file has no backbone tensors */
    assert_int_not_equal(clef_model_load(ORACLE_DIR "/tokenizer/qwen3-vocab.gguf", NULL, &m, &err), CLEF_OK);
    assert_null(m);
    printf("[qwen35] vocab-only file refused: %s\n", err.message);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_oracle_prompts),
        cmocka_unit_test(test_batch_and_threads),
        cmocka_unit_test(test_bad_inputs),
        cmocka_unit_test(test_model_info),
        cmocka_unit_test(test_load_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
