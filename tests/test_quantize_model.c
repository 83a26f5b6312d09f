/*
 * tests/test_quantize_model.c — `clef quantize` (model/quantize_model.h).
 *
 *   - F32 clef-tiny → Q8_0: every tensor byte for byte the oracle's Q8_0
 *     file (whose bytes the README says equal llama-quantize's), metadata
 *     record for record.  → BF16: the whole file equals the oracle's.
 *   - F32 clef-tiny → Q4_K_M: no row of the tiny model is a multiple of 256,
 *     so every K-quant falls back to Q8_0 and the file holds exactly the
 *     Q8_0 oracle's weights; clef_decide then answers every case exactly as
 *     on the oracle Q8_0 file, within the README's Q8_0 tolerance
 *     (|Δp| ≤ 0.05) of the F32 expectations.
 *   - The recipe, hand-evaluated from llama.cpp's rules: use_more_bits(i, n)
 *     = i < n/8 || i >= 7n/8 || (i − n/8) % 3 == 2 picks, for n = 24,
 *     layers {0,1,2, 5,8,11,14,17,20, 21,22,23}; for n = 4, layers {2, 3}.
 *   - A synth "small" model (rows of 256) through Q4_K_M / Q5_K_M / Q6_K:
 *     the types per tensor, each quantized tensor within its type's error
 *     bound of the F32 source (test_quantize.c derives them), answers valid.
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
#include "model/quantize_model.h"
#include "test_synth_common.h"

#define TINY ORACLE_DIR "/clef-tiny/"

static char *quantize_to_temp(const char *in, const char *type, const char *name) {
    char *out = tu_write_temp(name, "", 0);
    assert_non_null(out);
    clef_write_params wp = clef_write_default_params();
    wp.n_threads = 2;
    clef_error err = {0};
    if (clef_quantize_file(in, out, type, &wp, &err) != CLEF_OK) fail_msg("quantize: %s", err.message);
    return out;
}

static gguf_file *open_or_fail(const char *path) {
    gguf_file *f = NULL;
    clef_error err = {0};
    if (gguf_open(path, &f, &err) != CLEF_OK) fail_msg("%s: %s", path, err.message);
    return f;
}

static int eff_dims(const gguf_tensor *t) {
    int n = (int)t->n_dims;
    while (n > 1 && t->ne[n - 1] == 1) n--;
    return n;
}

/* Same tensors in the same order: names, types, shapes (trailing 1s aside),
 * bytes.  Returns how many tensors were compared. */
static uint64_t assert_same_tensors(const gguf_file *a, const gguf_file *b) {
    assert_int_equal(gguf_tensor_count(a), gguf_tensor_count(b));
    for (uint64_t i = 0; i < gguf_tensor_count(a); i++) {
        const gguf_tensor *x = gguf_tensor_at(a, i), *y = gguf_tensor_at(b, i);
        assert_int_equal(x->name.len, y->name.len);
        assert_memory_equal(x->name.ptr, y->name.ptr, (size_t)x->name.len);
        if (x->type != y->type) fail_msg("tensor '%.*s': type %u vs %u", (int)x->name.len, x->name.ptr, x->type, y->type);
        assert_int_equal(eff_dims(x), eff_dims(y));
        for (int d = 0; d < 4; d++) assert_int_equal(x->ne[d], y->ne[d]);
        assert_int_equal(x->nbytes, y->nbytes);
        if (memcmp(x->data, y->data, (size_t)x->nbytes))
            fail_msg("tensor '%.*s': bytes differ", (int)x->name.len, x->name.ptr);
    }
    return gguf_tensor_count(a);
}

