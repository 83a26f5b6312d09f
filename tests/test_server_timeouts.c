/*
 * tests/test_server_timeouts.c — the server's time limits (server.h, "Time
 * limits") in-process, behind a fake backend whose calls can be held at a
 * gate, so what is waiting on what is known rather than guessed:
 *   request timeout  a request queued behind a held worker gets 529 with
 *                    retry-after once its deadline passes; the held one still
 *                    answers 200; 0 = wait as long as it takes;
 *   slow body        a body dribbled past the request timeout: closed;
 *   header timeout   slowloris clients dribbling headers byte by byte are
 *                    closed while an ordinary client keeps being served; an
 *                    idle keep-alive connection is closed too.
 * Every wait is bounded (HC_TIMEOUT_MS); no assertion is about durations.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <pthread.h>

#include "server/server.h"
#include "test_server_client.h"
#include "testutil.h"

/* ---- a fake backend with a gate -------------------------------------------- */

typedef struct gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool hold;
    int entered, calls;
} gate;

static clef_status gate_decide(void *ctx, const char *json, size_t len,
                               const clef_decide_options *opt, clef_decide_result *res,
                               clef_error *err) {
    (void)json;
    (void)opt;
    (void)err;
    gate *g = ctx;
    pthread_mutex_lock(&g->mu);
    g->calls++;
    g->entered++;
    pthread_cond_broadcast(&g->cv);
    while (g->hold) pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
    char *body = malloc(64);
    if (!body) return CLEF_ERR_NOMEM;
    snprintf(body, 64, "{\"len\":%zu}", len);
    res->http_status = 200;
    res->body = body;
    res->body_len = strlen(body);
    return CLEF_OK;
}

static void gate_free(void *ctx, clef_decide_result *res) {
    (void)ctx;
    free(res->body);
    res->body = NULL;
}

static void gate_hold(gate *g, bool hold) {
    pthread_mutex_lock(&g->mu);
    g->hold = hold;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

static bool gate_wait_entered(gate *g, int n) {
    double deadline = hc_now_ms() + HC_TIMEOUT_MS;
    pthread_mutex_lock(&g->mu);
    while (g->entered < n && hc_now_ms() < deadline) {
        pthread_mutex_unlock(&g->mu);
        hc_sleep_ms(5);
        pthread_mutex_lock(&g->mu);
    }
    bool ok = g->entered >= n;
    pthread_mutex_unlock(&g->mu);
    return ok;
}

/* ---- fixture ------------------------------------------------------------------ */

static const char *const NAMES[] = {"fake"};

typedef struct fixture {
    gate gate;
    srv_config cfg;
    srv_server *srv;
    int port;
} fixture;

static int setup(void **state) {
    fixture *fx = calloc(1, sizeof *fx);
    pthread_mutex_init(&fx->gate.mu, NULL);
    pthread_cond_init(&fx->gate.cv, NULL);
    fx->cfg = srv_default_config();
    fx->cfg.port = 0;
    fx->cfg.model_names = NAMES;
    fx->cfg.n_model_names = 1;
    fx->cfg.drain_timeout_s = 20;
    *state = fx;
    return 0;
}

static void start(fixture *fx) {
    srv_backend be = {.ctx = &fx->gate, .decide = gate_decide, .result_free = gate_free};
    clef_error err = {0};
    if (srv_start(&fx->cfg, &be, &fx->srv, &err) != CLEF_OK) fail_msg("srv_start: %s", err.message);
    fx->port = srv_port(fx->srv);
}

static int teardown(void **state) {
    fixture *fx = *state;
    gate_hold(&fx->gate, false);
    srv_free(fx->srv);
    pthread_cond_destroy(&fx->gate.cv);
    pthread_mutex_destroy(&fx->gate.mu);
    free(fx);
    return 0;
}

/* A POST whose answer is read later (socket returned). */
static int post_async(int port, const char *body) {
    int fd = hc_connect(port);
    assert_true(fd >= 0);
    assert_true(hc_write_request(fd, "POST", "/v1/systemone", NULL, body, strlen(body), false));
    return fd;
}

static void expect_status(const hc_resp *r, int status) {
    if (r->status != status)
        fail_msg("expected %d, got %d\n%s%s", status, r->status, r->head ? r->head : "",
                 r->body ? r->body : "");
}

/* Keep sending one byte of `text` per step until the server closes fd
 * (bounded).  Returns true when it closed before the text ran out. */
static bool dribble_until_closed(int fd, const char *text, int step_ms) {
    size_t n = strlen(text);
    double deadline = hc_now_ms() + HC_TIMEOUT_MS;
    for (size_t i = 0; hc_now_ms() < deadline; i++) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, step_ms) > 0) {
            char c;
            return recv(fd, &c, 1, 0) <= 0;   /* EOF or reset: closed, with no answer */
        }
        if (i >= n) return false;
        if (send(fd, text + i, 1, MSG_NOSIGNAL) != 1) return true;
    }
    return false;
}

