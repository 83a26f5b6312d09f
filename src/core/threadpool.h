/*
 * core/threadpool.h — a fixed set of worker threads that run one data-parallel
 * job at a time.
 *
 * A job is a function called once per thread as fn(ctx, ith, nth) with
 * ith in [0, nth); the caller's thread takes part as ith = 0, so a pool of n
 * threads starts n-1 workers.  tp_run returns when every call has returned.
 * The function splits the work itself (tp_split gives the usual contiguous
 * share), must not call tp_run, and must not fail: jobs only compute.
 *
 * Jobs run with denormals flushed to zero on every thread (cpu_fp_flush_enter:
 * workers for good, the caller's thread for the length of tp_run, its own
 * mode restored after).
 *
 * Several threads may call tp_run on one pool: the jobs run one after the
 * other (a mutex serialises them), so a model shared by request threads stays
 * correct without each request owning its threads.
 */
#ifndef CLEF_CORE_THREADPOOL_H
#define CLEF_CORE_THREADPOOL_H

#include <stdint.h>

#include "clef.h"

typedef struct tp_pool tp_pool;

typedef void (*tp_fn)(void *ctx, int ith, int nth);

/* Start a pool of n_threads (<= 0: the number of online CPUs; capped at
 * TP_MAX_THREADS).  *out is owned by the caller: tp_free. */
#define TP_MAX_THREADS 256
clef_status tp_create(int n_threads, tp_pool **out, clef_error *err);

/* Stop and join the workers.  NULL is allowed. */
void tp_free(tp_pool *pool);

/* Threads a job runs on (1 for a NULL pool). */
int tp_size(const tp_pool *pool);

/* Run fn on every thread of the pool and wait.  A NULL pool runs fn(ctx, 0, 1)
 * on the calling thread. */
void tp_run(tp_pool *pool, tp_fn fn, void *ctx);

/* The contiguous share [*begin, *end) of n items for thread ith of nth, in
 * multiples of `align` items (the last share takes the remainder). */
void tp_split(int64_t n, int64_t align, int ith, int nth, int64_t *begin, int64_t *end);

#endif
