/*
 * tests/test_qwen35_carry.c — continuing the backbone from a saved state
 * (qwen35_forward_carry): a prompt cut anywhere into a saved head and a
 * continued tail gives the hidden states of the uninterrupted prompt (and
 * llama.cpp's fp32 dump, ../shared/oracle/qwen35), whatever the chunk size,
 * batched with fresh sequences or not, saved from a continued run or not.
 * States that do not fit are refused.
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

#define HIDDEN_TOL 1e-3   /* oracle README: F32 implementation, every element */
/* One implementation run two ways: blocked fast kernels (the chunked delta
 * rule, GEMM attention) round differently when a sequence is cut elsewhere
 * (up to ~1e-5 seen over the small model's 8 layers and 291 tokens), so
 * |Δ| <= SAME_TOL·max(1, |x|) per element, still 30x inside the oracle's
 * 1e-3; the reference kernels (CLEF_CPU=ref) compute every row alike
 * whatever the cut, so there it must be exact. */
#define SAME_TOL 3e-5

typedef struct prompt {
    int32_t *ids;
    int64_t n;
    int E;
    float *oracle;        /* [n][E] llama.cpp hidden states, or NULL */
} prompt;

static void prompt_free(prompt *p) {
    free(p->ids);
    free(p->oracle);
}

static void prompt_read(const char *file, prompt *p) {
    char path[256];
    snprintf(path, sizeof path, ORACLE_DIR "/qwen35/%s", file);
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root) fail_msg("%s: %s", path, jerr.text);
    json_t *toks = json_object_get(root, "tokens"), *hid = json_object_get(root, "hidden");
    p->n = (int64_t)json_array_size(toks);
    p->E = (int)json_integer_value(json_object_get(root, "n_embd"));
    assert_true(p->n > 8 && p->E > 0 && json_array_size(hid) == (size_t)p->n);
    p->ids = malloc((size_t)p->n * sizeof *p->ids);
    p->oracle = malloc((size_t)(p->n * p->E) * sizeof *p->oracle);
    for (int64_t t = 0; t < p->n; t++) {
        p->ids[t] = (int32_t)json_integer_value(json_array_get(toks, (size_t)t));
        json_t *row = json_array_get(hid, (size_t)t);
        for (int e = 0; e < p->E; e++)
            p->oracle[t * p->E + e] = (float)json_number_value(json_array_get(row, (size_t)e));
    }
    json_decref(root);
}

/* A deterministic pseudo-random prompt (no oracle): ids in [0, n_vocab). */
static void prompt_synthetic(int64_t n, int n_vocab, int E, uint32_t seed, prompt *p) {
    p->n = n;
    p->E = E;
    p->oracle = NULL;
    p->ids = malloc((size_t)n * sizeof *p->ids);
    for (int64_t t = 0; t < n; t++) {
        seed = seed * 1664525u + 1013904223u;
        p->ids[t] = (int32_t)((seed >> 8) % (uint32_t)n_vocab);
    }
}

static double max_abs_diff(const float *a, const float *b, int64_t n) {
    double m = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) m = d; /* NaN propagates as a failure */
    }
    return m;
}

/* max |a − b| / max(1, |b|): b is the reference run. */
static double max_rel_diff(const float *a, const float *b, int64_t n) {
    double m = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]) / fmax(1.0, fabs((double)b[i]));
        if (!(d <= m)) m = d; /* NaN propagates as a failure */
    }
    return m;
}

static clef_model *load(const char *path) {
    clef_model_params p = clef_model_default_params();
    p.n_threads = 2;
    clef_model *m = NULL;
    clef_error err = {0};
    if (clef_model_load(path, &p, &m, &err) != CLEF_OK) fail_msg("load %s: %s", path, err.message);
    return m;
}

static qwen35_state *state_new(clef_model *m, int64_t n) {
    qwen35_state *s = NULL;
    clef_error err = {0};
    if (qwen35_state_new(model_backbone(m), n, &s, &err) != CLEF_OK) fail_msg("state: %s", err.message);
    assert_int_equal(s->bytes, qwen35_state_bytes(model_backbone(m), n));
    return s;
}

