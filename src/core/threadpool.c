/*
 * core/threadpool.c — the worker threads behind tp_run.
 *
 * One mutex and two condition variables: workers sleep on `start` until the
 * job generation changes, run their share, and the last one to finish wakes
 * the caller on `done`.  A job is a handful of pointers, so a generation
 * counter (rather than a queue) is all the hand-over needs.
 */
#include "core/threadpool.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/error.h"

typedef struct tp_worker {
    tp_pool *pool;
    int ith;
    pthread_t thread;
} tp_worker;

struct tp_pool {
    int n_threads;              /* including the caller's thread            */
    int n_started;              /* workers actually running (n_threads - 1) */
    tp_worker *workers;         /* [n_threads - 1]                          */

    pthread_mutex_t run_lock;   /* serialises tp_run callers                */
    pthread_mutex_t lock;       /* guards everything below                  */
    pthread_cond_t start;
    pthread_cond_t done;
    uint64_t generation;        /* bumped once per job                      */
    int pending;                /* workers still running the current job    */
    int stop;
    tp_fn fn;
    void *ctx;
};

static void *tp_worker_main(void *arg) {
    tp_worker *w = arg;
    tp_pool *p = w->pool;
    uint64_t seen = 0;
    for (;;) {
        pthread_mutex_lock(&p->lock);
        while (p->generation == seen && !p->stop) pthread_cond_wait(&p->start, &p->lock);
        if (p->stop) {
            pthread_mutex_unlock(&p->lock);
            return NULL;
        }
        seen = p->generation;
        tp_fn fn = p->fn;
        void *ctx = p->ctx;
        pthread_mutex_unlock(&p->lock);

        fn(ctx, w->ith, p->n_threads);

        pthread_mutex_lock(&p->lock);
        if (--p->pending == 0) pthread_cond_signal(&p->done);
        pthread_mutex_unlock(&p->lock);
    }
}

static int tp_default_threads(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

clef_status tp_create(int n_threads, tp_pool **out, clef_error *err) {
    *out = NULL;
    if (n_threads <= 0) n_threads = tp_default_threads();
    if (n_threads > TP_MAX_THREADS) n_threads = TP_MAX_THREADS;
    tp_pool *p = calloc(1, sizeof *p);
    if (!p) return clef_err_set(err, CLEF_ERR_NOMEM, "thread pool: out of memory");
    p->n_threads = n_threads;
    pthread_mutex_init(&p->run_lock, NULL);
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->start, NULL);
    pthread_cond_init(&p->done, NULL);
    if (n_threads > 1) {
        p->workers = calloc((size_t)n_threads - 1, sizeof *p->workers);
        if (!p->workers) {
            tp_free(p);
            return clef_err_set(err, CLEF_ERR_NOMEM, "thread pool: out of memory");
        }
    }
    for (int i = 0; i < n_threads - 1; i++) {
        p->workers[i].pool = p;
        p->workers[i].ith = i + 1;
        if (pthread_create(&p->workers[i].thread, NULL, tp_worker_main, &p->workers[i])) {
            tp_free(p);
            return clef_err_set(err, CLEF_ERR_INTERNAL,
                                "thread pool: could not start worker %d of %d", i + 1, n_threads);
        }
        p->n_started++;
    }
    *out = p;
    return CLEF_OK;
}

void tp_free(tp_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->lock);
    p->stop = 1;
    pthread_cond_broadcast(&p->start);
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; i < p->n_started; i++) pthread_join(p->workers[i].thread, NULL);
    free(p->workers);
    pthread_cond_destroy(&p->done);
    pthread_cond_destroy(&p->start);
    pthread_mutex_destroy(&p->lock);
    pthread_mutex_destroy(&p->run_lock);
    free(p);
}

int tp_size(const tp_pool *p) { return p ? p->n_threads : 1; }

void tp_run(tp_pool *p, tp_fn fn, void *ctx) {
    if (!p || p->n_threads == 1) {
        fn(ctx, 0, 1);
        return;
    }
    pthread_mutex_lock(&p->run_lock);
    pthread_mutex_lock(&p->lock);
    p->fn = fn;
    p->ctx = ctx;
    p->pending = p->n_threads - 1;
    p->generation++;
    pthread_cond_broadcast(&p->start);
    pthread_mutex_unlock(&p->lock);

    fn(ctx, 0, p->n_threads);

    pthread_mutex_lock(&p->lock);
    while (p->pending > 0) pthread_cond_wait(&p->done, &p->lock);
    pthread_mutex_unlock(&p->lock);
    pthread_mutex_unlock(&p->run_lock);
}

void tp_split(int64_t n, int64_t align, int ith, int nth, int64_t *begin, int64_t *end) {
    if (align < 1) align = 1;
    int64_t units = (n + align - 1) / align;
    int64_t per = units / nth, extra = units % nth;
    int64_t u0 = ith * per + (ith < extra ? ith : extra);
    int64_t u1 = u0 + per + (ith < extra ? 1 : 0);
    int64_t b = u0 * align, e = u1 * align;
    *begin = b < n ? b : n;
    *end = e < n ? e : n;
}
