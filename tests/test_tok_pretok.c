/* tests/test_tok_pretok.c — the pre-tokenizer against the oracle's splits
 * (qwen3_pretok.jsonl: Qwen2 regex; qwen35_pretok.jsonl: Qwen3.5 regex),
 * on NFC-normalised text, with no GGUF involved. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "testutil.h"
#include "text/pretok.h"
#include "tok_oracle.h"

typedef struct piece_list {
    const char **ptr;
    size_t *len;
    size_t n, cap;
} piece_list;

static clef_status collect(void *ctx, const char *piece, size_t len, clef_error *err) {
    (void)err;
    piece_list *p = ctx;
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 64;
        p->ptr = realloc(p->ptr, p->cap * sizeof *p->ptr);
        p->len = realloc(p->len, p->cap * sizeof *p->len);
    }
    p->ptr[p->n] = piece;
    p->len[p->n++] = len;
    return CLEF_OK;
}

static void print_escaped(const char *s, size_t len) {
    for (size_t i = 0; i < len && i < 200; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7f && c != '\\') putchar(c);
        else printf("\\x%02x", c);
    }
}

/* Do the pieces of (NFC) text match the expected JSON array? */
static int pieces_match(const tok_pretok *pre, const char *text, size_t len, json_t *want,
                        int verbose) {
    utf8proc_uint8_t *nfc = NULL;
    utf8proc_ssize_t nl = 0;
    if (len) {
        nl = utf8proc_map((const utf8proc_uint8_t *)text, (utf8proc_ssize_t)len, &nfc,
                          UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        assert_true(nl >= 0);
    }
    piece_list got = {0};
    clef_error err = {0};
    assert_int_equal(tok_pretok_split(pre, (const char *)nfc, (size_t)nl, collect, &got, &err),
                     CLEF_OK);
    int ok = got.n == json_array_size(want);
    for (size_t i = 0; ok && i < got.n; i++) {
        json_t *w = json_array_get(want, i);
        ok = tok_eq_marked(got.ptr[i], got.len[i], json_string_value(w), json_string_length(w));
    }
    if (!ok && verbose) {
        printf("    got  %zu pieces:", got.n);
        for (size_t i = 0; i < got.n; i++) {
            printf(" [");
            print_escaped(got.ptr[i], got.len[i]);
            printf("]");
        }
        printf("\n    want %zu pieces:", json_array_size(want));
        for (size_t i = 0; i < json_array_size(want); i++) {
            json_t *w = json_array_get(want, i);
            printf(" [");
            print_escaped(json_string_value(w), json_string_length(w));
            printf("]");
        }
        printf("\n");
    }
    free(got.ptr);
    free(got.len);
    free(nfc);
    return ok;
}

/* A record rebuilt from fragments is only trusted when its pieces still
 * concatenate to its (NFC) text for some reading of the marks: otherwise
 * fragments of different records were joined. */
static int rejoined_consistent(const char *text, size_t len, json_t *want) {
    size_t cl = 0;
    for (size_t i = 0; i < json_array_size(want); i++)
        cl += json_string_length(json_array_get(want, i));
    char *cat = malloc(cl + 1);
    cl = 0;
    for (size_t i = 0; i < json_array_size(want); i++) {
        json_t *w = json_array_get(want, i);
        memcpy(cat + cl, json_string_value(w), json_string_length(w));
        cl += json_string_length(w);
    }
    int ok = 0;
    for (unsigned c = 0; c < tok_pow3(tok_count_marks(text, len)) && !ok; c++) {
        size_t sl;
        char *s = tok_subst_marks(text, len, c, &sl);
        utf8proc_uint8_t *nfc = NULL;
        utf8proc_ssize_t nl = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)sl,
                                           &nfc, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        ok = nl >= 0 && tok_eq_marked((const char *)nfc, (size_t)nl, cat, cl);
        free(nfc);
        free(s);
    }
    free(cat);
    return ok;
}

