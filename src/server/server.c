/*
 * server/server.c — the libmicrohttpd daemon behind `clef serve`: request
 * lifecycle, routing, responses, the decision workers and shutdown.
 *
 * A request's life (srv_request, one per HTTP request):
 *   first handler call   route, method, drain, auth and Content-Length checks;
 *                        anything but a decision is answered right here
 *   body calls           bytes appended up to max_body (then discarded → 413)
 *   last body call       pushed on the queue; the connection is suspended
 *                        (under the queue lock, before a worker can see it)
 *   worker               backend decide → result stored → state DONE →
 *                        MHD_resume_connection (its last touch of the request)
 *   handler again        the stored answer is sent
 *   completed callback   the request is freed
 * Suspended connections are not polled by libmicrohttpd, so they can only be
 * closed by us: a worker or a queue sweep that finds the peer gone marks the
 * request CANCELLED and resumes it; the handler then drops the connection.
 *
 * Deadlines (server.h, "Time limits"): every open connection has a srv_conn
 * (libmicrohttpd's socket context) holding the moment its current phase
 * must end.  The reaper thread shuts down the socket of a connection past
 * it; libmicrohttpd then sees the socket fail and closes the connection
 * through its usual path (the fd stays ours to touch until NOTIFY_CLOSED,
 * which unlinks the srv_conn under conns_mu before libmicrohttpd closes it).
 * Queued requests past the request deadline are taken out of the queue and
 * answered 529 (state TIMEDOUT), as cancelled ones are resumed.
 */
#include "server/server.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "server/srv_metrics.h"
#include "server/srv_queue.h"

#define REQUEST_ID_LEN 36   /* "req_" + 32 hex */
#define REAPER_TICK_MS 100  /* how often deadlines and departed clients are checked */

enum req_state {
    REQ_NEW,
    REQ_VERDICT,    /* answer known from the headers; body (if any) discarded */
    REQ_BODY,       /* reading the decision body                               */
    REQ_QUEUED,     /* waiting for or inside a worker (connection suspended)  */
    REQ_DONE,       /* the worker's answer is stored                           */
    REQ_CANCELLED,  /* the client left while waiting                           */
    REQ_TIMEDOUT,   /* waited past the request timeout: answer 529             */
    REQ_ANSWERED,   /* a response is queued                                    */
};

/* One open connection (its libmicrohttpd socket context). */
typedef struct srv_conn {
    struct srv_conn *prev, *next;
    int fd;
    double deadline;            /* monotonic ms; 0 = none; guarded by conns_mu */
} srv_conn;

typedef struct srv_request {
    srv_job job;                /* first member: the queue hands back &job */
    srv_server *srv;
    struct MHD_Connection *conn;
    srv_conn *sc;               /* its connection's record; NULL if untracked */
    int fd;                     /* the client socket, for the disconnect check */
    char id[REQUEST_ID_LEN + 1];
    srv_route route;
    double t_arrival, t_queued, t_start, t_end;   /* monotonic ms */
    char *body;                 /* POST body so far, owned */
    size_t len, cap, discarded;
    int v_status;               /* the verdict of REQ_VERDICT: status, body, one header */
    const char *v_body;         /* NULL = the metrics page */
    const char *v_hname, *v_hvalue;
    _Atomic int state;          /* enum req_state; written by worker and HTTP thread */
    /* Filled by the worker before DONE: */
    int status;
    char *out;                  /* a body the server wrote instead of the backend's (owned) */
    clef_decide_result result;
    bool has_result;
} srv_request;

struct srv_server {
    srv_config cfg;
    srv_backend backend;
    struct MHD_Daemon *mhd;
    int listen_fd;              /* ours until the daemon starts, then the daemon's */
    int port;
    srv_queue queue;
    srv_metrics metrics;
    pthread_mutex_t mu;         /* guards active */
    pthread_cond_t changed;     /* active went down */
    size_t active;              /* requests begun and not yet completed */
    atomic_bool draining;
    bool queue_started, stopped, drained;
    char *models_body;          /* prebuilt GET /v1/models answer */
    char *timeout_body;         /* prebuilt 529 body of a request timeout */
    pthread_mutex_t conns_mu;   /* guards conns, every srv_conn and reaper_stop */
    pthread_cond_t reaper_cv;   /* reaper_stop was set */
    srv_conn *conns;            /* open connections */
    pthread_t reaper;
    bool reaper_started, reaper_stop;
    const char **accept;        /* --strict-model: model_names + model_extra_name */
    size_t n_accept;
};

typedef struct route_def {
    const char *path;
    srv_route route;
    const char *allow;          /* value of Allow on a 405 */
} route_def;

static const route_def routes[] = {
    {"/v1/systemone", SRV_ROUTE_SYSTEMONE, "POST"},
    {"/v1/models", SRV_ROUTE_MODELS, "GET, HEAD"},
    {"/healthz", SRV_ROUTE_HEALTH, "GET, HEAD"},
    {"/health", SRV_ROUTE_HEALTH, "GET, HEAD"},   /* llama.cpp's name */
    {"/metrics", SRV_ROUTE_METRICS, "GET, HEAD"},
};

