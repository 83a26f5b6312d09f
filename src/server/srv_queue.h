/*
 * server/srv_queue.h — a bounded FIFO of jobs served by a fixed set of
 * worker threads (the server's decision workers).
 *
 * Contract: jobs are intrusive (the caller embeds a srv_job in its own
 * record and owns it); the queue never allocates per job.  A push is
 * admitted while waiting + busy workers < workers + capacity, so `capacity`
 * is how many requests may wait beyond the ones being computed; a refused
 * push returns false and the caller answers 529.  A worker that comes free
 * takes up to `batch` waiting jobs at once (as many as are there: it never
 * waits for more) and passes them to run(jobs, n, ctx) as a list linked
 * through ->next, in queue order.  Each admitted job is passed to run
 * exactly once, unless srv_queue_remove_if takes it out first (then the
 * caller finishes it).  srv_queue_stop lets the
 * workers finish every admitted job, then joins them.  All functions are
 * thread-safe.
 */
#ifndef CLEF_SERVER_SRV_QUEUE_H
#define CLEF_SERVER_SRV_QUEUE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "clef.h"

typedef struct srv_job {
    struct srv_job *next;
} srv_job;

typedef void (*srv_job_fn)(srv_job *jobs, size_t n, void *ctx);
typedef bool (*srv_job_pred)(srv_job *job, void *ctx);

typedef struct srv_queue {
    pthread_mutex_t mu;
    pthread_cond_t work;        /* a job arrived or the queue is closing   */
    pthread_cond_t idle;        /* nothing waiting and nothing running      */
    srv_job *head, *tail;
    size_t waiting, running;    /* jobs                                     */
    size_t busy;                /* workers inside run                       */
    size_t batch;               /* most jobs one run takes                  */
    size_t capacity;
    bool closing;
    pthread_t *threads;         /* n_threads workers                        */
    size_t n_threads;
    srv_job_fn run;
    void *ctx;
} srv_queue;

clef_status srv_queue_start(srv_queue *q, size_t workers, size_t capacity, size_t batch,
                            srv_job_fn run, void *ctx, clef_error *err);

/* Admit a job, or return false when full or closing.  When admitted and
 * admit is non-NULL, admit(arg) runs under the queue lock before any worker
 * can see the job (the server suspends the HTTP connection there, so that a
 * worker's resume can never come before the suspend). */
bool srv_queue_push(srv_queue *q, srv_job *job, void (*admit)(void *arg), void *arg);

/* Take every waiting job for which pred(job, ctx) holds out of the queue
 * (pred runs under the queue lock: keep it short and non-blocking).
 * Returns them as a list linked through ->next, in queue order. */
srv_job *srv_queue_remove_if(srv_queue *q, srv_job_pred pred, void *ctx);

void srv_queue_counts(srv_queue *q, size_t *waiting, size_t *running);

/* Block until nothing waits and nothing runs. */
void srv_queue_wait_idle(srv_queue *q);

/* Finish every admitted job, stop and join the workers, free the queue. */
void srv_queue_stop(srv_queue *q);

#endif
