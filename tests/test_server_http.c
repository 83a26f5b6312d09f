/*
 * tests/test_server_http.c — the HTTP server core (src/server) in-process,
 * behind a fake decision backend, talked to over loopback sockets.
 *
 * The fake backend makes what the model would decide irrelevant, so these
 * tests pin down the server's own contract: routes, 404/405 bodies, auth
 * order (403 before 401 before the body), the body limit, request ids,
 * timing and state-token headers, /v1/models, /metrics, --strict-model,
 * the bounded queue (529), dropping requests whose client left, draining,
 * and many clients at once.  The backend's answer (status + body) must come
 * back byte for byte.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <pthread.h>

#include "server/server.h"
#include "server/srv_auth.h"
#include "test_server_client.h"
#include "testutil.h"

/* ---- the fake backend ------------------------------------------------------ */

/* Answers depend only on the body: "bad" → 422, "fail" → clef failure,
 * "cut" → a cut state; otherwise 200 with the model name, length and a hash
 * of the body.  While hold is set, calls wait on the gate. */
typedef struct fake {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool hold;
    int entered;        /* calls that reached the gate */
    int calls;
    char accept[256];   /* the last call's accept_models, comma-joined */
} fake;

static clef_status fake_decide(void *ctx, const char *json, size_t len,
                               const clef_decide_options *opt, clef_decide_result *res,
                               clef_error *err) {
    fake *f = ctx;
    pthread_mutex_lock(&f->mu);
    f->calls++;
    f->entered++;
    f->accept[0] = '\0';
    for (size_t i = 0; i < opt->n_accept_models; i++)
        snprintf(f->accept + strlen(f->accept), sizeof f->accept - strlen(f->accept), "%s%s",
                 i ? "," : "", opt->accept_models[i]);
    pthread_cond_broadcast(&f->cv);
    while (f->hold) pthread_cond_wait(&f->cv, &f->mu);
    pthread_mutex_unlock(&f->mu);
    if (strstr(json, "\"fail\"")) {
        snprintf(err->message, sizeof err->message, "fake failure");
        err->status = CLEF_ERR_INTERNAL;
        return CLEF_ERR_INTERNAL;
    }
    unsigned h = 2166136261u;
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)json[i]) * 16777619u;
    char *body = malloc(256);
    if (!body) return CLEF_ERR_NOMEM;
    if (strstr(json, "\"bad\"")) {
        res->http_status = 422;
        snprintf(body, 256, "{\"detail\":[{\"type\":\"missing\",\"loc\":[\"body\",\"model\"],\"h\":%u}]}", h);
    } else {
        res->http_status = 200;
        snprintf(body, 256, "{\"model\":\"%s\",\"len\":%zu,\"h\":%u}",
                 opt->model_name ? opt->model_name : "?", len, h);
    }
    res->body = body;
    res->body_len = strlen(body);
    res->input_tokens = 30;
    res->state_tokens = 10;
    res->state_tokens_used = strstr(json, "\"cut\"") ? 4 : 10;
    res->parse_ms = 0.25;
    res->tokenize_ms = 0.5;
    res->backbone_ms = 2.0;
    res->head_ms = 0.125;
    return CLEF_OK;
}

static void fake_free(void *ctx, clef_decide_result *res) {
    (void)ctx;
    free(res->body);
    res->body = NULL;
}

