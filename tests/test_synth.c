/*
 * tests/test_synth.c — random-weight models (model/synth.h, clef synth).
 *
 * What a synth model must be: loadable by clef_model_load and answering
 * every oracle request with a well-formed distribution, for every file
 * type; a qwen35 file runs clef_forward; same arguments give the same
 * bytes, another seed other weights; the weights have the distributions
 * synth.h promises; the vocabulary has the promised layout and tokenizes
 * text losslessly; the big shapes have the sizes the spec states (the Flash
 * head is 243.5 MB in BF16, clef-model.md) without being generated here.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/dtype.h"
#include "format/gguf.h"
#include "kernels/dequant.h"
#include "model/synth.h"
#include "test_synth_common.h"

/* ---- loading and answering ------------------------------------------------------ */

static void decide_all_cases(const char *path) {
    sc_cases cs;
    sc_cases_load(&cs);
    clef_model *m = sc_load(path);
    assert_string_equal(clef_model_arch(m), "clef");
    for (size_t i = 0; i < cs.n; i++) {
        char *body = NULL;
        int status = sc_decide(m, &cs.c[i], &body);
        if (!strcmp(cs.c[i].id, "schema_exceeds_max_length")) {
            assert_int_equal(status, 400); /* the prompt alone is over 96 tokens */
        } else {
            if (status != 200) fail_msg("%s: case %s: %d %s", path, cs.c[i].id, status, body);
            sc_check_answers(body, cs.c[i].parsed);
        }
        free(body);
    }
    clef_model_free(m);
    sc_cases_free(&cs);
}

static void test_tiny_every_type_answers(void **state) {
    (void)state;
    static const char *types[] = {"F32", "F16", "BF16", "Q8_0", "Q4_K_M", "Q5_K_M", "Q6_K"};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        char name[64];
        snprintf(name, sizeof name, "tiny-%s.gguf", types[t]);
        char *path = sc_synth("clef", "tiny", types[t], 1, name);
        decide_all_cases(path);
        unlink(path);
        free(path);
    }
}

/* small: every matrix row a multiple of 256, so the K-quants themselves run */
static void test_small_q4_k_m_answers(void **state) {
    (void)state;
    char *path = sc_synth("clef", "small", "Q4_K_M", 5, "small-q4km.gguf");
    decide_all_cases(path);
    gguf_file *f = NULL;
    assert_int_equal(gguf_open(path, &f, NULL), CLEF_OK);
    assert_int_equal(gguf_find_tensor(f, "blk.0.ffn_up.weight")->type, CLEF_DTYPE_Q4_K);
    assert_int_equal(gguf_find_tensor(f, "output.weight")->type, CLEF_DTYPE_Q6_K);
    assert_int_equal(gguf_find_tensor(f, "decision.scorer.weight")->type, CLEF_DTYPE_BF16);
    assert_int_equal(gguf_find_tensor(f, "decision.scorer.bias")->type, CLEF_DTYPE_F32);
    gguf_close(f);
    unlink(path);
    free(path);
}

static void test_qwen35_forward(void **state) {
    (void)state;
    char *path = sc_synth("qwen35", "tiny", "BF16", 3, "qwen35-tiny.gguf");
    clef_model *m = sc_load(path);
    assert_string_equal(clef_model_arch(m), "qwen35");
    const char *text = "The order arrived two weeks late and the box was crushed.";
    int32_t *ids = NULL;
    size_t n = 0;
    clef_error err = {0};
    assert_int_equal(clef_tokenize(clef_model_tokenizer(m), text, strlen(text), true, &ids, &n, &err),
                     CLEF_OK);
    assert_true(n > 4);
    int E = clef_model_n_embd(m);
    assert_int_equal(E, 64);
    float *h = malloc(n * (size_t)E * sizeof *h);
    if (clef_forward(m, ids, n, h, &err) != CLEF_OK) fail_msg("%s", err.message);
    /* final-normed rows: finite, RMS near the output norm's ~1, not all alike */
    for (size_t t = 0; t < n; t++) {
        double ss = 0;
        for (int e = 0; e < E; e++) {
            assert_true(isfinite(h[t * (size_t)E + (size_t)e]));
            ss += (double)h[t * (size_t)E + (size_t)e] * h[t * (size_t)E + (size_t)e];
        }
        double rms = sqrt(ss / E);
        assert_true(rms > 0.5 && rms < 2.0);
    }
    assert_true(memcmp(h, h + E, (size_t)E * sizeof *h) != 0);
    free(h);
    clef_free(ids);
    clef_model_free(m);
    unlink(path);
    free(path);
}

