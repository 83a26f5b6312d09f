/*
 * tests/test_server_faults.c — hostile and broken clients against
 * `$CLEF_BIN serve` on the tiny oracle model (127.0.0.1 only): bodies at
 * and over the size limit (declared and chunked), 10,000 questions,
 * 1,000-level nesting, invalid UTF-8 and NUL bytes (raw and \u0000) in every
 * string slot, clients that vanish mid-headers / mid-body / before the
 * answer, slowloris clients, and the model file truncated under a running
 * server.  After each, the server must still answer a valid request with
 * the oracle's answer.  Every wait is bounded; each server is stopped.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "test_server_tools.h"

#define QID "q"   /* the one question of st_body_of_size bodies */

typedef struct world {
    hc_server plain;    /* defaults: 1 MiB body, 256 questions, depth 64 */
    hc_server small;    /* --max-body 4096 */
    hc_server raised;   /* --max-questions 20000 --max-depth 1024 --max-choices 4 --strict-model */
    char *probe;        /* a small valid body (noul_basic) */
    json_t *oracle;     /* its oracle response */
} world;

static int group_setup(void **state) {
    signal(SIGPIPE, SIG_IGN);
    world *w = calloc(1, sizeof *w);
    *state = w;
    w->probe = hc_case_request(ST_CASES, "noul_basic");
    w->oracle = st_oracle_response("noul_basic");
    if (!w->probe || !w->oracle) return -1;
    const char *plain[] = {"-m", ST_TINY, "-np", "1", NULL};
    const char *small[] = {"-m", ST_TINY, "--max-body", "4096", NULL};
    const char *raised[] = {"-m", ST_TINY, "-a", "clef-tiny-a", "--strict-model", "--max-questions",
                            "20000", "--max-depth", "1024", "--max-choices", "4", NULL};
    if (!hc_server_start(&w->plain, plain) || !hc_server_start(&w->small, small) ||
        !hc_server_start(&w->raised, raised))
        return -1;
    return 0;
}

static int group_teardown(void **state) {
    world *w = *state;
    if (!w) return 0;
    hc_server_stop(&w->plain, SIGKILL);
    hc_server_stop(&w->small, SIGKILL);
    hc_server_stop(&w->raised, SIGKILL);
    free(w->probe);
    json_decref(w->oracle);
    free(w);
    return 0;
}

static void expect_status(const hc_resp *r, int status) {
    if (r->status != status)
        fail_msg("expected HTTP %d, got %d\n%s%.600s", status, r->status, r->head ? r->head : "",
                 r->body ? r->body : "");
}

/* The server is alive and right: noul_basic answers as the oracle does. */
static void expect_healthy(const world *w, int port) {
    hc_resp r;
    assert_true(hc_post(port, NULL, w->probe, &r));
    expect_status(&r, 200);
    if (!st_noul_matches(r.body, w->oracle, "is_urgent")) fail_msg("wrong answer: %s", r.body);
    hc_free(&r);
}

/* POST len bytes (may hold NULs) and read the answer. */
static bool post_bytes(int port, const char *body, size_t len, hc_resp *r) {
    memset(r, 0, sizeof *r);
    r->status = -1;
    int fd = hc_connect(port);
    if (fd < 0) return false;
    bool ok = hc_write_request(fd, "POST", "/v1/systemone", NULL, body, len, false) && hc_read(fd, r, false);
    close(fd);
    return ok;
}

/* POST as two chunks (Transfer-Encoding: chunked, no Content-Length). */
static bool post_chunked(int port, const char *body, size_t len, hc_resp *r) {
    memset(r, 0, sizeof *r);
    r->status = -1;
    int fd = hc_connect(port);
    if (fd < 0) return false;
    static const char head[] = "POST /v1/systemone HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                               "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
    size_t half = len / 2;
    char size_line[32];
    bool ok = hc_send(fd, head, sizeof head - 1);
    snprintf(size_line, sizeof size_line, "%zx\r\n", half);
    ok = ok && hc_send(fd, size_line, strlen(size_line)) && hc_send(fd, body, half) && hc_send(fd, "\r\n", 2);
    snprintf(size_line, sizeof size_line, "%zx\r\n", len - half);
    ok = ok && hc_send(fd, size_line, strlen(size_line)) && hc_send(fd, body + half, len - half) &&
         hc_send(fd, "\r\n0\r\n\r\n", 7);
    ok = ok && hc_read(fd, r, false);
    close(fd);
    return ok;
}