/* ---- request timeout ----------------------------------------------------------- */

static void test_queued_request_times_out(void **state) {
    fixture *fx = *state;
    fx->cfg.workers = 1;
    fx->cfg.queue = 4;
    fx->cfg.request_timeout_s = 0.5;
    start(fx);
    gate_hold(&fx->gate, true);
    int a = post_async(fx->port, "{\"n\":\"a\"}");
    assert_true(gate_wait_entered(&fx->gate, 1));   /* a holds the only worker */
    hc_resp r;
    assert_true(hc_post(fx->port, NULL, "{\"n\":\"b\"}", &r));   /* b waits, then times out */
    expect_status(&r, 529);
    assert_string_equal(r.body,
                        "{\"detail\":\"Server overloaded: the request waited longer than the 0.5 s "
                        "request timeout for a decision worker. Retry later.\"}");
    char v[64];
    assert_non_null(hc_header(&r, "retry-after", v, sizeof v));
    assert_string_equal(v, "1");
    assert_non_null(hc_header(&r, "x-typesafe-request-id", v, sizeof v));
    assert_true(hc_is_request_id(v));
    hc_free(&r);
    gate_hold(&fx->gate, false);
    assert_true(hc_read(a, &r, false));   /* the decision already running was not cut */
    expect_status(&r, 200);
    hc_free(&r);
    close(a);
    assert_int_equal(fx->gate.calls, 1);   /* b never reached the backend */
    assert_true(hc_wait_metric(fx->port, "\nclef_requests_total{route=\"/v1/systemone\",status=\"529\"} 1\n"));
    assert_true(hc_wait_metric(fx->port, "\nclef_queue_depth 0\n"));
    assert_true(hc_post(fx->port, NULL, "{\"n\":\"c\"}", &r));   /* and the server goes on */
    expect_status(&r, 200);
    hc_free(&r);
}

/* With no request timeout a queued request waits for as long as it takes. */
static void test_no_request_timeout(void **state) {
    fixture *fx = *state;
    fx->cfg.workers = 1;
    fx->cfg.request_timeout_s = 0;
    fx->cfg.header_timeout_s = 0;
    start(fx);
    gate_hold(&fx->gate, true);
    int a = post_async(fx->port, "{\"n\":\"a\"}");
    assert_true(gate_wait_entered(&fx->gate, 1));
    int b = post_async(fx->port, "{\"n\":\"b\"}");
    assert_true(hc_wait_metric(fx->port, "\nclef_queue_depth 1\n"));
    hc_sleep_ms(600);   /* several reaper rounds with b waiting */
    gate_hold(&fx->gate, false);
    hc_resp r;
    assert_true(hc_read(a, &r, false));
    expect_status(&r, 200);
    hc_free(&r);
    assert_true(hc_read(b, &r, false));
    expect_status(&r, 200);
    hc_free(&r);
    close(a);
    close(b);
}