/* Bodies fixed by the System One contract (systemone.md, "Errors"). */
static const char BODY_NOT_FOUND[] = "{\"detail\":\"Not Found\"}";
static const char BODY_METHOD[] = "{\"detail\":\"Method Not Allowed\"}";
static const char BODY_AUTH_MISSING[] =
    "{\"detail\":{\"error_type\":\"authentication_error\",\"message\":"
    "\"Must supply an API key! Check your request and try again.\"}}";
static const char BODY_AUTH_WRONG[] =
    "{\"detail\":{\"error_type\":\"authentication_error\",\"message\":"
    "\"Cannot authenticate with the server. Please check your API key and try again.\"}}";
static const char BODY_OVERLOADED[] =
    "{\"detail\":\"Server overloaded: every decision worker is busy and the queue is full. "
    "Retry later.\"}";
static const char BODY_DRAINING[] = "{\"detail\":\"Server is shutting down.\"}";
static const char BODY_INTERNAL[] = "{\"detail\":\"Internal Server Error\"}";
static const char BODY_HEALTH_OK[] = "{\"status\":\"ok\"}";
static const char BODY_HEALTH_DRAINING[] = "{\"status\":\"draining\"}";

static const char CT_JSON[] = "application/json";
static const char CT_PROMETHEUS[] = "text/plain; version=0.0.4; charset=utf-8";

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* "req_" + 32 lowercase hex of 16 bytes from getrandom.  Should the kernel
 * refuse (it does not on any supported Linux), fall back to a clock/address
 * mix: ids must be unique, not secret. */
static void make_request_id(char out[REQUEST_ID_LEN + 1], const void *salt) {
    unsigned char b[16];
    size_t got = 0;
    while (got < sizeof b) {
        ssize_t n = getrandom(b + got, sizeof b - got, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += (size_t)n;
    }
    if (got < sizeof b) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^ (uint64_t)(uintptr_t)salt;
        for (size_t i = 0; i < sizeof b; i++) {   /* splitmix64 steps */
            x += 0x9e3779b97f4a7c15ull;
            uint64_t z = x;
            z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
            z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
            b[i] = (unsigned char)(z ^ (z >> 31));
        }
    }
    static const char hex[] = "0123456789abcdef";
    memcpy(out, "req_", 4);
    for (size_t i = 0; i < sizeof b; i++) {
        out[4 + 2 * i] = hex[b[i] >> 4];
        out[5 + 2 * i] = hex[b[i] & 15];
    }
    out[REQUEST_ID_LEN] = '\0';
}

/* Compact JSON text of obj (consumed); NULL when out of memory. */
static char *dump_json(json_t *obj) {
    if (!obj) return NULL;
    char *text = json_dumps(obj, JSON_COMPACT);
    json_decref(obj);
    return text;
}

/* ---- connection deadlines --------------------------------------------------- */

/* Set c's deadline to from_ms + timeout_s (none when timeout_s is 0). */
static void conn_deadline(srv_server *s, srv_conn *c, double from_ms, double timeout_s) {
    if (!c) return;
    pthread_mutex_lock(&s->conns_mu);
    c->deadline = timeout_s > 0 ? from_ms + timeout_s * 1e3 : 0;
    pthread_mutex_unlock(&s->conns_mu);
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    srv_server *s = cls;
    srv_conn *c = *socket_context;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        c = calloc(1, sizeof *c);
        *socket_context = c;
        if (!c) return;   /* untracked: only the idle timeout applies to it */
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        c->fd = ci ? ci->connect_fd : -1;
        pthread_mutex_lock(&s->conns_mu);
        double t = s->cfg.header_timeout_s;
        c->deadline = t > 0 ? now_ms() + t * 1e3 : 0;
        c->next = s->conns;
        if (s->conns) s->conns->prev = c;
        s->conns = c;
        pthread_mutex_unlock(&s->conns_mu);
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED && c) {
        pthread_mutex_lock(&s->conns_mu);
        if (c->prev) c->prev->next = c->next;
        else s->conns = c->next;
        if (c->next) c->next->prev = c->prev;
        pthread_mutex_unlock(&s->conns_mu);
        free(c);
        *socket_context = NULL;
    }
}

/* ---- responses ------------------------------------------------------------ */

typedef struct header {
    const char *name, *value;
} header;

static void log_request(const srv_request *r, const char *method, const char *url, int status) {
    const srv_config *c = &r->srv->cfg;
    if (!c->verbose) return;
    fprintf(c->log, "clef serve: %s %s %s %d %.1f ms\n", r->id, method, url, status,
            now_ms() - r->t_arrival);
    fflush(c->log);
}

/* Queue one response: body copied, request id and timing added.  Every
 * answer the server writes goes through here. */
static enum MHD_Result respond(srv_request *r, const char *method, const char *url, int status,
                               const char *ctype, const char *body, size_t len,
                               const header *extra, size_t n_extra, bool has_timing) {
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    MHD_add_response_header(resp, "x-typesafe-request-id", r->id);
    if (!has_timing) {
        char timing[48];
        snprintf(timing, sizeof timing, "total;dur=%.3f", now_ms() - r->t_arrival);
        MHD_add_response_header(resp, "Server-Timing", timing);
    }
    for (size_t i = 0; i < n_extra; i++) MHD_add_response_header(resp, extra[i].name, extra[i].value);
    if (atomic_load(&r->srv->draining))
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    conn_deadline(r->srv, r->sc, 0, 0);   /* answering: only the idle timeout from here */
    enum MHD_Result ret = MHD_queue_response(r->conn, (unsigned)status, resp);
    MHD_destroy_response(resp);
    atomic_store(&r->state, REQ_ANSWERED);
    r->status = status;
    srv_metrics_count_request(&r->srv->metrics, r->route, status);
    log_request(r, method, url, status);
    return ret;
}