/* ---- determinism ----------------------------------------------------------------- */

static void test_same_seed_same_bytes(void **state) {
    (void)state;
    char *a = sc_synth("clef", "tiny", "Q4_K_M", 7, "det-a.gguf");
    char *b = sc_synth("clef", "tiny", "Q4_K_M", 7, "det-b.gguf");
    char *c = sc_synth("clef", "tiny", "Q4_K_M", 8, "det-c.gguf");
    size_t la, lb, lc;
    char *da = tu_read_file(a, &la), *db = tu_read_file(b, &lb), *dc = tu_read_file(c, &lc);
    assert_int_equal(la, lb);
    assert_memory_equal(da, db, la);
    assert_int_equal(la, lc); /* same layout ... */
    gguf_file *fa = NULL, *fc = NULL;
    assert_int_equal(gguf_open(a, &fa, NULL), CLEF_OK);
    assert_int_equal(gguf_open(c, &fc, NULL), CLEF_OK);
    /* ... other weights in every tensor but the constant scales */
    for (uint64_t i = 0; i < gguf_tensor_count(fa); i++) {
        const gguf_tensor *ta = gguf_tensor_at(fa, i), *tc = gguf_tensor_at(fc, i);
        assert_int_equal(ta->nbytes, tc->nbytes);
        bool same = !memcmp(ta->data, tc->data, (size_t)ta->nbytes);
        assert_true(same == gguf_str_eq(ta->name, "decision.scales"));
    }
    /* ... and the same vocabulary (it depends on the shape only) */
    const gguf_kv *ka = gguf_find_kv(fa, "tokenizer.ggml.merges"), *kc = gguf_find_kv(fc, "tokenizer.ggml.merges");
    assert_int_equal(ka->nbytes, kc->nbytes);
    assert_memory_equal(ka->data, kc->data, (size_t)ka->nbytes);
    gguf_close(fa);
    gguf_close(fc);
    free(da);
    free(db);
    free(dc);
    unlink(a);
    unlink(b);
    unlink(c);
    free(a);
    free(b);
    free(c);
}

/* The thread count changes who computes a row, never its bytes. */
static void test_threads_do_not_change_bytes(void **state) {
    (void)state;
    char *a = sc_synth("clef", "small", "Q6_K", 2, "thr-a.gguf");
    char *b = tu_write_temp("thr-b.gguf", "", 0);
    clef_synth_spec spec = {"clef", "small", "Q6_K", 2};
    clef_write_params wp = clef_write_default_params();
    wp.n_threads = 1;
    assert_int_equal(clef_synth_model(&spec, b, &wp, NULL), CLEF_OK);
    size_t la, lb;
    char *da = tu_read_file(a, &la), *db = tu_read_file(b, &lb);
    assert_int_equal(la, lb);
    assert_memory_equal(da, db, la);
    free(da);
    free(db);
    unlink(a);
    unlink(b);
    free(a);
    free(b);
}

/* ---- weight statistics ----------------------------------------------------------- */

typedef struct stats {
    double mean, sd, min, max;
} stats;

static stats tensor_stats(const gguf_file *f, const char *name) {
    const gguf_tensor *t = gguf_find_tensor(f, name);
    assert_non_null(t);
    assert_int_equal(t->type, CLEF_DTYPE_F32);
    uint64_t n = t->nbytes / 4;
    const float *x = t->data;
    double s = 0, ss = 0;
    stats st = {0, 0, x[0], x[0]};
    for (uint64_t i = 0; i < n; i++) {
        s += x[i];
        ss += (double)x[i] * x[i];
        st.min = fmin(st.min, x[i]);
        st.max = fmax(st.max, x[i]);
    }
    st.mean = s / (double)n;
    st.sd = sqrt(ss / (double)n - st.mean * st.mean);
    return st;
}

