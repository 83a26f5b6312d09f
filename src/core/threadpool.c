/*
 * core/threadpool.c — the worker threads behind tp_run.
 *
 * Hand-over is a generation counter: tp_run publishes fn/ctx and bumps it;
 * workers notice and run their share; a `pending` count tells the caller when
 * all are done.  A forward issues hundreds of short jobs (one per matmul,
 * norm pass, attention chunk ...), so waking through a condition variable
 * every time (tens of microseconds) would cost several percent: idle workers
 * first spin on the counter for a while (TP_SPIN rounds of `pause`, about a
 * millisecond) and only then sleep on `start`; the caller spins on `pending`
 * (yielding now and then).  With more threads than CPUs spinning only steals
 * time from the threads that have work, so workers then sleep at once and
 * the caller yields on every check.
 * Lost wake-ups are impossible: a worker going to sleep registers in
 * `sleeping` and re-reads the generation under the lock; tp_run bumps the
 * generation before reading `sleeping` (both sequentially consistent), so at
 * least one of the two sees the other.
 */
#include "core/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/cpu.h"
#include "core/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
static inline void cpu_relax(void) { _mm_pause(); }
#elif defined(__aarch64__)
static inline void cpu_relax(void) { __asm__ volatile("yield"); }
#else
static inline void cpu_relax(void) {}
#endif

enum { TP_SPIN = 20000 };

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
    pthread_mutex_t lock;       /* guards the sleep/wake hand-over          */
    pthread_cond_t start;
    _Atomic uint64_t generation; /* bumped once per job                     */
    atomic_int pending;         /* workers still running the current job    */
    atomic_int sleeping;        /* workers asleep (or about to) on `start`  */
    atomic_int stop;
    int spin;                   /* rounds idle workers spin: TP_SPIN, or 0 when
                                 * there are more threads than CPUs          */
    tp_fn fn;                   /* written before the generation bump       */
    void *ctx;
};

/* Wait until the generation differs from `seen` (or stop); returns it. */
static uint64_t tp_wait_job(tp_pool *p, uint64_t seen) {
    for (int i = 0; i < p->spin; i++) {
        uint64_t g = atomic_load(&p->generation);
        if (g != seen || atomic_load(&p->stop)) return g;
        cpu_relax();
    }
    pthread_mutex_lock(&p->lock);
    atomic_fetch_add(&p->sleeping, 1);
    uint64_t g;
    while ((g = atomic_load(&p->generation)) == seen && !atomic_load(&p->stop))
        pthread_cond_wait(&p->start, &p->lock);
    atomic_fetch_sub(&p->sleeping, 1);
    pthread_mutex_unlock(&p->lock);
    return g;
}

static void *tp_worker_main(void *arg) {
    tp_worker *w = arg;
    tp_pool *p = w->pool;
    uint64_t seen = 0;
    cpu_fp_flush_enter(); /* for good: workers only run jobs */
    for (;;) {
        seen = tp_wait_job(p, seen);
        if (atomic_load(&p->stop)) return NULL;
        p->fn(p->ctx, w->ith, p->n_threads);
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_release);
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
    p->spin = n_threads <= tp_default_threads() ? TP_SPIN : 0;
    pthread_mutex_init(&p->run_lock, NULL);
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->start, NULL);
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
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->start);
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; i < p->n_started; i++) pthread_join(p->workers[i].thread, NULL);
    free(p->workers);
    pthread_cond_destroy(&p->start);
    pthread_mutex_destroy(&p->lock);
    pthread_mutex_destroy(&p->run_lock);
    free(p);
}

int tp_size(const tp_pool *p) { return p ? p->n_threads : 1; }

void tp_run(tp_pool *p, tp_fn fn, void *ctx) {
    const unsigned long fp = cpu_fp_flush_enter();
    if (!p || p->n_threads == 1) {
        fn(ctx, 0, 1);
        cpu_fp_restore(fp);
        return;
    }
    pthread_mutex_lock(&p->run_lock);
    p->fn = fn;
    p->ctx = ctx;
    atomic_store(&p->pending, p->n_threads - 1);
    atomic_fetch_add(&p->generation, 1);
    if (atomic_load(&p->sleeping) > 0) {
        pthread_mutex_lock(&p->lock);
        pthread_cond_broadcast(&p->start);
        pthread_mutex_unlock(&p->lock);
    }

    fn(ctx, 0, p->n_threads);

    for (unsigned spins = 1; atomic_load_explicit(&p->pending, memory_order_acquire) > 0; spins++) {
        if (!p->spin || spins % 1024 == 0) sched_yield();
        else cpu_relax();
    }
    pthread_mutex_unlock(&p->run_lock);
    cpu_fp_restore(fp);
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