static enum MHD_Result respond_json(srv_request *r, const char *method, const char *url,
                                    int status, const char *body) {
    return respond(r, method, url, status, CT_JSON, body, strlen(body), NULL, 0, false);
}

static enum MHD_Result respond_retry(srv_request *r, const char *method, const char *url,
                                     int status, const char *body) {
    const header h[] = {{"retry-after", "1"}};
    return respond(r, method, url, status, CT_JSON, body, strlen(body), h, 1, false);
}

/* text + the backend's own metrics (text is consumed; NULL when out of memory). */
static char *append_backend_metrics(srv_server *s, char *text) {
    char *extra = s->backend.metrics_text(s->backend.ctx);
    if (!extra) return text;
    size_t a = strlen(text), b = strlen(extra);
    char *all = realloc(text, a + b + 1);
    if (all) memcpy(all + a, extra, b + 1);
    else free(text);
    free(extra);
    return all;
}

static enum MHD_Result answer_metrics(srv_request *r, const char *method, const char *url) {
    srv_server *s = r->srv;
    srv_gauges g = {.queue_capacity = (size_t)s->cfg.queue, .workers = (size_t)s->cfg.workers};
    srv_queue_counts(&s->queue, &g.queue_depth, &g.in_flight);
    char *text = srv_metrics_render(&s->metrics, &g);
    if (text && s->backend.metrics_text) text = append_backend_metrics(s, text);
    if (!text) return respond_json(r, method, url, 500, BODY_INTERNAL);
    enum MHD_Result ret =
        respond(r, method, url, 200, CT_PROMETHEUS, text, strlen(text), NULL, 0, false);
    free(text);
    return ret;
}

/* The stored outcome of a decision, with its timing and token headers. */
static enum MHD_Result answer_decision(srv_request *r, const char *method, const char *url) {
    srv_server *s = r->srv;
    const clef_decide_result *res = &r->result;
    double stage[SRV_STAGE_COUNT] = {0};
    stage[SRV_STAGE_QUEUE] = r->t_start - r->t_queued;
    stage[SRV_STAGE_TOTAL] = now_ms() - r->t_arrival;
    header h[2];
    size_t nh = 0;
    char timing[256], tokens[64];
    if (r->has_result) {
        stage[SRV_STAGE_PARSE] = res->parse_ms;
        stage[SRV_STAGE_TOKENIZE] = res->tokenize_ms;
        stage[SRV_STAGE_BACKBONE] = res->backbone_ms;
        stage[SRV_STAGE_HEAD] = res->head_ms;
    }
    snprintf(timing, sizeof timing,
             "queue;dur=%.3f, parse;dur=%.3f, tokenize;dur=%.3f, backbone;dur=%.3f, "
             "head;dur=%.3f, total;dur=%.3f",
             stage[SRV_STAGE_QUEUE], stage[SRV_STAGE_PARSE], stage[SRV_STAGE_TOKENIZE],
             stage[SRV_STAGE_BACKBONE], stage[SRV_STAGE_HEAD], stage[SRV_STAGE_TOTAL]);
    h[nh++] = (header){"Server-Timing", timing};
    if (r->has_result && r->status == 200) {
        if (res->state_tokens_used < res->state_tokens) {
            snprintf(tokens, sizeof tokens, "sent=%lld; used=%lld", (long long)res->state_tokens,
                     (long long)res->state_tokens_used);
            h[nh++] = (header){"x-clef-state-tokens", tokens};
        }
        srv_metrics_count_decision(&s->metrics, res->input_tokens, res->state_tokens,
                                   res->state_tokens_used, stage);
    }
    const char *body = r->out ? r->out : res->body;
    size_t len = r->out ? strlen(r->out) : res->body_len;
    return respond(r, method, url, r->status, CT_JSON, body, len, h, nh, true);
}

/* ---- the decision workers ------------------------------------------------ */

/* True when the client has closed (EOF) or reset its connection.  Data
 * waiting (a pipelined request) or nothing yet both mean it is still there. */
