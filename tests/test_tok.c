/* tests/test_tok.c — the tokenizer end to end: every oracle case on the
 * Qwen3 vocabulary (plain, added tokens, added tokens as text), the qwen35
 * prompts with their model files, round trips, invalid UTF-8, a synthetic
 * vocabulary for BPE order and load errors, and the `clef tokenize` CLI. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "format/gguf_write.h"
#include "testutil.h"
#include "text/bpe.h"
#include "text/tokenizer.h"
#include "tok_oracle.h"

#define QWEN3_VOCAB ORACLE_DIR "/tokenizer/qwen3-vocab.gguf"

/* ---- helpers ---- */

static char *nfc(const char *s, size_t len, size_t *out_len) {
    if (len == 0) {
        *out_len = 0;
        return calloc(1, 1);
    }
    utf8proc_uint8_t *o = NULL;
    utf8proc_ssize_t n = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len, &o,
                                      UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    assert_true(n >= 0);
    *out_len = (size_t)n;
    return (char *)o;
}

static void print_escaped(const char *s, size_t len) {
    for (size_t i = 0; i < len && i < 160; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7f && c != '\\') putchar(c);
        else printf("\\x%02x", c);
    }
}

static void print_ids(const char *label, const int32_t *ids, size_t n) {
    printf("    %s (%zu):", label, n);
    for (size_t i = 0; i < n && i < 40; i++) printf(" %d", ids[i]);
    printf("%s\n", n > 40 ? " ..." : "");
}

/* ids of a JSON array of integers (malloc'd). */
static int32_t *json_ids(json_t *arr, size_t *n) {
    *n = json_array_size(arr);
    int32_t *ids = malloc((*n ? *n : 1) * sizeof *ids);
    for (size_t i = 0; i < *n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(arr, i));
    return ids;
}

static int encode_equals(const clef_tokenizer *tok, const char *text, size_t len, bool special,
                         const int32_t *want, size_t n_want) {
    int32_t *ids = NULL;
    size_t n = 0;
    clef_error err = {0};
    clef_status st = clef_tokenize(tok, text, len, special, &ids, &n, &err);
    if (st != CLEF_OK) printf("    clef_tokenize failed: %s\n", err.message);
    int ok = st == CLEF_OK && n == n_want && (n == 0 || memcmp(ids, want, n * sizeof *ids) == 0);
    clef_free(ids);
    return ok;
}

/* Check every record of an oracle JSONL file of {"text","ids"}. */
static void check_ids_file(const clef_tokenizer *tok, const char *name, bool special,
                           size_t min_records) {
    char path[256];
    snprintf(path, sizeof path, "%s/tokenizer/%s", ORACLE_DIR, name);
    tok_recs recs;
    assert_int_equal(tok_recs_read(path, &recs, 1), 0);
    assert_true(recs.n >= min_records);
    size_t pass = 0, n_bad = 0, fail = 0;
    for (size_t r = 0; r < recs.n; r++) {
        json_t *t = json_object_get(recs.recs[r].obj, "text");
        json_t *ja = json_object_get(recs.recs[r].obj, "ids");
        assert_true(json_is_string(t) && json_is_array(ja));
        const char *text = json_string_value(t);
        size_t len = json_string_length(t), n_want;
        int32_t *want = json_ids(ja, &n_want);
        int marks = tok_count_marks(text, len);
        assert_true(marks <= 6);
        int ok = 0;
        for (unsigned c = 0; c < tok_pow3(marks) && !ok; c++) {
            size_t sl;
            char *s = tok_subst_marks(text, len, c, &sl);
            ok = encode_equals(tok, s, sl, special, want, n_want);
            free(s);
        }
        if (ok) {
            pass++;
        } else if (recs.recs[r].n_marks) {
            /* Rebuilt from fragments and matching no reading of the marks:
             * the fragments belong to different records. */
            printf("  %s:%d: damaged record (fragments of several records), not checked\n",
                   name, recs.recs[r].line);
            n_bad++;
        } else {
            fail++;
            printf("  FAIL %s:%d text [", name, recs.recs[r].line);
            print_escaped(text, len);
            printf("]\n");
            int32_t *got = NULL;
            size_t n_got = 0;
            clef_error err = {0};
            if (clef_tokenize(tok, text, len, special, &got, &n_got, &err) == CLEF_OK)
                print_ids("got ", got, n_got);
            print_ids("want", want, n_want);
            clef_free(got);
        }
        free(want);
    }
    printf("  %s: %zu/%zu records pass (%zu rebuilt from damaged lines, %zu of them "
           "inconsistent and skipped; %zu damaged lines formed no record)\n",
           name, pass, recs.n - n_bad, recs.n_rejoined, n_bad, recs.n_lost_lines);
    tok_recs_free(&recs);
    assert_int_equal(fail, 0);
}