/* A 400 whose detail is a string starting with prefix. */
static void expect_detail_prefix(const hc_resp *r, const char *prefix, const char *what) {
    if (r->status != 400) fail_msg("%s: expected 400, got %d: %s", what, r->status, r->body ? r->body : "");
    json_t *j = json_loads(r->body, 0, NULL);   /* also: the error body is valid JSON and UTF-8 */
    const char *d = json_string_value(json_object_get(j, "detail"));
    if (!d || strncmp(d, prefix, strlen(prefix))) fail_msg("%s: detail is not '%s...': %s", what, prefix, r->body);
    json_decref(j);
}

/* ---- size limits --------------------------------------------------------------- */

static void test_body_at_and_over_limit(void **state) {
    world *w = *state;
    int port = w->small.port;
    static const char over[] = "{\"detail\":\"Request body too large: the limit is 4096 bytes.\"}";
    char *at = st_body_of_size(4096), *above = st_body_of_size(4097);
    assert_non_null(at);
    assert_non_null(above);
    hc_resp r;
    assert_true(post_bytes(port, at, 4096, &r));
    expect_status(&r, 200);
    assert_non_null(strstr(r.body, "\"answers\":{\"q\":{\"type\":\"noul\""));
    hc_free(&r);
    assert_true(post_bytes(port, above, 4097, &r));
    expect_status(&r, 413);
    assert_string_equal(r.body, over);
    hc_free(&r);
    assert_true(post_chunked(port, at, 4096, &r));
    expect_status(&r, 200);
    hc_free(&r);
    assert_true(post_chunked(port, above, 4097, &r));
    expect_status(&r, 413);
    assert_string_equal(r.body, over);
    hc_free(&r);
    free(at);
    free(above);
    expect_healthy(w, port);
}

static void test_ten_thousand_questions(void **state) {
    world *w = *state;
    char *body = st_questions_body(10000);
    assert_non_null(body);
    hc_resp r;
    assert_true(hc_post(w->plain.port, NULL, body, &r));
    expect_status(&r, 400);
    assert_string_equal(r.body, "{\"detail\":\"Too many questions. Must have at most 256 questions.\"}");
    hc_free(&r);
    /* Limit raised: the schema alone is far over the 16384-token budget. */
    assert_true(hc_post(w->raised.port, NULL, body, &r));
    expect_status(&r, 400);
    assert_string_equal(r.body, "{\"detail\":{\"error_type\":\"max_tokens_exceeded\"}}");
    hc_free(&r);
    free(body);
    /* Just over the default: refused by the count, or (raised) by the budget,
     * since ~90 tokens a noul question put 257 of them past 16384. */
    body = st_questions_body(257);
    assert_true(hc_post(w->plain.port, NULL, body, &r));
    expect_status(&r, 400);
    assert_string_equal(r.body, "{\"detail\":\"Too many questions. Must have at most 256 questions.\"}");
    hc_free(&r);
    assert_true(hc_post(w->raised.port, NULL, body, &r));
    expect_status(&r, 400);
    assert_string_equal(r.body, "{\"detail\":{\"error_type\":\"max_tokens_exceeded\"}}");
    hc_free(&r);
    free(body);
    /* A few: every id answered, in order. */
    body = st_questions_body(5);
    assert_true(hc_post(w->raised.port, NULL, body, &r));
    expect_status(&r, 200);
    json_t *j = json_loads(r.body, 0, NULL);
    json_t *answers = json_object_get(j, "answers");
    assert_int_equal(json_object_size(answers), 5);
    size_t i = 0;
    const char *key;
    json_t *a;
    json_object_foreach(answers, key, a) {
        char want[16];
        snprintf(want, sizeof want, "q%zu", i++);
        assert_string_equal(key, want);
        double p = json_number_value(json_object_get(a, "noul"));
        assert_true(p >= 0 && p <= 1);
    }
    json_decref(j);
    hc_free(&r);
    free(body);
    expect_healthy(w, w->plain.port);
    expect_healthy(w, w->raised.port);
}