static void fake_hold(fake *f, bool hold) {
    pthread_mutex_lock(&f->mu);
    f->hold = hold;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

/* Wait (bounded) until `entered` reaches n. */
static bool fake_wait_entered(fake *f, int n) {
    bool ok = true;
    pthread_mutex_lock(&f->mu);
    double deadline = hc_now_ms() + HC_TIMEOUT_MS;
    while (f->entered < n && (ok = hc_now_ms() < deadline)) {
        pthread_mutex_unlock(&f->mu);
        hc_sleep_ms(5);
        pthread_mutex_lock(&f->mu);
    }
    pthread_mutex_unlock(&f->mu);
    return ok;
}

/* ---- fixture: one server per test ------------------------------------------ */

static const char *const NAMES[] = {"alpha", "beta"};

typedef struct fixture {
    fake fake;
    srv_keys keys;
    srv_config cfg;
    srv_server *srv;
    int port;
} fixture;

static fixture *fixture_new(void) {
    fixture *fx = calloc(1, sizeof *fx);
    pthread_mutex_init(&fx->fake.mu, NULL);
    pthread_cond_init(&fx->fake.cv, NULL);
    fx->cfg = srv_default_config();
    fx->cfg.port = 0;
    fx->cfg.model_names = NAMES;
    fx->cfg.n_model_names = 2;
    fx->cfg.model_extra_name = "real-name";
    fx->cfg.model_description = "a fake model";
    fx->cfg.model_release_date = "2026-01-02";
    fx->cfg.drain_timeout_s = 20;
    return fx;
}

static void fixture_start(fixture *fx) {
    srv_backend be = {.ctx = &fx->fake, .decide = fake_decide, .result_free = fake_free};
    clef_error err = {0};
    clef_status st = srv_start(&fx->cfg, &be, &fx->srv, &err);
    if (st != CLEF_OK) fail_msg("srv_start: %s", err.message);
    fx->port = srv_port(fx->srv);
    assert_true(fx->port > 0);
}

static int setup(void **state) {
    *state = fixture_new();
    return 0;
}

static int teardown(void **state) {
    fixture *fx = *state;
    fake_hold(&fx->fake, false);   /* never leave a worker stuck behind the gate */
    srv_free(fx->srv);
    srv_keys_free(&fx->keys);
    pthread_cond_destroy(&fx->fake.cv);
    pthread_mutex_destroy(&fx->fake.mu);
    free(fx);
    return 0;
}

/* Status, exact body and a well-formed request id. */
static void expect(const hc_resp *r, int status, const char *body) {
    char id[128];
    if (r->status != status)
        fail_msg("expected %d, got %d\n%s%s", status, r->status, r->head ? r->head : "",
                 r->body ? r->body : "");
    if (body) assert_string_equal(r->body, body);
    assert_non_null(hc_header(r, "x-typesafe-request-id", id, sizeof id));
    assert_true(hc_is_request_id(id));
}

static const char NOT_FOUND[] = "{\"detail\":\"Not Found\"}";
static const char METHOD[] = "{\"detail\":\"Method Not Allowed\"}";
static const char AUTH_MISSING[] =
    "{\"detail\":{\"error_type\":\"authentication_error\",\"message\":"
    "\"Must supply an API key! Check your request and try again.\"}}";
static const char AUTH_WRONG[] =
    "{\"detail\":{\"error_type\":\"authentication_error\",\"message\":"
    "\"Cannot authenticate with the server. Please check your API key and try again.\"}}";

/* ---- auth and key units --------------------------------------------------- */

static void test_ct_equal_and_auth_parse(void **state) {
    (void)state;
    assert_true(srv_ct_equal("abc", 3, "abc", 3));
    assert_false(srv_ct_equal("abc", 3, "abd", 3));
    assert_false(srv_ct_equal("abc", 3, "ab", 2));
    assert_false(srv_ct_equal("ab", 2, "abc", 3));
    assert_false(srv_ct_equal("abc", 3, "abcabc", 6));   /* cyclic reads must not match */
    assert_true(srv_ct_equal("", 0, "", 0));

    srv_keys keys = {0};
    clef_error err;
    assert_int_equal(srv_auth_check(&keys, NULL), SRV_AUTH_OK);   /* no keys: open */
    assert_int_equal(srv_keys_add_list(&keys, "k1,k2", &err), CLEF_OK);
    assert_int_equal(keys.n, 2);
    assert_int_equal(srv_auth_check(&keys, NULL), SRV_AUTH_MISSING);
    assert_int_equal(srv_auth_check(&keys, ""), SRV_AUTH_MISSING);
    assert_int_equal(srv_auth_check(&keys, "Bearer"), SRV_AUTH_MISSING);
    assert_int_equal(srv_auth_check(&keys, "Bearer "), SRV_AUTH_MISSING);
    assert_int_equal(srv_auth_check(&keys, "Basic azE="), SRV_AUTH_MISSING);
    assert_int_equal(srv_auth_check(&keys, "k1"), SRV_AUTH_MISSING);
    assert_int_equal(srv_auth_check(&keys, "Bearerk1"), SRV_AUTH_MISSING);
    assert_int_equal(srv_auth_check(&keys, "Bearer k3"), SRV_AUTH_WRONG);
    assert_int_equal(srv_auth_check(&keys, "Bearer k1x"), SRV_AUTH_WRONG);
    assert_int_equal(srv_auth_check(&keys, "Bearer k"), SRV_AUTH_WRONG);
    assert_int_equal(srv_auth_check(&keys, "Bearer k1"), SRV_AUTH_OK);
    assert_int_equal(srv_auth_check(&keys, "bearer k2"), SRV_AUTH_OK);
    assert_int_equal(srv_auth_check(&keys, "BEARER  k2"), SRV_AUTH_OK);
    assert_int_not_equal(srv_keys_add_list(&keys, "a,,b", &err), CLEF_OK);
    assert_non_null(strstr(err.message, "empty API key"));
    srv_keys_free(&keys);
}

static void test_key_file(void **state) {
    (void)state;
    static const char text[] = "alpha\r\n\n  beta  \n\t\ngamma";
    char *path = tu_write_temp("keys.txt", text, sizeof text - 1);
    char *empty = tu_write_temp("nokeys.txt", "\n \r\n", 4);
    assert_non_null(path);
    assert_non_null(empty);
    srv_keys keys = {0};
    clef_error err;
    assert_int_equal(srv_keys_load_file(&keys, path, &err), CLEF_OK);
    assert_int_equal(keys.n, 3);
    assert_string_equal(keys.keys[0], "alpha");
    assert_string_equal(keys.keys[1], "beta");
    assert_string_equal(keys.keys[2], "gamma");
    assert_int_equal(srv_auth_check(&keys, "Bearer beta"), SRV_AUTH_OK);
    assert_int_equal(srv_auth_check(&keys, "Bearer  beta  "), SRV_AUTH_WRONG);
    assert_int_not_equal(srv_keys_load_file(&keys, empty, &err), CLEF_OK);
    assert_non_null(strstr(err.message, "holds no key"));
    assert_non_null(strstr(err.message, empty));
    assert_int_equal(srv_keys_load_file(&keys, "/nonexistent/keys", &err), CLEF_ERR_IO);
    assert_non_null(strstr(err.message, "/nonexistent/keys"));
    srv_keys_free(&keys);
    unlink(path);
    unlink(empty);
    free(path);
    free(empty);
}

/* ---- routes ------------------------------------------------------------------ */

static void test_routes_404_405(void **state) {
    fixture *fx = *state;
    fixture_start(fx);
    hc_resp r;
    char v[256];
    assert_true(hc_request(fx->port, "GET", "/", NULL, NULL, &r));
    expect(&r, 404, NOT_FOUND);
    assert_non_null(hc_header(&r, "content-type", v, sizeof v));
    assert_string_equal(v, "application/json");
    hc_free(&r);
    assert_true(hc_request(fx->port, "POST", "/v1/systemonex", NULL, "{}", &r));
    expect(&r, 404, NOT_FOUND);
    hc_free(&r);
    assert_true(hc_request(fx->port, "GET", "/v1/systemone/", NULL, NULL, &r));
    expect(&r, 404, NOT_FOUND);
    hc_free(&r);
    assert_true(hc_request(fx->port, "GET", "/v1/systemone", NULL, NULL, &r));
    expect(&r, 405, METHOD);
    assert_non_null(hc_header(&r, "allow", v, sizeof v));
    assert_string_equal(v, "POST");
    hc_free(&r);
    assert_true(hc_request(fx->port, "PUT", "/v1/systemone", NULL, "{}", &r));
    expect(&r, 405, METHOD);
    hc_free(&r);
    assert_true(hc_request(fx->port, "POST", "/v1/models", NULL, "{}", &r));
    expect(&r, 405, METHOD);
    assert_non_null(hc_header(&r, "allow", v, sizeof v));
    assert_string_equal(v, "GET, HEAD");
    hc_free(&r);
    assert_true(hc_request(fx->port, "DELETE", "/healthz", NULL, NULL, &r));
    expect(&r, 405, METHOD);
    hc_free(&r);
    /* The query string is not part of the route. */
    assert_true(hc_request(fx->port, "GET", "/healthz?verbose=1", NULL, NULL, &r));
    expect(&r, 200, "{\"status\":\"ok\"}");
    hc_free(&r);
    assert_true(hc_request(fx->port, "GET", "/health", NULL, NULL, &r));
    expect(&r, 200, "{\"status\":\"ok\"}");
    hc_free(&r);
}

static void test_models_and_ids(void **state) {
    fixture *fx = *state;
    fixture_start(fx);
    hc_resp r;
    assert_true(hc_request(fx->port, "GET", "/v1/models", NULL, NULL, &r));
    expect(&r, 200,
           "{\"models\":[{\"name\":\"alpha\",\"description\":\"a fake model\",\"release_date\":\"2026-01-02\"},"
           "{\"name\":\"beta\",\"description\":\"a fake model\",\"release_date\":\"2026-01-02\"}]}");
    hc_free(&r);
    assert_true(hc_request(fx->port, "HEAD", "/v1/models", NULL, NULL, &r));
    expect(&r, 200, "");
    hc_free(&r);
    /* Ids differ from request to request. */
    char ids[8][64];
    for (int i = 0; i < 8; i++) {
        assert_true(hc_request(fx->port, "GET", i % 2 ? "/nope" : "/healthz", NULL, NULL, &r));
        assert_non_null(hc_header(&r, "x-typesafe-request-id", ids[i], sizeof ids[i]));
        assert_true(hc_is_request_id(ids[i]));
        for (int j = 0; j < i; j++) assert_string_not_equal(ids[i], ids[j]);
        hc_free(&r);
    }
}

/* ---- decisions -------------------------------------------------------------- */

static void test_decision_passthrough_and_headers(void **state) {
    fixture *fx = *state;
    fixture_start(fx);
    hc_resp r;
    char v[512];
    const char *good = "{\"model\":\"x\",\"state\":\"s\"}";
    assert_true(hc_post(fx->port, NULL, good, &r));
    expect(&r, 200, NULL);
    assert_non_null(strstr(r.body, "\"model\":\"alpha\""));   /* the first name is reported */
    assert_non_null(hc_header(&r, "content-type", v, sizeof v));
    assert_string_equal(v, "application/json");
    assert_non_null(hc_header(&r, "server-timing", v, sizeof v));
    assert_non_null(strstr(v, "queue;dur="));
    assert_non_null(strstr(v, "parse;dur=0.250"));
    assert_non_null(strstr(v, "tokenize;dur=0.500"));
    assert_non_null(strstr(v, "backbone;dur=2.000"));
    assert_non_null(strstr(v, "head;dur=0.125"));
    assert_non_null(strstr(v, "total;dur="));
    assert_null(hc_header(&r, "x-clef-state-tokens", v, sizeof v));   /* nothing was cut */
    hc_free(&r);

    assert_true(hc_post(fx->port, NULL, "{\"state\":\"cut\"}", &r));
    expect(&r, 200, NULL);
    assert_non_null(hc_header(&r, "x-clef-state-tokens", v, sizeof v));
    assert_string_equal(v, "sent=10; used=4");
    hc_free(&r);

    /* The backend's error answers pass through unchanged. */
    assert_true(hc_post(fx->port, NULL, "{\"bad\":1}", &r));
    expect(&r, 422, NULL);
    assert_non_null(strstr(r.body, "{\"detail\":[{\"type\":\"missing\""));
    hc_free(&r);
    /* A failure of clef itself is a 500 that still names the request. */
    assert_true(hc_post(fx->port, NULL, "{\"fail\":1}", &r));
    expect(&r, 500, "{\"detail\":\"Internal Server Error\"}");
    hc_free(&r);
    /* An empty body still goes to the backend (which says it is not JSON). */
    assert_true(hc_post(fx->port, NULL, "", &r));
    expect(&r, 200, "{\"model\":\"alpha\",\"len\":0,\"h\":2166136261}");
    hc_free(&r);
    assert_int_equal(fx->fake.calls, 5);
}

static void test_keep_alive(void **state) {
    fixture *fx = *state;
    fixture_start(fx);
    int fd = hc_connect(fx->port);
    assert_true(fd >= 0);
    hc_resp r;
    for (int i = 0; i < 3; i++) {
        assert_true(hc_write_request(fd, "POST", "/v1/systemone", NULL, "{}", 2, true));
        assert_true(hc_read(fd, &r, false));
        expect(&r, 200, NULL);
        assert_false(r.closed);
        hc_free(&r);
        assert_true(hc_write_request(fd, "GET", "/nope", NULL, NULL, 0, true));
        assert_true(hc_read(fd, &r, false));
        expect(&r, 404, NOT_FOUND);
        hc_free(&r);
    }
    close(fd);
}

/* ---- auth --------------------------------------------------------------------- */

static void test_auth_order(void **state) {
    fixture *fx = *state;
    clef_error err;
    assert_int_equal(srv_keys_add_list(&fx->keys, "sekrit,other-key", &err), CLEF_OK);
    fx->cfg.keys = &fx->keys;
    fx->cfg.max_body = 64;
    fixture_start(fx);
    hc_resp r;
    assert_true(hc_post(fx->port, NULL, "{}", &r));
    expect(&r, 403, AUTH_MISSING);
    hc_free(&r);
    assert_true(hc_post(fx->port, "Authorization: Basic c2Vrcml0\r\n", "{}", &r));
    expect(&r, 403, AUTH_MISSING);
    hc_free(&r);
    assert_true(hc_post(fx->port, "Authorization: Bearer\r\n", "{}", &r));
    expect(&r, 403, AUTH_MISSING);
    hc_free(&r);
    assert_true(hc_post(fx->port, "Authorization: Bearer nope\r\n", "{}", &r));
    expect(&r, 401, AUTH_WRONG);
    hc_free(&r);
    /* Auth comes before the body: a bad body with a bad key is a 401, ... */
    assert_true(hc_post(fx->port, "Authorization: Bearer nope\r\n", "{\"bad\":1}", &r));
    expect(&r, 401, AUTH_WRONG);
    hc_free(&r);
    /* ... and before the size check (the body is never read). */
    int fd = hc_connect(fx->port);
    assert_true(fd >= 0);
    const char *big = "POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n"
                      "Expect: 100-continue\r\n\r\n";
    assert_true(hc_send(fd, big, strlen(big)));
    assert_true(hc_read(fd, &r, false));
    expect(&r, 403, AUTH_MISSING);
    hc_free(&r);
    close(fd);
    assert_int_equal(fx->fake.calls, 0);
    /* A refused request with a small body leaves a keep-alive connection usable. */
    fd = hc_connect(fx->port);
    assert_true(hc_write_request(fd, "POST", "/v1/systemone", "Authorization: Bearer nope\r\n",
                                 "{\"state\":\"s\"}", 13, true));
    assert_true(hc_read(fd, &r, false));
    expect(&r, 401, AUTH_WRONG);
    hc_free(&r);
    assert_true(hc_write_request(fd, "POST", "/v1/systemone", "Authorization: Bearer sekrit\r\n",
                                 "{}", 2, true));
    assert_true(hc_read(fd, &r, false));
    expect(&r, 200, NULL);
    hc_free(&r);
    close(fd);

    assert_true(hc_post(fx->port, "Authorization: Bearer sekrit\r\n", "{}", &r));
    expect(&r, 200, NULL);
    hc_free(&r);
    assert_true(hc_post(fx->port, "Authorization: bearer other-key\r\n", "{\"bad\":1}", &r));
    expect(&r, 422, NULL);
    hc_free(&r);
    assert_true(hc_request(fx->port, "GET", "/v1/models", NULL, NULL, &r));
    expect(&r, 403, AUTH_MISSING);
    hc_free(&r);
    assert_true(hc_request(fx->port, "GET", "/v1/models", "Authorization: Bearer x\r\n", NULL, &r));
    expect(&r, 401, AUTH_WRONG);
    hc_free(&r);
    assert_true(hc_request(fx->port, "GET", "/v1/models", "Authorization: Bearer sekrit\r\n", NULL, &r));
    expect(&r, 200, NULL);
    hc_free(&r);
    /* Routing comes first; health and metrics are open. */
    assert_true(hc_request(fx->port, "GET", "/v1/nothing", NULL, NULL, &r));
    expect(&r, 404, NOT_FOUND);
    hc_free(&r);
    assert_true(hc_request(fx->port, "GET", "/v1/systemone", NULL, NULL, &r));
    expect(&r, 405, METHOD);
    hc_free(&r);
    assert_true(hc_request(fx->port, "GET", "/healthz", NULL, NULL, &r));
    expect(&r, 200, NULL);
    hc_free(&r);
    assert_true(hc_request(fx->port, "GET", "/metrics", NULL, NULL, &r));
    expect(&r, 200, NULL);
    hc_free(&r);
    assert_int_equal(fx->fake.calls, 3);
}

/* ---- body limit and malformed HTTP -------------------------------------------- */

static void test_body_limit_over(void **state) {
    fixture *fx = *state;
    fx->cfg.max_body = 1000;
    fixture_start(fx);
    static const char TOO_LARGE[] = "{\"detail\":\"Request body too large: the limit is 1000 bytes.\"}";
    char body[1002];
    memset(body, ' ', sizeof body);
    body[0] = '{';
    body[999] = '}';
    body[1000] = '\0';
    hc_resp r;
    assert_true(hc_post(fx->port, NULL, body, &r));   /* exactly the limit passes */
    expect(&r, 200, NULL);
    assert_non_null(strstr(r.body, "\"len\":1000,"));
    hc_free(&r);
    body[1000] = ' ';
    body[1001] = '\0';
    /* Declared too long: refused from the headers alone. */
    int fd = hc_connect(fx->port);
    const char *head = "POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Length: 1001\r\n\r\n";
    assert_true(hc_send(fd, head, strlen(head)));
    assert_true(hc_read(fd, &r, false));
    expect(&r, 413, TOO_LARGE);
    hc_free(&r);
    close(fd);
    /* Chunked, no declared length: read, counted, refused. */
    fd = hc_connect(fx->port);
    const char *chunked = "POST /v1/systemone HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                          "Connection: close\r\n\r\n";
    assert_true(hc_send(fd, chunked, strlen(chunked)));
    for (int i = 0; i < 3; i++) {
        char chunk[600];
        memset(chunk, ' ', sizeof chunk);
        char size_line[16];
        snprintf(size_line, sizeof size_line, "%zx\r\n", sizeof chunk);
        assert_true(hc_send(fd, size_line, strlen(size_line)));
        assert_true(hc_send(fd, chunk, sizeof chunk));
        assert_true(hc_send(fd, "\r\n", 2));
    }
    assert_true(hc_send(fd, "0\r\n\r\n", 5));
    assert_true(hc_read(fd, &r, false));
    expect(&r, 413, TOO_LARGE);
    hc_free(&r);
    close(fd);
    /* A chunked body under the limit is fine. */
    fd = hc_connect(fx->port);
    assert_true(hc_send(fd, chunked, strlen(chunked)));
    const char *small = "2\r\n{}\r\n0\r\n\r\n";
    assert_true(hc_send(fd, small, strlen(small)));
    assert_true(hc_read(fd, &r, false));
    expect(&r, 200, NULL);
    assert_non_null(strstr(r.body, "\"len\":2,"));
    hc_free(&r);
    close(fd);
    assert_int_equal(fx->fake.calls, 2);
}

static void test_malformed_http(void **state) {
    fixture *fx = *state;
    fixture_start(fx);
    static const char *const junk[] = {
        "GARBAGE\r\n\r\n",
        "GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n",
        "POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
        "GET /healthz HTTP/1.1\r\nNo colon here\r\n\r\n",
    };
    hc_resp r;
    for (size_t i = 0; i < sizeof junk / sizeof junk[0]; i++) {
        int fd = hc_connect(fx->port);
        assert_true(fd >= 0);
        assert_true(hc_send(fd, junk[i], strlen(junk[i])));
        /* libmicrohttpd answers these itself (400, 505) or, for a request
         * line it cannot parse at all, just closes; it never hangs. */
        if (hc_read(fd, &r, false)) assert_true(r.status == 400 || r.status == 505);
        assert_true(r.closed || hc_wait_closed(fd));
        hc_free(&r);
        close(fd);
    }
    /* Oversized headers. */
    size_t n = 64 * 1024;
    char *big = malloc(n + 64);
    int len = snprintf(big, 64, "GET /healthz HTTP/1.1\r\nX-Big: ");
    memset(big + len, 'a', n);
    memcpy(big + len + n, "\r\n\r\n", 4);
    int fd = hc_connect(fx->port);
    hc_send(fd, big, (size_t)len + n + 4);
    /* 431, unless the server's close (with our bytes unread) reset the
     * connection before the answer was read: a reset is fine, a hang is not. */
    if (hc_read(fd, &r, false)) assert_int_equal(r.status, 431);
    assert_true(r.closed || hc_wait_closed(fd));
    hc_free(&r);
    close(fd);
    free(big);
    /* Still serving. */
    assert_true(hc_request(fx->port, "GET", "/healthz", NULL, NULL, &r));
    expect(&r, 200, "{\"status\":\"ok\"}");
    hc_free(&r);
}

/* ---- strict model ---------------------------------------------------------------- */

/* --strict-model reaches the backend as the list of accepted names. */
static void test_strict_model(void **state) {
    fixture *fx = *state;
    fx->cfg.strict_model = true;
    fixture_start(fx);
    hc_resp r;
    assert_true(hc_post(fx->port, NULL, "{\"model\":\"other\"}", &r));
    expect(&r, 200, NULL);
    hc_free(&r);
    assert_string_equal(fx->fake.accept, "alpha,beta,real-name");
}

static void test_not_strict_model(void **state) {
    fixture *fx = *state;
    fixture_start(fx);
    hc_resp r;
    assert_true(hc_post(fx->port, NULL, "{\"model\":\"other\",\"state\":\"s\"}", &r));
    expect(&r, 200, NULL);
    assert_non_null(strstr(r.body, "\"model\":\"alpha\""));
    hc_free(&r);
    assert_string_equal(fx->fake.accept, "");
}

/* ---- metrics -------------------------------------------------------------------- */

static void test_metrics(void **state) {
    fixture *fx = *state;
    fixture_start(fx);
    hc_resp r;
    for (int i = 0; i < 3; i++) {
        assert_true(hc_post(fx->port, NULL, i == 2 ? "{\"cut\":1}" : "{}", &r));
        expect(&r, 200, NULL);
        hc_free(&r);
    }
    assert_true(hc_post(fx->port, NULL, "{\"bad\":1}", &r));
    hc_free(&r);
    assert_true(hc_request(fx->port, "GET", "/x", NULL, NULL, &r));
    hc_free(&r);
    assert_true(hc_request(fx->port, "GET", "/metrics", NULL, NULL, &r));
    expect(&r, 200, NULL);
    char v[128];
    assert_non_null(hc_header(&r, "content-type", v, sizeof v));
    assert_string_equal(v, "text/plain; version=0.0.4; charset=utf-8");
    const char *m = r.body;
    assert_non_null(strstr(m, "# TYPE clef_requests_total counter\n"));
    assert_non_null(strstr(m, "\nclef_requests_total{route=\"/v1/systemone\",status=\"200\"} 3\n"));
    assert_non_null(strstr(m, "\nclef_requests_total{route=\"/v1/systemone\",status=\"422\"} 1\n"));
    assert_non_null(strstr(m, "\nclef_requests_total{route=\"other\",status=\"404\"} 1\n"));
    /* Tokens and cuts count 200s only: 3 × 30 input, 3 × 10 state, 10+10+4 used. */
    assert_non_null(strstr(m, "\nclef_tokens_total{kind=\"input\"} 90\n"));
    assert_non_null(strstr(m, "\nclef_tokens_total{kind=\"state\"} 30\n"));
    assert_non_null(strstr(m, "\nclef_tokens_total{kind=\"state_used\"} 24\n"));
    assert_non_null(strstr(m, "\nclef_state_cut_total 1\n"));
    assert_non_null(strstr(m, "# TYPE clef_stage_duration_seconds histogram\n"));
    /* backbone took 2 ms each time: not under 1 ms, all under 2.5 ms. */
    assert_non_null(strstr(m, "\nclef_stage_duration_seconds_bucket{stage=\"backbone\",le=\"0.001\"} 0\n"));
    assert_non_null(strstr(m, "\nclef_stage_duration_seconds_bucket{stage=\"backbone\",le=\"0.0025\"} 3\n"));
    assert_non_null(strstr(m, "\nclef_stage_duration_seconds_bucket{stage=\"backbone\",le=\"+Inf\"} 3\n"));
    assert_non_null(strstr(m, "\nclef_stage_duration_seconds_sum{stage=\"backbone\"} 0.006\n"));
    assert_non_null(strstr(m, "\nclef_stage_duration_seconds_count{stage=\"head\"} 3\n"));
    assert_non_null(strstr(m, "\nclef_stage_duration_seconds_count{stage=\"parse\"} 3\n"));
    assert_non_null(strstr(m, "\nclef_stage_duration_seconds_count{stage=\"tokenize\"} 3\n"));
    assert_non_null(strstr(m, "\nclef_queue_depth 0\n"));
    assert_non_null(strstr(m, "\nclef_queue_capacity 64\n"));
    assert_non_null(strstr(m, "\nclef_workers 1\n"));
    hc_free(&r);
    /* The worker counts itself idle a moment after its answer is out. */
    assert_true(hc_wait_metric(fx->port, "\nclef_requests_in_flight 0\n"));
}

/* ---- queue, disconnects, draining ------------------------------------------------ */

/* Send a POST on a fresh connection without reading the answer. */
static int post_async(int port, const char *body) {
    int fd = hc_connect(port);
    if (fd >= 0 && !hc_write_request(fd, "POST", "/v1/systemone", NULL, body, strlen(body), false)) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* Poll /metrics until the queue holds `depth` waiting requests. */
static bool wait_queue_depth(int port, int depth) {
    char want[64];
    snprintf(want, sizeof want, "\nclef_queue_depth %d\n", depth);
    return hc_wait_metric(port, want);
}

static void test_queue_full_529(void **state) {
    fixture *fx = *state;
    fx->cfg.workers = 1;
    fx->cfg.queue = 1;
    fixture_start(fx);
    fake_hold(&fx->fake, true);
    int a = post_async(fx->port, "{\"n\":\"a\"}");
    assert_true(fake_wait_entered(&fx->fake, 1));
    int b = post_async(fx->port, "{\"n\":\"b\"}");
    assert_true(wait_queue_depth(fx->port, 1));
    hc_resp r;
    assert_true(hc_post(fx->port, NULL, "{\"n\":\"c\"}", &r));
    expect(&r, 529, "{\"detail\":\"Server overloaded: every decision worker is busy and the queue "
                    "is full. Retry later.\"}");
    char v[64];
    assert_non_null(hc_header(&r, "retry-after", v, sizeof v));
    assert_string_equal(v, "1");
    hc_free(&r);
    fake_hold(&fx->fake, false);
    assert_true(hc_read(a, &r, false));
    expect(&r, 200, NULL);
    hc_free(&r);
    assert_true(hc_read(b, &r, false));
    expect(&r, 200, NULL);
    hc_free(&r);
    close(a);
    close(b);
    assert_int_equal(fx->fake.calls, 2);
    assert_true(hc_request(fx->port, "GET", "/metrics", NULL, NULL, &r));
    assert_non_null(strstr(r.body, "\nclef_requests_total{route=\"/v1/systemone\",status=\"529\"} 1\n"));
    hc_free(&r);
}

static void test_disconnect_frees_slot(void **state) {
    fixture *fx = *state;
    fx->cfg.workers = 1;
    fx->cfg.queue = 1;
    fixture_start(fx);
    fake_hold(&fx->fake, true);
    int a = post_async(fx->port, "{\"n\":\"a\"}");
    assert_true(fake_wait_entered(&fx->fake, 1));
    int b = post_async(fx->port, "{\"n\":\"b\"}");
    assert_true(wait_queue_depth(fx->port, 1));
    close(b);   /* b gives up while waiting */
    hc_sleep_ms(50);
    int c = post_async(fx->port, "{\"n\":\"c\"}");   /* the full queue sweeps b out, c waits */
    assert_true(wait_queue_depth(fx->port, 1));
    fake_hold(&fx->fake, false);
    hc_resp r;
    assert_true(hc_read(a, &r, false));
    expect(&r, 200, NULL);
    hc_free(&r);
    assert_true(hc_read(c, &r, false));
    expect(&r, 200, NULL);
    hc_free(&r);
    close(a);
    close(c);
    assert_int_equal(fx->fake.calls, 2);   /* b was never computed */
    assert_true(hc_request(fx->port, "GET", "/metrics", NULL, NULL, &r));
    assert_non_null(strstr(r.body, "\nclef_requests_cancelled_total 1\n"));
    hc_free(&r);
}

static void test_disconnect_before_worker(void **state) {
    fixture *fx = *state;
    fx->cfg.workers = 1;
    fixture_start(fx);
    fake_hold(&fx->fake, true);
    int a = post_async(fx->port, "{\"n\":\"a\"}");
    assert_true(fake_wait_entered(&fx->fake, 1));
    int b = post_async(fx->port, "{\"n\":\"b\"}");
    assert_true(wait_queue_depth(fx->port, 1));
    close(b);
    hc_sleep_ms(50);
    fake_hold(&fx->fake, false);   /* the worker takes b, sees it gone, skips it */
    hc_resp r;
    assert_true(hc_read(a, &r, false));
    expect(&r, 200, NULL);
    hc_free(&r);
    close(a);
    assert_true(wait_queue_depth(fx->port, 0));
    assert_true(hc_wait_metric(fx->port, "\nclef_requests_in_flight 0\n"));
    assert_true(hc_wait_metric(fx->port, "\nclef_requests_cancelled_total 1\n"));
    assert_int_equal(fx->fake.calls, 1);
}

static void *shutdown_thread(void *arg) {
    bool *drained = malloc(sizeof *drained);
    *drained = srv_shutdown(arg);
    return drained;
}

static void test_drain(void **state) {
    fixture *fx = *state;
    fx->cfg.workers = 1;
    fixture_start(fx);
    /* Two idle keep-alive connections opened before the shutdown. */
    int k1 = hc_connect(fx->port), k2 = hc_connect(fx->port);
    hc_resp r;
    for (int i = 0; i < 2; i++) {
        int k = i ? k2 : k1;
        assert_true(hc_write_request(k, "GET", "/healthz", NULL, NULL, 0, true));
        assert_true(hc_read(k, &r, false));
        expect(&r, 200, NULL);
        hc_free(&r);
    }
    fake_hold(&fx->fake, true);
    int a = post_async(fx->port, "{\"n\":\"a\"}");
    assert_true(fake_wait_entered(&fx->fake, 1));
    int b = post_async(fx->port, "{\"n\":\"b\"}");
    assert_true(wait_queue_depth(fx->port, 1));
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, shutdown_thread, fx->srv), 0);
    /* New connections are refused once the listener is closed. */
    double deadline = hc_now_ms() + HC_TIMEOUT_MS;
    int fd;
    while ((fd = hc_connect(fx->port)) >= 0 && hc_now_ms() < deadline) {
        close(fd);
        hc_sleep_ms(5);
    }
    assert_true(fd < 0);
    /* Requests on connections already open are refused politely. */
    assert_true(hc_write_request(k1, "POST", "/v1/systemone", NULL, "{}", 2, true));
    assert_true(hc_read(k1, &r, false));
    expect(&r, 503, "{\"detail\":\"Server is shutting down.\"}");
    char v[64];
    assert_non_null(hc_header(&r, "connection", v, sizeof v));
    assert_string_equal(v, "close");
    hc_free(&r);
    assert_true(hc_write_request(k2, "GET", "/healthz", NULL, NULL, 0, true));
    assert_true(hc_read(k2, &r, false));
    expect(&r, 503, "{\"status\":\"draining\"}");
    hc_free(&r);
    /* What was already received is answered. */
    fake_hold(&fx->fake, false);
    assert_true(hc_read(a, &r, false));
    expect(&r, 200, NULL);
    hc_free(&r);
    assert_true(hc_read(b, &r, false));
    expect(&r, 200, NULL);
    hc_free(&r);
    void *ret = NULL;
    pthread_join(th, &ret);
    assert_non_null(ret);
    assert_true(*(bool *)ret);
    free(ret);
    assert_int_equal(fx->fake.calls, 2);
    close(a);
    close(b);
    close(k1);
    close(k2);
}

