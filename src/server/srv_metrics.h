/*
 * server/srv_metrics.h — the server's counters and latency histograms, and
 * their Prometheus text rendering (GET /metrics).
 *
 * Contract: one srv_metrics per server, updated from any thread (a mutex
 * inside); srv_metrics_render returns a malloc'd text the caller frees.
 * Families (all prefixed clef_):
 *   requests_total{route,status}          counter, every answered request
 *   requests_cancelled_total               counter, queued requests whose client left
 *   connections_timed_out_total            counter, connections cut for slow headers/body
 *   tokens_total{kind=input|state|state_used}  counter, from answered decisions
 *   state_cut_total                        counter, decisions whose state was cut
 *   worker_batches_total / worker_batch_requests_total  counters: worker runs and
 *                                          the requests they took together
 *   queue_depth / requests_in_flight / queue_capacity / workers   gauges
 *   stage_duration_seconds{stage}          histogram: queue, parse, tokenize,
 *                                          backbone, head, total
 */
#ifndef CLEF_SERVER_SRV_METRICS_H
#define CLEF_SERVER_SRV_METRICS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

typedef enum srv_route {
    SRV_ROUTE_SYSTEMONE = 0,
    SRV_ROUTE_MODELS,
    SRV_ROUTE_HEALTH,
    SRV_ROUTE_METRICS,
    SRV_ROUTE_OTHER,            /* 404s and anything unrouted */
    SRV_ROUTE_COUNT
} srv_route;

typedef enum srv_stage {
    SRV_STAGE_QUEUE = 0,
    SRV_STAGE_PARSE,
    SRV_STAGE_TOKENIZE,
    SRV_STAGE_BACKBONE,
    SRV_STAGE_HEAD,
    SRV_STAGE_TOTAL,
    SRV_STAGE_COUNT
} srv_stage;

#define SRV_METRICS_STATUS_SLOTS 16   /* distinct status codes tracked per route */
#define SRV_METRICS_BUCKETS 15        /* finite histogram bounds, +Inf is implied */

typedef struct srv_histogram {
    uint64_t bucket[SRV_METRICS_BUCKETS + 1];   /* non-cumulative; last = over the top bound */
    uint64_t count;
    double sum_s;
} srv_histogram;

typedef struct srv_metrics {
    pthread_mutex_t mu;
    int status_code[SRV_ROUTE_COUNT][SRV_METRICS_STATUS_SLOTS];   /* 0 = free slot */
    uint64_t status_count[SRV_ROUTE_COUNT][SRV_METRICS_STATUS_SLOTS];
    uint64_t cancelled;
    uint64_t timed_out;
    uint64_t batches, batch_requests;
    uint64_t input_tokens, state_tokens, state_tokens_used, state_cuts;
    srv_histogram stage[SRV_STAGE_COUNT];
} srv_metrics;

/* Gauges are read from the queue when rendering, not stored here. */
typedef struct srv_gauges {
    size_t queue_depth, in_flight, queue_capacity, workers;
} srv_gauges;

void srv_metrics_init(srv_metrics *m);
void srv_metrics_destroy(srv_metrics *m);

void srv_metrics_count_request(srv_metrics *m, srv_route route, int status);
void srv_metrics_count_cancelled(srv_metrics *m);
void srv_metrics_count_timed_out(srv_metrics *m);
/* A worker took n requests to compute together. */
void srv_metrics_count_batch(srv_metrics *m, size_t n);
/* One answered decision: tokens and per-stage milliseconds (indexed by srv_stage). */
void srv_metrics_count_decision(srv_metrics *m, int64_t input_tokens, int64_t state_tokens,
                                int64_t state_tokens_used, const double stage_ms[SRV_STAGE_COUNT]);

/* Prometheus text exposition format 0.0.4; NULL when out of memory. */
char *srv_metrics_render(srv_metrics *m, const srv_gauges *g);

#endif