static void test_choice_limit_configured(void **state) {
    world *w = *state;
    hc_resp r;
    const char *five = "{\"model\":\"clef-tiny-a\",\"state\":\"s\",\"questions\":{\"c\":{\"type\":\"choice\","
                       "\"criteria\":{\"a\":null,\"b\":null,\"c\":null,\"d\":null,\"e\":null}}}}";
    assert_true(hc_post(w->raised.port, NULL, five, &r));
    expect_status(&r, 400);
    assert_string_equal(r.body, "{\"detail\":\"Too many choices. Must have at most 4 choices.\"}");
    hc_free(&r);
    assert_true(hc_post(w->plain.port, NULL, five, &r));
    expect_status(&r, 200);
    hc_free(&r);
}

/* `levels` arrays around a string, in place of "<>" in tmpl. */
static char *nest_into(const char *tmpl, size_t levels) {
    size_t hole = strcspn(tmpl, "<");
    if (tmpl[hole] != '<' || tmpl[hole + 1] != '>') {
        fail_msg("no <> in %s", tmpl);
        return NULL;
    }
    st_buf b = {0};
    st_add(&b, tmpl, hole);
    for (size_t i = 0; i < levels; i++) st_puts(&b, "[");
    st_puts(&b, "\"deep\"");
    for (size_t i = 0; i < levels; i++) st_puts(&b, "]");
    st_puts(&b, tmpl + hole + 2);
    return b.p;
}

static void test_deep_nesting(void **state) {
    world *w = *state;
    static const char *const slots[] = {
        "{\"model\":\"clef-tiny-a\",\"state\":<>,\"questions\":{\"q\":{\"type\":\"noul\",\"instructions\":\"x\"}}}",
        "{\"model\":\"clef-tiny-a\",\"state\":\"s\",\"questions\":{\"q\":{\"type\":\"noul\",\"instructions\":<>}}}",
        "{\"model\":\"clef-tiny-a\",\"state\":\"s\",\"questions\":{\"q\":{\"type\":\"choice\",\"criteria\":{\"a\":<>}}}}",
        "{\"model\":\"clef-tiny-a\",\"state\":\"s\",\"questions\":{\"q\":{\"type\":\"score\",\"criteria\":[<>,\"b\"]}}}",
        "{\"model\":<>,\"state\":\"s\",\"questions\":{\"q\":{\"type\":\"noul\",\"instructions\":\"x\"}}}",
    };
    hc_resp r;
    for (size_t i = 0; i < sizeof slots / sizeof slots[0]; i++) {
        char *body = nest_into(slots[i], 1000);
        assert_true(hc_post(w->plain.port, NULL, body, &r));
        expect_status(&r, 400);
        assert_string_equal(r.body, "{\"detail\":\"Request body is nested too deeply: arrays/objects "
                                    "nested deeper than 64 levels\"}");
        hc_free(&r);
        free(body);
    }
    /* --max-depth 1024: a 1000-level state is a state like any other. */
    char *body = nest_into(slots[0], 1000);
    assert_true(hc_post(w->raised.port, NULL, body, &r));
    expect_status(&r, 200);
    hc_free(&r);
    free(body);
    body = nest_into(slots[0], 3000);   /* past jansson's own limit: still a clean 400 */
    assert_true(hc_post(w->raised.port, NULL, body, &r));
    expect_status(&r, 400);
    assert_string_equal(r.body, "{\"detail\":\"Request body is nested too deeply: arrays/objects "
                                "nested deeper than 1024 levels\"}");
    hc_free(&r);
    free(body);
    expect_healthy(w, w->plain.port);
    expect_healthy(w, w->raised.port);
}

/* ---- bad bytes in every string slot --------------------------------------------- */