static void assert_same_metadata(const gguf_file *a, const gguf_file *b) {
    assert_int_equal(gguf_kv_count(a), gguf_kv_count(b));
    for (uint64_t i = 0; i < gguf_kv_count(a); i++) {
        const gguf_kv *x = gguf_kv_at(a, i), *y = gguf_kv_at(b, i);
        assert_int_equal(x->key.len, y->key.len);
        assert_memory_equal(x->key.ptr, y->key.ptr, (size_t)x->key.len);
        assert_int_equal(x->type, y->type);
        assert_int_equal(x->nbytes, y->nbytes);
        assert_memory_equal(x->data, y->data, (size_t)x->nbytes);
    }
}

/* ---- against the oracle files ------------------------------------------------------- */

static void test_q8_0_matches_llama_quantize(void **state) {
    (void)state;
    char *out = quantize_to_temp(TINY "clef-tiny-a-F32.gguf", "Q8_0", "tiny-q8.gguf");
    gguf_file *got = open_or_fail(out), *want = open_or_fail(TINY "clef-tiny-a-Q8_0.gguf");
    assert_int_equal(assert_same_tensors(got, want), 164);
    assert_same_metadata(got, want);
    uint32_t ft = 0;
    assert_true(gguf_get_u32(got, "general.file_type", &ft) && ft == 7);
    gguf_close(got);
    gguf_close(want);
    unlink(out);
    free(out);
}

static void test_bf16_whole_file(void **state) {
    (void)state;
    char *out = quantize_to_temp(TINY "clef-tiny-a-F32.gguf", "BF16", "tiny-bf16.gguf");
    size_t la, lb;
    char *a = tu_read_file(out, &la), *b = tu_read_file(TINY "clef-tiny-a-BF16.gguf", &lb);
    assert_int_equal(la, lb);
    assert_memory_equal(a, b, la);
    free(a);
    free(b);
    unlink(out);
    free(out);
}

static void test_q4_k_m_tiny_falls_back_to_q8_0(void **state) {
    (void)state;
    char *out = quantize_to_temp(TINY "clef-tiny-a-F32.gguf", "Q4_K_M", "tiny-q4km.gguf");
    gguf_file *got = open_or_fail(out), *q8 = open_or_fail(TINY "clef-tiny-a-Q8_0.gguf");
    assert_same_tensors(got, q8);
    uint32_t ft = 0;
    assert_true(gguf_get_u32(got, "general.file_type", &ft) && ft == 15);
    gguf_close(got);
    gguf_close(q8);

    sc_cases cs;
    sc_cases_load(&cs);
    clef_model *m = sc_load(out), *ref = sc_load(TINY "clef-tiny-a-Q8_0.gguf");
    size_t len = 0;
    char *expected = tu_read_file(TINY "expected.jsonl", &len);
    char *line = strtok(expected, "\n");
    double max_dp = 0;
    for (size_t i = 0; i < cs.n; i++, line = strtok(NULL, "\n")) {
        char *body = NULL, *ref_body = NULL;
        int st = sc_decide(m, &cs.c[i], &body);
        assert_int_equal(sc_decide(ref, &cs.c[i], &ref_body), st);
        assert_string_equal(body, ref_body);
        json_error_t je;
        json_t *exp = json_loads(line, 0, &je);
        assert_non_null(exp);
        if (st == 200) {
            sc_check_answers(body, cs.c[i].parsed);
            json_t *got_v = json_loads(body, 0, &je);
            const json_t *qs = json_object_get(exp, "questions");
            for (size_t q = 0; q < json_array_size(qs); q++) {
                const json_t *eq = json_array_get(qs, q);
                const json_t *ans = json_object_get(json_object_get(got_v, "answers"),
                                                    json_string_value(json_object_get(eq, "id")));
                const json_t *probs = json_object_get(eq, "probs"), *ids = json_object_get(eq, "option_ids");
                for (size_t k = 0; k < json_array_size(probs); k++) {
                    double want = json_number_value(json_array_get(probs, k)), have;
                    if (!strcmp(json_string_value(json_object_get(eq, "type")), "noul"))
                        have = k == 0 ? json_number_value(json_object_get(ans, "noul"))
                                      : 1 - json_number_value(json_object_get(ans, "noul"));
                    else
                        have = json_number_value(json_object_get(
                            json_object_get(ans, "probabilities"), json_string_value(json_array_get(ids, k))));
                    max_dp = fmax(max_dp, fabs(have - want));
                }
            }
            json_decref(got_v);
        } else {
            assert_non_null(json_object_get(exp, "error"));
        }
        json_decref(exp);
        free(body);
        free(ref_body);
    }
    print_message("# tiny Q4_K_M vs F32 expectations: max |dp| %.3g\n", max_dp);
    assert_true(max_dp > 0 && max_dp <= 0.05);
    free(expected);
    clef_model_free(m);
    clef_model_free(ref);
    sc_cases_free(&cs);
    unlink(out);
    free(out);
}

