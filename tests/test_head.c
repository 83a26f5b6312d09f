/*
 * tests/test_head.c — the joint schema head against the clef-tiny oracle.
 *
 * For every encoded case of ../shared/oracle/clef-tiny/expected.jsonl the
 * oracle's F32 hidden states, ids and spans go through head_score and the
 * logits (and float64 softmax probabilities) are compared with the
 * reference's, for each of the three GGUF variants, with the README's
 * tolerances.  Then files with a head tensor or key removed or mis-shaped
 * (patched copies of the oracle bytes) must be refused, naming what is wrong,
 * and head tensors stored as BF16 / F16 / Q8_0 must give exactly the logits
 * of the f32 values they encode.
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

#include "core/dtype.h"
#include "core/threadpool.h"
#include "format/gguf.h"
#include "format/gguf_write.h"
#include "kernels/dequant.h"
#include "model/head.h"
#include "testutil.h"

#define TINY_DIR ORACLE_DIR "/clef-tiny"

typedef struct oracle_case {
    char id[64];
    int T;
    int32_t *ids;           /* [T]        */
    float *hidden;          /* [T][E]     */
    int nq, no;
    head_question *qs;      /* [nq]       */
    head_span *spans;       /* [no]       */
    double *logits;         /* [no] top-level (F32) reference */
    double *probs;          /* [no]       */
} oracle_case;

typedef struct oracle {
    int n;
    int n_embd;
    oracle_case cases[32];
} oracle;

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    assert_non_null(p);
    return p;
}

static head_span span_of(const json_t *a) {
    assert_true(json_is_array(a) && json_array_size(a) == 2);
    return (head_span){(int32_t)json_integer_value(json_array_get(a, 0)),
                       (int32_t)json_integer_value(json_array_get(a, 1))};
}

static void parse_case(const json_t *j, int n_embd, oracle_case *c) {
    snprintf(c->id, sizeof c->id, "%s", json_string_value(json_object_get(j, "id")));
    const json_t *ids = json_object_get(j, "input_ids");
    const json_t *hid = json_object_get(j, "hidden_f32");
    const json_t *qs = json_object_get(j, "questions");
    c->T = (int)json_array_size(ids);
    assert_true(c->T > 0);
    assert_int_equal(json_array_size(hid), (size_t)c->T);
    c->ids = xmalloc((size_t)c->T * sizeof *c->ids);
    c->hidden = xmalloc((size_t)c->T * n_embd * sizeof *c->hidden);
    for (int t = 0; t < c->T; t++) {
        c->ids[t] = (int32_t)json_integer_value(json_array_get(ids, (size_t)t));
        const json_t *row = json_array_get(hid, (size_t)t);
        assert_int_equal(json_array_size(row), (size_t)n_embd);
        for (int i = 0; i < n_embd; i++)
            c->hidden[(size_t)t * n_embd + i] =
                (float)json_number_value(json_array_get(row, (size_t)i));
    }
    c->nq = (int)json_array_size(qs);
    c->no = 0;
    for (int q = 0; q < c->nq; q++)
        c->no += (int)json_array_size(
            json_object_get(json_array_get(qs, (size_t)q), "option_spans"));
    c->qs = xmalloc((size_t)c->nq * sizeof *c->qs);
    c->spans = xmalloc((size_t)c->no * sizeof *c->spans);
    c->logits = xmalloc((size_t)c->no * sizeof *c->logits);
    c->probs = xmalloc((size_t)c->no * sizeof *c->probs);
    int o = 0;
    for (int q = 0; q < c->nq; q++) {
        const json_t *jq = json_array_get(qs, (size_t)q);
        const json_t *os = json_object_get(jq, "option_spans");
        const json_t *lg = json_object_get(jq, "logits");
        const json_t *pr = json_object_get(jq, "probs");
        int n = (int)json_array_size(os);
        assert_int_equal(json_array_size(lg), (size_t)n);
        c->qs[q] = (head_question){
            .type_id = (int)json_integer_value(json_object_get(jq, "type_id")),
            .span = span_of(json_object_get(jq, "question_span")),
            .n_options = n,
            .options = c->spans + o,
        };
        for (int k = 0; k < n; k++, o++) {
            c->spans[o] = span_of(json_array_get(os, (size_t)k));
            c->logits[o] = json_number_value(json_array_get(lg, (size_t)k));
            c->probs[o] = json_number_value(json_array_get(pr, (size_t)k));
        }
    }
}