static bool peer_closed(int fd) {
    if (fd < 0) return false;
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return true;
    return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

static bool job_peer_closed(srv_job *job, void *ctx) {
    (void)ctx;
    return peer_closed(((srv_request *)job)->fd);
}

/* ctx: the current monotonic ms. */
static bool job_expired(srv_job *job, void *ctx) {
    const srv_request *r = (const srv_request *)job;
    double t = r->srv->cfg.request_timeout_s;
    return t > 0 && *(const double *)ctx >= r->t_arrival + t * 1e3;
}

static bool job_any(srv_job *job, void *ctx) {
    (void)job;
    (void)ctx;
    return true;
}

/* A waiting request that will not be computed: hand it back to the HTTP
 * thread, which drops the connection. */
static void cancel(srv_request *r) {
    srv_metrics_count_cancelled(&r->srv->metrics);
    atomic_store(&r->state, REQ_CANCELLED);
    MHD_resume_connection(r->conn);
}

/* A waiting request past its deadline: the HTTP thread answers 529. */
static void time_out(srv_request *r) {
    atomic_store(&r->state, REQ_TIMEDOUT);
    MHD_resume_connection(r->conn);
}

/* Take the waiting jobs pred(job, ctx) selects out of the queue and hand
 * each to finish (cancel or time_out).  Returns how many. */
static size_t finish_jobs(srv_server *s, srv_job_pred pred, void *ctx,
                          void (*finish)(srv_request *)) {
    size_t n = 0;
    srv_job *job = srv_queue_remove_if(&s->queue, pred, ctx);
    while (job) {
        srv_job *next = job->next;
        finish((srv_request *)job);
        job = next;
        n++;
    }
    return n;
}

static size_t cancel_jobs(srv_server *s, srv_job_pred pred) {
    return finish_jobs(s, pred, NULL, cancel);
}

/* The options every decision of this server runs with. */
static clef_decide_options decide_options(const srv_server *s) {
    clef_decide_options opt = s->cfg.decide;
    opt.model_name = s->cfg.model_names[0];
    if (s->cfg.strict_model) {   /* the backend refuses other names: 400 Unknown model */
        opt.accept_models = s->accept;
        opt.n_accept_models = s->n_accept;
    }
    return opt;
}

/* r->result came back from the backend with status st: keep its answer, or
 * log why not and answer 500. */
static void take_result(srv_request *r, clef_status st, const clef_error *err) {
    srv_server *s = r->srv;
    int code = r->result.http_status;
    if (st != CLEF_OK || code < 100 || code > 599 || !r->result.body) {
        fprintf(s->cfg.log, "clef serve: %s: decision failed: %s (%s)\n", r->id,
                st != CLEF_OK ? err->message : "the backend returned no answer",
                clef_status_name(st));
        r->status = 500;
        r->out = strdup(BODY_INTERNAL);
        return;
    }
    r->status = code;
}

/* The answer is stored: hand r back to the HTTP thread (r is its from here on). */
static void complete(srv_request *r) {
    r->t_end = now_ms();
    atomic_store(&r->state, REQ_DONE);
    MHD_resume_connection(r->conn);
}

static void run_decision(srv_request *r) {
    srv_server *s = r->srv;
    clef_decide_options opt = decide_options(s);
    clef_error err;
    clef_err_clear(&err);
    memset(&r->result, 0, sizeof r->result);
    r->has_result = true;
    clef_status st = s->backend.decide(s->backend.ctx, r->body ? r->body : "", r->len, &opt,
                                       &r->result, &err);
    take_result(r, st, &err);
    complete(r);
}

/* A batch on its way through the backend's passes. */
typedef struct srv_batch {
    srv_request **reqs;         /* [n] */
    clef_decide_result *results;
    bool *done;
} srv_batch;

static void batch_done(size_t i, void *ctx) {
    srv_batch *b = ctx;
    srv_request *r = b->reqs[i];
    r->result = b->results[i];  /* the request owns the result from here */
    r->has_result = true;
    b->done[i] = true;
    take_result(r, CLEF_OK, NULL);
    complete(r);
}

/* n >= 2 live requests through the backend's shared passes; each is
 * answered as its pass ends.  If the backend fails, the ones not yet
 * answered get 500.  Without memory for the batch, one at a time. */
static void run_batch(srv_server *s, srv_request **reqs, size_t n) {
    const char **bodies = calloc(n, sizeof *bodies);
    size_t *lens = calloc(n, sizeof *lens);
    srv_batch b = {reqs, calloc(n, sizeof *b.results), calloc(n, sizeof *b.done)};
    if (!bodies || !lens || !b.results || !b.done) {
        for (size_t i = 0; i < n; i++) run_decision(reqs[i]);
    } else {
        for (size_t i = 0; i < n; i++) {
            bodies[i] = reqs[i]->body ? reqs[i]->body : "";
            lens[i] = reqs[i]->len;
        }
        srv_metrics_count_batch(&s->metrics, n);
        clef_decide_options opt = decide_options(s);
        clef_error err;
        clef_err_clear(&err);
        clef_status st = s->backend.decide_passes(s->backend.ctx, n, bodies, lens, &opt,
                                                  (size_t)s->cfg.batch_tokens, batch_done, &b,
                                                  b.results, &err);
        for (size_t i = 0; i < n; i++)
            if (!b.done[i]) {
                reqs[i]->has_result = false;
                take_result(reqs[i], st != CLEF_OK ? st : CLEF_ERR_INTERNAL, &err);
                complete(reqs[i]);
            }
    }
    free(b.done);
    free(b.results);
    free(lens);
    free(bodies);
}

/* A worker's jobs: the ones whose client left or whose deadline passed are
 * finished at once; the rest are decided, together when the backend can. */
static void run_jobs(srv_job *jobs, size_t n, void *ctx) {
    srv_server *s = ctx;
    srv_request **live = calloc(n, sizeof *live);
    size_t m = 0;
    for (srv_job *job = jobs, *next; job; job = next) {
        next = job->next;   /* read first: a finished request is no longer ours */
        srv_request *r = (srv_request *)job;
        r->t_start = now_ms();
        if (peer_closed(r->fd)) cancel(r);
        else if (job_expired(job, &r->t_start)) time_out(r);
        else if (!live) run_decision(r);   /* no memory for a batch: one at a time */
        else live[m++] = r;
    }
    if (m == 1 || (m > 1 && !s->backend.decide_passes)) {
        for (size_t i = 0; i < m; i++) run_decision(live[i]);
    } else if (m > 1) {
        run_batch(s, live, m);
    }
    free(live);
}

static void suspend_request(void *arg) {
    srv_request *r = arg;
    atomic_store(&r->state, REQ_QUEUED);
    MHD_suspend_connection(r->conn);
}

static enum MHD_Result submit(srv_request *r, const char *method, const char *url) {
    srv_server *s = r->srv;
    r->t_queued = now_ms();
    conn_deadline(s, r->sc, 0, 0);   /* the queue keeps the request deadline from here */
    if (srv_queue_push(&s->queue, &r->job, suspend_request, r)) return MHD_YES;
    /* Full: clients that gave up while waiting still hold slots; free them. */
    if (cancel_jobs(s, job_peer_closed) > 0 && srv_queue_push(&s->queue, &r->job, suspend_request, r))
        return MHD_YES;
    return respond_retry(r, method, url, 529, BODY_OVERLOADED);
}

/* ---- the libmicrohttpd callbacks ----------------------------------------- */

static const route_def *find_route(const char *url) {
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (!strcmp(url, routes[i].path)) return &routes[i];
    return NULL;
}

static bool method_allowed(const route_def *rt, const char *method) {
    if (rt->route == SRV_ROUTE_SYSTEMONE) return !strcmp(method, MHD_HTTP_METHOD_POST);
    return !strcmp(method, MHD_HTTP_METHOD_GET) || !strcmp(method, MHD_HTTP_METHOD_HEAD);
}

/* The declared Content-Length, or -1 when there is none (chunked) or it
 * does not parse (libmicrohttpd rejects that itself). */
static long long declared_length(struct MHD_Connection *conn) {
    const char *cl =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (!cl) return -1;
    errno = 0;
    char *end;
    unsigned long long n = strtoull(cl, &end, 10);
    if (end == cl) return -1;
    return errno == ERANGE || n > (unsigned long long)LLONG_MAX ? LLONG_MAX : (long long)n;
}

/* Decide what to answer without reading the body.  Either sets a verdict
 * (state VERDICT) or lets the body in (state BODY). */
static void verdict(srv_request *r, int status, const char *body, const char *hname,
                    const char *hvalue) {
    r->v_status = status;
    r->v_body = body;
    r->v_hname = hname;
    r->v_hvalue = hvalue;
    atomic_store(&r->state, REQ_VERDICT);
}

static void too_large(srv_request *r) {
    free(r->out);
    r->out = NULL;
    if (asprintf(&r->out, "{\"detail\":\"Request body too large: the limit is %zu bytes.\"}",
                 r->srv->cfg.max_body) < 0)
        r->out = NULL;
    verdict(r, 413, r->out ? r->out : BODY_INTERNAL, NULL, NULL);
}

/* The answer a request gets from its headers alone, if any.  Order: route,
 * method, health/metrics, draining, auth, body size. */
static void begin_request(srv_request *r, const char *url, const char *method) {
    srv_server *s = r->srv;
    const route_def *rt = find_route(url);
    bool draining = atomic_load(&s->draining);
    if (rt) r->route = rt->route;
    if (!rt) {
        verdict(r, 404, BODY_NOT_FOUND, NULL, NULL);
    } else if (!method_allowed(rt, method)) {
        verdict(r, 405, BODY_METHOD, MHD_HTTP_HEADER_ALLOW, rt->allow);
    } else if (rt->route == SRV_ROUTE_HEALTH) {
        verdict(r, draining ? 503 : 200, draining ? BODY_HEALTH_DRAINING : BODY_HEALTH_OK, NULL, NULL);
    } else if (rt->route == SRV_ROUTE_METRICS) {
        verdict(r, 200, NULL, NULL, NULL);
    } else if (draining) {
        verdict(r, 503, BODY_DRAINING, "retry-after", "1");
    } else {
        srv_auth_result auth = SRV_AUTH_OK;
        if (s->cfg.keys)
            auth = srv_auth_check(s->cfg.keys, MHD_lookup_connection_value(
                                                   r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION));
        if (auth == SRV_AUTH_MISSING) verdict(r, 403, BODY_AUTH_MISSING, NULL, NULL);
        else if (auth == SRV_AUTH_WRONG) verdict(r, 401, BODY_AUTH_WRONG, NULL, NULL);
        else if (rt->route == SRV_ROUTE_MODELS) verdict(r, 200, s->models_body, NULL, NULL);
        else if (declared_length(r->conn) > (long long)s->cfg.max_body) too_large(r);
        else atomic_store(&r->state, REQ_BODY);
    }
}

static enum MHD_Result send_verdict(srv_request *r, const char *method, const char *url) {
    if (!r->v_body) return answer_metrics(r, method, url);
    header h[1] = {{r->v_hname, r->v_hvalue}};
    return respond(r, method, url, r->v_status, CT_JSON, r->v_body, strlen(r->v_body), h,
                   r->v_hname ? 1 : 0, false);
}

/* Bytes we will not use: read them (so the connection stays usable and the
 * client sees the answer rather than a reset), but not forever. */
static enum MHD_Result discard(srv_request *r, size_t *size) {
    r->discarded += *size;
    *size = 0;
    size_t max = r->srv->cfg.max_body;
    return r->discarded > 16 * max + (1u << 20) ? MHD_NO : MHD_YES;
}

static enum MHD_Result receive_body(srv_request *r, const char *data, size_t *size,
                                    const char *method, const char *url) {
    size_t max = r->srv->cfg.max_body;
    if (*size == 0) return submit(r, method, url);
    size_t n = *size;
    if (n > max - r->len) {   /* only chunked bodies get here: no declared length */
        free(r->body);
        r->body = NULL;
        r->len = r->cap = 0;
        too_large(r);
        return discard(r, size);
    }
    *size = 0;
    if (r->len + n + 1 > r->cap) {
        size_t cap = r->cap ? r->cap : 4096;
        while (cap < r->len + n + 1) cap *= 2;
        if (cap > max + 1) cap = max + 1;
        char *nb = realloc(r->body, cap);
        if (!nb) return MHD_NO;
        r->body = nb;
        r->cap = cap;
    }
    memcpy(r->body + r->len, data, n);
    r->len += n;
    r->body[r->len] = '\0';
    return MHD_YES;
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *conn, const char *url,
                                 const char *method, const char *version, const char *data,
                                 size_t *size, void **con_cls) {
    (void)version;
    srv_server *s = cls;
    srv_request *r = *con_cls;
    if (!r) {
        r = calloc(1, sizeof *r);
        if (!r) return MHD_NO;
        r->srv = s;
        r->conn = conn;
        r->t_arrival = now_ms();
        make_request_id(r->id, r);
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        r->fd = ci ? ci->connect_fd : -1;
        ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        r->sc = ci ? ci->socket_context : NULL;
        conn_deadline(s, r->sc, r->t_arrival, s->cfg.request_timeout_s);   /* the body's */
        r->route = SRV_ROUTE_OTHER;
        atomic_store(&r->state, REQ_NEW);
        *con_cls = r;
        pthread_mutex_lock(&s->mu);
        s->active++;
        pthread_mutex_unlock(&s->mu);
        begin_request(r, url, method);
        /* Answers are sent once the request is read (libmicrohttpd closes a
         * connection answered earlier), except when the declared body is over
         * the limit: then the answer goes now and the body is never read. */
        if (atomic_load(&r->state) == REQ_VERDICT &&
            declared_length(conn) > (long long)s->cfg.max_body)
            return send_verdict(r, method, url);
        return MHD_YES;
    }
    switch (atomic_load(&r->state)) {
    case REQ_VERDICT: return *size ? discard(r, size) : send_verdict(r, method, url);
    case REQ_BODY: return receive_body(r, data, size, method, url);
    case REQ_DONE: return answer_decision(r, method, url);
    case REQ_TIMEDOUT: return respond_retry(r, method, url, 529, s->timeout_body);
    case REQ_ANSWERED:   /* answered early: let the rest of the body go by */
        *size = 0;
        return MHD_YES;
    default: return MHD_NO;   /* REQ_CANCELLED: the client left */
    }
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode code) {
    (void)conn;
    (void)code;
    srv_server *s = cls;
    srv_request *r = *con_cls;
    if (!r) return;
    *con_cls = NULL;
    /* Keep-alive: the next request's headers are due within the header timeout. */
    conn_deadline(s, r->sc, now_ms(), s->cfg.header_timeout_s);
    free(r->body);
    free(r->out);
    if (r->has_result) s->backend.result_free(s->backend.ctx, &r->result);
    free(r);
    pthread_mutex_lock(&s->mu);
    s->active--;
    pthread_cond_broadcast(&s->changed);
    pthread_mutex_unlock(&s->mu);
}

/* libmicrohttpd's own messages: start-up problems always, per-connection
 * ones (malformed requests, the drops we ask for) only with --verbose. */
static void on_mhd_log(void *cls, const char *fmt, va_list ap) {
    srv_server *s = cls;
    if (s->mhd && !s->cfg.verbose) return;
    fputs("clef serve: libmicrohttpd: ", s->cfg.log);
    vfprintf(s->cfg.log, fmt, ap);
    fflush(s->cfg.log);
}

/* ---- the reaper ------------------------------------------------------------ */

/* Connections past their deadline get their socket shut down; queued
 * requests whose client left are dropped, those past the request timeout
 * answered 529.  Runs until reaper_stop. */
static void *reaper_main(void *arg) {
    srv_server *s = arg;
    pthread_mutex_lock(&s->conns_mu);
    while (!s->reaper_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += REAPER_TICK_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&s->reaper_cv, &s->conns_mu, &ts);
        if (s->reaper_stop) break;
        double now = now_ms();
        for (srv_conn *c = s->conns; c; c = c->next) {
            if (c->deadline <= 0 || now < c->deadline || c->fd < 0) continue;
            c->deadline = 0;
            shutdown(c->fd, SHUT_RDWR);
            srv_metrics_count_timed_out(&s->metrics);
        }
        pthread_mutex_unlock(&s->conns_mu);
        cancel_jobs(s, job_peer_closed);
        finish_jobs(s, job_expired, &now, time_out);
        pthread_mutex_lock(&s->conns_mu);
    }
    pthread_mutex_unlock(&s->conns_mu);
    return NULL;
}

