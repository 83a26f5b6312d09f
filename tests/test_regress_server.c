/*
 * tests/test_regress_server.c — regression tests for what fuzz/fuzz_http
 * found in the HTTP server (src/server), in-process over loopback.
 *
 * 1. A client that closed its connection in the middle of a request (body
 *    shorter than its Content-Length, or headers not finished) kept its
 *    connection on the server, in CLOSE-WAIT, until an idle/request timeout:
 *    libmicrohttpd 0.9.75's epoll loop (MHD_USE_AUTO_INTERNAL_THREAD picks
 *    epoll on Linux) never noticed that FIN.  fuzz_http filled all
 *    max_connections this way within seconds, after which the server
 *    accepted nobody.  The server now runs libmicrohttpd's poll loop.
 *
 * The checks wait for the server to let go for at most RELEASE_WAIT_MS, far
 * below the 60 s timeouts that would otherwise release the connection (and
 * that are switched off here), so they test whether the close is noticed at
 * all, not how fast.  The server's connections are counted as the sockets
 * open in this process (the server runs in it).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <dirent.h>
#include <sys/stat.h>

#include "core/error.h"
#include "server/server.h"
#include "server/srv_auth.h"
#include "test_server_client.h"
#include "testutil.h"

#define RELEASE_WAIT_MS 10000

static clef_status never_decide(void *ctx, const char *json, size_t len,
                                const clef_decide_options *opt, clef_decide_result *res,
                                clef_error *err) {
    (void)ctx, (void)json, (void)len, (void)opt;
    res->http_status = 200;
    res->body = strdup("{}");
    res->body_len = 2;
    return res->body ? CLEF_OK : clef_err_set(err, CLEF_ERR_NOMEM, "out of memory");
}

static void free_result(void *ctx, clef_decide_result *res) {
    (void)ctx;
    free(res->body);
}

static int count_sockets(void) {
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, 0) == 0 && S_ISSOCK(st.st_mode)) n++;
    }
    closedir(d);
    return n;
}

typedef struct fixture {
    srv_keys keys;
    srv_server *srv;
    int port, base_sockets;
} fixture;

static int setup(void **state) {
    fixture *fx = calloc(1, sizeof *fx);
    clef_error err = {0};
    if (!fx || srv_keys_add(&fx->keys, "k", 1, &err) != CLEF_OK) return -1;
    static const char *const names[] = {"m"};
    static const srv_backend be = {.decide = never_decide, .result_free = free_result};
    srv_config cfg = srv_default_config();
    cfg.port = 0;
    cfg.keys = &fx->keys;
    cfg.model_names = names;
    cfg.n_model_names = 1;
    cfg.timeout_s = 60;
    cfg.header_timeout_s = 0;   /* none: only noticing the close can release it */
    cfg.request_timeout_s = 0;
    cfg.drain_timeout_s = 5;
    if (srv_start(&cfg, &be, &fx->srv, &err) != CLEF_OK) {
        fprintf(stderr, "srv_start: %s\n", err.message);
        return -1;
    }
    fx->port = srv_port(fx->srv);
    fx->base_sockets = count_sockets();
    *state = fx;
    return 0;
}

static int teardown(void **state) {
    fixture *fx = *state;
    srv_free(fx->srv);
    srv_keys_free(&fx->keys);
    free(fx);
    return 0;
}

/* Send text, close at once, and expect the server to drop the connection. */
static void send_close_once(fixture *fx, const char *text) {
    int fd = hc_connect(fx->port);
    assert_true(fd >= 0);
    size_t len = strlen(text);
    assert_int_equal(send(fd, text, len, MSG_NOSIGNAL), (ssize_t)len);
    close(fd);
    double until = hc_now_ms() + RELEASE_WAIT_MS;
    int n;
    while ((n = count_sockets()) > fx->base_sockets && hc_now_ms() < until) hc_sleep_ms(5);
    if (n > fx->base_sockets)
        fail_msg("the server still holds %d connection(s) %d ms after the client closed "
                 "after sending: %.60s", n - fx->base_sockets, RELEASE_WAIT_MS, text);
}

/* The same five times: whether the close went unseen depended on timing. */
static void send_close_released(fixture *fx, const char *text) {
    for (int k = 0; k < 5; k++) send_close_once(fx, text);
}

/* fuzz_http crash-a0074206 (minimized): wrong key, body cut short. */
static void test_wrong_key_partial_body(void **state) {
    send_close_released(*state, "POST /v1/systemone HTTP/1.1\r\nHost: x\r\n"
                                "Authorization: Bearer nope\r\nContent-Length: 174\r\n\r\n"
                                "{\"model\": \"m\", \"state\": \"Help");
}

static void test_good_key_partial_body(void **state) {
    send_close_released(*state, "POST /v1/systemone HTTP/1.1\r\nHost: x\r\n"
                                "Authorization: Bearer k\r\nContent-Length: 100\r\n\r\n{\"model\"");
}

static void test_partial_chunked_body(void **state) {
    send_close_released(*state, "POST /v1/systemone HTTP/1.1\r\nHost: x\r\n"
                                "Authorization: Bearer k\r\nTransfer-Encoding: chunked\r\n\r\n"
                                "10\r\n{\"model\":");
}

static void test_partial_headers(void **state) {
    send_close_released(*state, "GET /healthz HTTP/1.1\r\nHost: x\r\nAccept: */*");
}

/* Many in a row: none may pile up (fuzz_http saw all slots taken). */
static void test_many_aborted_uploads(void **state) {
    for (int i = 0; i < 40; i++)
        send_close_once(*state, "POST /v1/systemone HTTP/1.1\r\nHost: x\r\n"
                                    "Authorization: Bearer k\r\nContent-Length: 50\r\n\r\n{");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_wrong_key_partial_body, setup, teardown),
        cmocka_unit_test_setup_teardown(test_good_key_partial_body, setup, teardown),
        cmocka_unit_test_setup_teardown(test_partial_chunked_body, setup, teardown),
        cmocka_unit_test_setup_teardown(test_partial_headers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_many_aborted_uploads, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