static int setup_oracle(void **state) {
    oracle *orc = calloc(1, sizeof *orc);
    assert_non_null(orc);
    orc->n_embd = 64; /* clef-tiny: hidden 64 (README "The model") */
    FILE *fp = fopen(TINY_DIR "/expected.jsonl", "r");
    assert_non_null(fp);
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, fp) > 0) {
        json_error_t jerr;
        json_t *j = json_loads(line, 0, &jerr);
        if (!j) fail_msg("expected.jsonl: %s", jerr.text);
        if (!json_object_get(j, "error")) {
            assert_true(orc->n < (int)(sizeof orc->cases / sizeof orc->cases[0]));
            parse_case(j, orc->n_embd, &orc->cases[orc->n++]);
        }
        json_decref(j);
    }
    free(line);
    fclose(fp);
    assert_int_equal(orc->n, 17); /* 18 cases, one of them the error case */
    *state = orc;
    return 0;
}

static int teardown_oracle(void **state) {
    oracle *orc = *state;
    for (int i = 0; i < orc->n; i++) {
        oracle_case *c = &orc->cases[i];
        free(c->ids);
        free(c->hidden);
        free(c->qs);
        free(c->spans);
        free(c->logits);
        free(c->probs);
    }
    free(orc);
    return 0;
}

static gguf_file *open_tiny(const char *variant) {
    char path[256];
    snprintf(path, sizeof path, TINY_DIR "/clef-tiny-a-%s.gguf", variant);
    gguf_file *f = NULL;
    clef_error err = {0};
    if (gguf_open(path, &f, &err) != CLEF_OK) fail_msg("%s: %s", path, err.message);
    return f;
}

/* Run every case through (head, rows); compare logits and float64 softmax
 * probabilities with the top-level reference, return the max deltas. */
static void score_all(const oracle *orc, const head_model *h, const cpu_target *cpu,
                      const head_rows *rows, double tol_logit, double tol_prob, const char *label) {
    double max_dl = 0.0, max_dp = 0.0;
    for (int i = 0; i < orc->n; i++) {
        const oracle_case *c = &orc->cases[i];
        float *lg = xmalloc((size_t)c->no * sizeof *lg);
        clef_error err = {0};
        if (head_score_on(h, NULL, cpu, rows, c->hidden, c->ids, c->T, c->qs, c->nq, lg, &err) !=
            CLEF_OK)
            fail_msg("%s %s: %s", label, c->id, err.message);
        int o0 = 0;
        for (int q = 0; q < c->nq; q++) {
            const int n = c->qs[q].n_options;
            double mx = -INFINITY, sum = 0.0;
            /* a plain comparison: fmax here crashes Debian's aarch64 GCC 12
             * at -O3 (internal compiler error in vect_transform_reduction) */
            for (int k = 0; k < n; k++)
                if ((double)lg[o0 + k] > mx) mx = lg[o0 + k];
            for (int k = 0; k < n; k++) sum += exp((double)lg[o0 + k] - mx);
            for (int k = 0; k < n; k++) {
                const double dl = fabs((double)lg[o0 + k] - c->logits[o0 + k]);
                const double p = exp((double)lg[o0 + k] - mx) / sum;
                const double dp = fabs(p - c->probs[o0 + k]);
                if (!(dl <= tol_logit) || !(dp <= tol_prob))
                    fail_msg("%s %s question %d option %d: logit %.9g (reference %.9g), p %.9g "
                             "(reference %.9g)", label, c->id, q, k, lg[o0 + k], c->logits[o0 + k],
                             p, c->probs[o0 + k]);
                max_dl = fmax(max_dl, dl);
                max_dp = fmax(max_dp, dp);
            }
            o0 += n;
        }
        free(lg);
    }
    printf("[ head ] %-28s max |dlogit| %.3e  max |dp| %.3e  (tolerance %g / %g, %d cases)\n",
           label, max_dl, max_dp, tol_logit, tol_prob, orc->n);
}

