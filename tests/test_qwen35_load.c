/*
 * tests/test_qwen35_load.c — loading variants of the tiny qwen35 oracle
 * model, rewritten with the GGUF writer: the optional keys
 * (attention.recurrent_layers, nextn_predict_layers, no
 * full_attention_interval), norms stored as F16 (converted copies), and the
 * refusals (a mis-shaped or missing tensor, a missing key, an unsupported
 * type), whose messages must name the tensor or key.
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
#include <jansson.h>

#include "core/dtype.h"
#include "format/gguf.h"
#include "format/gguf_write.h"
#include "kernels/dequant.h"
#include "model/model.h"
#include "testutil.h"

#define TINY ORACLE_DIR "/qwen35/qwen35-tiny.gguf"

typedef struct mutation {
    const char *drop_keys[4];      /* metadata not copied                        */
    void (*add_keys)(gguf_writer *w);
    const char *drop_tensor;       /* tensor not copied                          */
    const char *reshape;           /* tensor written as [ne0, ne1] (zero bytes)  */
    int64_t ne0, ne1;
    uint32_t reshape_type;
    bool f16_vectors;              /* 1-D tensors stored as F16                  */
    bool extra_block;              /* blk.4.* = copies of blk.3.* (an MTP block) */
} mutation;

static bool dropped(const mutation *mu, const gguf_str key) {
    for (int i = 0; i < 4 && mu->drop_keys[i]; i++)
        if (gguf_str_eq(key, mu->drop_keys[i])) return true;
    return false;
}

static void copy_kv(gguf_writer *w, const gguf_file *f, const gguf_kv *kv) {
    char key[256];
    snprintf(key, sizeof key, "%.*s", (int)kv->key.len, kv->key.ptr);
    if (kv->type == GGUF_VT_STRING) {
        gguf_str s;
        assert_true(gguf_get_str(f, key, &s));
        gguf_writer_add_strn(w, key, s.ptr, (size_t)s.len);
    } else if (kv->type == GGUF_VT_ARRAY && kv->arr_type == GGUF_VT_STRING) {
        const char **strs = malloc(kv->arr_n * sizeof *strs);
        size_t *lens = malloc(kv->arr_n * sizeof *lens);
        for (uint64_t i = 0; i < kv->arr_n; i++) {
            gguf_str s;
            assert_true(gguf_arr_str(f, kv, i, &s));
            strs[i] = s.ptr;
            lens[i] = (size_t)s.len;
        }
        gguf_writer_add_arr_str(w, key, strs, lens, kv->arr_n);
        free(strs);
        free(lens);
    } else if (kv->type == GGUF_VT_ARRAY) {
        gguf_writer_add_arr(w, key, kv->arr_type, kv->data, kv->arr_n);
    } else {
        uint64_t raw = 0;
        memcpy(&raw, kv->data, (size_t)kv->nbytes);
        switch (kv->type) {
        case GGUF_VT_UINT32: gguf_writer_add_u32(w, key, (uint32_t)raw); break;
        case GGUF_VT_INT32: gguf_writer_add_i32(w, key, (int32_t)(uint32_t)raw); break;
        case GGUF_VT_BOOL: gguf_writer_add_bool(w, key, raw != 0); break;
        case GGUF_VT_FLOAT32: {
            float v;
            memcpy(&v, kv->data, 4);
            gguf_writer_add_f32(w, key, v);
            break;
        }
        default: fail_msg("copy_kv: key %s has a type this test does not copy", key);
        }
    }
}

static void add_tensor(gguf_writer *w, const mutation *mu, const char *name, const gguf_tensor *t) {
    if (mu->reshape && !strcmp(name, mu->reshape)) {
        int64_t ne[2] = {mu->ne0, mu->ne1};
        uint64_t bytes;
        assert_true(clef_dtype_row_bytes(mu->reshape_type, (uint64_t)(mu->ne0 * mu->ne1), &bytes));
        void *zero = calloc(1, (size_t)bytes);
        gguf_writer_add_tensor(w, name, mu->reshape_type, 2, ne, zero, (size_t)bytes);
        free(zero);
    } else if (mu->f16_vectors && t->n_dims == 1 && t->type == CLEF_DTYPE_F32) {
        uint16_t *h = malloc((size_t)t->ne[0] * sizeof *h);
        for (int64_t i = 0; i < t->ne[0]; i++) h[i] = clef_f32_to_f16(((const float *)t->data)[i]);
        gguf_writer_add_tensor(w, name, CLEF_DTYPE_F16, 1, t->ne, h, (size_t)t->ne[0] * 2);
        free(h);
    } else {
        gguf_writer_add_tensor_ref(w, name, t->type, t->n_dims, t->ne, t->data, (size_t)t->nbytes);
    }
}