/* ---- the Qwen3 vocabulary (loaded once for the group) ---- */

static int load_qwen3(void **state) {
    clef_tokenizer *tok = NULL;
    clef_error err = {0};
    if (clef_tokenizer_load(QWEN3_VOCAB, &tok, &err) != CLEF_OK) {
        printf("cannot load %s: %s\n", QWEN3_VOCAB, err.message);
        return -1;
    }
    *state = tok;
    return 0;
}

static int free_qwen3(void **state) {
    clef_tokenizer_free(*state);
    return 0;
}

static void test_qwen3_facts(void **state) {
    const clef_tokenizer *tok = *state;
    /* From the oracle README / SOURCE.md. */
    assert_int_equal(clef_tokenizer_vocab_size(tok), 151669);
    assert_int_equal(tok_n_tokens(tok), 151669);
    assert_int_equal(tok_find(tok, "<|endoftext|>", 13), 151643);
    assert_int_equal(tok_find(tok, "<|im_start|>", 12), 151644);
    assert_int_equal(tok_find(tok, "</think>", 8), 151668);
    assert_int_equal(tok_find(tok, "!", 1), 0);
    assert_int_equal(tok_find(tok, "no such token", 13), -1);
    assert_int_equal(tok_token_type(tok, 151644), TOK_TYPE_CONTROL);
    assert_int_equal(tok_token_type(tok, 151668), TOK_TYPE_USER_DEFINED);
    assert_int_equal(tok_token_type(tok, 151669), 0);
    assert_int_equal(tok_eos(tok), 151645);
    assert_int_equal(tok_bos(tok), -1);
    assert_int_equal(tok_pre(tok), TOK_PRE_QWEN2);
    size_t len = 0;
    const char *s = tok_token_str(tok, 151645, &len);
    assert_non_null(s);
    assert_int_equal(len, 10);
    assert_memory_equal(s, "<|im_end|>", 10);
    assert_null(tok_token_str(tok, -1, &len));
}

static void test_qwen3_cases(void **state) {
    check_ids_file(*state, "qwen3_cases.jsonl", true, 600);
}

static void test_qwen3_special(void **state) {
    check_ids_file(*state, "qwen3_special_cases.jsonl", true, 80);
}

static void test_qwen3_special_as_text(void **state) {
    check_ids_file(*state, "qwen3_special_as_text.jsonl", false, 80);
}

/* decode(oracle ids) == NFC(text), and decode(encode(text)) == NFC(text),
 * for every intact record of the three files (with added tokens, NFC is
 * per segment). */
