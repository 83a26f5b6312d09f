/*
 * fuzz/fuzz_http.c — libFuzzer harness for the HTTP path of `clef serve`:
 * the bytes are what one client sends on one connection (a request line,
 * headers, a body, possibly several pipelined requests).
 *
 * The server (src/server) runs in this process, bound to 127.0.0.1 on a free
 * port, with the real backend: clef_decide on the clef-tiny model (budget
 * 256 tokens), one decision worker, a 4 KiB body limit (so 413 is reachable)
 * and one API key, "fuzz-key" (the seeds send it; mutations reach 401/403).
 * Each input: connect, send everything, then read answers until the server
 * has been quiet for FUZZ_IDLE_MS with no decision running (the backend
 * wrapper counts them), then close.  Why not half-close at once: the server
 * takes a half-closed client for one that left and drops its queued
 * decisions, which would hide the whole decision path.  One input in eight
 * is instead closed right after sending, which is that drop path.  Nothing
 * leaves loopback and every wait is bounded (FUZZ_IO_TIMEOUT_S per input),
 * so a server that stops answering shows up as a failed check or a
 * libFuzzer timeout, not a hang.
 *
 * Checked: whatever comes back starts with an HTTP/1.x status line, every
 * answer from the server's own code carries x-typesafe-request-id, and after
 * the client has closed the server lets go of the connection within
 * FUZZ_RELEASE_MS (less than the idle timeout; counted as this process's
 * open sockets), so aborted requests cannot use up max_connections.
 * Crashes, leaks and races in server threads are what ASan reports.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "clef.h"
#include "fuzzutil.h"
#include "server/server.h"
#include "server/srv_auth.h"

#define FUZZ_IO_TIMEOUT_S 5
#define FUZZ_IDLE_MS 6           /* quiet time that ends an input           */
#define FUZZ_RELEASE_MS 3000     /* longest the server may hold a closed connection */
#define FUZZ_RESP_MAX (1 << 20)

static clef_model *g_model;
static srv_keys g_keys;
static srv_server *g_srv;
static int g_port;
static int g_base_sockets;      /* sockets open with the server idle (its listener) */
static const char *const g_names[] = {"clef-tiny-a"};
static atomic_int g_deciding;   /* decisions running now (worker thread) */

static clef_status backend_decide(void *ctx, const char *json, size_t len,
                                  const clef_decide_options *options, clef_decide_result *result,
                                  clef_error *err) {
    atomic_fetch_add(&g_deciding, 1);
    clef_status st = clef_decide(ctx, json, len, options, result, err);
    atomic_fetch_sub(&g_deciding, 1);
    return st;
}

static void backend_free(void *ctx, clef_decide_result *result) {
    (void)ctx;
    clef_decide_result_free(result);
}

static void stop_server(void) {
    srv_free(g_srv);
    srv_keys_free(&g_keys);
    clef_model_free(g_model);
}

/* Sockets open in this process (the server's connections, its listener and
 * ours): what to look at when the server stops accepting. */
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

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    signal(SIGPIPE, SIG_IGN); /* a server that closes early must not kill us */
    clef_error err;
    clef_model_params mp = clef_model_default_params();
    mp.n_threads = 1;
    if (clef_model_load(fuzz_model_path(), &mp, &g_model, &err) != CLEF_OK)
        FUZZ_SETUP_FAIL("%s", err.message);
    if (srv_keys_add(&g_keys, "fuzz-key", 8, &err) != CLEF_OK) FUZZ_SETUP_FAIL("%s", err.message);
    static srv_backend backend = {.decide = backend_decide, .result_free = backend_free};
    backend.ctx = g_model;
    srv_config cfg = srv_default_config();
    cfg.host = "127.0.0.1";
    cfg.port = 0;
    cfg.http_threads = 1;
    cfg.workers = 1;
    cfg.queue = 4;
    cfg.max_body = 4096;
    cfg.timeout_s = FUZZ_IO_TIMEOUT_S;
    cfg.max_connections = 16;
    cfg.drain_timeout_s = 2;
    cfg.keys = &g_keys;
    cfg.model_names = g_names;
    cfg.n_model_names = 1;
    cfg.model_description = "fuzz";
    cfg.model_release_date = "2025-01-01";
    cfg.decide = clef_decide_default_options();
    cfg.decide.max_length = 256;
    static srv_config kept; /* srv_start borrows the config's strings only, but keep it all */
    kept = cfg;
    if (srv_start(&kept, &backend, &g_srv, &err) != CLEF_OK) FUZZ_SETUP_FAIL("%s", err.message);
    g_port = srv_port(g_srv);
    g_base_sockets = count_sockets();
    atexit(stop_server);
    return 0;
}