static void test_weight_distributions(void **state) {
    (void)state;
    char *path = sc_synth("clef", "small", "F32", 11, "stats.gguf");
    gguf_file *f = NULL;
    assert_int_equal(gguf_open(path, &f, NULL), CLEF_OK);
    /* N(0, 1): 213k samples, so the mean is within 5 standard errors (0.011)
     * and the sd within 2%; Irwin–Hall of 4 never passes 3.47 */
    stats e = tensor_stats(f, "token_embd.weight");
    assert_true(fabs(e.mean) < 0.011 && fabs(e.sd - 1) < 0.02);
    assert_true(e.max <= 3.465 && e.min >= -3.465 && e.max > 2.5);
    /* a matrix [256] -> [256]: std 1/16 */
    stats m = tensor_stats(f, "blk.1.ffn_down.weight");
    assert_true(fabs(m.mean) < 0.001 && fabs(m.sd - 1.0 / 16) < 0.002);
    stats nrm = tensor_stats(f, "blk.0.attn_norm.weight");
    assert_true(fabs(nrm.mean - 1) < 0.05 && nrm.sd > 0.05 && nrm.sd < 0.15);
    stats a = tensor_stats(f, "blk.0.ssm_a");
    assert_true(a.min >= -16 && a.max <= -1);
    stats dt = tensor_stats(f, "blk.2.ssm_dt.bias");
    assert_true(dt.min >= -6.9 && dt.max <= -2.3);
    const float *sc = gguf_find_tensor(f, "decision.scales")->data;
    assert_true(fabsf(sc[0] - expf(1.6f)) < 1e-5f && fabsf(sc[1] - expf(2.5f)) < 1e-4f &&
                fabsf(sc[2] - 1 / (1 + expf(-0.3f))) < 1e-6f);
    assert_int_equal(gguf_find_tensor(f, "decision.scorer_out.weight")->n_dims, 1);
    gguf_close(f);
    unlink(path);
    free(path);
}

/* ---- the vocabulary ------------------------------------------------------------ */

static void test_vocab_layout(void **state) {
    (void)state;
    synth_vocab v;
    assert_int_equal(synth_vocab_build(832, &v, NULL), CLEF_OK);
    assert_int_equal(v.n, 832);
    assert_string_equal(v.tokens[0], "!");              /* bytes_to_unicode order */
    assert_string_equal(v.tokens[220], "\xc4\xa0");     /* byte 0x20 is 'Ġ' */
    assert_string_equal(v.tokens[255], "\xc5\x83");     /* byte 0xad is U+0143 */
    assert_string_equal(v.tokens[v.id_endoftext], "<|endoftext|>");
    assert_string_equal(v.tokens[v.id_im_start], "<|im_start|>");
    assert_string_equal(v.tokens[v.id_im_end], "<|im_end|>");
    assert_string_equal(v.tokens[v.id_im_end + 1], "<think>");
    assert_int_equal(v.types[v.id_im_end], 3);          /* CONTROL */
    assert_int_equal(v.types[v.id_im_end + 2], 4);      /* USER_DEFINED */
    assert_int_equal(v.types[831], 5);                  /* UNUSED */
    assert_string_equal(v.tokens[831], "[PAD831]");
    assert_int_equal((size_t)v.id_endoftext, 256 + v.n_merges); /* every merge made a token */
    assert_int_equal(v.n_merges, 832 - 261 - 41);
    for (size_t i = 0; i < v.n_merges; i++) assert_non_null(strchr(v.merges[i], ' '));
    synth_vocab_free(&v);
    clef_error err = {0};
    assert_int_equal(synth_vocab_build(100, &v, &err), CLEF_ERR_INVALID_ARG);
}