/* The head and the LM-head rows of one variant file. */
/* cpu NULL: the reference dots. */
static void check_variant(void **state, const char *variant, const cpu_target *cpu,
                          double tol_logit, double tol_prob) {
    const oracle *orc = *state;
    gguf_file *f = open_tiny(variant);
    head_model *h = NULL;
    clef_error err = {0};
    if (head_load(f, &h, &err) != CLEF_OK) fail_msg("%s: %s", variant, err.message);
    const head_hparams *hp = head_get_hparams(h);
    assert_int_equal(hp->n_embd, 64);
    assert_int_equal(hp->width, 32);
    assert_int_equal(hp->n_ff, 64);
    assert_int_equal(hp->n_head, 4);
    assert_int_equal(hp->n_routing, 2);
    assert_int_equal(hp->n_decoder, 2);
    head_rows rows;
    assert_int_equal(head_rows_from_file(f, hp->n_embd, &rows, &err), CLEF_OK);
    assert_int_equal(rows.n_rows, 832);
    char label[64];
    snprintf(label, sizeof label, "%s file, %s", variant, cpu ? cpu_target_name(cpu) : "reference");
    score_all(orc, h, cpu, &rows, tol_logit, tol_prob, label);
    head_free(h);
    gguf_close(f);
}

/* F32 file: README "F32 file" row, 1e-4 / 2e-5. */
static void test_f32_file(void **state) { check_variant(state, "F32", NULL, 1e-4, 2e-5); }

/* The head's products on each fast path this CPU has (the backbone's f32
 * matmul) stay inside the same F32 tolerance as the reference dots. */
static void test_f32_file_fast_paths(void **state) {
    cpu_features f;
    cpu_detect(&f);
    int ran = 0;
    for (cpu_path p = CPU_PATH_AVX2; p < CPU_PATH_COUNT; p++) {
        if (p == CPU_PATH_AMX || !cpu_path_supported(&f, p)) continue;
        cpu_target t;
        clef_error err = {0};
        assert_int_equal(cpu_choose(cpu_path_name(p), &f, &t, &err), CLEF_OK);
        check_variant(state, "F32", &t, 1e-4, 2e-5);
        ran++;
    }
    if (!ran) printf("[ head ] no fast path on this CPU: only the reference was checked\n");
}

/* BF16/Q8_0 files fed the F32 hidden states: only output.weight differs from
 * the F32 file (the head tensors are F32 in all three), so what is measured
 * is the effect of the variant's LM-head rows on lex_o.  No README row has
 * exactly this expectation (variants.* use that variant's own hidden states),
 * so the justified bound is "BF16/Q8_0 file, any kernels" vs the top-level
 * F32 logits: 0.1 / 0.02 and 0.5 / 0.05. */
static void test_bf16_file(void **state) { check_variant(state, "BF16", NULL, 0.1, 0.02); }
static void test_q8_0_file(void **state) { check_variant(state, "Q8_0", NULL, 0.5, 0.05); }

/* The head tensors of the BF16/Q8_0 files (scorer_out 2-D in one, 1-D in the
 * other) with the F32 file's LM-head rows: the F32 expectations exactly. */