static void round_trip_file(const clef_tokenizer *tok, const char *name, bool special) {
    char path[256];
    snprintf(path, sizeof path, "%s/tokenizer/%s", ORACLE_DIR, name);
    tok_recs recs;
    assert_int_equal(tok_recs_read(path, &recs, 0), 0);
    size_t checked = 0;
    for (size_t r = 0; r < recs.n; r++) {
        if (recs.recs[r].n_marks) continue;
        json_t *t = json_object_get(recs.recs[r].obj, "text");
        const char *text = json_string_value(t);
        size_t len = json_string_length(t), n_want, nl, dl, dl2;
        int32_t *want = json_ids(json_object_get(recs.recs[r].obj, "ids"), &n_want);
        char *norm = nfc(text, len, &nl);
        if (special) {
            /* Each segment between added tokens is normalised on its own
             * ("<|im_start|>" + U+0338 must not compose '>' + U+0338), so
             * the reference is the oracle ids' own decoding, which must
             * still agree with the text up to NFC. */
            char *d = NULL;
            size_t dn = 0, dnl = 0;
            clef_error e = {0};
            assert_int_equal(clef_detokenize(tok, want, n_want, &d, &dn, &e), CLEF_OK);
            char *dnorm = nfc(d, dn, &dnl);
            assert_int_equal(dnl, nl);
            assert_memory_equal(dnorm, norm, nl);
            free(dnorm);
            free(norm);
            norm = d;
            nl = dn;
        }
        char *dec = NULL, *dec2 = NULL;
        int32_t *ids = NULL;
        size_t n = 0;
        clef_error err = {0};
        assert_int_equal(clef_detokenize(tok, want, n_want, &dec, &dl, &err), CLEF_OK);
        assert_int_equal(clef_tokenize(tok, text, len, special, &ids, &n, &err), CLEF_OK);
        assert_int_equal(clef_detokenize(tok, ids, n, &dec2, &dl2, &err), CLEF_OK);
        if (dl != nl || memcmp(dec, norm, nl) != 0 || dl2 != nl || memcmp(dec2, norm, nl) != 0) {
            printf("  round trip FAIL %s:%d [", name, recs.recs[r].line);
            print_escaped(text, len);
            printf("]\n");
            fail();
        }
        assert_int_equal(dec[dl], '\0');
        checked++;
        clef_free(dec);
        clef_free(dec2);
        clef_free(ids);
        free(norm);
        free(want);
    }
    printf("  %s: %zu round trips\n", name, checked);
    tok_recs_free(&recs);
}

static void test_round_trip(void **state) {
    round_trip_file(*state, "qwen3_cases.jsonl", true);
    round_trip_file(*state, "qwen3_special_cases.jsonl", true);
    round_trip_file(*state, "qwen3_special_as_text.jsonl", false);
}

static void expect_invalid(const clef_tokenizer *tok, const char *text, size_t len,
                           size_t offset) {
    int32_t *ids = (int32_t *)1;
    size_t n = 7;
    clef_error err = {0};
    assert_int_equal(clef_tokenize(tok, text, len, true, &ids, &n, &err), CLEF_ERR_INVALID_ARG);
    assert_null(ids);
    assert_int_equal(n, 0);
    char want[64];
    snprintf(want, sizeof want, "byte offset %zu ", offset);
    if (!strstr(err.message, want)) printf("  message: %s (want '%s')\n", err.message, want);
    assert_non_null(strstr(err.message, want));
}

static void test_invalid_utf8(void **state) {
    const clef_tokenizer *tok = *state;
    expect_invalid(tok, "ab\xff", 3, 2);
    expect_invalid(tok, "abc\xc3", 4, 3);                 /* truncated at the end   */
    expect_invalid(tok, "\xc0\x80", 2, 0);                /* overlong NUL           */
    expect_invalid(tok, "x\xed\xa0\x80y", 5, 1);          /* surrogate U+D800       */
    expect_invalid(tok, "\xf4\x90\x80\x80", 4, 0);        /* above U+10FFFF         */
    expect_invalid(tok, "<|im_start|>\x80", 13, 12);      /* after an added token   */
    expect_invalid(tok, "a\0\xe2\x82", 4, 2);             /* NUL, then truncated    */
}