static void test_vocab_tokenizes(void **state) {
    (void)state;
    char *path = sc_synth("clef", "tiny", "Q8_0", 1, "vocab.gguf");
    clef_tokenizer *tok = NULL;
    assert_int_equal(clef_tokenizer_load(path, &tok, NULL), CLEF_OK);
    assert_int_equal(clef_tokenizer_vocab_size(tok), 832);
    /* the fixed prompt text is in the training text: about as dense as the
     * real Qwen3 vocabulary (../shared/oracle/tokenizer) makes it */
    const char *sys = "Read the complete state and schema. Decide every field jointly. Each answer "
                      "must be exactly one of that field's allowed options.";
    int32_t *ids = NULL;
    size_t n = 0;
    assert_int_equal(clef_tokenize(tok, sys, strlen(sys), true, &ids, &n, NULL), CLEF_OK);
    clef_free(ids);
    clef_tokenizer *qwen3 = NULL;
    size_t n_qwen3 = 0;
    assert_int_equal(clef_tokenizer_load(ORACLE_DIR "/tokenizer/qwen3-vocab.gguf", &qwen3, NULL), CLEF_OK);
    assert_int_equal(clef_tokenize(qwen3, sys, strlen(sys), true, &ids, &n_qwen3, NULL), CLEF_OK);
    clef_free(ids);
    clef_tokenizer_free(qwen3);
    print_message("# prompt text: %zu tokens (Qwen3's vocabulary: %zu)\n", n, n_qwen3);
    assert_true(4 * n <= 5 * n_qwen3);
    /* any text round-trips: non-ASCII, digits, added tokens as special ids */
    const char *text = "<|im_start|>user\nCaf\xc3\xa9 \xe2\x82\xac 12.50 \xf0\x9f\x98\x80 z\tq<|im_end|>";
    assert_int_equal(clef_tokenize(tok, text, strlen(text), true, &ids, &n, NULL), CLEF_OK);
    assert_int_equal(ids[0], 256 + 530 + 1); /* <|im_start|>: after the merges and <|endoftext|> */
    char *back = NULL;
    size_t blen = 0;
    assert_int_equal(clef_detokenize(tok, ids, n, &back, &blen, NULL), CLEF_OK);
    assert_int_equal(blen, strlen(text));
    assert_memory_equal(back, text, blen);
    clef_free(back);
    clef_free(ids);
    clef_tokenizer_free(tok);
    unlink(path);
    free(path);
}

/* ---- the big shapes, by size only ---------------------------------------------- */

static void test_big_shape_sizes(void **state) {
    (void)state;
    synth_summary s;
    const synth_shape *flash = synth_find_shape("flash"), *b08 = synth_find_shape("0.8b");
    assert_non_null(flash);
    assert_non_null(b08);
    assert_null(synth_find_shape("7b"));
    /* clef-model.md: the Flash joint schema head is 243.5 MB (BF16 matrices) */
    assert_int_equal(synth_summarize("clef", flash, QM_FTYPE_BF16, &s, NULL), CLEF_OK);
    print_message("# flash BF16: %zu tensors, %.4g elements, head %.1f MB\n", s.n_tensors,
                  (double)s.n_elements, s.head_bytes / 1e6);
    assert_true(s.head_bytes > 243.0e6 && s.head_bytes < 244.0e6);
    /* global 3; FFN 3 a layer; DeltaNet 11 and attention 8 more; head 160
     * (10 global + 18 per routing block + 26 per decoder layer + 8 final) */
    assert_int_equal(s.n_tensors, 3 + 32 * 3 + 24 * 11 + 8 * 8 + 10 + 2 * 18 + 2 + 4 * 26 + 8);
    /* Q4_K_M: ~4.5 bits per backbone weight, the head still BF16 */
    synth_summary q;
    assert_int_equal(synth_summarize("clef", flash, QM_FTYPE_Q4_K_M, &q, NULL), CLEF_OK);
    assert_int_equal(q.head_bytes, s.head_bytes);
    double bpw = 8.0 * (double)(q.data_bytes - q.head_bytes) / (double)(q.n_elements - s.head_bytes / 2);
    print_message("# flash Q4_K_M: %.2f GB, %.2f bits per backbone weight\n", q.data_bytes / 1e9, bpw);
    assert_true(bpw > 4.5 && bpw < 5.5);
    /* 0.8b: 24 layers, the qwen35 file has no head */
    assert_int_equal(synth_summarize("qwen35", b08, QM_FTYPE_BF16, &s, NULL), CLEF_OK);
    assert_int_equal(s.head_bytes, 0);
    assert_int_equal(s.n_tensors, 3 + 24 * 3 + 18 * 11 + 6 * 8);
    assert_int_equal(synth_summarize("gpt2", b08, QM_FTYPE_BF16, &s, NULL), CLEF_ERR_INVALID_ARG);
}

