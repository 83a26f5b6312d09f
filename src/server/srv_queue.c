/* server/srv_queue.c — bounded job FIFO and its worker threads. */
#include "server/srv_queue.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

/* Take up to q->batch jobs off the head (q->mu held, queue not empty). */
static srv_job *take_jobs(srv_queue *q, size_t *n) {
    srv_job *first = q->head, *last = first;
    size_t k = 1;
    while (k < q->batch && last->next) {
        last = last->next;
        k++;
    }
    q->head = last->next;
    if (!q->head) q->tail = NULL;
    last->next = NULL;
    q->waiting -= k;
    q->running += k;
    *n = k;
    return first;
}

static void *worker_main(void *arg) {
    srv_queue *q = arg;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (!q->head && !q->closing) pthread_cond_wait(&q->work, &q->mu);
        if (!q->head) break;    /* closing and drained */
        size_t n;
        srv_job *jobs = take_jobs(q, &n);
        q->busy++;
        pthread_mutex_unlock(&q->mu);
        q->run(jobs, n, q->ctx);
        pthread_mutex_lock(&q->mu);
        q->busy--;
        q->running -= n;
        if (!q->waiting && !q->running) pthread_cond_broadcast(&q->idle);
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

clef_status srv_queue_start(srv_queue *q, size_t workers, size_t capacity, size_t batch,
                            srv_job_fn run, void *ctx, clef_error *err) {
    memset(q, 0, sizeof *q);
    if (workers == 0) return clef_err_set(err, CLEF_ERR_INVALID_ARG, "need at least one decision worker");
    if (batch == 0) return clef_err_set(err, CLEF_ERR_INVALID_ARG, "a worker must take at least one request at a time");
    q->threads = calloc(workers, sizeof *q->threads);
    if (!q->threads) return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory for %zu workers", workers);
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->work, NULL);
    pthread_cond_init(&q->idle, NULL);
    q->capacity = capacity;
    q->batch = batch;
    q->run = run;
    q->ctx = ctx;
    for (size_t i = 0; i < workers; i++) {
        if (pthread_create(&q->threads[i], NULL, worker_main, q) != 0) {
            srv_queue_stop(q);
            return clef_err_set(err, CLEF_ERR_INTERNAL, "cannot start decision worker %zu of %zu",
                                i + 1, workers);
        }
        q->n_threads++;
    }
    return CLEF_OK;
}

bool srv_queue_push(srv_queue *q, srv_job *job, void (*admit)(void *arg), void *arg) {
    pthread_mutex_lock(&q->mu);
    bool ok = !q->closing && q->waiting + q->busy < q->n_threads + q->capacity;
    if (ok) {
        if (admit) admit(arg);
        job->next = NULL;
        if (q->tail) q->tail->next = job;
        else q->head = job;
        q->tail = job;
        q->waiting++;
        pthread_cond_signal(&q->work);
    }
    pthread_mutex_unlock(&q->mu);
    return ok;
}

srv_job *srv_queue_remove_if(srv_queue *q, srv_job_pred pred, void *ctx) {
    srv_job *out = NULL, **out_tail = &out;
    pthread_mutex_lock(&q->mu);
    srv_job **link = &q->head, *prev = NULL;
    while (*link) {
        srv_job *job = *link;
        if (pred(job, ctx)) {
            *link = job->next;
            if (q->tail == job) q->tail = prev;
            job->next = NULL;
            *out_tail = job;
            out_tail = &job->next;
            q->waiting--;
        } else {
            prev = job;
            link = &job->next;
        }
    }
    if (!q->waiting && !q->running) pthread_cond_broadcast(&q->idle);
    pthread_mutex_unlock(&q->mu);
    return out;
}

void srv_queue_counts(srv_queue *q, size_t *waiting, size_t *running) {
    pthread_mutex_lock(&q->mu);
    *waiting = q->waiting;
    *running = q->running;
    pthread_mutex_unlock(&q->mu);
}

void srv_queue_wait_idle(srv_queue *q) {
    pthread_mutex_lock(&q->mu);
    while (q->waiting || q->running) pthread_cond_wait(&q->idle, &q->mu);
    pthread_mutex_unlock(&q->mu);
}

void srv_queue_stop(srv_queue *q) {
    if (!q->threads) return;
    pthread_mutex_lock(&q->mu);
    q->closing = true;
    pthread_cond_broadcast(&q->work);
    pthread_mutex_unlock(&q->mu);
    for (size_t i = 0; i < q->n_threads; i++) pthread_join(q->threads[i], NULL);
    free(q->threads);
    q->threads = NULL;
    pthread_cond_destroy(&q->idle);
    pthread_cond_destroy(&q->work);
    pthread_mutex_destroy(&q->mu);
}
