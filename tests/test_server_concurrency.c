/*
 * tests/test_server_concurrency.c — many clients at once against
 * `$CLEF_BIN serve` on the tiny oracle model: 16 threads × 8 requests, good
 * and bad mixed (decisions of every question type, shape and limit errors,
 * wrong keys, unknown routes), on 4 decision workers, and again on one
 * worker that batches up to 16 waiting requests into shared backbone passes
 * (/metrics must show that batches formed).  Every answer must be
 * byte for byte the one the same request gets when sent alone (with its
 * state already cached, as it is for the concurrent ones), and every
 * request id distinct.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <pthread.h>

#include "test_server_client.h"
#include "testutil.h"

#define TINY ORACLE_DIR "/clef-tiny/clef-tiny-a-F32.gguf"
#define CASES ORACLE_DIR "/clef-tiny/cases.jsonl"
#define N_THREADS 16
#define N_PER_THREAD 8
#define KEY "Authorization: Bearer conc-key\r\n"

typedef struct kind {
    const char *method, *path, *auth;
    const char *case_id;    /* body from cases.jsonl, or NULL */
    const char *body;       /* else this body */
    int status;             /* expected on the serial run */
} kind;

static const kind KINDS[] = {
    {"POST", "/v1/systemone", KEY, "noul_basic", NULL, 200},
    {"POST", "/v1/systemone", KEY, "choice_12_unsorted", NULL, 200},
    {"POST", "/v1/systemone", KEY, "score_10_levels", NULL, 200},
    {"POST", "/v1/systemone", KEY, "state_object_nested", NULL, 200},
    {"POST", "/v1/systemone", KEY, "mixed_three_spec_example", NULL, 200},
    {"POST", "/v1/systemone", KEY, "eight_questions", NULL, 200},
    {"POST", "/v1/systemone", KEY, NULL, "{\"model\":\"m\",\"state\":null,\"questions\":{}}", 422},
    {"POST", "/v1/systemone", KEY, NULL, "{\"model\":\"m\",\"state\":\"s\",\"questions\":{\"q\":{\"type\":\"noul\"}}}", 400},
    {"POST", "/v1/systemone", "Authorization: Bearer nope\r\n", "noul_basic", NULL, 401},
    {"POST", "/v1/systemone", NULL, "noul_basic", NULL, 403},
    {"GET", "/v1/models", KEY, NULL, NULL, 200},
    {"GET", "/v1/nothing", NULL, NULL, NULL, 404},
};
#define N_KINDS (sizeof KINDS / sizeof KINDS[0])

typedef struct answer {
    int status;
    char *body;
    char id[64];
} answer;

typedef struct world {
    hc_server srv;
    char *bodies[N_KINDS];
    answer serial[N_KINDS];
    answer got[N_THREADS][N_PER_THREAD];
} world;

static void ask(const world *w, size_t k, answer *out) {
    hc_resp r;
    const kind *q = &KINDS[k];
    const char *body = q->case_id ? w->bodies[k] : q->body;
    out->status = hc_request(w->srv.port, q->method, q->path, q->auth, body, &r) ? r.status : -1;
    out->body = r.body ? strdup(r.body) : NULL;
    if (!hc_header(&r, "x-typesafe-request-id", out->id, sizeof out->id)) out->id[0] = '\0';
    hc_free(&r);
}

typedef struct client {
    world *w;
    int t;
} client;

static void *client_main(void *arg) {
    client *c = arg;
    for (int i = 0; i < N_PER_THREAD; i++)
        ask(c->w, (size_t)(c->t * N_PER_THREAD + i * 5) % N_KINDS, &c->w->got[c->t][i]);
    return NULL;
}

static int start_world(void **state, const char *const *args) {
    signal(SIGPIPE, SIG_IGN);
    world *w = calloc(1, sizeof *w);
    *state = w;
    for (size_t k = 0; k < N_KINDS; k++)
        if (KINDS[k].case_id && !(w->bodies[k] = hc_case_request(CASES, KINDS[k].case_id))) {
            fprintf(stderr, "no case '%s' in %s\n", KINDS[k].case_id, CASES);
            return -1;
        }
    return hc_server_start(&w->srv, args) ? 0 : -1;
}

static int setup(void **state) {
    const char *args[] = {"-m", TINY, "-np", "4", "--queue", "512", "-t", "1", "--batch", "1",
                          "--api-key", "conc-key", NULL};
    return start_world(state, args);
}

/* One worker: while it computes, the other clients' requests pile up, and
 * it takes them 16 at a time; small passes, so a batch spans several. */