/* ---- API and CLI --------------------------------------------------------------- */

static void test_api_refusals(void **state) {
    (void)state;
    clef_error err = {0};
    clef_synth_spec spec = {"clef", "huge", "BF16", 1};
    assert_int_equal(clef_synth_model(&spec, "/tmp/never.gguf", NULL, &err), CLEF_ERR_INVALID_ARG);
    assert_non_null(strstr(err.message, "unknown shape 'huge'"));
    spec.shape = "tiny";
    spec.type = "Q3_K";
    assert_int_equal(clef_synth_model(&spec, "/tmp/never.gguf", NULL, &err), CLEF_ERR_INVALID_ARG);
    assert_non_null(strstr(err.message, "unknown type 'Q3_K'"));
    spec.type = "BF16";
    spec.arch = "llama";
    assert_int_equal(clef_synth_model(&spec, "/tmp/never.gguf", NULL, &err), CLEF_ERR_INVALID_ARG);
    assert_non_null(strstr(err.message, "unknown arch 'llama'"));
    assert_int_equal(access("/tmp/never.gguf", F_OK), -1);
    spec.arch = "clef";
    assert_int_equal(clef_synth_model(&spec, "/nonexistent-dir/x.gguf", NULL, &err), CLEF_ERR_IO);
}

static void test_cli(void **state) {
    (void)state;
    char *api = sc_synth("clef", "tiny", "Q8_0", 3, "cli-api.gguf");
    char *cli = tu_write_temp("cli.gguf", "", 0);
    char cmd[1024];
    int st = -1;
    snprintf(cmd, sizeof cmd, "%s synth -q --shape tiny --type Q8_0 --seed 3 %s 2>&1", tu_clef_bin(), cli);
    char *out = tu_run(cmd, &st);
    assert_int_equal(st, 0);
    size_t la, lc;
    char *da = tu_read_file(api, &la), *dc = tu_read_file(cli, &lc);
    assert_int_equal(la, lc);
    assert_memory_equal(da, dc, la);
    free(out);
    free(da);
    free(dc);
    snprintf(cmd, sizeof cmd, "%s synth --shape nope %s 2>&1", tu_clef_bin(), cli);
    out = tu_run(cmd, &st);
    assert_int_equal(st, 2);
    assert_non_null(strstr(out, "unknown shape 'nope'"));
    free(out);
    snprintf(cmd, sizeof cmd, "%s synth --seed -4 %s 2>&1", tu_clef_bin(), cli);
    out = tu_run(cmd, &st);
    assert_int_equal(st, 2);
    free(out);
    snprintf(cmd, sizeof cmd, "%s synth --help", tu_clef_bin());
    out = tu_run(cmd, &st);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "--shape"));
    free(out);
    unlink(api);
    unlink(cli);
    free(api);
    free(cli);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny_every_type_answers),
        cmocka_unit_test(test_small_q4_k_m_answers),
        cmocka_unit_test(test_qwen35_forward),
        cmocka_unit_test(test_same_seed_same_bytes),
        cmocka_unit_test(test_threads_do_not_change_bytes),
        cmocka_unit_test(test_weight_distributions),
        cmocka_unit_test(test_vocab_layout),
        cmocka_unit_test(test_vocab_tokenizes),
        cmocka_unit_test(test_big_shape_sizes),
        cmocka_unit_test(test_api_refusals),
        cmocka_unit_test(test_cli),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