static void test_variant_heads_with_f32_rows(void **state) {
    const oracle *orc = *state;
    gguf_file *f32 = open_tiny("F32");
    head_rows rows;
    clef_error err = {0};
    assert_int_equal(head_rows_from_file(f32, 64, &rows, &err), CLEF_OK);
    const char *variants[] = {"BF16", "Q8_0"};
    for (int i = 0; i < 2; i++) {
        gguf_file *f = open_tiny(variants[i]);
        head_model *h = NULL;
        if (head_load(f, &h, &err) != CLEF_OK) fail_msg("%s: %s", variants[i], err.message);
        char label[64];
        snprintf(label, sizeof label, "%s head, F32 rows", variants[i]);
        score_all(orc, h, NULL, &rows, 1e-4, 2e-5, label);
        head_free(h);
        gguf_close(f);
    }
    gguf_close(f32);
}

/* ---- refused files: patched copies of the F32 oracle bytes ---- */

/* Find the length-prefixed string `s` in the header of buf. */
static uint8_t *find_lp_string(uint8_t *buf, size_t len, const char *s) {
    const size_t n = strlen(s);
    uint8_t pat[160];
    assert_true(n + 8 <= sizeof pat);
    for (int i = 0; i < 8; i++) pat[i] = (uint8_t)((uint64_t)n >> (8 * i));
    memcpy(pat + 8, s, n);
    uint8_t *p = memmem(buf, len, pat, n + 8);
    assert_non_null(p);
    return p + 8;
}

/* head_load on a copy of the F32 file after patch(); returns the status and
 * copies the message. */
static clef_status load_patched(void (*patch)(uint8_t *, size_t), char *msg, size_t msg_len) {
    size_t len = 0;
    uint8_t *buf = (uint8_t *)tu_read_file(TINY_DIR "/clef-tiny-a-F32.gguf", &len);
    assert_non_null(buf);
    patch(buf, len);
    gguf_file *f = NULL;
    clef_error err = {0};
    if (gguf_open_memory(buf, len, &f, &err) != CLEF_OK) fail_msg("patched file: %s", err.message);
    head_model *h = NULL;
    clef_status st = head_load(f, &h, &err);
    if (st == CLEF_OK) assert_non_null(h);
    else assert_null(h);
    snprintf(msg, msg_len, "%s", err.message);
    head_free(h);
    gguf_close(f);
    free(buf);
    return st;
}

static void rename_attn_q(uint8_t *buf, size_t len) {
    /* same length, so every offset stays valid */
    find_lp_string(buf, len, "dec.blk.2.attn_q.weight")[15] = 'X'; /* attn_X */
}

static void transpose_proj_question(uint8_t *buf, size_t len) {
    /* ne [64, 32] -> [32, 64]: same byte count, wrong orientation */
    uint8_t *p = find_lp_string(buf, len, "decision.proj_question.weight");
    p += strlen("decision.proj_question.weight");
    uint32_t nd;
    memcpy(&nd, p, 4);
    assert_int_equal(nd, 2);
    uint64_t ne[2];
    memcpy(ne, p + 4, sizeof ne);
    assert_true(ne[0] == 64 && ne[1] == 32);
    uint64_t sw[2] = {ne[1], ne[0]};
    memcpy(p + 4, sw, sizeof sw);
}

static void rename_scorer_out_bias(uint8_t *buf, size_t len) {
    find_lp_string(buf, len, "decision.scorer_out.bias")[20] = 'X'; /* .Xias */
}

static void rename_head_count(uint8_t *buf, size_t len) {
    find_lp_string(buf, len, "clef.decision.head_count")[23] = 'X'; /* head_counX */
}

static void test_missing_tensor(void **state) {
    (void)state;
    char msg[CLEF_ERROR_MESSAGE_MAX];
    assert_int_equal(load_patched(rename_attn_q, msg, sizeof msg), CLEF_ERR_FORMAT);
    assert_string_equal(msg, "decision head: tensor 'dec.blk.2.attn_q.weight' missing");
    assert_int_equal(load_patched(rename_scorer_out_bias, msg, sizeof msg), CLEF_ERR_FORMAT);
    assert_string_equal(msg, "decision head: tensor 'decision.scorer_out.bias' missing");
}