static clef_status start_reaper(srv_server *s, clef_error *err) {
    int rc = pthread_create(&s->reaper, NULL, reaper_main, s);
    if (rc != 0)
        return clef_err_set(err, CLEF_ERR_INTERNAL, "cannot start the server's reaper thread: %s",
                            strerror(rc));
    s->reaper_started = true;
    return CLEF_OK;
}

static void stop_reaper(srv_server *s) {
    if (!s->reaper_started) return;
    pthread_mutex_lock(&s->conns_mu);
    s->reaper_stop = true;
    pthread_cond_signal(&s->reaper_cv);
    pthread_mutex_unlock(&s->conns_mu);
    pthread_join(s->reaper, NULL);
    s->reaper_started = false;
}

/* ---- start and stop ------------------------------------------------------- */

srv_config srv_default_config(void) {
    srv_config c = {
        .host = "127.0.0.1",
        .port = 8080,
        .http_threads = 2,
        .workers = 1,
        .queue = 64,
        .batch = 8,
        .batch_tokens = 256,
        .max_body = 1u << 20,
        .timeout_s = 60,
        .header_timeout_s = 30,
        .request_timeout_s = 60,
        .max_connections = 256,
        .drain_timeout_s = 30,
        /* .decide stays zeroed (= clef_decide_default_options()): the server
         * core links without the decision pipeline, for its own tests. */
    };
    return c;
}