static void run(clef_model *m, qwen35_seq *seqs, const qwen35_carry *carry, int n, int64_t chunk) {
    clef_error err = {0};
    clef_status st = qwen35_forward_carry(model_backbone(m), model_pool(m), seqs, carry, n, chunk, &err);
    if (st != CLEF_OK) fail_msg("forward: %s", err.message);
}

static float *hidden_new(const prompt *p) {
    return malloc((size_t)(p->n * p->E) * sizeof(float));
}

/* Every float of two states of one model. */
static double state_diff(const qwen35_state *a, const qwen35_state *b) {
    assert_int_equal(a->n, b->n);
    assert_int_equal(a->bytes, b->bytes);
    size_t nf = (a->bytes - sizeof *a - (size_t)a->n_layer * sizeof *a->layers) / sizeof(float);
    return max_abs_diff(a->data, b->data, (int64_t)nf);
}

/* Cut p at every cut in cuts: save at the cut, continue the rest from the
 * saved state; both halves must give the uninterrupted hidden states. */
static void check_cuts(clef_model *m, const prompt *p, const int64_t *cuts, int n_cuts,
                       int64_t chunk, double tol) {
    const int E = p->E;
    float *ref = hidden_new(p), *head = hidden_new(p), *tail = hidden_new(p);
    qwen35_seq whole = {.ids = p->ids, .n = p->n, .hidden = ref};
    run(m, &whole, NULL, 1, 0);
    double worst = 0.0;
    if (p->oracle) assert_true(max_abs_diff(ref, p->oracle, p->n * E) <= HIDDEN_TOL);
    for (int i = 0; i < n_cuts; i++) {
        int64_t P = cuts[i];
        qwen35_state *st = state_new(m, P);
        qwen35_seq s1 = {.ids = p->ids, .n = p->n, .hidden = head};
        qwen35_carry c1 = {.save = st};
        run(m, &s1, &c1, 1, chunk);
        qwen35_seq s2 = {.ids = p->ids + P, .n = p->n - P, .hidden = tail};
        qwen35_carry c2 = {.past = st};
        run(m, &s2, &c2, 1, chunk);
        double d1 = max_rel_diff(head, ref, p->n * E);
        double d2 = max_rel_diff(tail, ref + P * E, (p->n - P) * E);
        double dor = p->oracle ? max_abs_diff(tail, p->oracle + P * E, (p->n - P) * E) : 0.0;
        if (!(d1 <= tol) || !(d2 <= tol) || dor > HIDDEN_TOL)
            fail_msg("cut %lld chunk %lld: saving run %g, continued %g, vs oracle %g",
                     (long long)P, (long long)chunk, d1, d2, dor);
        worst = fmax(worst, fmax(d1, d2));
        qwen35_state_free(st);
    }
    printf("[carry] T=%lld chunk %lld: %d cuts agree (max relative diff %g)\n", (long long)p->n,
           (long long)chunk, n_cuts, worst);
    free(ref);
    free(head);
    free(tail);
}

/* Cuts before the conv kernel fills (1, 2), at chunk edges, near the end;
 * chunks of one token, uneven ones, the default (n_chunks of them). */
static void check_prompt_cuts(clef_model *m, const prompt *p, int n_chunks, double tol) {
    int64_t cuts[] = {1, 2, 3, 4, 7, 16, p->n / 2, p->n - 2, p->n - 1};
    const int64_t chunks[] = {0, 16, 3, 1};
    for (int i = 0; i < n_chunks; i++)
        check_cuts(m, p, cuts, (int)(sizeof cuts / sizeof cuts[0]), chunks[i], tol);
}

static void test_cuts_qwen35_oracle(void **state) {
    (void)state;
    const char *files[][2] = {{"qwen35-tiny.gguf", "qwen35-tiny.p3.json"},
                              {"qwen35-small.gguf", "qwen35-small.p2.json"}};
    const int n_chunks[] = {4, 2}; /* the small model's 291 tokens: not one at a time */
    for (size_t f = 0; f < 2; f++) {
        char path[256];
        snprintf(path, sizeof path, ORACLE_DIR "/qwen35/%s", files[f][0]);
        clef_model *m = load(path);
        prompt p;
        prompt_read(files[f][1], &p);
        check_prompt_cuts(m, &p, n_chunks[f], SAME_TOL);
        prompt_free(&p);
        clef_model_free(m);
    }
}