/* BF16 input: dequantized exactly, then Q8_0. */
static void test_requantize_from_bf16(void **state) {
    (void)state;
    char *out = quantize_to_temp(TINY "clef-tiny-a-BF16.gguf", "Q8_0", "bf16-q8.gguf");
    gguf_file *got = open_or_fail(out), *src = open_or_fail(TINY "clef-tiny-a-BF16.gguf");
    const gguf_tensor *t = gguf_find_tensor(got, "blk.1.ffn_up.weight");
    const gguf_tensor *s = gguf_find_tensor(src, "blk.1.ffn_up.weight");
    assert_int_equal(t->type, CLEF_DTYPE_Q8_0);
    float a[64 * 128], b[64 * 128];
    assert_true(clef_dequantize_row(CLEF_DTYPE_BF16, s->data, a, 64 * 128));
    assert_true(clef_dequantize_row(CLEF_DTYPE_Q8_0, t->data, b, 64 * 128));
    for (int i = 0; i < 64 * 128; i++) assert_true(fabsf(a[i] - b[i]) <= 0.01f * fabsf(a[i]) + 0.01f);
    /* the head stays BF16/F32 as stored */
    assert_int_equal(gguf_find_tensor(got, "decision.scorer.weight")->type,
                     gguf_find_tensor(src, "decision.scorer.weight")->type);
    gguf_close(got);
    gguf_close(src);
    clef_model *m = sc_load(out);
    sc_cases cs;
    sc_cases_load(&cs);
    char *body = NULL;
    assert_int_equal(sc_decide(m, &cs.c[0], &body), 200);
    sc_check_answers(body, cs.c[0].parsed);
    free(body);
    sc_cases_free(&cs);
    clef_model_free(m);
    unlink(out);
    free(out);
}

/* ---- the recipe ------------------------------------------------------------------------ */

typedef struct desc_list {
    qm_tensor_desc d[256];
    char names[256][48];
    size_t n;
} desc_list;

static void push(desc_list *l, const char *name, int64_t ne0, int64_t ne1) {
    assert_true(l->n < 256);
    snprintf(l->names[l->n], sizeof l->names[0], "%s", name);
    l->d[l->n] = (qm_tensor_desc){l->names[l->n], CLEF_DTYPE_F32, ne1 ? 2 : 1, {ne0, ne1 ? ne1 : 1, 1, 1}};
    l->n++;
}

static uint32_t type_of(const desc_list *l, const uint32_t *types, const char *name) {
    for (size_t i = 0; i < l->n; i++)
        if (!strcmp(l->names[i], name)) return types[i];
    fail_msg("no tensor %s", name);
    return 0;
}