/* The model at src rewritten with mu applied; returns the temp file path. */
static char *write_variant_of(const char *src, const mutation *mu, const char *file) {
    gguf_file *f;
    clef_error err = {0};
    assert_int_equal(gguf_open(src, &f, &err), CLEF_OK);
    gguf_writer *w = gguf_writer_new();
    for (uint64_t i = 0; i < gguf_kv_count(f); i++) {
        const gguf_kv *kv = gguf_kv_at(f, i);
        if (!dropped(mu, kv->key) && !gguf_str_eq(kv->key, "general.alignment")) copy_kv(w, f, kv);
    }
    if (mu->add_keys) mu->add_keys(w);
    for (uint64_t i = 0; i < gguf_tensor_count(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        if (mu->drop_tensor && !strcmp(name, mu->drop_tensor)) continue;
        add_tensor(w, mu, name, t);
    }
    for (uint64_t i = 0; mu->extra_block && i < gguf_tensor_count(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        if (t->name.len > 6 && !memcmp(t->name.ptr, "blk.3.", 6)) {
            char name[128];
            snprintf(name, sizeof name, "blk.4.%.*s", (int)t->name.len - 6, t->name.ptr + 6);
            gguf_writer_add_tensor_ref(w, name, t->type, t->n_dims, t->ne, t->data, (size_t)t->nbytes);
        }
    }
    char *path = tu_write_temp(file, "", 0);
    if (gguf_writer_write_file(w, path, &err) != CLEF_OK) fail_msg("write %s: %s", file, err.message);
    gguf_writer_free(w);
    gguf_close(f);
    return path;
}

static char *write_variant(const mutation *mu, const char *file) { return write_variant_of(TINY, mu, file); }

/* Hidden states of the oracle prompt p3 on the model at path. */
static float *run_p3(const char *path, int64_t *n_out, float **want) {
    json_t *root = json_load_file(ORACLE_DIR "/qwen35/qwen35-tiny.p3.json", 0, NULL);
    assert_non_null(root);
    json_t *toks = json_object_get(root, "tokens"), *hid = json_object_get(root, "hidden");
    int64_t n = (int64_t)json_array_size(toks);
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    float *h = malloc((size_t)n * 64 * sizeof *h);
    *want = malloc((size_t)n * 64 * sizeof **want);
    for (int64_t t = 0; t < n; t++) {
        ids[t] = (int32_t)json_integer_value(json_array_get(toks, (size_t)t));
        for (int e = 0; e < 64; e++)
            (*want)[t * 64 + e] = (float)json_number_value(json_array_get(json_array_get(hid, (size_t)t), (size_t)e));
    }
    json_decref(root);
    clef_model *m;
    clef_error err = {0};
    if (clef_model_load(path, NULL, &m, &err) != CLEF_OK) fail_msg("load: %s", err.message);
    assert_int_equal(clef_forward(m, ids, (size_t)n, h, &err), CLEF_OK);
    clef_model_free(m);
    free(ids);
    *n_out = n;
    return h;
}

static double max_diff(const float *a, const float *b, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= m)) m = d;
    }
    return m;
}

static void add_recurrent_layers(gguf_writer *w) {
    const bool rec[4] = {true, true, true, false};
    gguf_writer_add_arr(w, "qwen35.attention.recurrent_layers", GGUF_VT_BOOL, rec, 4);
}

static void add_mtp(gguf_writer *w) {
    gguf_writer_add_u32(w, "qwen35.block_count", 5);
    gguf_writer_add_u32(w, "qwen35.nextn_predict_layers", 1);
}