/* A listening TCP socket on host:port; its bound port in *bound. */
static clef_status open_listener(const char *host, int port, int *fd_out, int *bound,
                                 clef_error *err) {
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *list = NULL;
    int gai = getaddrinfo(host, service, &hints, &list);
    if (gai != 0)
        return clef_err_set(err, CLEF_ERR_INVALID_ARG, "cannot resolve host '%s': %s", host,
                            gai_strerror(gai));
    int fd = -1, last_errno = 0;
    for (struct addrinfo *a = list; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
        if (fd < 0) { last_errno = errno; continue; }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0) {
            last_errno = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(list);
    if (fd < 0)
        return clef_err_set(err, CLEF_ERR_IO, "cannot listen on %s:%d: %s", host, port,
                            strerror(last_errno));
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    *bound = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                            : ((struct sockaddr_in *)&ss)->sin_port);
    *fd_out = fd;
    return CLEF_OK;
}

static char *build_models_body(const srv_config *c) {
    json_t *list = json_array();
    for (size_t i = 0; list && i < c->n_model_names; i++)
        json_array_append_new(list, json_pack("{s:s,s:s,s:s}", "name", c->model_names[i],
                                              "description", c->model_description ? c->model_description : "",
                                              "release_date", c->model_release_date ? c->model_release_date : ""));
    return dump_json(json_pack("{s:o}", "models", list));
}