/* A 24-layer Qwen3.5 listing (attention every 4th layer), in file order. */
static void qwen35_24(desc_list *l, bool with_output) {
    memset(l, 0, sizeof *l);
    char n[48];
    push(l, "token_embd.weight", 1024, 1000);
    push(l, "output_norm.weight", 1024, 0);
    if (with_output) push(l, "output.weight", 1024, 1000);
    for (int il = 0; il < 24; il++) {
        bool attn = (il + 1) % 4 == 0;
        snprintf(n, sizeof n, "blk.%d.attn_norm.weight", il), push(l, n, 1024, 0);
        snprintf(n, sizeof n, attn ? "blk.%d.attn_v.weight" : "blk.%d.attn_qkv.weight", il);
        push(l, n, 1024, attn ? 512 : 6144);
        snprintf(n, sizeof n, "blk.%d.ssm_conv1d.weight", il), push(l, n, 4, 6144);
        snprintf(n, sizeof n, "blk.%d.ffn_down.weight", il), push(l, n, 3584, 1024);
        snprintf(n, sizeof n, "blk.%d.ffn_up.weight", il), push(l, n, 1024, 3584);
    }
    push(l, "dec.blk.0.cross_attn_v.weight", 1024, 1024);
    push(l, "decision.proj_memory.weight", 1024, 1024);
    push(l, "token_types.weight", 1024, 3);
}

static void test_recipe_use_more_bits_24(void **state) {
    (void)state;
    static const int more[24] = {1, 1, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 1, 1, 1};
    desc_list l;
    qwen35_24(&l, true);
    uint32_t types[256];
    assert_int_equal(qm_choose_types(QM_FTYPE_Q4_K_M, l.d, l.n, 24, types, NULL), CLEF_OK);
    char n[48];
    for (int il = 0; il < 24; il++) {
        uint32_t want = more[il] ? CLEF_DTYPE_Q6_K : CLEF_DTYPE_Q4_K;
        snprintf(n, sizeof n, (il + 1) % 4 ? "blk.%d.attn_qkv.weight" : "blk.%d.attn_v.weight", il);
        assert_int_equal(type_of(&l, types, n), want);
        snprintf(n, sizeof n, "blk.%d.ffn_down.weight", il);
        assert_int_equal(type_of(&l, types, n), want);
        snprintf(n, sizeof n, "blk.%d.ffn_up.weight", il);
        assert_int_equal(type_of(&l, types, n), CLEF_DTYPE_Q4_K);
        snprintf(n, sizeof n, "blk.%d.ssm_conv1d.weight", il);
        assert_int_equal(type_of(&l, types, n), CLEF_DTYPE_F32);
        snprintf(n, sizeof n, "blk.%d.attn_norm.weight", il);
        assert_int_equal(type_of(&l, types, n), CLEF_DTYPE_F32);
    }
    assert_int_equal(type_of(&l, types, "token_embd.weight"), CLEF_DTYPE_Q4_K);
    assert_int_equal(type_of(&l, types, "output.weight"), CLEF_DTYPE_Q6_K);
    assert_int_equal(type_of(&l, types, "dec.blk.0.cross_attn_v.weight"), CLEF_DTYPE_F32);
    assert_int_equal(type_of(&l, types, "decision.proj_memory.weight"), CLEF_DTYPE_F32);
    assert_int_equal(type_of(&l, types, "token_types.weight"), CLEF_DTYPE_F32);
    /* Q5_K_M: the same layers Q6_K, the rest Q5_K */
    assert_int_equal(qm_choose_types(QM_FTYPE_Q5_K_M, l.d, l.n, 24, types, NULL), CLEF_OK);
    assert_int_equal(type_of(&l, types, "blk.5.ffn_down.weight"), CLEF_DTYPE_Q6_K);
    assert_int_equal(type_of(&l, types, "blk.6.ffn_down.weight"), CLEF_DTYPE_Q5_K);
    /* Q8_0: everything Q8_0, output too */
    assert_int_equal(qm_choose_types(QM_FTYPE_Q8_0, l.d, l.n, 24, types, NULL), CLEF_OK);
    assert_int_equal(type_of(&l, types, "output.weight"), CLEF_DTYPE_Q8_0);
    assert_int_equal(type_of(&l, types, "blk.0.attn_qkv.weight"), CLEF_DTYPE_Q8_0);
    /* BF16: every convertible tensor BF16, no layer rules */
    assert_int_equal(qm_choose_types(QM_FTYPE_BF16, l.d, l.n, 24, types, NULL), CLEF_OK);
    assert_int_equal(type_of(&l, types, "output.weight"), CLEF_DTYPE_BF16);
    assert_int_equal(type_of(&l, types, "blk.0.ffn_down.weight"), CLEF_DTYPE_BF16);
    assert_int_equal(type_of(&l, types, "blk.0.attn_norm.weight"), CLEF_DTYPE_F32);
}