static void check_file(const char *name, tok_pre_kind kind) {
    char path[256];
    snprintf(path, sizeof path, "%s/tokenizer/%s", ORACLE_DIR, name);
    tok_pretok *pre = NULL;
    clef_error err = {0};
    assert_int_equal(tok_pretok_new(kind, &pre, &err), CLEF_OK);
    tok_recs recs;
    assert_int_equal(tok_recs_read(path, &recs, 1), 0);
    assert_true(recs.n > 600);
    size_t pass = 0, n_bad = 0;
    for (size_t r = 0; r < recs.n; r++) {
        json_t *t = json_object_get(recs.recs[r].obj, "text");
        json_t *want = json_object_get(recs.recs[r].obj, "pieces");
        assert_true(json_is_string(t) && json_is_array(want));
        const char *text = json_string_value(t);
        size_t len = json_string_length(t);
        int marks = tok_count_marks(text, len);
        assert_true(marks <= 6);
        if (recs.recs[r].n_marks && !rejoined_consistent(text, len, want)) {
            printf("  %s:%d: damaged record (fragments of several records), not checked\n",
                   name, recs.recs[r].line);
            n_bad++;
            continue;
        }
        int ok = 0;
        for (unsigned c = 0; c < tok_pow3(marks) && !ok; c++) {
            size_t sl;
            char *s = tok_subst_marks(text, len, c, &sl);
            ok = pieces_match(pre, s, sl, want, 0);
            free(s);
        }
        if (ok) {
            pass++;
            continue;
        }
        printf("  FAIL %s:%d text [", name, recs.recs[r].line);
        print_escaped(text, len);
        printf("]\n");
        pieces_match(pre, text, len, want, 1);
    }
    printf("  %s: %zu/%zu records pass (%zu rebuilt from damaged lines, %zu of them "
           "inconsistent and skipped; %zu damaged lines formed no record)\n",
           name, pass, recs.n - n_bad, recs.n_rejoined, n_bad, recs.n_lost_lines);
    size_t n = recs.n - n_bad;
    tok_recs_free(&recs);
    tok_pretok_free(pre);
    assert_int_equal(pass, n);
}

static void test_qwen2_pattern(void **state) {
    (void)state;
    check_file("qwen3_pretok.jsonl", TOK_PRE_QWEN2);
}

static void test_qwen35_pattern(void **state) {
    (void)state;
    check_file("qwen35_pretok.jsonl", TOK_PRE_QWEN35);
}

static void test_pre_names(void **state) {
    (void)state;
    tok_pre_kind k;
    clef_error err = {0};
    assert_int_equal(tok_pre_kind_from_name("qwen2", 5, &k, &err), CLEF_OK);
    assert_int_equal(k, TOK_PRE_QWEN2);
    assert_int_equal(tok_pre_kind_from_name("qwen35", 6, &k, &err), CLEF_OK);
    assert_int_equal(k, TOK_PRE_QWEN35);
    assert_int_equal(tok_pre_kind_from_name("llama3", 6, &k, &err), CLEF_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.message, "'llama3'"));
    /* Exact match only: a prefix of a known name is not that name. */
    assert_int_equal(tok_pre_kind_from_name("qwen35", 5 - 1, &k, &err), CLEF_ERR_UNSUPPORTED);
}

/* Long runs must split in linear time and without exhausting the JIT stack:
 * a megabyte of spaces then a word is one whitespace piece and " x". */
static void test_long_runs(void **state) {
    (void)state;
    tok_pretok *pre = NULL;
    clef_error err = {0};
    assert_int_equal(tok_pretok_new(TOK_PRE_QWEN2, &pre, &err), CLEF_OK);
    size_t n = 1 << 20;
    char *s = malloc(n + 1);
    memset(s, ' ', n);
    s[n] = 'x';
    piece_list got = {0};
    assert_int_equal(tok_pretok_split(pre, s, n + 1, collect, &got, &err), CLEF_OK);
    assert_int_equal(got.n, 2);
    assert_int_equal(got.len[0], n - 1);
    assert_int_equal(got.len[1], 2);
    free(got.ptr);
    free(got.len);
    free(s);
    tok_pretok_free(pre);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen2_pattern),
        cmocka_unit_test(test_qwen35_pattern),
        cmocka_unit_test(test_pre_names),
        cmocka_unit_test(test_long_runs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
