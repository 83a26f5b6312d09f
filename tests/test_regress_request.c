/*
 * tests/test_regress_request.c — regression tests for request-body crashes
 * and failures that fuzz/fuzz_request found (each test names its input).
 *
 * 1. jansson's syntax errors quote the input "near '...'" and cut that quote
 *    byte-wise, so a multi-byte character could be split: the 400 detail then
 *    held invalid UTF-8, jansson refused to build the error body, and
 *    req_parse answered CLEF_ERR_NOMEM ("out of memory building an error
 *    body") instead of 400.  pyjson_loadb now hands back valid UTF-8 only.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decide/request.h"
#include "text/pyjson.h"
#include "text/tokenizer.h"

/* A 400 {"detail": "<sentence>"} whose sentence is valid UTF-8 and contains want. */
static void expect_400_text(const char *body, size_t len, const char *want) {
    req_request req;
    req_reject rej;
    clef_error err = {0};
    clef_status st = req_parse(body, len, NULL, &req, &rej, &err);
    if (st != CLEF_ERR_REQUEST) fail_msg("req_parse gave %d (%s), not a refusal", st, err.message);
    assert_int_equal(rej.http_status, 400);
    json_t *v = NULL;
    assert_int_equal(pyjson_loadb(rej.body, rej.body_len, 0, &v, NULL, 0), PYJSON_LOAD_OK);
    const char *detail = json_string_value(json_object_get(v, "detail"));
    assert_non_null(detail);
    assert_int_equal(tok_check_utf8(detail, strlen(detail), &err), CLEF_OK);
    if (!strstr(detail, want)) fail_msg("detail '%s' lacks '%s'", detail, want);
    json_decref(v);
    req_reject_free(&rej);
}

/* The loader's own message for text is valid UTF-8 and contains want. */
static void expect_msg_utf8(const char *text, size_t len, pyjson_load_status want_st,
                            const char *want) {
    json_t *v = NULL;
    char msg[256];
    clef_error err = {0};
    assert_int_equal(pyjson_loadb(text, len, 0, &v, msg, sizeof msg), want_st);
    assert_null(v);
    assert_int_equal(tok_check_utf8(msg, strlen(msg), &err), CLEF_OK);
    if (!strstr(msg, want)) fail_msg("message '%s' lacks '%s'", msg, want);
}

/* fuzz_request crash-9d259f62 (minimized): an invalid \u escape right before
 * "é" — jansson quotes '"\u00e' plus the first byte of é. */
static void test_invalid_escape_before_multibyte(void **s) {
    (void)s;
    static const char body[] = "{\"model\":\"m\",\"state\":\"\\u00e\xC3\xA9\",\"questions\":{}}";
    expect_400_text(body, sizeof body - 1, "invalid escape");
    expect_msg_utf8(body, sizeof body - 1, PYJSON_LOAD_SYNTAX, "invalid escape near");
}

/* The same cut after an escape of 0..3 hex digits, before a 2-, 3- or
 * 4-byte character (the quote holds only the character's first byte).  Long quotes
 * are no risk: jansson leaves out quotes over 20 bytes. */
static void test_escape_cut_before_each_width(void **s) {
    (void)s;
    static const char *const hex[] = {"", "0", "00", "00e"};
    static const char *const utf8[] = {"\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80"};
    for (size_t h = 0; h < 4; h++)
        for (size_t c = 0; c < 3; c++) {
            char body[128];
            int n = snprintf(body, sizeof body, "{\"model\":\"m\",\"state\":\"\\u%s%s\"}",
                             hex[h], utf8[c]);
            expect_400_text(body, (size_t)n, "Request body is not valid JSON");
        }
}

/* Untouched: a message whose quote holds whole characters keeps them. */
static void test_whole_characters_kept(void **s) {
    (void)s;
    static const char body[] = "[1\xC3\xA9]";
    expect_msg_utf8(body, sizeof body - 1, PYJSON_LOAD_SYNTAX, "near '\xC3\xA9'");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_invalid_escape_before_multibyte),
        cmocka_unit_test(test_escape_cut_before_each_width),
        cmocka_unit_test(test_whole_characters_kept),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