static void test_misshaped_tensor(void **state) {
    (void)state;
    char msg[CLEF_ERROR_MESSAGE_MAX];
    assert_int_equal(load_patched(transpose_proj_question, msg, sizeof msg), CLEF_ERR_FORMAT);
    assert_string_equal(msg, "decision head: tensor 'decision.proj_question.weight' has shape "
                             "[32, 64], expected [64, 32]");
}

static void test_missing_key(void **state) {
    (void)state;
    char msg[CLEF_ERROR_MESSAGE_MAX];
    assert_int_equal(load_patched(rename_head_count, msg, sizeof msg), CLEF_ERR_FORMAT);
    assert_non_null(strstr(msg, "'clef.decision.head_count'"));
}

/* Without output.weight the rows come from token_embd.weight. */
static void test_rows_fallback_to_token_embd(void **state) {
    (void)state;
    size_t len = 0;
    uint8_t *buf = (uint8_t *)tu_read_file(TINY_DIR "/clef-tiny-a-F32.gguf", &len);
    assert_non_null(buf);
    find_lp_string(buf, len, "output.weight")[0] = 'X';
    gguf_file *f = NULL;
    clef_error err = {0};
    assert_int_equal(gguf_open_memory(buf, len, &f, &err), CLEF_OK);
    assert_null(gguf_find_tensor(f, "output.weight"));
    const gguf_tensor *te = gguf_find_tensor(f, "token_embd.weight");
    assert_non_null(te);
    head_rows rows;
    assert_int_equal(head_rows_from_file(f, 64, &rows, &err), CLEF_OK);
    assert_ptr_equal(rows.data, te->data);
    assert_int_equal(rows.n_rows, 832);
    float row[64];
    assert_int_equal(head_rows_get(&rows, 831, row, &err), CLEF_OK);
    assert_memory_equal(row, (const float *)te->data + 831 * 64, sizeof row);
    assert_int_equal(head_rows_get(&rows, 832, row, &err), CLEF_ERR_INVALID_ARG);
    assert_non_null(strstr(err.message, "832"));
    /* a matrix of the wrong width is refused by name */
    assert_int_equal(head_rows_from_tensor(te, 32, &rows, &err), CLEF_ERR_FORMAT);
    assert_non_null(strstr(err.message, "'token_embd.weight'"));
    gguf_close(f);
    free(buf);
}

/* Bad spans, types and ids are refused before any arithmetic. */
static void test_bad_requests(void **state) {
    const oracle *orc = *state;
    const oracle_case *c = &orc->cases[0];
    gguf_file *f = open_tiny("F32");
    head_model *h = NULL;
    clef_error err = {0};
    assert_int_equal(head_load(f, &h, &err), CLEF_OK);
    head_rows rows;
    assert_int_equal(head_rows_from_file(f, 64, &rows, &err), CLEF_OK);
    float lg[64];
    head_span opts[2] = {c->qs[0].options[0], c->qs[0].options[1]};
    head_question q = c->qs[0];
    q.options = opts;

    q.type_id = 3;
    assert_int_equal(head_score(h, &rows, c->hidden, c->ids, c->T, &q, 1, lg, &err),
                     CLEF_ERR_INVALID_ARG);
    assert_non_null(strstr(err.message, "type id 3"));
    q.type_id = c->qs[0].type_id;

    opts[1] = (head_span){c->T - 1, c->T + 1};
    assert_int_equal(head_score(h, &rows, c->hidden, c->ids, c->T, &q, 1, lg, &err),
                     CLEF_ERR_INVALID_ARG);
    assert_non_null(strstr(err.message, "question 0 option 1"));
    opts[1] = (head_span){5, 5};
    assert_int_equal(head_score(h, &rows, c->hidden, c->ids, c->T, &q, 1, lg, &err),
                     CLEF_ERR_INVALID_ARG);
    opts[1] = c->qs[0].options[1];

    q.n_options = 0;
    assert_int_equal(head_score(h, &rows, c->hidden, c->ids, c->T, &q, 1, lg, &err),
                     CLEF_ERR_INVALID_ARG);
    assert_non_null(strstr(err.message, "no options"));
    q.n_options = 2;

    int32_t *ids = xmalloc((size_t)c->T * sizeof *ids);
    memcpy(ids, c->ids, (size_t)c->T * sizeof *ids);
    ids[opts[0].start] = 832;
    assert_int_equal(head_score(h, &rows, c->hidden, ids, c->T, &q, 1, lg, &err),
                     CLEF_ERR_INVALID_ARG);
    assert_non_null(strstr(err.message, "token id 832"));
    free(ids);

    /* the unmodified question still scores */
    assert_int_equal(head_score(h, &rows, c->hidden, c->ids, c->T, &q, 1, lg, &err), CLEF_OK);
    head_free(h);
    gguf_close(f);
}


