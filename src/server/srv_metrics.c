/* server/srv_metrics.c — counters, histograms and Prometheus rendering. */
#include "server/srv_metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Upper bounds in seconds: sub-millisecond parses up to multi-second prefills. */
static const double bucket_bound_s[SRV_METRICS_BUCKETS] = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};

static const char *const route_label[SRV_ROUTE_COUNT] = {
    "/v1/systemone", "/v1/models", "/healthz", "/metrics", "other"};

static const char *const stage_label[SRV_STAGE_COUNT] = {
    "queue", "parse", "tokenize", "backbone", "head", "total"};

/* The last status slot collects codes once the others are taken. */
#define OTHER_SLOT (SRV_METRICS_STATUS_SLOTS - 1)

void srv_metrics_init(srv_metrics *m) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
}

void srv_metrics_destroy(srv_metrics *m) { pthread_mutex_destroy(&m->mu); }

void srv_metrics_count_request(srv_metrics *m, srv_route route, int status) {
    if ((unsigned)route >= SRV_ROUTE_COUNT) route = SRV_ROUTE_OTHER;
    pthread_mutex_lock(&m->mu);
    int slot = OTHER_SLOT;
    for (int i = 0; i < OTHER_SLOT; i++) {
        if (m->status_code[route][i] == status) { slot = i; break; }
        if (m->status_code[route][i] == 0) {
            m->status_code[route][i] = status;
            slot = i;
            break;
        }
    }
    m->status_count[route][slot]++;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_count_cancelled(srv_metrics *m) {
    pthread_mutex_lock(&m->mu);
    m->cancelled++;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_count_timed_out(srv_metrics *m) {
    pthread_mutex_lock(&m->mu);
    m->timed_out++;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_count_batch(srv_metrics *m, size_t n) {
    pthread_mutex_lock(&m->mu);
    m->batches++;
    m->batch_requests += n;
    pthread_mutex_unlock(&m->mu);
}

static void observe(srv_histogram *h, double ms) {
    double s = ms > 0 ? ms / 1000.0 : 0.0;
    int b = 0;
    while (b < SRV_METRICS_BUCKETS && s > bucket_bound_s[b]) b++;
    h->bucket[b]++;
    h->count++;
    h->sum_s += s;
}

void srv_metrics_count_decision(srv_metrics *m, int64_t input_tokens, int64_t state_tokens,
                                int64_t state_tokens_used, const double stage_ms[SRV_STAGE_COUNT]) {
    pthread_mutex_lock(&m->mu);
    if (input_tokens > 0) m->input_tokens += (uint64_t)input_tokens;
    if (state_tokens > 0) m->state_tokens += (uint64_t)state_tokens;
    if (state_tokens_used > 0) m->state_tokens_used += (uint64_t)state_tokens_used;
    if (state_tokens_used < state_tokens) m->state_cuts++;
    for (int s = 0; s < SRV_STAGE_COUNT; s++) observe(&m->stage[s], stage_ms[s]);
    pthread_mutex_unlock(&m->mu);
}

static void render_requests(FILE *f, const srv_metrics *m) {
    fputs("# HELP clef_requests_total HTTP requests answered, by route and status.\n"
          "# TYPE clef_requests_total counter\n", f);
    for (int r = 0; r < SRV_ROUTE_COUNT; r++)
        for (int i = 0; i < SRV_METRICS_STATUS_SLOTS; i++) {
            if (!m->status_count[r][i]) continue;
            if (i == OTHER_SLOT)
                fprintf(f, "clef_requests_total{route=\"%s\",status=\"other\"} %llu\n",
                        route_label[r], (unsigned long long)m->status_count[r][i]);
            else
                fprintf(f, "clef_requests_total{route=\"%s\",status=\"%d\"} %llu\n", route_label[r],
                        m->status_code[r][i], (unsigned long long)m->status_count[r][i]);
        }
    fprintf(f, "# HELP clef_requests_cancelled_total Queued requests dropped because the client left.\n"
               "# TYPE clef_requests_cancelled_total counter\n"
               "clef_requests_cancelled_total %llu\n", (unsigned long long)m->cancelled);
    fprintf(f, "# HELP clef_connections_timed_out_total Connections closed for sending their "
               "headers or body too slowly (--header-timeout, --request-timeout).\n"
               "# TYPE clef_connections_timed_out_total counter\n"
               "clef_connections_timed_out_total %llu\n", (unsigned long long)m->timed_out);
    fprintf(f, "# HELP clef_worker_batches_total Times a decision worker took requests to compute "
               "together (their backbone work shares passes).\n"
               "# TYPE clef_worker_batches_total counter\n"
               "clef_worker_batches_total %llu\n"
               "# HELP clef_worker_batch_requests_total Requests those batches held.\n"
               "# TYPE clef_worker_batch_requests_total counter\n"
               "clef_worker_batch_requests_total %llu\n",
            (unsigned long long)m->batches, (unsigned long long)m->batch_requests);
}

static void render_tokens(FILE *f, const srv_metrics *m) {
    fprintf(f, "# HELP clef_tokens_total Tokens of answered decisions: input = sent to the backbone, "
               "state = state tokens before the cut, state_used = after it.\n"
               "# TYPE clef_tokens_total counter\n"
               "clef_tokens_total{kind=\"input\"} %llu\n"
               "clef_tokens_total{kind=\"state\"} %llu\n"
               "clef_tokens_total{kind=\"state_used\"} %llu\n"
               "# HELP clef_state_cut_total Decisions whose state was cut to fit the token budget.\n"
               "# TYPE clef_state_cut_total counter\n"
               "clef_state_cut_total %llu\n",
            (unsigned long long)m->input_tokens, (unsigned long long)m->state_tokens,
            (unsigned long long)m->state_tokens_used, (unsigned long long)m->state_cuts);
}

static void render_gauges(FILE *f, const srv_gauges *g) {
    fprintf(f, "# HELP clef_queue_depth Requests waiting for a decision worker.\n"
               "# TYPE clef_queue_depth gauge\nclef_queue_depth %zu\n"
               "# HELP clef_requests_in_flight Requests a decision worker is computing.\n"
               "# TYPE clef_requests_in_flight gauge\nclef_requests_in_flight %zu\n"
               "# HELP clef_queue_capacity Most requests that may wait; more get 529.\n"
               "# TYPE clef_queue_capacity gauge\nclef_queue_capacity %zu\n"
               "# HELP clef_workers Decision worker threads.\n"
               "# TYPE clef_workers gauge\nclef_workers %zu\n",
            g->queue_depth, g->in_flight, g->queue_capacity, g->workers);
}

static void render_stages(FILE *f, const srv_metrics *m) {
    fputs("# HELP clef_stage_duration_seconds Wall time of each decision stage "
          "(queue = waiting for a worker, total = arrival to answer).\n"
          "# TYPE clef_stage_duration_seconds histogram\n", f);
    for (int s = 0; s < SRV_STAGE_COUNT; s++) {
        const srv_histogram *h = &m->stage[s];
        uint64_t cum = 0;
        for (int b = 0; b < SRV_METRICS_BUCKETS; b++) {
            cum += h->bucket[b];
            fprintf(f, "clef_stage_duration_seconds_bucket{stage=\"%s\",le=\"%g\"} %llu\n",
                    stage_label[s], bucket_bound_s[b], (unsigned long long)cum);
        }
        fprintf(f, "clef_stage_duration_seconds_bucket{stage=\"%s\",le=\"+Inf\"} %llu\n"
                   "clef_stage_duration_seconds_sum{stage=\"%s\"} %.9g\n"
                   "clef_stage_duration_seconds_count{stage=\"%s\"} %llu\n",
                stage_label[s], (unsigned long long)h->count, stage_label[s], h->sum_s,
                stage_label[s], (unsigned long long)h->count);
    }
}

char *srv_metrics_render(srv_metrics *m, const srv_gauges *g) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return NULL;
    pthread_mutex_lock(&m->mu);
    render_requests(f, m);
    render_tokens(f, m);
    render_stages(f, m);
    pthread_mutex_unlock(&m->mu);
    render_gauges(f, g);
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}