/* Every place a request carries a string; "@" marks where bad bytes go. */
static const char *const SLOTS[] = {
    "{\"model\":\"clef-tiny-a\",\"state\":\"pay@outs\",\"questions\":{\"q\":{\"type\":\"noul\",\"instructions\":\"x\"}}}",
    "{\"model\":\"clef-tiny-a\",\"state\":{\"k@ey\":\"v\"},\"questions\":{\"q\":{\"type\":\"noul\",\"instructions\":\"x\"}}}",
    "{\"model\":\"clef-tiny-a\",\"state\":[\"a\",\"b@\"],\"questions\":{\"q\":{\"type\":\"noul\",\"instructions\":\"x\"}}}",
    "{\"model\":\"clef-tiny-a\",\"state\":\"s\",\"questions\":{\"q@\":{\"type\":\"noul\",\"instructions\":\"x\"}}}",
    "{\"model\":\"clef-tiny-a\",\"state\":\"s\",\"questions\":{\"q\":{\"type\":\"noul\",\"instructions\":\"x@\"}}}",
    "{\"model\":\"clef-tiny-a\",\"state\":\"s\",\"questions\":{\"q\":{\"type\":\"noul\",\"instructions\":{\"question\":\"x@\"}}}}",
    "{\"model\":\"clef-tiny-a\",\"state\":\"s\",\"questions\":{\"q\":{\"type\":\"noul\",\"criteria\":{\"true\":\"y@es\"}}}}",
    "{\"model\":\"clef-tiny-a\",\"state\":\"s\",\"questions\":{\"q\":{\"type\":\"choice\",\"criteria\":{\"a@\":\"x\",\"b\":null}}}}",
    "{\"model\":\"clef-tiny-a\",\"state\":\"s\",\"questions\":{\"q\":{\"type\":\"choice\",\"criteria\":{\"a\":\"x@\",\"b\":null}}}}",
    "{\"model\":\"clef-tiny-a\",\"state\":\"s\",\"questions\":{\"q\":{\"type\":\"choice\",\"criteria\":{\"a\":{\"what\":\"x@\"}}}}}",
    "{\"model\":\"clef-tiny-a\",\"state\":\"s\",\"questions\":{\"q\":{\"type\":\"score\",\"criteria\":[\"low@\",\"high\"]}}}",
    "{\"model\":\"clef-tiny-a\",\"state\":\"s\",\"questions\":{\"q\":{\"type\":\"no@ul\",\"instructions\":\"x\"}}}",
    "{\"model\":\"clef@-tiny-a\",\"state\":\"s\",\"questions\":{\"q\":{\"type\":\"noul\",\"instructions\":\"x\"}}}",
};
#define N_SLOTS (sizeof SLOTS / sizeof SLOTS[0])

/* SLOTS[i] with "@" replaced by the n bytes of bad (len in *len). */
static char *fill_slot(size_t i, const char *bad, size_t n, size_t *len) {
    size_t at = strcspn(SLOTS[i], "@");
    if (SLOTS[i][at] != '@') {
        fail_msg("no @ in slot %zu", i);
        return NULL;
    }
    size_t rest = strlen(SLOTS[i] + at + 1);
    char *out = malloc(at + n + rest + 1);
    assert_non_null(out);
    memcpy(out, SLOTS[i], at);
    memcpy(out + at, bad, n);
    memcpy(out + at + n, SLOTS[i] + at + 1, rest + 1);
    *len = at + n + rest;
    return out;
}

static void test_invalid_utf8_everywhere(void **state) {
    world *w = *state;
    static const struct { const char *bytes; size_t n; } bad[] = {
        {"\xff", 1},                 /* never valid */
        {"\xc3", 1},                 /* a sequence cut short */
        {"\xc0\xaf", 2},             /* overlong '/' */
        {"\xed\xa0\x80", 3},         /* a UTF-16 surrogate */
        {"\xf4\x90\x80\x80", 4},     /* past U+10FFFF */
    };
    for (size_t i = 0; i < N_SLOTS; i++)
        for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
            size_t len;
            char *body = fill_slot(i, bad[k].bytes, bad[k].n, &len);
            hc_resp r;
            assert_true(post_bytes(w->plain.port, body, len, &r));
            char what[64];
            snprintf(what, sizeof what, "slot %zu, bad bytes %zu", i, k);
            expect_detail_prefix(&r, "Request body is not valid UTF-8: invalid UTF-8 at byte ", what);
            hc_free(&r);
            free(body);
        }
    /* A lone surrogate escape is valid UTF-8 but no character. */
    size_t len;
    char *body = fill_slot(0, "\\ud800", 6, &len);
    hc_resp r;
    assert_true(post_bytes(w->plain.port, body, len, &r));
    expect_detail_prefix(&r, "Request body is not valid JSON: ", "lone surrogate");
    hc_free(&r);
    free(body);
    expect_healthy(w, w->plain.port);
}