/* ---- head tensors stored in other types ---- */

static bool is_head_tensor(const gguf_tensor *t) {
    const char *pre[] = {"decision.", "dec.blk.", "token_types."};
    for (int i = 0; i < 3; i++)
        if (t->name.len >= strlen(pre[i]) && memcmp(t->name.ptr, pre[i], strlen(pre[i])) == 0)
            return true;
    return false;
}

/* Encode vals[n] (a row length ne0) as `type`; exact[] receives the f32
 * values the encoding stands for.  Q8_0 blocks are built here (d = amax/127
 * rounded to f16, q = round(x/d)) so the test does not lean on a quantizer. */
static void *encode_as(uint32_t type, const float *vals, int64_t n, float *exact, size_t *nbytes) {
    if (type == CLEF_DTYPE_Q8_0) {
        uint8_t *out = xmalloc((size_t)(n / 32) * 34);
        for (int64_t b = 0; b < n / 32; b++) {
            const float *x = vals + 32 * b;
            float amax = 0.0f;
            for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[i]));
            uint16_t dh = clef_f32_to_f16(amax / 127.0f);
            float d = clef_f16_to_f32(dh);
            uint8_t *blk = out + 34 * b;
            memcpy(blk, &dh, 2);
            for (int i = 0; i < 32; i++) {
                long q = d > 0.0f ? lroundf(x[i] / d) : 0;
                q = q > 127 ? 127 : q < -127 ? -127 : q;
                blk[2 + i] = (uint8_t)(int8_t)q;
                exact[32 * b + i] = d * (float)(int8_t)q;
            }
        }
        *nbytes = (size_t)(n / 32) * 34;
        return out;
    }
    uint16_t *out = xmalloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++) {
        out[i] = type == CLEF_DTYPE_BF16 ? clef_f32_to_bf16(vals[i]) : clef_f32_to_f16(vals[i]);
        exact[i] = type == CLEF_DTYPE_BF16 ? clef_bf16_to_f32(out[i]) : clef_f16_to_f32(out[i]);
    }
    *nbytes = (size_t)n * 2;
    return out;
}

/* Two files from the F32 oracle's head: `stored` with every head tensor in
 * pick(tensor)'s type, `exact` with the f32 values those encodings decode to. */