static void test_recipe_tied_and_fallbacks(void **state) {
    (void)state;
    desc_list l;
    qwen35_24(&l, false);
    uint32_t types[256];
    assert_int_equal(qm_choose_types(QM_FTYPE_Q4_K_M, l.d, l.n, 24, types, NULL), CLEF_OK);
    /* no output.weight: token_embd is the LM head and gets its Q6_K */
    assert_int_equal(type_of(&l, types, "token_embd.weight"), CLEF_DTYPE_Q6_K);
    memset(&l, 0, sizeof l);
    push(&l, "output.weight", 64, 100);         /* 64 % 256: Q8_0, not Q6_K */
    push(&l, "blk.0.ffn_up.weight", 96, 64);    /* Q4_K → Q8_0 */
    push(&l, "blk.0.ffn_gate.weight", 48, 64);  /* 48 % 32 too: F16 */
    push(&l, "blk.0.ffn_down.weight", 512, 1);  /* [512, 1] is 1-D: kept */
    push(&l, "blk.0.ssm_a", 64, 4);             /* not a "weight" */
    assert_int_equal(qm_choose_types(QM_FTYPE_Q4_K_M, l.d, l.n, 0, types, NULL), CLEF_OK);
    assert_int_equal(types[0], CLEF_DTYPE_Q8_0);
    assert_int_equal(types[1], CLEF_DTYPE_Q8_0);
    assert_int_equal(types[2], CLEF_DTYPE_F16);
    assert_int_equal(types[3], CLEF_DTYPE_F32);
    assert_int_equal(types[4], CLEF_DTYPE_F32);
    assert_int_equal(qm_choose_types(QM_FTYPE_Q8_0, l.d, l.n, 0, types, NULL), CLEF_OK);
    assert_int_equal(types[2], CLEF_DTYPE_F16);
    qm_ftype ft;
    assert_true(qm_ftype_parse("q4_k_m", &ft) && ft == QM_FTYPE_Q4_K_M);
    assert_false(qm_ftype_parse("Q4_0", &ft));
    assert_string_equal(qm_ftype_name(QM_FTYPE_BF16), "BF16");
}

/* ---- K-quants on a synth model ------------------------------------------------------------- */

/* Relative RMS error of every quantized tensor against the F32 source. */
static void check_tensor_errors(const gguf_file *q, const gguf_file *src, uint32_t type, double bound) {
    for (uint64_t i = 0; i < gguf_tensor_count(q); i++) {
        const gguf_tensor *t = gguf_tensor_at(q, i), *s = gguf_tensor_at(src, i);
        if (t->type != type) continue;
        int64_t n = t->ne[0] * t->ne[1];
        float *a = malloc((size_t)n * sizeof *a);
        assert_true(clef_dequantize_row(t->type, t->data, a, n));
        const float *x = s->data;
        double se = 0, sx = 0;
        for (int64_t k = 0; k < n; k++) {
            se += ((double)a[k] - x[k]) * ((double)a[k] - x[k]);
            sx += (double)x[k] * x[k];
        }
        if (sqrt(se / sx) > bound)
            fail_msg("tensor '%.*s' (%s): relative RMS error %.4f > %.3f", (int)t->name.len, t->name.ptr,
                     clef_dtype_get(type)->name, sqrt(se / sx), bound);
        free(a);
    }
}