/* Raw NUL bytes are never JSON; \u0000 is refused in keys and carried in values. */
static void test_nul_everywhere(void **state) {
    world *w = *state;
    hc_resp r;
    for (size_t i = 0; i < N_SLOTS; i++) {
        size_t len;
        char *body = fill_slot(i, "\0", 1, &len);
        assert_true(post_bytes(w->plain.port, body, len, &r));
        expect_detail_prefix(&r, "Request body is not valid JSON: control character 0x0", "raw NUL");
        hc_free(&r);
        free(body);
    }
    static const char between[] = "{\"model\":\"clef-tiny-a\",\0\"state\":\"s\"}";
    assert_true(post_bytes(w->plain.port, between, sizeof between - 1, &r));
    expect_detail_prefix(&r, "Request body is not valid JSON: ", "NUL between tokens");
    hc_free(&r);
    /* \u0000: slots 1, 3 and 7 are object keys; 11 is the type; 12 the model. */
    for (size_t i = 0; i < N_SLOTS; i++) {
        size_t len;
        char *body = fill_slot(i, "\\u0000", 6, &len);
        assert_true(post_bytes(w->plain.port, body, len, &r));
        if (i == 1 || i == 3 || i == 7) {
            expect_detail_prefix(&r, "Request body has an object key containing NUL: ", "NUL key");
        } else if (i == 11) {
            expect_status(&r, 400);
            assert_string_equal(r.body, "{\"detail\":{\"error_type\":\"api_usage_error\",\"message\":\"Invalid request.\"}}");
        } else {
            expect_status(&r, 200);   /* text with a NUL in it is text */
            json_t *j = json_loads(r.body, JSON_ALLOW_NUL, NULL);   /* a legend may echo the NUL */
            assert_non_null(json_object_get(json_object_get(j, "answers"), "q"));
            json_decref(j);
        }
        hc_free(&r);
        free(body);
    }
    /* The legend echoes a level with its NUL. */
    static const char score[] = "{\"model\":\"m\",\"state\":\"s\",\"questions\":{\"q\":{\"type\":\"score\","
                                "\"criteria\":[\"lo\\u0000w\",\"high\"]}}}";
    assert_true(hc_post(w->plain.port, NULL, score, &r));
    expect_status(&r, 200);
    json_t *j = json_loads(r.body, JSON_ALLOW_NUL, NULL);
    json_t *level = json_object_get(json_object_get(json_object_get(json_object_get(j, "answers"), "q"), "legend"), "0");
    assert_int_equal(json_string_length(level), 4);
    assert_memory_equal(json_string_value(level), "lo\0w", 4);
    json_decref(j);
    hc_free(&r);
    /* --strict-model: "clef-tiny-a\u0000" is not "clef-tiny-a". */
    static const char model[] = "{\"model\":\"clef-tiny-a\\u0000\",\"state\":\"s\",\"questions\":{\"q\":"
                                "{\"type\":\"noul\",\"instructions\":\"x\"}}}";
    assert_true(hc_post(w->raised.port, NULL, model, &r));
    expect_status(&r, 400);
    assert_string_equal(r.body, "{\"detail\":{\"error_type\":\"api_usage_error\",\"message\":"
                                "\"Unknown model: clef-tiny-a\\u0000\"}}");
    hc_free(&r);
    expect_healthy(w, w->plain.port);
    expect_healthy(w, w->raised.port);
}

/* ---- clients that leave ------------------------------------------------------------ */

