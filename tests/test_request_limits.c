/*
 * tests/test_request_limits.c — the configurable request limits of
 * decide/request.h (max_questions, max_choices, max_depth): defaults, the
 * exact refusal at one over the limit, zero meaning the default, the depth
 * cap (1024), and a model name holding a NUL under
 * model_known.  Bodies are built here, large ones included (10,000
 * questions, 3,000 levels of nesting).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "decide/request.h"
#include "testutil.h"

/* A growing text buffer; every append aborts the test when out of memory. */
typedef struct sbuf {
    char *p;
    size_t len, cap;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *np = realloc(b->p, cap);
        assert_non_null(np);
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_puts(sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

/* {"model":"m","state":"s","questions":{"q0":noul,...}} with n questions. */
static char *questions_body(size_t n) {
    sbuf b = {0};
    sb_puts(&b, "{\"model\":\"m\",\"state\":\"s\",\"questions\":{");
    for (size_t i = 0; i < n; i++) {
        char q[96];
        snprintf(q, sizeof q, "%s\"q%zu\":{\"type\":\"noul\",\"instructions\":\"is it?\"}", i ? "," : "", i);
        sb_puts(&b, q);
    }
    sb_puts(&b, "}}");
    return b.p;
}

/* A choice question with n options. */
static char *choices_body(size_t n) {
    sbuf b = {0};
    sb_puts(&b, "{\"model\":\"m\",\"state\":\"s\",\"questions\":{\"pick\":{\"type\":\"choice\",\"criteria\":{");
    for (size_t i = 0; i < n; i++) {
        char o[32];
        snprintf(o, sizeof o, "%s\"o%zu\":null", i ? "," : "", i);
        sb_puts(&b, o);
    }
    sb_puts(&b, "}}}}");
    return b.p;
}

/* A state nested `levels` arrays deep: the body's depth is levels + 1. */
static char *nested_body(size_t levels) {
    sbuf b = {0};
    sb_puts(&b, "{\"model\":\"m\",\"state\":");
    for (size_t i = 0; i < levels; i++) sb_puts(&b, "[");
    sb_puts(&b, "\"deep\"");
    for (size_t i = 0; i < levels; i++) sb_puts(&b, "]");
    sb_puts(&b, ",\"questions\":{\"q\":{\"type\":\"noul\",\"instructions\":\"is it?\"}}}");
    return b.p;
}

static void expect_ok(const char *body, const req_params *p) {
    req_request req;
    req_reject rej;
    clef_error err = {0};
    clef_status st = req_parse(body, strlen(body), p, &req, &rej, &err);
    if (st != CLEF_OK)
        fail_msg("refused (%d): %d %s %s", (int)st, rej.http_status, rej.body ? rej.body : "", err.message);
    req_request_free(&req);
}

static void expect_refused(const char *body, const req_params *p, int status, const char *want) {
    req_request req;
    req_reject rej;
    clef_error err = {0};
    clef_status st = req_parse(body, strlen(body), p, &req, &rej, &err);
    if (st != CLEF_ERR_REQUEST) fail_msg("status %d (%s), not a refusal", (int)st, err.message);
    assert_int_equal(rej.http_status, status);
    assert_string_equal(rej.body, want);
    assert_int_equal(rej.body_len, strlen(want));
    req_reject_free(&rej);
}

static void test_defaults(void **s) {
    (void)s;
    req_params p = req_default_params();
    assert_int_equal(p.max_questions, 256);
    assert_int_equal(p.max_choices, 255);
    assert_int_equal(p.max_depth, 64);
}

static void test_max_questions(void **s) {
    (void)s;
    static const char over256[] = "{\"detail\":\"Too many questions. Must have at most 256 questions.\"}";
    char *b256 = questions_body(256), *b257 = questions_body(257), *b10k = questions_body(10000);
    expect_ok(b256, NULL);
    expect_refused(b257, NULL, 400, over256);
    expect_refused(b10k, NULL, 400, over256);
    req_params zero = {0};   /* zeros are the defaults */
    expect_refused(b257, &zero, 400, over256);
    req_params p = req_default_params();
    p.max_questions = 3;
    char *b3 = questions_body(3), *b4 = questions_body(4);
    expect_ok(b3, &p);
    expect_refused(b4, &p, 400, "{\"detail\":\"Too many questions. Must have at most 3 questions.\"}");
    p.max_questions = 20000;   /* raised: 10,000 questions are a valid request */
    req_request req;
    req_reject rej;
    assert_int_equal(req_parse(b10k, strlen(b10k), &p, &req, &rej, NULL), CLEF_OK);
    assert_int_equal(req.n_questions, 10000);
    assert_string_equal(req.questions[9999].id, "q9999");
    req_request_free(&req);
    free(b3);
    free(b4);
    free(b256);
    free(b257);
    free(b10k);
}

/* The shape phase still answers first: a 422 is not hidden by the count. */
static void test_max_questions_after_shape(void **s) {
    (void)s;
    sbuf b = {0};
    sb_puts(&b, "{\"model\":7,\"state\":\"s\",\"questions\":{");
    for (int i = 0; i < 300; i++) {
        char q[80];
        snprintf(q, sizeof q, "%s\"q%d\":{\"type\":\"noul\",\"instructions\":\"x\"}", i ? "," : "", i);
        sb_puts(&b, q);
    }
    sb_puts(&b, "}}");
    req_request req;
    req_reject rej;
    assert_int_equal(req_parse(b.p, b.len, NULL, &req, &rej, NULL), CLEF_ERR_REQUEST);
    assert_int_equal(rej.http_status, 422);
    assert_non_null(strstr(rej.body, "\"loc\":[\"body\",\"model\"]"));
    req_reject_free(&rej);
    free(b.p);
}

static void test_max_choices(void **s) {
    (void)s;
    char *b255 = choices_body(255), *b256 = choices_body(256), *b4 = choices_body(4), *b5 = choices_body(5);
    expect_ok(b255, NULL);
    expect_refused(b256, NULL, 400, "{\"detail\":\"Too many choices. Must have at most 255 choices.\"}");
    req_params p = req_default_params();
    p.max_choices = 4;
    expect_ok(b4, &p);
    expect_refused(b5, &p, 400, "{\"detail\":\"Too many choices. Must have at most 4 choices.\"}");
    p.max_choices = 300;
    expect_ok(b256, &p);
    free(b4);
    free(b5);
    free(b255);
    free(b256);
}

static void test_max_depth(void **s) {
    (void)s;
    char *d63 = nested_body(63), *d64 = nested_body(64), *d1000 = nested_body(1000);
    char *d1023 = nested_body(1023), *d1024 = nested_body(1024), *d3000 = nested_body(3000);
    static const char over64[] =
        "{\"detail\":\"Request body is nested too deeply: arrays/objects nested deeper than 64 levels\"}";
    expect_ok(d63, NULL);   /* 64 levels: the body object and 63 arrays */
    expect_refused(d64, NULL, 400, over64);
    expect_refused(d1000, NULL, 400, over64);
    req_params p = req_default_params();
    p.max_depth = 8;
    char *d7 = nested_body(7), *d8 = nested_body(8);
    expect_ok(d7, &p);
    expect_refused(d8, &p, 400,
                   "{\"detail\":\"Request body is nested too deeply: arrays/objects nested deeper "
                   "than 8 levels\"}");
    /* Raised to the cap, and no further. */
    assert_int_equal(REQ_MAX_DEPTH_LIMIT, 1024);
    p.max_depth = REQ_MAX_DEPTH_LIMIT;
    expect_ok(d1000, &p);
    expect_ok(d1023, &p);
    static const char over1024[] =
        "{\"detail\":\"Request body is nested too deeply: arrays/objects nested deeper than 1024 levels\"}";
    expect_refused(d1024, &p, 400, over1024);
    p.max_depth = 100000;   /* capped */
    expect_refused(d3000, &p, 400, over1024);
    free(d7);
    free(d8);
    free(d63);
    free(d64);
    free(d1000);
    free(d1023);
    free(d1024);
    free(d3000);
}

static bool only_m(const char *name, void *user) {
    (void)user;
    return !strcmp(name, "m");
}

/* "m\u0000x" is not the configured "m" (a C comparison would stop at the NUL). */
static void test_model_name_with_nul(void **s) {
    (void)s;
    req_params p = req_default_params();
    p.model_known = only_m;
    expect_ok("{\"model\":\"m\",\"state\":\"s\",\"questions\":{\"q\":{\"type\":\"noul\",\"instructions\":\"x\"}}}", &p);
    expect_refused("{\"model\":\"m\\u0000x\",\"state\":\"s\",\"questions\":{\"q\":{\"type\":\"noul\",\"instructions\":\"x\"}}}",
                   &p, 400,
                   "{\"detail\":{\"error_type\":\"api_usage_error\",\"message\":\"Unknown model: m\\u0000x\"}}");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_max_questions),
        cmocka_unit_test(test_max_questions_after_shape),
        cmocka_unit_test(test_max_choices),
        cmocka_unit_test(test_max_depth),
        cmocka_unit_test(test_model_name_with_nul),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