static void test_api_args(void **state) {
    const clef_tokenizer *tok = *state;
    int32_t *ids = NULL;
    size_t n = 9;
    clef_error err = {0};
    assert_int_equal(clef_tokenize(tok, NULL, 0, true, &ids, &n, &err), CLEF_OK);
    assert_non_null(ids);
    assert_int_equal(n, 0);
    clef_free(ids);
    assert_int_equal(clef_tokenize(tok, NULL, 3, true, &ids, &n, &err), CLEF_ERR_INVALID_ARG);
    char *text = NULL;
    size_t len = 0;
    int32_t bad[] = {9707, 151669};
    assert_int_equal(clef_detokenize(tok, bad, 2, &text, &len, &err), CLEF_ERR_INVALID_ARG);
    assert_non_null(strstr(err.message, "151669"));
    assert_null(text);
    assert_int_equal(clef_detokenize(tok, NULL, 0, &text, &len, &err), CLEF_OK);
    assert_int_equal(len, 0);
    assert_string_equal(text, "");
    clef_free(text);
    /* Appending keeps what was there; a failure restores the count. */
    int32_t *buf = NULL;
    size_t nb = 0, cap = 0;
    assert_int_equal(tok_encode_append(tok, "Hello", 5, true, &buf, &nb, &cap, &err), CLEF_OK);
    assert_int_equal(tok_encode_append(tok, " world", 6, true, &buf, &nb, &cap, &err), CLEF_OK);
    assert_int_equal(nb, 2);
    assert_int_equal(buf[0], 9707); /* "Hello world" = [9707,1879] in qwen3_cases.jsonl */
    assert_int_equal(buf[1], 1879);
    assert_int_equal(tok_encode_append(tok, "x\xff", 2, true, &buf, &nb, &cap, &err),
                     CLEF_ERR_INVALID_ARG);
    assert_int_equal(nb, 2);
    free(buf);
}

/* ---- qwen35 prompts (llama.cpp's ids, pre = qwen35) ---- */

static void test_qwen35_prompts(void **state) {
    (void)state;
    glob_t g;
    assert_int_equal(glob(ORACLE_DIR "/qwen35/*.p*.json", 0, NULL, &g), 0);
    assert_true(g.gl_pathc >= 7);
    for (size_t i = 0; i < g.gl_pathc; i++) {
        json_error_t je;
        json_t *j = json_load_file(g.gl_pathv[i], 0, &je);
        assert_non_null(j);
        char model[512];
        snprintf(model, sizeof model, "%s/qwen35/%s", ORACLE_DIR,
                 json_string_value(json_object_get(j, "model")));
        clef_tokenizer *tok = NULL;
        clef_error err = {0};
        if (clef_tokenizer_load(model, &tok, &err) != CLEF_OK) printf("  %s\n", err.message);
        assert_non_null(tok);
        assert_int_equal(tok_pre(tok), TOK_PRE_QWEN35);
        json_t *p = json_object_get(j, "prompt");
        size_t n_want;
        int32_t *want = json_ids(json_object_get(j, "tokens"), &n_want);
        int ok = encode_equals(tok, json_string_value(p), json_string_length(p), true, want,
                               n_want);
        printf("  %s: %zu tokens %s\n", g.gl_pathv[i], n_want, ok ? "ok" : "DIFFER");
        assert_true(ok);
        /* Forcing the Qwen2 split (what Clef checkpoints use) changes
         * nothing on these ASCII prompts. */
        gguf_file *f = NULL;
        assert_int_equal(gguf_open(model, &f, &err), CLEF_OK);
        clef_tokenizer *tok2 = NULL;
        tok_pre_kind qwen2 = TOK_PRE_QWEN2;
        assert_int_equal(tok_load_gguf_ex(f, &qwen2, &tok2, &err), CLEF_OK);
        gguf_close(f);
        assert_int_equal(tok_pre(tok2), TOK_PRE_QWEN2);
        assert_true(encode_equals(tok2, json_string_value(p), json_string_length(p), true, want,
                                  n_want));
        clef_tokenizer_free(tok2);
        free(want);
        clef_tokenizer_free(tok);
        json_decref(j);
    }
    globfree(&g);
}