static int connect_local(void) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct timeval tv = {FUZZ_IO_TIMEOUT_S, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g_port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

static bool send_all(int fd, const uint8_t *p, size_t n) {
    while (n) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return false; /* the server closed on us: fine */
        p += k;
        n -= (size_t)k;
    }
    return true;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Read what the server answers until it closes, or until it has been quiet
 * for FUZZ_IDLE_MS with no decision running, or FUZZ_IO_TIMEOUT_S passed.
 * Returns a NUL-terminated buffer. */
static char *read_answers(int fd, size_t *len) {
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    if (!buf) abort();
    double deadline = now_ms() + FUZZ_IO_TIMEOUT_S * 1000.0, quiet_since = now_ms();
    while (now_ms() < deadline) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r = poll(&p, 1, 5);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            if (atomic_load(&g_deciding)) quiet_since = now_ms();
            else if (now_ms() - quiet_since >= FUZZ_IDLE_MS) break;
            continue;
        }
        if (n + 1 >= cap) {
            if (cap >= FUZZ_RESP_MAX) break;
            cap *= 2;
            char *b = realloc(buf, cap);
            if (!b) abort();
            buf = b;
        }
        ssize_t k = recv(fd, buf + n, cap - n - 1, MSG_DONTWAIT);
        if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (k <= 0) break; /* closed (or reset) by the server */
        n += (size_t)k;
        quiet_since = now_ms();
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

/* Every response in buf (pipelined answers follow each other). */
static void check_responses(const char *buf, size_t len) {
    if (len == 0) return; /* closed without an answer (e.g. empty input) */
    FUZZ_CHECK(len >= 12 && !memcmp(buf, "HTTP/1.", 7), "answer is not HTTP: %.60s", buf);
    int status = atoi(buf + 9);
    FUZZ_CHECK(status >= 100 && status <= 599, "status %d", status);
    const char *end = strstr(buf, "\r\n\r\n");
    if (!end) return; /* cut by the read limit */
    /* The server's own answers (JSON bodies) carry a request id; answers that
     * libmicrohttpd makes itself for malformed HTTP do not. */
    bool json = memmem(buf, (size_t)(end - buf), "application/json", 16) != NULL;
    if (json)
        FUZZ_CHECK(memmem(buf, (size_t)(end - buf), "x-typesafe-request-id: req_", 27) ||
                       memmem(buf, (size_t)(end - buf), "X-Typesafe-Request-Id: req_", 27),
                   "JSON answer without a request id: %.*s", (int)(end - buf), buf);
}

/* Once the client has gone, the server must let go of the connection: a
 * connection it keeps forever takes one of max_connections for good. */
static void check_released(void) {
    double until = now_ms() + FUZZ_RELEASE_MS;
    int n;
    while ((n = count_sockets()) > g_base_sockets && now_ms() < until) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    FUZZ_CHECK(n <= g_base_sockets, "the server still holds %d connection(s) %d ms after "
               "the client closed", n - g_base_sockets, FUZZ_RELEASE_MS);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int fd = connect_local();
    FUZZ_CHECK(fd >= 0, "cannot connect to the server on 127.0.0.1:%d within %d s (%s); "
               "%d sockets open in this process", g_port, FUZZ_IO_TIMEOUT_S, strerror(errno),
               count_sockets());
    send_all(fd, data, size);
    if (size % 8 == 7) { /* the client leaves at once */
        close(fd);
        check_released();
        return 0;
    }
    size_t len = 0;
    char *buf = read_answers(fd, &len);
    close(fd);
    check_responses(buf, len);
    free(buf);
    check_released();
    return 0;
}