/* ---- many clients at once ------------------------------------------------------- */

#define N_THREADS 16
#define N_PER_THREAD 8
#define N_KINDS 8

typedef struct kind {
    const char *method, *path, *auth, *body;
} kind;

static const kind KINDS[N_KINDS] = {
    {"POST", "/v1/systemone", "Authorization: Bearer k\r\n", "{\"state\":\"one\"}"},
    {"POST", "/v1/systemone", "Authorization: Bearer k\r\n", "{\"state\":\"two, longer\"}"},
    {"POST", "/v1/systemone", "Authorization: Bearer k\r\n", "{\"bad\":\"shape\"}"},
    {"POST", "/v1/systemone", "Authorization: Bearer wrong\r\n", "{\"state\":\"one\"}"},
    {"POST", "/v1/systemone", NULL, "{\"state\":\"one\"}"},
    {"GET", "/v1/models", "Authorization: Bearer k\r\n", NULL},
    {"GET", "/nowhere", NULL, NULL},
    {"POST", "/v1/systemone", "Authorization: Bearer k\r\n", "{\"state\":\"cut\"}"},
};

typedef struct answer {
    int status;
    char body[512];
    char id[64];
} answer;

static void ask(int port, int k, answer *out) {
    hc_resp r;
    const kind *q = &KINDS[k];
    memset(out, 0, sizeof *out);
    if (hc_request(port, q->method, q->path, q->auth, q->body, &r)) {
        out->status = r.status;
        snprintf(out->body, sizeof out->body, "%s", r.body);
        hc_header(&r, "x-typesafe-request-id", out->id, sizeof out->id);
    } else {
        out->status = -1;
    }
    hc_free(&r);
}