static clef_status check_config(const srv_config *c, clef_error *err) {
    if (c->workers < 1) return clef_err_set(err, CLEF_ERR_INVALID_ARG, "--parallel must be at least 1 (got %d)", c->workers);
    if (c->batch < 1) return clef_err_set(err, CLEF_ERR_INVALID_ARG, "--batch must be at least 1 (got %d)", c->batch);
    if (c->batch_tokens < 1) return clef_err_set(err, CLEF_ERR_INVALID_ARG, "--batch-tokens must be at least 1 (got %d)", c->batch_tokens);
    if (c->queue < 0) return clef_err_set(err, CLEF_ERR_INVALID_ARG, "--queue must be 0 or more (got %d)", c->queue);
    if (c->http_threads < 1) return clef_err_set(err, CLEF_ERR_INVALID_ARG, "--threads-http must be at least 1 (got %d)", c->http_threads);
    if (c->max_body < 1) return clef_err_set(err, CLEF_ERR_INVALID_ARG, "--max-body must be at least 1 byte");
    if (c->max_connections < 1) return clef_err_set(err, CLEF_ERR_INVALID_ARG, "--max-connections must be at least 1 (got %d)", c->max_connections);
    if (c->timeout_s < 0) return clef_err_set(err, CLEF_ERR_INVALID_ARG, "--timeout must be 0 or more (got %d)", c->timeout_s);
    if (!(c->header_timeout_s >= 0)) return clef_err_set(err, CLEF_ERR_INVALID_ARG, "--header-timeout must be 0 or more (got %g)", c->header_timeout_s);
    if (!(c->request_timeout_s >= 0)) return clef_err_set(err, CLEF_ERR_INVALID_ARG, "--request-timeout must be 0 or more (got %g)", c->request_timeout_s);
    if (c->port < 0 || c->port > 65535) return clef_err_set(err, CLEF_ERR_INVALID_ARG, "--port %d is not a TCP port", c->port);
    if (c->n_model_names < 1) return clef_err_set(err, CLEF_ERR_INVALID_ARG, "the server needs a model name to report");
    return CLEF_OK;
}