static int setup_batched(void **state) {
    const char *args[] = {"-m", TINY, "-np", "1", "--queue", "512", "-t", "1", "--batch", "16",
                          "--batch-tokens", "600", "--api-key", "conc-key", NULL};
    return start_world(state, args);
}

/* The value of a counter line "name N" in /metrics, or -1. */
static long long metric_value(int port, const char *name) {
    hc_resp r;
    long long v = -1;
    if (hc_request(port, "GET", "/metrics", NULL, NULL, &r) && r.body) {
        char key[128];
        snprintf(key, sizeof key, "\n%s ", name);
        const char *at = strstr(r.body, key);
        if (at) v = strtoll(at + strlen(key), NULL, 10);
    }
    hc_free(&r);
    return v;
}

static int teardown(void **state) {
    world *w = *state;
    if (!w) return 0;
    hc_server_stop(&w->srv, SIGKILL);
    for (size_t k = 0; k < N_KINDS; k++) {
        free(w->bodies[k]);
        free(w->serial[k].body);
    }
    for (int t = 0; t < N_THREADS; t++)
        for (int i = 0; i < N_PER_THREAD; i++) free(w->got[t][i].body);
    free(w);
    return 0;
}

/* Every kind alone, then all of them from many clients at once. */
static void run_mix(world *w) {
    /* Each request alone, twice: the first puts its state in the server's
     * cache, the second answers from it as every concurrent one will (a
     * cache hit agrees with a miss to |dp| <= 1e-6, test_engine checks that;
     * here the answers must be the same bytes). */
    for (size_t k = 0; k < N_KINDS; k++) {
        ask(w, k, &w->serial[k]);
        free(w->serial[k].body);
        ask(w, k, &w->serial[k]);
        if (w->serial[k].status != KINDS[k].status)
            fail_msg("kind %zu: expected %d alone, got %d: %s", k, KINDS[k].status,
                     w->serial[k].status, w->serial[k].body ? w->serial[k].body : "");
    }
    client clients[N_THREADS];
    pthread_t th[N_THREADS];
    for (int t = 0; t < N_THREADS; t++) {
        clients[t] = (client){w, t};
        assert_int_equal(pthread_create(&th[t], NULL, client_main, &clients[t]), 0);
    }
    for (int t = 0; t < N_THREADS; t++) pthread_join(th[t], NULL);
    for (int t = 0; t < N_THREADS; t++)
        for (int i = 0; i < N_PER_THREAD; i++) {
            size_t k = (size_t)(t * N_PER_THREAD + i * 5) % N_KINDS;
            const answer *a = &w->got[t][i], *s = &w->serial[k];
            if (a->status != s->status || !a->body || strcmp(a->body, s->body))
                fail_msg("thread %d request %d (kind %zu): %d %s\nalone: %d %s", t, i, k,
                         a->status, a->body ? a->body : "(none)", s->status, s->body);
            assert_true(hc_is_request_id(a->id));
        }
    for (int x = 0; x < N_THREADS * N_PER_THREAD; x++) {
        const char *ix = w->got[x / N_PER_THREAD][x % N_PER_THREAD].id;
        for (int y = 0; y < x; y++) assert_string_not_equal(ix, w->got[y / N_PER_THREAD][y % N_PER_THREAD].id);
    }
}

/* The server is idle again and still exits cleanly. */
static void check_idle_and_stop(world *w) {
    assert_true(hc_wait_metric(w->srv.port, "\nclef_queue_depth 0\n"));
    assert_true(hc_wait_metric(w->srv.port, "\nclef_requests_in_flight 0\n"));
    assert_int_equal(hc_server_stop(&w->srv, SIGTERM), 0);
}

static void test_concurrent_equals_serial(void **state) {
    world *w = *state;
    run_mix(w);
    assert_int_equal(metric_value(w->srv.port, "clef_worker_batches_total"), 0);   /* --batch 1 */
    check_idle_and_stop(w);
}

/* The same mix through a batching worker: batches must form, and every
 * answer is still the one the request gets alone. */
static void test_batched_equals_serial(void **state) {
    world *w = *state;
    run_mix(w);
    long long batches = metric_value(w->srv.port, "clef_worker_batches_total");
    long long batched = metric_value(w->srv.port, "clef_worker_batch_requests_total");
    fprintf(stderr, "worker batches: %lld, holding %lld of %d requests\n", batches, batched,
            N_THREADS * N_PER_THREAD);
    assert_true(batches >= 1);
    assert_true(batched >= 2 * batches);   /* a batch holds two requests or more */
    check_idle_and_stop(w);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_concurrent_equals_serial, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batched_equals_serial, setup_batched, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