typedef struct client {
    int port, t;
    answer got[N_PER_THREAD];
} client;

static void *client_main(void *arg) {
    client *c = arg;
    for (int i = 0; i < N_PER_THREAD; i++) ask(c->port, (c->t * N_PER_THREAD + i) % N_KINDS, &c->got[i]);
    return NULL;
}

static void test_concurrent_clients(void **state) {
    fixture *fx = *state;
    clef_error err;
    assert_int_equal(srv_keys_add_list(&fx->keys, "k", &err), CLEF_OK);
    fx->cfg.keys = &fx->keys;
    fx->cfg.workers = 4;
    fx->cfg.queue = N_THREADS * N_PER_THREAD;
    fixture_start(fx);
    answer serial[N_KINDS];
    for (int k = 0; k < N_KINDS; k++) {
        ask(fx->port, k, &serial[k]);
        assert_true(serial[k].status > 0);
    }
    static client clients[N_THREADS];
    pthread_t th[N_THREADS];
    for (int t = 0; t < N_THREADS; t++) {
        clients[t] = (client){.port = fx->port, .t = t};
        assert_int_equal(pthread_create(&th[t], NULL, client_main, &clients[t]), 0);
    }
    for (int t = 0; t < N_THREADS; t++) pthread_join(th[t], NULL);
    for (int t = 0; t < N_THREADS; t++)
        for (int i = 0; i < N_PER_THREAD; i++) {
            const answer *a = &clients[t].got[i];
            const answer *s = &serial[(t * N_PER_THREAD + i) % N_KINDS];
            assert_int_equal(a->status, s->status);
            assert_string_equal(a->body, s->body);
            assert_true(hc_is_request_id(a->id));
            assert_string_not_equal(a->id, s->id);
        }
    /* Every id is distinct. */
    for (int x = 0; x < N_THREADS * N_PER_THREAD; x++)
        for (int y = 0; y < x; y++)
            assert_string_not_equal(clients[x / N_PER_THREAD].got[x % N_PER_THREAD].id,
                                    clients[y / N_PER_THREAD].got[y % N_PER_THREAD].id);
}