/* kernels: NULL = the default choice, else a CLEF_CPU value. */
static void cuts_clef_tiny(const char *kernels, double tol) {
    if (kernels) setenv("CLEF_CPU", kernels, 1);
    clef_model *m = load(ORACLE_DIR "/clef-tiny/clef-tiny-a-F32.gguf");
    unsetenv("CLEF_CPU");
    prompt p;
    prompt_synthetic(150, model_backbone(m)->cfg.n_vocab, clef_model_n_embd(m), 7, &p);
    check_prompt_cuts(m, &p, 4, tol);
    prompt_free(&p);
    clef_model_free(m);
}

static void test_cuts_clef_tiny(void **state) {
    (void)state;
    cuts_clef_tiny(NULL, SAME_TOL);
}

static void test_cuts_reference_kernels_exact(void **state) {
    (void)state;
    cuts_clef_tiny("ref", 0.0);
}

/* One batch mixing a fresh sequence that saves, a continued one, a plain
 * one and a continued one that saves again (a state from a continued run):
 * each equals its own uninterrupted run, and the re-saved state equals the
 * state saved straight from position 0. */
static void test_batch_mixed(void **state) {
    (void)state;
    clef_model *m = load(ORACLE_DIR "/clef-tiny/clef-tiny-a-F32.gguf");
    const int V = model_backbone(m)->cfg.n_vocab, E = clef_model_n_embd(m);
    prompt p[4];
    for (int i = 0; i < 4; i++) prompt_synthetic(40 + 9 * i, V, E, 100u + (uint32_t)i, &p[i]);
    float *ref[4];
    for (int i = 0; i < 4; i++) {
        ref[i] = hidden_new(&p[i]);
        qwen35_seq s = {.ids = p[i].ids, .n = p[i].n, .hidden = ref[i]};
        run(m, &s, NULL, 1, 0);
    }
    /* pasts for sequences 1 and 3, saved by fresh runs */
    qwen35_state *past1 = state_new(m, 11), *past3 = state_new(m, 5);
    qwen35_state *save0 = state_new(m, 23), *save3 = state_new(m, 30), *direct3 = state_new(m, 30);
    float *h[4], *h3 = hidden_new(&p[3]);
    for (int i = 0; i < 4; i++) h[i] = hidden_new(&p[i]);
    qwen35_seq pre[3] = {{.ids = p[1].ids, .n = 11, .hidden = h[1]},
                         {.ids = p[3].ids, .n = 5, .hidden = h[3]},
                         {.ids = p[3].ids, .n = p[3].n, .hidden = h3}};
    qwen35_carry pre_c[3] = {{.save = past1}, {.save = past3}, {.save = direct3}};
    run(m, pre, pre_c, 3, 0);

    const int64_t chunks[] = {0, 4, 13};
    for (size_t ci = 0; ci < 3; ci++) {
        qwen35_seq seqs[4] = {{.ids = p[0].ids, .n = p[0].n, .hidden = h[0]},
                              {.ids = p[1].ids + 11, .n = p[1].n - 11, .hidden = h[1]},
                              {.ids = p[2].ids, .n = p[2].n, .hidden = h[2]},
                              {.ids = p[3].ids + 5, .n = p[3].n - 5, .hidden = h[3]}};
        qwen35_carry carry[4] = {{.save = save0}, {.past = past1}, {0}, {.past = past3, .save = save3}};
        run(m, seqs, carry, 4, chunks[ci]);
        const int64_t off[4] = {0, 11, 0, 5};
        for (int i = 0; i < 4; i++) {
            double d = max_rel_diff(h[i], ref[i] + off[i] * E, (p[i].n - off[i]) * E);
            if (!(d <= SAME_TOL)) fail_msg("chunk %lld seq %d: %g from its own run", (long long)chunks[ci], i, d);
        }
        double ds = state_diff(save3, direct3);
        if (!(ds <= SAME_TOL)) fail_msg("chunk %lld: re-saved state differs by %g", (long long)chunks[ci], ds);
    }
    /* save0 continues like a state saved alone */
    float *tail = hidden_new(&p[0]);
    qwen35_seq s = {.ids = p[0].ids + 23, .n = p[0].n - 23, .hidden = tail};
    qwen35_carry c = {.past = save0};
    run(m, &s, &c, 1, 0);
    assert_true(max_rel_diff(tail, ref[0] + 23 * E, (p[0].n - 23) * E) <= SAME_TOL);
    free(tail);
    free(h3);
    qwen35_state *sts[] = {past1, past3, save0, save3, direct3};
    for (int i = 0; i < 5; i++) qwen35_state_free(sts[i]);
    for (int i = 0; i < 4; i++) {
        free(h[i]);
        free(ref[i]);
        prompt_free(&p[i]);
    }
    clef_model_free(m);
}