/* The clef-tiny model's tokenizer (facts from its README). */
static void test_clef_tiny_vocab(void **state) {
    (void)state;
    clef_tokenizer *tok = NULL;
    clef_error err = {0};
    assert_int_equal(clef_tokenizer_load(ORACLE_DIR "/clef-tiny/clef-tiny-a-F32.gguf", &tok, &err),
                     CLEF_OK);
    assert_int_equal(tok_n_tokens(tok), 832);
    assert_int_equal(tok_pre(tok), TOK_PRE_QWEN2);
    assert_int_equal(tok_find(tok, "<|im_start|>", 12), 786);
    assert_int_equal(tok_find(tok, "<think>", 7), 788);
    assert_int_equal(tok_token_type(tok, 788), TOK_TYPE_USER_DEFINED);
    assert_int_equal(tok_token_type(tok, 786), TOK_TYPE_CONTROL);
    assert_int_equal(tok_bos(tok), 785);
    assert_int_equal(tok_eos(tok), 787);
    int32_t *ids = NULL;
    size_t n = 0;
    assert_int_equal(clef_tokenize(tok, "<|im_start|><think>", 19, true, &ids, &n, &err), CLEF_OK);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], 786);
    assert_int_equal(ids[1], 788);
    clef_free(ids);
    clef_tokenizer_free(tok);
}

/* ---- a synthetic vocabulary: BPE order, added tokens, load errors ----
 * Tokens 0..255 are the byte symbols in byte order (so the id of an
 * unmerged byte is the byte), then "aa", "ab" (merges ranked 0, 1),
 * "<x>" (control), "<x>y" (user-defined), "[PAD]" (unused). */

typedef struct synth_opts {
    const char *model, *pre;
    bool no_merges, bad_merge, short_types, bos_out_of_range, drop_byte_z;
} synth_opts;

static clef_status synth_load(const synth_opts *o, clef_tokenizer **out, clef_error *err) {
    enum { N = 261 };
    char sym[256][3];
    const char *strs[N];
    int32_t types[N];
    for (int b = 0; b < 256; b++) {
        size_t l = tok_byte_to_utf8((uint8_t)b, sym[b]);
        sym[b][l] = '\0';
        strs[b] = sym[b];
        types[b] = TOK_TYPE_BYTE;
    }
    if (o->drop_byte_z) strs['z'] = "zz";
    strs[256] = "aa", strs[257] = "ab", strs[258] = "<x>", strs[259] = "<x>y", strs[260] = "[PAD]";
    types[256] = types[257] = TOK_TYPE_NORMAL;
    types[258] = TOK_TYPE_CONTROL, types[259] = TOK_TYPE_USER_DEFINED, types[260] = TOK_TYPE_UNUSED;
    const char *merges[] = {"a a", o->bad_merge ? "a q" : "a b"};
    gguf_writer *w = gguf_writer_new();
    gguf_writer_add_str(w, "tokenizer.ggml.model", o->model ? o->model : "gpt2");
    gguf_writer_add_str(w, "tokenizer.ggml.pre", o->pre ? o->pre : "qwen2");
    gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", strs, NULL, N);
    gguf_writer_add_arr(w, "tokenizer.ggml.token_type", GGUF_VT_INT32, types,
                        o->short_types ? N - 1 : N);
    if (!o->no_merges) gguf_writer_add_arr_str(w, "tokenizer.ggml.merges", merges, NULL, 2);
    gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", o->bos_out_of_range ? N : 258);
    void *mem = NULL;
    size_t len = 0;
    clef_error werr = {0};
    assert_int_equal(gguf_writer_write_memory(w, &mem, &len, &werr), CLEF_OK);
    gguf_writer_free(w);
    gguf_file *f = NULL;
    assert_int_equal(gguf_open_memory(mem, len, &f, &werr), CLEF_OK);
    clef_status st = tok_load_gguf(f, out, err);
    gguf_close(f);
    free(mem);
    return st;
}

static void expect_ids(const clef_tokenizer *tok, const char *text, bool special,
                       const int32_t *want, size_t n_want) {
    int ok = encode_equals(tok, text, strlen(text), special, want, n_want);
    if (!ok) printf("  text '%s'\n", text);
    assert_true(ok);
}

