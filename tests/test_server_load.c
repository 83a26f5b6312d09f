/*
 * tests/test_server_load.c — `$CLEF_BIN serve` on the tiny oracle model
 * under sustained load and under SIGTERM, on 127.0.0.1, bounded in count
 * and time:
 *   sustained   16 keep-alive clients, then 8 clients opening a connection
 *               per request, a mix of decisions and GETs: every answer 2xx
 *               and byte for byte the one the request gets alone; the
 *               server's resident memory (VmRSS after a warm-up vs after
 *               the run) grows by less than a generous bound.
 *   SIGTERM     requests already queued when SIGTERM arrives are answered
 *               200 (their reference answer); clients still hammering get
 *               200, 503 or 529, or find the port closed; exit status 0.
 * Throughput and latency percentiles are printed for information only
 * (tools/loadtest.sh measures them properly); nothing asserts on time.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <pthread.h>

#include "test_server_tools.h"

/* ---- request kinds ------------------------------------------------------------ */

typedef struct kind {
    const char *method, *path, *case_id;   /* case_id: body from cases.jsonl */
} kind;

static const kind KINDS[] = {
    {"POST", "/v1/systemone", "noul_basic"},
    {"POST", "/v1/systemone", "choice_12_unsorted"},
    {"POST", "/v1/systemone", "score_10_levels"},
    {"POST", "/v1/systemone", "mixed_three_spec_example"},
    {"GET", "/v1/models", NULL},
    {"GET", "/healthz", NULL},
};
#define N_KINDS (sizeof KINDS / sizeof KINDS[0])

typedef struct world {
    char *bodies[N_KINDS];
    char *reference[N_KINDS];   /* each kind's answer when sent alone */
} world;

static int group_setup(void **state) {
    signal(SIGPIPE, SIG_IGN);
    world *w = calloc(1, sizeof *w);
    *state = w;
    for (size_t k = 0; k < N_KINDS; k++)
        if (KINDS[k].case_id && !(w->bodies[k] = hc_case_request(ST_CASES, KINDS[k].case_id))) return -1;
    return 0;
}

static int group_teardown(void **state) {
    world *w = *state;
    for (size_t k = 0; w && k < N_KINDS; k++) {
        free(w->bodies[k]);
        free(w->reference[k]);
    }
    free(w);
    return 0;
}

/* ---- clients ------------------------------------------------------------------- */

typedef struct client {
    const world *w;
    int port, n, first_kind;
    bool keep_alive;
    int bad;                /* non-2xx, wrong bodies or I/O failures */
    char why[256];
    double *lat_ms;         /* [n] */
} client;

/* One request on fd (reconnecting when needed); true when it got the
 * reference answer. */
static bool one_request(client *c, int *fd, size_t k, double *ms) {
    const kind *kd = &KINDS[k];
    const char *body = c->w->bodies[k];
    if (*fd < 0 && (*fd = hc_connect(c->port)) < 0) {
        snprintf(c->why, sizeof c->why, "cannot connect");
        return false;
    }
    double t = hc_now_ms();
    hc_resp r;
    bool ok = hc_write_request(*fd, kd->method, kd->path, NULL, body, body ? strlen(body) : 0,
                               c->keep_alive) &&
              hc_read(*fd, &r, false);
    *ms = hc_now_ms() - t;
    if (!ok) {
        snprintf(c->why, sizeof c->why, "%s %s: no complete answer", kd->method, kd->path);
    } else if (r.status < 200 || r.status > 299 || strcmp(r.body, c->w->reference[k])) {
        snprintf(c->why, sizeof c->why, "%s %s: %d %.160s", kd->method, kd->path, r.status, r.body);
        ok = false;
    }
    if (!c->keep_alive || !ok || r.closed) {
        close(*fd);
        *fd = -1;
    }
    hc_free(&r);
    return ok;
}