static void build_pair(const gguf_file *src, uint32_t (*pick)(const gguf_tensor *),
                       void **stored, size_t *stored_len, void **exact, size_t *exact_len) {
    gguf_writer *ws = gguf_writer_new(), *we = gguf_writer_new();
    assert_true(ws && we);
    gguf_writer *both[2] = {ws, we};
    const char *counts[] = {"clef.decision.routing_block_count", "clef.decision.block_count",
                            "clef.decision.head_count", "clef.embedding_length"};
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < 4; i++) {
            uint32_t v = 0;
            assert_true(gguf_get_u32(src, counts[i], &v));
            gguf_writer_add_u32(both[k], counts[i], v);
        }
        float eps = 0.0f;
        assert_true(gguf_get_f32(src, "clef.attention.layer_norm_epsilon", &eps));
        gguf_writer_add_f32(both[k], "clef.attention.layer_norm_epsilon", eps);
    }
    for (uint64_t i = 0; i < gguf_tensor_count(src); i++) {
        const gguf_tensor *t = gguf_tensor_at(src, i);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        const bool head = is_head_tensor(t);
        if (!head && strcmp(name, "output.weight") != 0) continue;
        assert_int_equal(t->type, CLEF_DTYPE_F32);
        if (!head) {
            for (int k = 0; k < 2; k++)
                gguf_writer_add_tensor_ref(both[k], name, t->type, t->n_dims, t->ne, t->data,
                                           t->nbytes);
            continue;
        }
        const int64_t n = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
        float *ex = xmalloc((size_t)n * sizeof *ex);
        size_t nb = 0;
        const uint32_t type = pick(t);
        void *enc = encode_as(type, t->data, n, ex, &nb);
        gguf_writer_add_tensor(ws, name, type, t->n_dims, t->ne, enc, nb);
        gguf_writer_add_tensor(we, name, CLEF_DTYPE_F32, t->n_dims, t->ne, ex,
                               (size_t)n * sizeof *ex);
        free(enc);
        free(ex);
    }
    clef_error err = {0};
    if (gguf_writer_write_memory(ws, stored, stored_len, &err) != CLEF_OK ||
        gguf_writer_write_memory(we, exact, exact_len, &err) != CLEF_OK)
        fail_msg("building the re-typed head: %s", err.message);
    gguf_writer_free(ws);
    gguf_writer_free(we);
}

static uint32_t pick_bf16(const gguf_tensor *t) { (void)t; return CLEF_DTYPE_BF16; }

/* Q8_0 where rows are whole blocks (the matrices), F16 for the rest. */
static uint32_t pick_q8_0(const gguf_tensor *t) {
    return t->ne[0] % 32 == 0 && t->n_dims == 2 && t->ne[1] > 1 ? CLEF_DTYPE_Q8_0 : CLEF_DTYPE_F16;
}

static int total_options(const oracle *orc) {
    int total = 0;
    for (int i = 0; i < orc->n; i++) total += orc->cases[i].no;
    return total;
}

/* Logits of every oracle case, concatenated (malloc'd). */
static float *score_cases(const oracle *orc, const head_model *h, tp_pool *pool,
                          const cpu_target *cpu, const head_rows *rows) {
    float *lg = xmalloc((size_t)total_options(orc) * sizeof *lg);
    clef_error err = {0};
    int o = 0;
    for (int i = 0; i < orc->n; i++) {
        const oracle_case *c = &orc->cases[i];
        clef_status st =
            head_score_on(h, pool, cpu, rows, c->hidden, c->ids, c->T, c->qs, c->nq, lg + o, &err);
        if (st != CLEF_OK)
            fail_msg("%s: %s", c->id, err.message);
        o += c->no;
    }
    return lg;
}

/* Logits of every oracle case for one in-memory file (cpu NULL: reference). */
static float *score_buffer(const oracle *orc, const void *buf, size_t len, const cpu_target *cpu) {
    gguf_file *f = NULL;
    clef_error err = {0};
    if (gguf_open_memory(buf, len, &f, &err) != CLEF_OK) fail_msg("%s", err.message);
    head_model *h = NULL;
    if (head_load(f, &h, &err) != CLEF_OK) fail_msg("%s", err.message);
    head_rows rows;
    assert_int_equal(head_rows_from_file(f, 64, &rows, &err), CLEF_OK);
    float *lg = score_cases(orc, h, NULL, cpu, &rows);
    head_free(h);
    gguf_close(f);
    return lg;
}