static void test_synthetic_bpe(void **state) {
    (void)state;
    clef_tokenizer *tok = NULL;
    clef_error err = {0};
    synth_opts o = {0};
    assert_int_equal(synth_load(&o, &tok, &err), CLEF_OK);
    assert_int_equal(tok_bos(tok), 258);
    assert_int_equal(tok_eos(tok), -1);
    /* Equal ranks: the leftmost pair merges first. */
    expect_ids(tok, "aaa", true, (int32_t[]){256, 'a'}, 2);
    expect_ids(tok, "aaaa", true, (int32_t[]){256, 256}, 2);
    /* Lower rank first even when it is further right: "a|ab" loses to "aa|b". */
    expect_ids(tok, "aab", true, (int32_t[]){256, 'b'}, 2);
    expect_ids(tok, "abab", true, (int32_t[]){257, 257}, 2);
    /* Longest added token wins; UNUSED tokens are not added tokens. */
    expect_ids(tok, "<x>y<x>z", true, (int32_t[]){259, 258, 'z'}, 3);
    expect_ids(tok, "<x>y", false, (int32_t[]){'<', 'x', '>', 'y'}, 4);
    expect_ids(tok, "[PAD]", true, (int32_t[]){'[', 'P', 'A', 'D', ']'}, 5);
    /* A space byte is the symbol U+0120, id 32 here. */
    expect_ids(tok, " aa", true, (int32_t[]){' ', 256}, 2);
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(clef_detokenize(tok, (int32_t[]){259, 256, ' ', 0}, 4, &text, &len, &err),
                     CLEF_OK);
    assert_int_equal(len, 8);
    assert_memory_equal(text, "<x>yaa \0", 8);
    clef_free(text);
    clef_tokenizer_free(tok);

    o.drop_byte_z = true;
    assert_int_equal(synth_load(&o, &tok, &err), CLEF_OK);
    int32_t *ids = NULL;
    size_t n = 0;
    assert_int_equal(clef_tokenize(tok, "az", 2, true, &ids, &n, &err), CLEF_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.message, "0x7a"));
    clef_tokenizer_free(tok);
}

static void expect_load_error(synth_opts o, clef_status want, const char *needle) {
    clef_tokenizer *tok = (clef_tokenizer *)1;
    clef_error err = {0};
    assert_int_equal(synth_load(&o, &tok, &err), want);
    assert_null(tok);
    if (!strstr(err.message, needle)) printf("  message: %s (want '%s')\n", err.message, needle);
    assert_non_null(strstr(err.message, needle));
}

static void test_load_errors(void **state) {
    (void)state;
    expect_load_error((synth_opts){.pre = "llama3"}, CLEF_ERR_UNSUPPORTED, "'llama3'");
    expect_load_error((synth_opts){.pre = "qwen3"}, CLEF_ERR_UNSUPPORTED, "'qwen3'");
    expect_load_error((synth_opts){.model = "llama"}, CLEF_ERR_UNSUPPORTED, "'llama'");
    expect_load_error((synth_opts){.no_merges = true}, CLEF_ERR_FORMAT, "tokenizer.ggml.merges");
    expect_load_error((synth_opts){.bad_merge = true}, CLEF_ERR_FORMAT, "merge 1 ('a q')");
    expect_load_error((synth_opts){.short_types = true}, CLEF_ERR_FORMAT,
                      "tokenizer.ggml.token_type");
    expect_load_error((synth_opts){.bos_out_of_range = true}, CLEF_ERR_FORMAT,
                      "tokenizer.ggml.bos_token_id");
    clef_tokenizer *tok = (clef_tokenizer *)1;
    clef_error err = {0};
    assert_int_not_equal(clef_tokenizer_load("/nonexistent/x.gguf", &tok, &err), CLEF_OK);
    assert_null(tok);
    assert_non_null(strstr(err.message, "/nonexistent/x.gguf"));
}

/* ---- the CLI ---- */

/* Run `clef tokenize ARGS` with stdin from a file holding text[0..len). */
static char *run_cli(const char *args, const char *stdin_text, size_t len, int *status) {
    char *in = tu_write_temp("tok_stdin.txt", stdin_text, len);
    assert_non_null(in);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' tokenize %s < '%s' 2>&1", tu_clef_bin(), args, in);
    char *out = tu_run(cmd, status);
    free(in);
    assert_non_null(out);
    return out;
}