static void test_small_k_quant_files(void **state) {
    (void)state;
    char *src_path = sc_synth("clef", "small", "F32", 9, "small-f32.gguf");
    gguf_file *src = open_or_fail(src_path);
    static const struct {
        const char *type;
        uint32_t base;
    } runs[] = {{"Q4_K_M", CLEF_DTYPE_Q4_K}, {"Q5_K_M", CLEF_DTYPE_Q5_K}, {"Q6_K", CLEF_DTYPE_Q6_K}};
    for (int r = 0; r < 3; r++) {
        char *out = quantize_to_temp(src_path, runs[r].type, "small-q.gguf");
        gguf_file *q = open_or_fail(out);
        bool mixed = runs[r].base != CLEF_DTYPE_Q6_K;
        for (uint64_t i = 0; i < gguf_tensor_count(q); i++) {
            const gguf_tensor *t = gguf_tensor_at(q, i), *s = gguf_tensor_at(src, i);
            char name[64];
            snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
            uint32_t want = CLEF_DTYPE_F32; /* norms, 1-D, conv, and the (F32) head */
            bool matrix = eff_dims(t) == 2 && strstr(name, "blk.") == name && !strstr(name, "_norm") &&
                          !strstr(name, "conv1d");
            if (!strcmp(name, "output.weight")) want = CLEF_DTYPE_Q6_K;
            else if (!strcmp(name, "token_embd.weight")) want = runs[r].base;
            else if (matrix) {
                /* n = 4 layers: use_more_bits picks layers 2 and 3 */
                bool more = (strstr(name, "attn_qkv") || strstr(name, "attn_v.") || strstr(name, "ffn_down")) &&
                            (name[4] == '2' || name[4] == '3');
                want = mixed && more ? CLEF_DTYPE_Q6_K : runs[r].base;
            }
            if (t->type != want) fail_msg("%s %s: got %s, want %s", runs[r].type, name,
                                          clef_dtype_get(t->type)->name, clef_dtype_get(want)->name);
            if (want == CLEF_DTYPE_F32) assert_memory_equal(t->data, s->data, (size_t)t->nbytes);
        }
        check_tensor_errors(q, src, CLEF_DTYPE_Q4_K, 0.10);
        check_tensor_errors(q, src, CLEF_DTYPE_Q5_K, 0.05);
        check_tensor_errors(q, src, CLEF_DTYPE_Q6_K, 0.022);
        gguf_close(q);
        clef_model *m = sc_load(out);
        sc_cases cs;
        sc_cases_load(&cs);
        for (size_t i = 0; i < 3; i++) {
            char *body = NULL;
            assert_int_equal(sc_decide(m, &cs.c[i], &body), 200);
            sc_check_answers(body, cs.c[i].parsed);
            free(body);
        }
        sc_cases_free(&cs);
        clef_model_free(m);
        unlink(out);
        free(out);
    }
    gguf_close(src);
    unlink(src_path);
    free(src_path);
}

/* synth --type X writes what quantizing synth --type F32 to X writes,
 * for the backbone (the head is BF16 in one, F32 in the other). */
static void test_synth_agrees_with_quantize(void **state) {
    (void)state;
    char *f32 = sc_synth("clef", "small", "F32", 4, "agree-f32.gguf");
    char *direct = sc_synth("clef", "small", "Q4_K_M", 4, "agree-q4.gguf");
    char *via = quantize_to_temp(f32, "Q4_K_M", "agree-via.gguf");
    gguf_file *a = open_or_fail(direct), *b = open_or_fail(via);
    assert_int_equal(gguf_tensor_count(a), gguf_tensor_count(b));
    int compared = 0;
    for (uint64_t i = 0; i < gguf_tensor_count(a); i++) {
        const gguf_tensor *x = gguf_tensor_at(a, i), *y = gguf_tensor_at(b, i);
        if (!(x->name.len > 4 && !memcmp(x->name.ptr, "blk.", 4)) && !gguf_str_eq(x->name, "token_embd.weight") &&
            !gguf_str_eq(x->name, "output.weight"))
            continue;
        assert_int_equal(x->type, y->type);
        assert_int_equal(x->nbytes, y->nbytes);
        assert_memory_equal(x->data, y->data, (size_t)x->nbytes);
        compared++;
    }
    assert_true(compared > 40);
    gguf_close(a);
    gguf_close(b);
    unlink(f32);
    unlink(direct);
    unlink(via);
    free(f32);
    free(direct);
    free(via);
}