/* Variants that must compute exactly what the original does. */
static void test_equivalent_layouts(void **state) {
    (void)state;
    mutation rec = {.drop_keys = {"qwen35.full_attention_interval"}, .add_keys = add_recurrent_layers};
    mutation mtp = {.drop_keys = {"qwen35.block_count"}, .add_keys = add_mtp, .extra_block = true};
    mutation nointerval = {.drop_keys = {"qwen35.full_attention_interval"}}; /* default 4 */
    const mutation *mus[] = {&rec, &mtp, &nointerval};
    const char *names[] = {"recurrent_layers", "nextn", "default interval"};
    for (int i = 0; i < 3; i++) {
        char *path = write_variant(mus[i], "variant.gguf");
        int64_t n;
        float *want, *h = run_p3(path, &n, &want);
        double d = max_diff(h, want, n * 64);
        printf("[qwen35 load] %s: max|dhidden| vs oracle %.3g\n", names[i], d);
        assert_true(d <= 1e-3);
        free(h);
        free(want);
        free(path);
    }
}

/* Norms stored as F16 load as converted copies; results move only by the
 * F16 rounding of the norm weights (|w| ~ 1: relative 5e-4). */
static void test_f16_vectors(void **state) {
    (void)state;
    mutation mu = {.f16_vectors = true};
    char *path = write_variant(&mu, "f16norms.gguf");
    clef_model *m;
    clef_error err = {0};
    assert_int_equal(clef_model_load(path, NULL, &m, &err), CLEF_OK);
    assert_true(m->n_owned > 0);
    const float *on = model_backbone(m)->output_norm;
    gguf_file *f;
    assert_int_equal(gguf_open(TINY, &f, &err), CLEF_OK);
    const float *orig = gguf_find_tensor(f, "output_norm.weight")->data;
    for (int i = 0; i < 64; i++) assert_float_equal(on[i], clef_f16_to_f32(clef_f32_to_f16(orig[i])), 0);
    gguf_close(f);
    clef_model_free(m);
    int64_t n;
    float *want, *h = run_p3(path, &n, &want);
    double d = max_diff(h, want, n * 64);
    printf("[qwen35 load] F16 norms: max|dhidden| vs oracle %.3g\n", d);
    assert_true(d <= 0.05);
    assert_true(d > 0);
    free(h);
    free(want);
    free(path);
}

static void expect_refusal(const mutation *mu, clef_status want, const char *needle) {
    char *path = write_variant(mu, "bad.gguf");
    clef_model *m = (clef_model *)1;
    clef_error err = {0};
    clef_status st = clef_model_load(path, NULL, &m, &err);
    printf("[qwen35 load] refused: %s\n", err.message);
    assert_int_equal(st, want);
    assert_null(m);
    if (!strstr(err.message, needle)) fail_msg("message '%s' lacks '%s'", err.message, needle);
    free(path);
}

static void test_refusals(void **state) {
    (void)state;
    mutation shape = {.reshape = "blk.3.attn_k.weight", .ne0 = 64, .ne1 = 32, .reshape_type = CLEF_DTYPE_F32};
    expect_refusal(&shape, CLEF_ERR_FORMAT, "tensor 'blk.3.attn_k.weight': expected [64,64] got [64,32]");
    mutation missing = {.drop_tensor = "blk.1.ssm_a"};
    expect_refusal(&missing, CLEF_ERR_FORMAT, "tensor 'blk.1.ssm_a' not found");
    mutation type = {.reshape = "blk.0.ffn_up.weight", .ne0 = 64, .ne1 = 128, .reshape_type = CLEF_DTYPE_Q4_0};
    expect_refusal(&type, CLEF_ERR_UNSUPPORTED, "tensor 'blk.0.ffn_up.weight': type Q4_0");
    mutation key = {.drop_keys = {"qwen35.ssm.state_size"}};
    expect_refusal(&key, CLEF_ERR_FORMAT, "qwen35.ssm.state_size");
}

static void add_interval_2(gguf_writer *w) { gguf_writer_add_u32(w, "qwen35.full_attention_interval", 2); }

/* with attention every 2nd layer, blk.1 must be an attention block */
static void test_wrong_layout(void **state) {
    (void)state;
    mutation mu = {.drop_keys = {"qwen35.full_attention_interval"}, .add_keys = add_interval_2};
    expect_refusal(&mu, CLEF_ERR_FORMAT, "tensor 'blk.1.attn_q.weight' not found");
}