static void test_disconnects(void **state) {
    world *w = *state;
    int port = w->plain.port;
    const char *body = w->probe;
    size_t blen = strlen(body);
    char head[256];
    snprintf(head, sizeof head, "POST /v1/systemone HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n", blen);
    int rounds = ST_SANITIZED ? 8 : 24;
    for (int i = 0; i < rounds; i++) {
        int fd;
        assert_true((fd = hc_connect(port)) >= 0);   /* mid-headers */
        assert_true(hc_send(fd, head, strlen(head) / 2));
        close(fd);
        assert_true((fd = hc_connect(port)) >= 0);   /* mid-body */
        assert_true(hc_send(fd, head, strlen(head)) && hc_send(fd, body, blen / 3));
        close(fd);
        assert_true((fd = hc_connect(port)) >= 0);   /* whole request, gone before the answer */
        assert_true(hc_send(fd, head, strlen(head)) && hc_send(fd, body, blen));
        close(fd);
        assert_true((fd = hc_connect(port)) >= 0);   /* half-closed after sending, then gone */
        assert_true(hc_send(fd, head, strlen(head)) && hc_send(fd, body, blen));
        shutdown(fd, SHUT_WR);
        close(fd);
        int lingering = hc_connect(port);   /* reset: SO_LINGER 0 */
        assert_true(lingering >= 0);
        struct linger lg = {1, 0};
        setsockopt(lingering, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        assert_true(hc_send(lingering, head, strlen(head)) && hc_send(lingering, body, blen));
        close(lingering);
        if (i % 4 == 0) expect_healthy(w, port);
    }
    assert_true(hc_wait_metric(port, "\nclef_queue_depth 0\n"));
    assert_true(hc_wait_metric(port, "\nclef_requests_in_flight 0\n"));
    expect_healthy(w, port);
}

/* ---- slowloris against the real binary ----------------------------------------------- */

#define N_SLOW 16

static void test_slowloris(void **state) {
    world *w = *state;
    hc_server s;
    const char *args[] = {"-m", ST_TINY, "--header-timeout", "1", NULL};
    assert_true(hc_server_start(&s, args));
    static const char head[] = "POST /v1/systemone HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: slowloris\r\n"
                               "Accept: */*\r\nX-Padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n"
                               "Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";
    int slow[N_SLOW];
    bool gone[N_SLOW] = {false};
    for (int i = 0; i < N_SLOW; i++) assert_true((slow[i] = hc_connect(s.port)) >= 0);
    int open = N_SLOW, served = 0;
    double deadline = hc_now_ms() + HC_TIMEOUT_MS;
    for (size_t pos = 0; open > 0 && hc_now_ms() < deadline; pos++) {
        assert_true(pos < sizeof head - 1);   /* no slow request gets through whole */
        for (int i = 0; i < N_SLOW; i++) {
            if (gone[i]) continue;
            struct pollfd p = {slow[i], POLLIN, 0};
            char c;
            if (poll(&p, 1, 0) > 0) {
                assert_true(recv(slow[i], &c, 1, 0) <= 0);   /* closed, no answer */
                gone[i] = true;
                open--;
            } else if (send(slow[i], head + pos, 1, MSG_NOSIGNAL) != 1) {
                gone[i] = true;
                open--;
            }
        }
        expect_healthy(w, s.port);   /* everyone else is served meanwhile */
        served++;
        hc_sleep_ms(40);
    }
    assert_int_equal(open, 0);
    for (int i = 0; i < N_SLOW; i++) close(slow[i]);
    char want[64];
    snprintf(want, sizeof want, "\nclef_connections_timed_out_total %d\n", N_SLOW);
    assert_true(hc_wait_metric(s.port, want));
    assert_true(served > 0);
    assert_int_equal(hc_server_stop(&s, SIGTERM), 0);
}

/* ---- the model file truncated under the server ---------------------------------------- */

static char *copy_model(const char *name) {
    size_t len = 0;
    char *bytes = tu_read_file(ST_TINY, &len);
    assert_non_null(bytes);
    char *path = tu_write_temp(name, bytes, len);
    free(bytes);
    assert_non_null(path);
    return path;
}

static void test_truncated_model(void **state) {
    world *w = *state;
    char *path = copy_model("serve-trunc.gguf");
    hc_server s;
    const char *args[] = {"-m", path, NULL};   /* default: the file is copied at start */
    assert_true(hc_server_start(&s, args));
    hc_resp before, r;
    assert_true(hc_post(s.port, NULL, w->probe, &before));
    expect_status(&before, 200);
    assert_true(st_noul_matches(before.body, w->oracle, "is_urgent"));
    assert_int_equal(truncate(path, 0), 0);
    for (int i = 0; i < 3; i++) {
        assert_true(hc_post(s.port, NULL, w->probe, &r));
        expect_status(&r, 200);
        assert_string_equal(r.body, before.body);   /* the very same answer */
        hc_free(&r);
    }
    assert_int_equal(unlink(path), 0);   /* even gone altogether */
    assert_true(hc_post(s.port, NULL, w->probe, &r));
    expect_status(&r, 200);
    assert_string_equal(r.body, before.body);
    hc_free(&r);
    hc_free(&before);
    assert_int_equal(hc_server_stop(&s, SIGTERM), 0);
    free(path);
}

/* --mmap is the documented risk: the same truncation takes the server down. */
static void test_truncated_model_mmap(void **state) {
    world *w = *state;
    char *path = copy_model("serve-trunc-mmap.gguf");
    hc_server s;
    const char *args[] = {"-m", path, "--mmap", NULL};
    assert_true(hc_server_start(&s, args));
    hc_resp r;
    assert_true(hc_post(s.port, NULL, w->probe, &r));
    expect_status(&r, 200);
    hc_free(&r);
    assert_int_equal(truncate(path, 0), 0);
    assert_false(hc_post(s.port, NULL, w->probe, &r));   /* no answer: the process died */
    hc_free(&r);
    assert_int_not_equal(hc_server_stop(&s, 0), 0);
    unlink(path);
    free(path);
}

/* ---- the flags --------------------------------------------------------------------------- */

static void test_limit_flags(void **state) {
    (void)state;
    char cmd[512];
    int st;
    snprintf(cmd, sizeof cmd, "timeout 60 %s serve --help", hc_clef_bin());
    char *out = tu_run(cmd, &st);
    assert_int_equal(st, 0);
    static const char *const want[] = {
        "--max-questions N", "(default 256)", "--max-choices N", "(default 255", "--max-depth N",
        "1..1024", "--header-timeout S", "(default 30)", "--request-timeout S", "(default 60)",
        "--timeout S", "--mmap", "RAM for the whole file", "SIGBUS", "-c, --ctx-size", "--queue N",
        "--max-body BYTES"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(out, want[i])) fail_msg("serve --help does not mention '%s'", want[i]);
    free(out);
    static const struct { const char *args, *msg; } bad[] = {
        {"--max-questions 0", "--max-questions expects an integer in [1, "},
        {"--max-choices x", "--max-choices expects an integer"},
        {"--max-depth 0", "--max-depth expects an integer in [1, 1024]"},
        {"--max-depth 1025", "--max-depth expects an integer in [1, 1024]"},
        {"--header-timeout -1", "--header-timeout expects seconds"},
        {"--request-timeout soon", "--request-timeout expects seconds"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(cmd, sizeof cmd, "timeout 60 %s serve -m %s %s 2>&1", hc_clef_bin(), ST_TINY, bad[i].args);
        out = tu_run(cmd, &st);
        if (st != 2 || !strstr(out, bad[i].msg))
            fail_msg("'clef serve %s': status %d, output:\n%s", bad[i].args, st, out);
        free(out);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_body_at_and_over_limit),
        cmocka_unit_test(test_ten_thousand_questions),
        cmocka_unit_test(test_choice_limit_configured),
        cmocka_unit_test(test_deep_nesting),
        cmocka_unit_test(test_invalid_utf8_everywhere),
        cmocka_unit_test(test_nul_everywhere),
        cmocka_unit_test(test_disconnects),
        cmocka_unit_test(test_slowloris),
        cmocka_unit_test(test_truncated_model),
        cmocka_unit_test(test_truncated_model_mmap),
        cmocka_unit_test(test_limit_flags),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