/* ---- refusals and the CLI ------------------------------------------------------------------ */

static void test_refusals(void **state) {
    (void)state;
    clef_error err = {0};
    char *out = tu_write_temp("refused.gguf", "", 0);
    unlink(out);
    assert_int_equal(clef_quantize_file(TINY "clef-tiny-a-F32.gguf", out, "Q3_K_S", NULL, &err),
                     CLEF_ERR_INVALID_ARG);
    assert_non_null(strstr(err.message, "unknown type 'Q3_K_S'"));
    assert_int_equal(clef_quantize_file("/nonexistent.gguf", out, "Q8_0", NULL, &err), CLEF_ERR_IO);
    assert_int_equal(access(out, F_OK), -1);
    /* never over its own input (it is mapped while being read) */
    char *copy = quantize_to_temp(TINY "clef-tiny-a-F32.gguf", "F32", "self.gguf");
    assert_int_equal(clef_quantize_file(copy, copy, "Q8_0", NULL, &err), CLEF_ERR_INVALID_ARG);
    assert_non_null(strstr(err.message, "overwrite the input"));
    /* F32 → F32 is a copy with the same tensors */
    gguf_file *a = open_or_fail(copy), *b = open_or_fail(TINY "clef-tiny-a-F32.gguf");
    assert_same_tensors(a, b);
    assert_same_metadata(a, b);
    gguf_close(a);
    gguf_close(b);
    unlink(copy);
    free(copy);
    free(out);
}

static void test_cli(void **state) {
    (void)state;
    char *api = quantize_to_temp(TINY "clef-tiny-a-F32.gguf", "Q8_0", "cli-api.gguf");
    char *cli = tu_write_temp("cli-q.gguf", "", 0);
    char cmd[1024];
    int st = -1;
    snprintf(cmd, sizeof cmd, "%s quantize -t 1 %s %s q8_0 2>&1", tu_clef_bin(), TINY "clef-tiny-a-F32.gguf", cli);
    char *out = tu_run(cmd, &st);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "blk.3.attn_v.weight"));   /* one progress line per tensor */
    assert_non_null(strstr(out, "F32    -> Q8_0"));
    free(out);
    size_t la, lc;
    char *da = tu_read_file(api, &la), *dc = tu_read_file(cli, &lc);
    assert_int_equal(la, lc);
    assert_memory_equal(da, dc, la);
    free(da);
    free(dc);
    snprintf(cmd, sizeof cmd, "%s quantize %s %s NOPE 2>&1", tu_clef_bin(), TINY "clef-tiny-a-F32.gguf", cli);
    out = tu_run(cmd, &st);
    assert_int_equal(st, 2);
    assert_non_null(strstr(out, "unknown type 'NOPE'"));
    free(out);
    snprintf(cmd, sizeof cmd, "%s quantize only-one-arg 2>&1", tu_clef_bin());
    out = tu_run(cmd, &st);
    assert_int_equal(st, 2);
    free(out);
    unlink(api);
    unlink(cli);
    free(api);
    free(cli);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_q8_0_matches_llama_quantize),
        cmocka_unit_test(test_bf16_whole_file),
        cmocka_unit_test(test_q4_k_m_tiny_falls_back_to_q8_0),
        cmocka_unit_test(test_requantize_from_bf16),
        cmocka_unit_test(test_recipe_use_more_bits_24),
        cmocka_unit_test(test_recipe_tied_and_fallbacks),
        cmocka_unit_test(test_small_k_quant_files),
        cmocka_unit_test(test_synth_agrees_with_quantize),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_cli),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