/* The lookup helpers on a loaded model: trailing-1 shapes, conversions. */
static void test_lookup_helpers(void **state) {
    (void)state;
    clef_model *m;
    clef_error err = {0};
    assert_int_equal(clef_model_load(ORACLE_DIR "/clef-tiny/clef-tiny-a-BF16.gguf", NULL, &m, &err), CLEF_OK);
    const gguf_tensor *t;
    const int64_t vec1[2] = {64, 1};
    assert_int_equal(model_tensor(m, "output_norm.weight", 2, vec1, &t, &err), CLEF_OK);
    assert_null(model_find(m, "no.such.tensor"));
    const int64_t emb[2] = {64, 832};
    const float *copy;
    size_t owned = m->n_owned;
    assert_int_equal(model_tensor_f32(m, "token_embd.weight", 2, emb, &copy, &err), CLEF_OK);
    assert_int_equal(m->n_owned, owned + 1); /* BF16: a converted copy */
    float row[64];
    mm_get_row(&model_backbone(m)->token_embd, 700, row);
    assert_memory_equal(row, copy + 700 * 64, sizeof row);
    mm_get_row(model_output(m), 3, row);
    const gguf_tensor *out = model_find(m, "output.weight");
    float ref[64];
    assert_true(clef_dequantize_row(out->type, (const uint8_t *)out->data + 3 * model_output(m)->row_bytes, ref, 64));
    assert_memory_equal(row, ref, sizeof row);
    mm_weight w;
    assert_int_equal(model_matrix(m, "output.weight", 832, 64, &w, &err), CLEF_ERR_FORMAT);
    assert_string_equal(err.message, "tensor 'output.weight': expected [832,64] got [64,832]");
    clef_model_free(m);
}

static void add_pre_qwen35(gguf_writer *w) { gguf_writer_add_str(w, "tokenizer.ggml.pre", "qwen35"); }

static int32_t *tokenize(const clef_tokenizer *tok, const char *text, size_t *n) {
    int32_t *ids;
    clef_error err = {0};
    if (clef_tokenize(tok, text, strlen(text), true, &ids, n, &err) != CLEF_OK) fail_msg("tokenize: %s", err.message);
    return ids;
}

/* A Clef file labelled pre = "qwen35" still splits with the Qwen2 regex
 * (combining marks not absorbed into words); the same file read as a plain
 * tokenizer follows its label, and the tiny vocabulary's mark merges then
 * give other ids — so this test can tell the two apart. */
static void test_clef_tokenizer_follows_checkpoint(void **state) {
    (void)state;
    const char *src = ORACLE_DIR "/clef-tiny/clef-tiny-a-F32.gguf";
    const char *text = "marks kept apart by the Qwen2 regex: q\xcc\x81 \xe0\xa4\xb9\xe0\xa4\xbf\xe0\xa4\xa8"
                       "\xe0\xa5\x8d\xe0\xa4\xa6\xe0\xa5\x80";
    mutation mu = {.drop_keys = {"tokenizer.ggml.pre"}, .add_keys = add_pre_qwen35};
    char *path = write_variant_of(src, &mu, "clef-pre-qwen35.gguf");
    clef_model *orig, *relabelled;
    clef_error err = {0};
    assert_int_equal(clef_model_load(src, NULL, &orig, &err), CLEF_OK);
    assert_int_equal(clef_model_load(path, NULL, &relabelled, &err), CLEF_OK);
    clef_tokenizer *plain;
    assert_int_equal(clef_tokenizer_load(path, &plain, &err), CLEF_OK);
    size_t n1, n2, n3;
    int32_t *a = tokenize(clef_model_tokenizer(orig), text, &n1);
    int32_t *b = tokenize(clef_model_tokenizer(relabelled), text, &n2);
    int32_t *c = tokenize(plain, text, &n3);
    assert_int_equal(n1, n2);
    assert_memory_equal(a, b, n1 * sizeof *a);
    assert_true(n3 != n1 || memcmp(a, c, n1 * sizeof *a) != 0);
    printf("[qwen35 load] clef tokenizer: %zu ids (Qwen2 split), %zu when following pre=qwen35\n", n1, n3);
    clef_free(a);
    clef_free(b);
    clef_free(c);
    clef_tokenizer_free(plain);
    clef_model_free(orig);
    clef_model_free(relabelled);
    free(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_equivalent_layouts),
        cmocka_unit_test(test_f16_vectors),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_wrong_layout),
        cmocka_unit_test(test_lookup_helpers),
        cmocka_unit_test(test_clef_tokenizer_follows_checkpoint),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