static void *client_main(void *arg) {
    client *c = arg;
    int fd = -1;
    for (int i = 0; i < c->n; i++)
        if (!one_request(c, &fd, (size_t)(c->first_kind + i) % N_KINDS, &c->lat_ms[i])) c->bad++;
    if (fd >= 0) close(fd);
    return NULL;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* n_clients clients of n requests each; returns the failures, prints rates. */
static int run_clients(const world *w, int port, int n_clients, int n, bool keep_alive,
                       const char *label) {
    client *cs = calloc((size_t)n_clients, sizeof *cs);
    pthread_t *th = calloc((size_t)n_clients, sizeof *th);
    double *lat = calloc((size_t)(n_clients * n), sizeof *lat);
    assert_true(cs && th && lat);
    double t0 = hc_now_ms();
    for (int i = 0; i < n_clients; i++) {
        cs[i] = (client){.w = w, .port = port, .n = n, .first_kind = i, .keep_alive = keep_alive,
                         .lat_ms = lat + (size_t)i * (size_t)n};
        assert_int_equal(pthread_create(&th[i], NULL, client_main, &cs[i]), 0);
    }
    int bad = 0;
    for (int i = 0; i < n_clients; i++) {
        pthread_join(th[i], NULL);
        if (cs[i].bad) fprintf(stderr, "client %d: %d bad, last: %s\n", i, cs[i].bad, cs[i].why);
        bad += cs[i].bad;
    }
    double secs = (hc_now_ms() - t0) / 1e3;
    size_t total = (size_t)(n_clients * n);
    qsort(lat, total, sizeof *lat, cmp_double);
    fprintf(stderr, "%s: %zu requests, %d clients: %.0f req/s, p50 %.2f ms, p95 %.2f ms, p99 %.2f ms\n",
            label, total, n_clients, (double)total / secs, lat[total / 2], lat[total * 95 / 100],
            lat[total * 99 / 100]);
    free(lat);
    free(th);
    free(cs);
    return bad;
}

/* Each kind alone, one at a time: the answers every later one must equal. */
static void take_references(world *w, int port) {
    for (size_t k = 0; k < N_KINDS; k++) {
        hc_resp r;
        assert_true(hc_request(port, KINDS[k].method, KINDS[k].path, NULL, w->bodies[k], &r));
        if (r.status != 200) fail_msg("%s %s alone: %d %s", KINDS[k].method, KINDS[k].path, r.status, r.body);
        free(w->reference[k]);
        w->reference[k] = strdup(r.body);
        hc_free(&r);
    }
    json_t *oracle = st_oracle_response("noul_basic");
    assert_true(st_noul_matches(w->reference[0], oracle, "is_urgent"));
    json_decref(oracle);
}

/* ---- sustained load ---------------------------------------------------------------- */

static void test_sustained_load(void **state) {
    world *w = *state;
    hc_server s;
    const char *args[] = {"-m", ST_TINY, "-np", "2", "-t", "1", "--threads-http", "2", NULL};
    if (ST_SANITIZED) {   /* a small quarantine, so that RSS shows leaks, not ASan's cache */
        const char *old = getenv("ASAN_OPTIONS");
        char opts[512];
        snprintf(opts, sizeof opts, "%s%squarantine_size_mb=4:thread_local_quarantine_size_kb=64",
                 old ? old : "", old && *old ? ":" : "");
        setenv("ASAN_OPTIONS", opts, 1);
    }
    assert_true(hc_server_start(&s, args));
    take_references(w, s.port);
    int per = ST_SANITIZED ? 6 : 24;
    assert_int_equal(run_clients(w, s.port, 16, per / 2, true, "warm-up"), 0);
    long rss0 = st_proc_kib(s.pid, "VmRSS");
    assert_true(rss0 > 0);
    assert_int_equal(run_clients(w, s.port, 16, per * 2, true, "keep-alive"), 0);
    assert_int_equal(run_clients(w, s.port, 8, per, false, "connection per request"), 0);
    long rss1 = st_proc_kib(s.pid, "VmRSS"), hwm = st_proc_kib(s.pid, "VmHWM");
    fprintf(stderr, "server VmRSS %ld KiB after warm-up, %ld KiB after the run; peak %ld KiB\n", rss0,
            rss1, hwm);
    /* Flat: a leak of even 1 KiB a request would pass 16 MiB here (ASan's
     * shadow and allocator caches get more room). */
    long bound_kib = ST_SANITIZED ? 64 * 1024 : 16 * 1024;
    if (rss1 - rss0 > bound_kib) fail_msg("server RSS grew by %ld KiB under load", rss1 - rss0);
    assert_true(hc_wait_metric(s.port, "\nclef_requests_in_flight 0\n"));
    assert_true(hc_wait_metric(s.port, "\nclef_queue_depth 0\n"));
    assert_int_equal(hc_server_stop(&s, SIGTERM), 0);
}

/* ---- SIGTERM under load ---------------------------------------------------------------- */

#define N_HEAVY 4
#define N_HAMMER 6

typedef struct heavy {
    int fd;
    hc_resp r;
    bool answered;
} heavy;

static void *heavy_main(void *arg) {
    heavy *h = arg;
    h->answered = hc_read(h->fd, &h->r, false);
    return NULL;
}

typedef struct hammer {
    int port;
    bool keep_alive;
    const char *body;
    volatile bool *stop;
    int ok, refused, bad;   /* 200s, 503/529 or no connection, anything else */
    char why[256];
} hammer;

/* Requests until the port refuses, or the bounded deadline. */
static void *hammer_main(void *arg) {
    hammer *h = arg;
    int fd = -1;
    double deadline = hc_now_ms() + 2 * HC_TIMEOUT_MS;
    while (!*h->stop && hc_now_ms() < deadline) {
        if (fd < 0 && (fd = hc_connect(h->port)) < 0) {
            h->refused++;   /* the listening socket is gone: the drain has begun */
            break;
        }
        hc_resp r;
        bool got = hc_write_request(fd, "POST", "/v1/systemone", NULL, h->body, strlen(h->body), h->keep_alive) &&
                   hc_read(fd, &r, false);
        if (!got) h->refused++;   /* reset: accepted by the kernel, never by the server */
        else if (r.status == 200 || r.status == 503 || r.status == 529) r.status == 200 ? h->ok++ : h->refused++;
        else {
            h->bad++;
            snprintf(h->why, sizeof h->why, "%d %.200s", r.status, r.body);
        }
        if (!got || !h->keep_alive || r.closed) {
            close(fd);
            fd = -1;
        }
        if (got) hc_free(&r);
    }
    if (fd >= 0) close(fd);
    return NULL;
}

static void test_sigterm_under_load(void **state) {
    world *w = *state;
    hc_server s;
    /* -c 2048 and a long state: each heavy decision takes a while, so the
     * heavy ones are seen waiting in the queue before the signal.  No state
     * cache: the heavy requests repeat the reference one, and a cache hit
     * would answer them before they could be seen queued; no batching, or
     * the worker would take them all at once. */
    const char *args[] = {"-m", ST_TINY, "-np", "1", "-c", "2048", "--cache-mb", "0", "--batch", "1", NULL};
    assert_true(hc_server_start(&s, args));
    st_buf big = {0};
    st_puts(&big, "{\"model\":\"clef-tiny-a\",\"state\":\"");
    for (int i = 0; i < 3000; i++) st_puts(&big, "payouts failing again ");
    st_puts(&big, "\",\"questions\":{\"u\":{\"type\":\"noul\",\"instructions\":\"Urgent?\"}}}");
    hc_resp ref;
    assert_true(hc_post(s.port, NULL, big.p, &ref));
    assert_int_equal(ref.status, 200);

    heavy hv[N_HEAVY];
    pthread_t hth[N_HEAVY];
    for (int i = 0; i < N_HEAVY; i++) {
        hv[i] = (heavy){.fd = hc_connect(s.port)};
        assert_true(hv[i].fd >= 0);
        assert_true(hc_write_request(hv[i].fd, "POST", "/v1/systemone", NULL, big.p, big.len, false));
    }
    char want[64];
    snprintf(want, sizeof want, "\nclef_queue_depth %d\n", N_HEAVY - 1);
    assert_true(hc_wait_metric(s.port, want));   /* all received: one computing, the rest queued */
    for (int i = 0; i < N_HEAVY; i++) assert_int_equal(pthread_create(&hth[i], NULL, heavy_main, &hv[i]), 0);

    volatile bool stop = false;
    hammer hm[N_HAMMER];
    pthread_t mth[N_HAMMER];
    for (int i = 0; i < N_HAMMER; i++) {
        hm[i] = (hammer){.port = s.port, .keep_alive = i % 2 == 0, .body = w->bodies[0], .stop = &stop};
        assert_int_equal(pthread_create(&mth[i], NULL, hammer_main, &hm[i]), 0);
    }
    hc_sleep_ms(50);
    assert_int_equal(kill(s.pid, SIGTERM), 0);
    for (int i = 0; i < N_HEAVY; i++) {
        pthread_join(hth[i], NULL);
        if (!hv[i].answered) fail_msg("queued request %d got no answer after SIGTERM", i);
        assert_int_equal(hv[i].r.status, 200);
        assert_string_equal(hv[i].r.body, ref.body);
        hc_free(&hv[i].r);
        close(hv[i].fd);
    }
    int exit_status = hc_server_stop(&s, 0);   /* only wait: a second signal would kill it */
    stop = true;
    int ok = 0, refused = 0;
    for (int i = 0; i < N_HAMMER; i++) {
        pthread_join(mth[i], NULL);
        if (hm[i].bad) fail_msg("hammer %d: %d unexpected answers, last %s", i, hm[i].bad, hm[i].why);
        ok += hm[i].ok;
        refused += hm[i].refused;
    }
    fprintf(stderr, "SIGTERM under load: %d queued answered 200; hammers: %d x 200, %d refused/503/529\n",
            N_HEAVY, ok, refused);
    assert_int_equal(exit_status, 0);
    hc_free(&ref);
    st_free(&big);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sustained_load),
        cmocka_unit_test(test_sigterm_under_load),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