static void test_bind_error(void **state) {
    fixture *fx = *state;
    fixture_start(fx);
    fixture *other = fixture_new();
    other->cfg.port = fx->port;   /* taken */
    srv_backend be = {.ctx = &other->fake, .decide = fake_decide, .result_free = fake_free};
    clef_error err = {0};
    srv_server *s2 = NULL;
    assert_int_equal(srv_start(&other->cfg, &be, &s2, &err), CLEF_ERR_IO);
    assert_null(s2);
    char want[64];
    snprintf(want, sizeof want, "cannot listen on 127.0.0.1:%d", fx->port);
    assert_non_null(strstr(err.message, want));
    other->cfg.workers = 0;
    assert_int_equal(srv_start(&other->cfg, &be, &s2, &err), CLEF_ERR_INVALID_ARG);
    void *st = other;
    teardown(&st);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ct_equal_and_auth_parse),
        cmocka_unit_test(test_key_file),
        cmocka_unit_test_setup_teardown(test_routes_404_405, setup, teardown),
        cmocka_unit_test_setup_teardown(test_models_and_ids, setup, teardown),
        cmocka_unit_test_setup_teardown(test_decision_passthrough_and_headers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_keep_alive, setup, teardown),
        cmocka_unit_test_setup_teardown(test_auth_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_body_limit_over, setup, teardown),
        cmocka_unit_test_setup_teardown(test_malformed_http, setup, teardown),
        cmocka_unit_test_setup_teardown(test_strict_model, setup, teardown),
        cmocka_unit_test_setup_teardown(test_not_strict_model, setup, teardown),
        cmocka_unit_test_setup_teardown(test_metrics, setup, teardown),
        cmocka_unit_test_setup_teardown(test_queue_full_529, setup, teardown),
        cmocka_unit_test_setup_teardown(test_disconnect_frees_slot, setup, teardown),
        cmocka_unit_test_setup_teardown(test_disconnect_before_worker, setup, teardown),
        cmocka_unit_test_setup_teardown(test_drain, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_clients, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bind_error, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