static clef_status start_daemon(srv_server *s, clef_error *err) {
    const srv_config *c = &s->cfg;
    /* poll, not AUTO (= epoll on Linux): libmicrohttpd 0.9.75's epoll loop can
     * miss the FIN of a client that leaves mid-request, which then holds its
     * connection until a timeout (tests/test_regress_server.c). */
    unsigned flags = MHD_USE_POLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    struct MHD_OptionItem opts[] = {
        {MHD_OPTION_EXTERNAL_LOGGER, (intptr_t)on_mhd_log, s},   /* first, or MHD complains */
        {MHD_OPTION_LISTEN_SOCKET, s->listen_fd, NULL},
        {MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)on_completed, s},
        {MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)on_connection, s},
        {MHD_OPTION_CONNECTION_TIMEOUT, c->timeout_s, NULL},
        {MHD_OPTION_CONNECTION_LIMIT, c->max_connections, NULL},
        {c->http_threads > 1 ? MHD_OPTION_THREAD_POOL_SIZE : MHD_OPTION_END, c->http_threads, NULL},
        {MHD_OPTION_END, 0, NULL},
    };
    s->mhd = MHD_start_daemon(flags, 0, NULL, NULL, on_access, s, MHD_OPTION_ARRAY, opts,
                              MHD_OPTION_END);
    if (!s->mhd)
        return clef_err_set(err, CLEF_ERR_INTERNAL, "libmicrohttpd failed to start on %s:%d",
                            c->host, s->port);
    return CLEF_OK;
}

clef_status srv_start(const srv_config *cfg, const srv_backend *backend, srv_server **out,
                      clef_error *err) {
    *out = NULL;
    clef_status st = check_config(cfg, err);
    if (st != CLEF_OK) return st;
    srv_server *s = calloc(1, sizeof *s);
    if (!s) return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory starting the server");
    s->cfg = *cfg;
    if (!s->cfg.log) s->cfg.log = stderr;
    if (s->cfg.keys && s->cfg.keys->n == 0) s->cfg.keys = NULL;
    s->backend = *backend;
    s->listen_fd = -1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->changed, &ca);
    pthread_cond_init(&s->reaper_cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&s->conns_mu, NULL);
    srv_metrics_init(&s->metrics);
    s->models_body = build_models_body(&s->cfg);
    s->accept = calloc(cfg->n_model_names + 1, sizeof *s->accept);
    if (asprintf(&s->timeout_body,
                 "{\"detail\":\"Server overloaded: the request waited longer than the %g s request "
                 "timeout for a decision worker. Retry later.\"}", cfg->request_timeout_s) < 0)
        s->timeout_body = NULL;
    if (!s->models_body || !s->accept || !s->timeout_body)
        st = clef_err_set(err, CLEF_ERR_NOMEM, "out of memory starting the server");
    for (size_t i = 0; s->accept && i < cfg->n_model_names; i++) s->accept[s->n_accept++] = cfg->model_names[i];
    if (s->accept && cfg->model_extra_name) s->accept[s->n_accept++] = cfg->model_extra_name;
    if (st == CLEF_OK)
        st = srv_queue_start(&s->queue, (size_t)cfg->workers, (size_t)cfg->queue, (size_t)cfg->batch,
                             run_jobs, s, err);
    s->queue_started = st == CLEF_OK;
    if (st == CLEF_OK) st = start_reaper(s, err);
    if (st == CLEF_OK) st = open_listener(cfg->host, cfg->port, &s->listen_fd, &s->port, err);
    if (st == CLEF_OK) st = start_daemon(s, err);
    if (st != CLEF_OK) {
        if (s->listen_fd >= 0 && !s->mhd) close(s->listen_fd);
        s->listen_fd = -1;
        srv_free(s);
        return st;
    }
    *out = s;
    return CLEF_OK;
}

int srv_port(const srv_server *srv) { return srv->port; }

/* Wait until no request is active or the drain deadline passes. */
static bool wait_inactive(srv_server *s) {
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    double t = s->cfg.drain_timeout_s > 0 ? s->cfg.drain_timeout_s : 0;
    deadline.tv_sec += (time_t)t;
    deadline.tv_nsec += (long)((t - (double)(time_t)t) * 1e9);
    if (deadline.tv_nsec >= 1000000000L) deadline.tv_sec++, deadline.tv_nsec -= 1000000000L;
    pthread_mutex_lock(&s->mu);
    int rc = 0;
    while (s->active > 0 && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&s->changed, &s->mu, &deadline);
    bool idle = s->active == 0;
    pthread_mutex_unlock(&s->mu);
    return idle;
}

bool srv_shutdown(srv_server *s) {
    if (s->stopped) return s->drained;
    s->stopped = true;
    atomic_store(&s->draining, true);
    if (s->mhd) {
        MHD_socket lfd = MHD_quiesce_daemon(s->mhd);   /* no new connections from here */
        if (lfd != MHD_INVALID_SOCKET) close(lfd);
        s->drained = wait_inactive(s);
    }
    /* Past the deadline: what still waits is dropped; what runs finishes
     * (a decision cannot be interrupted), so no worker touches a request
     * once the daemon stops. */
    if (s->queue_started) {
        cancel_jobs(s, job_any);
        srv_queue_wait_idle(&s->queue);
    }
    stop_reaper(s);   /* before the daemon goes: it resumes connections */
    if (s->mhd) MHD_stop_daemon(s->mhd);
    s->mhd = NULL;
    if (s->queue_started) srv_queue_stop(&s->queue);
    s->queue_started = false;
    return s->drained;
}

void srv_free(srv_server *s) {
    if (!s) return;
    srv_shutdown(s);
    free(s->models_body);
    free(s->timeout_body);
    free(s->accept);
    pthread_cond_destroy(&s->reaper_cv);
    pthread_mutex_destroy(&s->conns_mu);
    srv_metrics_destroy(&s->metrics);
    pthread_cond_destroy(&s->changed);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
