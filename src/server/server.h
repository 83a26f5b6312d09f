/*
 * server/server.h — the System One HTTP server (`clef serve`) on libmicrohttpd.
 *
 * What it owns: routing, the Bearer check, body size limits, request ids,
 * the decision queue and its workers, timing/token headers, /v1/models,
 * /healthz, /metrics and graceful shutdown.  What it does not: it never
 * looks inside a System One body.  Each POST /v1/systemone body is handed
 * as bytes to the backend's decide function (clef_decide in `clef serve`),
 * whose http_status and body are sent as they are.  --strict-model is
 * passed on as clef_decide_options.accept_models (the configured names), so
 * the backend answers 400 "Unknown model: X" in its own validation order.
 *
 * Routes: POST /v1/systemone; GET|HEAD /v1/models, /healthz (= /health),
 * /metrics.  Other paths → 404 {"detail":"Not Found"}; another method on a
 * known path → 405 {"detail":"Method Not Allowed"} with Allow.  With keys
 * configured, the /v1/ routes check auth before reading the body (403, then 401).
 * Every response the server writes carries x-typesafe-request-id
 * (req_ + 32 lowercase hex from getrandom) and Server-Timing; decisions
 * whose state was cut also carry x-clef-state-tokens: sent=N; used=M.
 * Malformed HTTP that libmicrohttpd rejects itself (bad request line,
 * oversized headers) gets libmicrohttpd's own reply, without those headers.
 *
 * Concurrency: requests that pass auth and size checks wait in a bounded
 * queue for `workers` decision threads; when workers + queue are all taken
 * the answer is 529 with retry-after.  A worker that comes free takes every
 * waiting request, up to `batch`, and (with a decide_passes backend) runs
 * their backbone work in shared passes of up to batch_tokens tokens: short
 * requests share the matrix products, and each is answered as soon as its
 * pass is done.  It never waits for more requests to arrive.  A waiting request whose client has
 * closed its connection is dropped (checked when a worker takes it, whenever
 * the queue is full and by the reaper; a client that half-closes its sending
 * side after the request counts as gone).  A decision already computing runs
 * to its end.  srv_shutdown stops accepting connections,
 * answers everything already received and then stops.
 *
 * Time limits (a reaper thread checks them every 100 ms):
 *   header_timeout_s   from a connection's opening, or from the end of its
 *                      previous request (keep-alive), to the end of the next
 *                      request's headers; past it the connection is closed
 *                      without an answer (slowloris clients that dribble
 *                      headers byte by byte; idle keep-alive connections).
 *   request_timeout_s  from the end of the headers to a decision worker
 *                      starting the request: the body must arrive in time
 *                      (else the connection is closed), and a request still
 *                      waiting in the queue gets 529 with retry-after.  It
 *                      does not interrupt a decision already computing; what
 *                      one decision costs is bounded by the token budget.
 *   timeout_s          libmicrohttpd's idle timeout: no byte in either
 *                      direction for that long closes the connection (not
 *                      counted while a request waits for or runs in a worker).
 *
 * Ownership: srv_start borrows cfg's strings, keys and the backend; they
 * must outlive the server.  srv_free releases the server.
 */
#ifndef CLEF_SERVER_SERVER_H
#define CLEF_SERVER_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "clef.h"
#include "server/srv_auth.h"

/* The decision function the server calls from its workers (thread-safe).
 * Same contract as clef_decide; result_free releases a filled result. */
typedef struct srv_backend {
    void *ctx;
    clef_status (*decide)(void *ctx, const char *json, size_t len,
                          const clef_decide_options *options, clef_decide_result *result,
                          clef_error *err);
    void (*result_free)(void *ctx, clef_decide_result *result);
    /* Optional: more Prometheus text for /metrics (malloc'd, caller frees;
     * NULL = nothing to add), e.g. the backend's cache counters. */
    char *(*metrics_text)(void *ctx);
    /* Optional: several requests at once, the contract of
     * clef_engine_decide_passes (done(i, done_ctx) as each result is final).
     * NULL: the workers call decide once per request. */
    clef_status (*decide_passes)(void *ctx, size_t n, const char *const *jsons, const size_t *lens,
                                 const clef_decide_options *options, size_t max_tokens,
                                 void (*done)(size_t i, void *done_ctx), void *done_ctx,
                                 clef_decide_result *results, clef_error *err);
} srv_backend;

typedef struct srv_config {
    const char *host;           /* address to bind; default "127.0.0.1"                 */
    int port;                   /* 0 = any free port (see srv_port); default 8080        */
    int http_threads;           /* libmicrohttpd I/O threads; default 2                 */
    int workers;                /* decision workers (requests computed at once); 1      */
    int queue;                  /* requests that may wait beyond the workers; 64        */
    int batch;                  /* most waiting requests a worker takes at once; 8      */
    int batch_tokens;           /* backbone tokens per pass within a batch; 256         */
    size_t max_body;            /* largest POST body in bytes, else 413; 1 MiB          */
    int timeout_s;              /* idle connection timeout (s); 60                      */
    double header_timeout_s;    /* open / previous answer → headers in; 0 = none; 30    */
    double request_timeout_s;   /* headers in → a worker starts it; 0 = none; 60        */
    int max_connections;        /* open connections at once; 256                        */
    double drain_timeout_s;     /* longest srv_shutdown waits for requests; 30          */
    const srv_keys *keys;       /* NULL or empty = no auth                              */
    const char *const *model_names; /* names in /v1/models; [0] is reported in "model" */
    size_t n_model_names;
    const char *model_extra_name;   /* also accepted by --strict-model (may be NULL)    */
    const char *model_description;
    const char *model_release_date; /* YYYY-MM-DD                                       */
    bool strict_model;          /* a request naming another model → 400 Unknown model   */
    clef_decide_options decide; /* max_length, confidence, explain (model_name is set)  */
    bool verbose;               /* one log line per request                             */
    FILE *log;                  /* where log lines go; default stderr                   */
} srv_config;

typedef struct srv_server srv_server;

srv_config srv_default_config(void);

/* Bind, start the HTTP threads and the workers.  On failure *out is NULL
 * and err names what failed (e.g. "cannot bind 127.0.0.1:8080: ..."). */
clef_status srv_start(const srv_config *cfg, const srv_backend *backend, srv_server **out,
                      clef_error *err);

/* The bound TCP port (useful with port 0). */
int srv_port(const srv_server *srv);

/* Graceful stop: close the listening socket, answer every request already
 * received (new requests on open keep-alive connections get 503), wait up
 * to drain_timeout_s, then stop.  Returns true when everything drained in
 * time.  Idempotent. */
bool srv_shutdown(srv_server *srv);

/* Shut down (if not yet) and free. NULL is allowed. */
void srv_free(srv_server *srv);

#endif