/* A thread pool shares out the products without changing a bit. */
static void test_pool_gives_same_logits(void **state) {
    const oracle *orc = *state;
    gguf_file *f = open_tiny("F32");
    head_model *h = NULL;
    clef_error err = {0};
    assert_int_equal(head_load(f, &h, &err), CLEF_OK);
    head_rows rows;
    assert_int_equal(head_rows_from_file(f, 64, &rows, &err), CLEF_OK);
    tp_pool *pool = NULL;
    assert_int_equal(tp_create(3, &pool, &err), CLEF_OK);
    float *a = score_cases(orc, h, NULL, NULL, &rows);
    float *b = score_cases(orc, h, pool, NULL, &rows);
    assert_memory_equal(a, b, (size_t)total_options(orc) * sizeof *a);
    free(a);
    free(b);
    cpu_features feat;   /* and on the best fast path: 1 thread vs 3, bit for bit */
    cpu_detect(&feat);
    cpu_target t;
    if (cpu_choose(NULL, &feat, &t, &err) == CLEF_OK && t.path != CPU_PATH_REF) {
        a = score_cases(orc, h, NULL, &t, &rows);
        b = score_cases(orc, h, pool, &t, &rows);
        assert_memory_equal(a, b, (size_t)total_options(orc) * sizeof *a);
        free(a);
        free(b);
    }
    tp_free(pool);
    head_free(h);
    gguf_close(f);
}

/* A head stored as BF16 (used in place), or as Q8_0 matrices (dequantized
 * at load) and F16 (in place), gives bit for bit the logits of the same
 * file with every head tensor replaced by its f32 decoding: on the
 * reference dots and on this CPU's own fast path. */
static void test_head_stored_in_other_types(void **state) {
    const oracle *orc = *state;
    const int total = total_options(orc);
    gguf_file *src = open_tiny("F32");
    cpu_features feat;
    cpu_detect(&feat);
    cpu_target best;
    clef_error err = {0};
    assert_int_equal(cpu_choose(NULL, &feat, &best, &err), CLEF_OK);
    const cpu_target *cpus[2] = {NULL, best.path != CPU_PATH_REF ? &best : NULL};
    uint32_t (*picks[2])(const gguf_tensor *) = {pick_bf16, pick_q8_0};
    const char *labels[2] = {"BF16", "Q8_0/F16"};
    for (int k = 0; k < 2; k++) {
        void *stored = NULL, *exact = NULL;
        size_t stored_len = 0, exact_len = 0;
        build_pair(src, picks[k], &stored, &stored_len, &exact, &exact_len);
        for (int c = 0; c < 2; c++) {
            if (c == 1 && !cpus[1]) continue;
            float *a = score_buffer(orc, stored, stored_len, cpus[c]);
            float *b = score_buffer(orc, exact, exact_len, cpus[c]);
            assert_memory_equal(a, b, (size_t)total * sizeof *a);
            double max_dl = 0.0;
            for (int o = 0, i = 0; i < orc->n; i++)
                for (int j = 0; j < orc->cases[i].no; j++, o++) {
                    const double d = fabs(a[o] - orc->cases[i].logits[j]);
                    if (d > max_dl) max_dl = d; /* not fmax: see score_all */
                }
            printf("[ head ] head stored %-8s %-11s %d logits identical to its f32 decoding; "
                   "%.3e from the F32 oracle (information)\n", labels[k],
                   cpus[c] ? cpu_target_name(cpus[c]) : "reference", total, max_dl);
            assert_true(max_dl > 0.0); /* the tensors really were re-typed */
            free(a);
            free(b);
        }
        free(stored);
        free(exact);
    }
    gguf_close(src);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f32_file),
        cmocka_unit_test(test_f32_file_fast_paths),
        cmocka_unit_test(test_bf16_file),
        cmocka_unit_test(test_q8_0_file),
        cmocka_unit_test(test_variant_heads_with_f32_rows),
        cmocka_unit_test(test_missing_tensor),
        cmocka_unit_test(test_misshaped_tensor),
        cmocka_unit_test(test_missing_key),
        cmocka_unit_test(test_rows_fallback_to_token_embd),
        cmocka_unit_test(test_bad_requests),
        cmocka_unit_test(test_head_stored_in_other_types),
        cmocka_unit_test(test_pool_gives_same_logits),
    };
    return cmocka_run_group_tests(tests, setup_oracle, teardown_oracle);
}