static void test_slow_body_closed(void **state) {
    fixture *fx = *state;
    fx->cfg.request_timeout_s = 0.3;
    start(fx);
    int fd = hc_connect(fx->port);
    assert_true(fd >= 0);
    static const char head[] = "POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                               "Content-Length: 200\r\n\r\n";
    assert_true(hc_send(fd, head, strlen(head)));
    char body[201];
    memset(body, ' ', 200);
    body[200] = '\0';
    assert_true(dribble_until_closed(fd, body, 20));
    close(fd);
    assert_true(hc_wait_metric(fx->port, "\nclef_connections_timed_out_total 1\n"));
    assert_int_equal(fx->gate.calls, 0);
    hc_resp r;
    assert_true(hc_post(fx->port, NULL, "{\"n\":1}", &r));
    expect_status(&r, 200);
    hc_free(&r);
}

/* ---- header timeout -------------------------------------------------------------- */

#define N_SLOW 8

/* Slowloris: N_SLOW clients dribble a request's headers a byte at a time
 * (each byte well within the idle timeout); an ordinary client is served
 * throughout, and every slow one is closed. */
static void test_slowloris(void **state) {
    fixture *fx = *state;
    fx->cfg.header_timeout_s = 0.3;
    fx->cfg.max_connections = 64;
    start(fx);
    static const char head[] = "POST /v1/systemone HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: slow\r\n"
                               "Content-Type: application/json\r\nContent-Length: 9\r\n\r\n{\"n\":\"s\"}";
    int slow[N_SLOW];
    bool closed[N_SLOW] = {false};
    for (int i = 0; i < N_SLOW; i++) assert_true((slow[i] = hc_connect(fx->port)) >= 0);
    size_t pos = 0;
    int open = N_SLOW, served = 0;
    double deadline = hc_now_ms() + HC_TIMEOUT_MS;
    while (open > 0 && hc_now_ms() < deadline) {
        for (int i = 0; i < N_SLOW; i++) {
            if (closed[i]) continue;
            struct pollfd p = {slow[i], POLLIN, 0};
            char c;
            if (poll(&p, 1, 0) > 0) {
                assert_true(recv(slow[i], &c, 1, 0) <= 0);   /* closed without an answer */
                closed[i] = true;
                open--;
            } else if (pos < sizeof head - 1 &&
                       send(slow[i], head + pos, 1, MSG_NOSIGNAL) != 1) {
                closed[i] = true;
                open--;
            }
        }
        pos++;
        assert_true(pos < sizeof head - 1);   /* no slow request may get through whole */
        hc_resp r;
        assert_true(hc_post(fx->port, NULL, "{\"n\":\"fast\"}", &r));
        expect_status(&r, 200);
        hc_free(&r);
        served++;
        hc_sleep_ms(20);
    }
    assert_int_equal(open, 0);
    for (int i = 0; i < N_SLOW; i++) close(slow[i]);
    assert_true(served > 0);
    assert_int_equal(fx->gate.calls, served);   /* only the ordinary requests were decided */
    char want[64];
    snprintf(want, sizeof want, "\nclef_connections_timed_out_total %d\n", N_SLOW);
    assert_true(hc_wait_metric(fx->port, want));
}

static void test_idle_keep_alive_closed(void **state) {
    fixture *fx = *state;
    fx->cfg.header_timeout_s = 0.3;
    start(fx);
    int fd = hc_connect(fx->port);
    assert_true(fd >= 0);
    hc_resp r;
    for (int i = 0; i < 3; i++) {   /* prompt requests on one connection are fine */
        assert_true(hc_write_request(fd, "GET", "/healthz", NULL, NULL, 0, true));
        assert_true(hc_read(fd, &r, false));
        expect_status(&r, 200);
        assert_false(r.closed);
        hc_free(&r);
    }
    assert_true(hc_wait_closed(fd));   /* then silence: closed by the header deadline */
    close(fd);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_queued_request_times_out, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_request_timeout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_slow_body_closed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_slowloris, setup, teardown),
        cmocka_unit_test_setup_teardown(test_idle_keep_alive_closed, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