static char *ids_json(const int32_t *ids, size_t n) {
    char *s = malloc(16 * n + 4);
    size_t k = 0;
    s[k++] = '[';
    for (size_t i = 0; i < n; i++) k += (size_t)sprintf(s + k, i ? ",%d" : "%d", ids[i]);
    s[k++] = ']';
    s[k++] = '\n';
    s[k] = '\0';
    return s;
}

/* The first record of an oracle file whose text contains byte c. */
static json_t *first_record_with(const char *name, char c) {
    char path[256];
    snprintf(path, sizeof path, "%s/tokenizer/%s", ORACLE_DIR, name);
    tok_recs recs;
    assert_int_equal(tok_recs_read(path, &recs, 0), 0);
    json_t *found = NULL;
    for (size_t r = 0; r < recs.n && !found; r++) {
        json_t *t = json_object_get(recs.recs[r].obj, "text");
        if (!recs.recs[r].n_marks && memchr(json_string_value(t), c, json_string_length(t)))
            found = json_incref(recs.recs[r].obj);
    }
    tok_recs_free(&recs);
    assert_non_null(found);
    return found;
}

static void cli_stdin_case(const char *file, char c, const char *flags) {
    json_t *rec = first_record_with(file, c);
    json_t *t = json_object_get(rec, "text");
    size_t n;
    int32_t *want = json_ids(json_object_get(rec, "ids"), &n);
    char *want_out = ids_json(want, n);
    char args[512];
    snprintf(args, sizeof args, "-m '%s' %s -", QWEN3_VOCAB, flags);
    int status = -1;
    char *out = run_cli(args, json_string_value(t), json_string_length(t), &status);
    assert_int_equal(status, 0);
    assert_string_equal(out, want_out);
    free(out);
    free(want_out);
    free(want);
    json_decref(rec);
}

static void test_cli(void **state) {
    (void)state;
    int status = -1;
    char args[512];
    snprintf(args, sizeof args, "-m '%s' 'Hello world'", QWEN3_VOCAB);
    char *out = run_cli(args, "", 0, &status);
    assert_int_equal(status, 0);
    assert_string_equal(out, "[9707,1879]\n"); /* qwen3_cases.jsonl */
    free(out);
    cli_stdin_case("qwen3_cases.jsonl", '\0', "");                  /* binary-safe stdin */
    cli_stdin_case("qwen3_special_cases.jsonl", '<', "");           /* added tokens      */
    cli_stdin_case("qwen3_special_as_text.jsonl", '<', "--no-special");

    out = run_cli("'Hello'", "", 0, &status); /* no -m */
    assert_int_equal(status, 2);
    free(out);
    snprintf(args, sizeof args, "-m '%s' --bogus x", QWEN3_VOCAB);
    out = run_cli(args, "", 0, &status);
    assert_int_equal(status, 2);
    free(out);
    out = run_cli("-m /nonexistent.gguf x", "", 0, &status);
    assert_int_equal(status, 1);
    assert_non_null(strstr(out, "clef tokenize: "));
    free(out);
    snprintf(args, sizeof args, "-m '%s' -", QWEN3_VOCAB);
    out = run_cli(args, "ok\xfe", 3, &status);
    assert_int_equal(status, 1);
    assert_non_null(strstr(out, "clef tokenize: invalid UTF-8 at byte offset 2"));
    free(out);
}

int main(void) {
    const struct CMUnitTest qwen3[] = {
        cmocka_unit_test(test_qwen3_facts),
        cmocka_unit_test(test_qwen3_cases),
        cmocka_unit_test(test_qwen3_special),
        cmocka_unit_test(test_qwen3_special_as_text),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_invalid_utf8),
        cmocka_unit_test(test_api_args),
    };
    const struct CMUnitTest other[] = {
        cmocka_unit_test(test_qwen35_prompts),
        cmocka_unit_test(test_clef_tiny_vocab),
        cmocka_unit_test(test_synthetic_bpe),
        cmocka_unit_test(test_load_errors),
        cmocka_unit_test(test_cli),
    };
    int failed = cmocka_run_group_tests_name("qwen3 vocabulary", qwen3, load_qwen3, free_qwen3);
    failed += cmocka_run_group_tests_name("other vocabularies and the CLI", other, NULL, NULL);
    return failed;
}