static clef_status try_run(clef_model *m, qwen35_seq *s, qwen35_carry *c, clef_error *err) {
    return qwen35_forward_carry(model_backbone(m), model_pool(m), s, c, 1, 0, err);
}

static void test_refusals(void **state) {
    (void)state;
    clef_model *m = load(ORACLE_DIR "/clef-tiny/clef-tiny-a-F32.gguf");
    char other_path[256];
    snprintf(other_path, sizeof other_path, ORACLE_DIR "/qwen35/qwen35-small.gguf"); /* other shapes */
    clef_model *other = load(other_path);
    const int E = clef_model_n_embd(m), n_ctx = clef_model_n_ctx(m);
    int32_t ids[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    float *h = malloc(8 * (size_t)E * sizeof *h);
    clef_error err = {0};
    qwen35_state *st = NULL;
    assert_int_equal(qwen35_state_new(model_backbone(m), 0, &st, &err), CLEF_ERR_INVALID_ARG);
    assert_null(st);
    assert_int_equal(qwen35_state_new(model_backbone(m), (int64_t)n_ctx + 1, &st, &err),
                     CLEF_ERR_INVALID_ARG);

    qwen35_state *s4 = state_new(m, 4);
    qwen35_seq seq = {.ids = ids, .n = 8, .hidden = h};
    /* a save point outside (past, past + n] */
    qwen35_carry c = {.past = s4, .save = s4};
    assert_int_equal(try_run(m, &seq, &c, &err), CLEF_ERR_INVALID_ARG);
    assert_non_null(strstr(err.message, "save at 4 tokens is outside 5..12"));
    qwen35_state *s9 = state_new(m, 9);
    c = (qwen35_carry){.save = s9};
    assert_int_equal(try_run(m, &seq, &c, &err), CLEF_ERR_INVALID_ARG);
    /* a state of another model */
    qwen35_state *foreign = NULL;
    assert_int_equal(qwen35_state_new(model_backbone(other), 4, &foreign, &err), CLEF_OK);
    c = (qwen35_carry){.past = foreign};
    assert_int_equal(try_run(m, &seq, &c, &err), CLEF_ERR_INVALID_ARG);
    assert_non_null(strstr(err.message, "past state is not one of this model's"));
    /* past + n beyond the context: refused before the state is read, so a
     * header claiming n_ctx − 4 tokens stands in for a 130 MB state */
    qwen35_state late = *s4;
    late.n = n_ctx - 4;
    late.bytes = qwen35_state_bytes(model_backbone(m), late.n);
    c = (qwen35_carry){.past = &late};
    assert_int_equal(try_run(m, &seq, &c, &err), CLEF_ERR_TOO_LONG);
    assert_non_null(strstr(err.message, "reaches position"));
    /* with s4 as the past, 8 more tokens are fine */
    c = (qwen35_carry){.past = s4};
    assert_int_equal(try_run(m, &seq, &c, &err), CLEF_OK);

    qwen35_state_free(foreign);
    qwen35_state_free(s9);
    qwen35_state_free(s4);
    free(h);
    clef_model_free(other);
    clef_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cuts_qwen35_oracle),
        cmocka_unit_test(test_cuts_clef_tiny),
        cmocka_unit_test(test_cuts_reference_kernels_exact),
        cmocka_unit_test(test_batch_mixed),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
