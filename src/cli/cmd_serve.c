/*
 * cli/cmd_serve.c — `clef serve`: load a model, serve System One over HTTP
 * (server/server.h) until SIGTERM or SIGINT, then drain and exit 0.
 *
 * Flags follow llama.cpp's server where they mean the same thing (-m, -a,
 * --host, --port, -t, -np/--parallel, -c, --api-key, --api-key-file,
 * --threads-http, --timeout).  This file wires clef_decide into the server;
 * the server itself never sees the model.  The model file is copied into
 * memory at start (clef_model_params.no_mmap) unless --mmap: a server runs
 * for long, and a mapped file truncated under it would kill it with SIGBUS.
 * Request limits go to clef_decide_options, time limits to srv_config.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "clef.h"
#include "cli/commands.h"
#include "core/error.h"
#include "decide/request.h"
#include "server/server.h"
#include "text/pyjson.h"

static void usage(FILE *out) {
    srv_config d = srv_default_config();
    char hto[32], rto[32];
    snprintf(hto, sizeof hto, "%g", d.header_timeout_s);
    snprintf(rto, sizeof rto, "%g", d.request_timeout_s);
    fprintf(out,
        "usage: clef serve -m MODEL [options]\n"
        "\n"
        "Serve the System One API (POST /v1/systemone, GET /v1/models) plus GET /healthz\n"
        "and GET /metrics (Prometheus).  Runs until SIGTERM/SIGINT, then stops accepting\n"
        "connections, answers the requests it already has and exits 0 (1 if that takes\n"
        "longer than --drain-timeout; a second signal quits at once).\n"
        "\n"
        "model:\n"
        "  -m, --model PATH          GGUF model, arch clef or qwen35 (required)\n"
        "      --mmap                map the model file instead of copying it into memory.\n"
        "                            Default: the whole file is read into RAM at start (costs\n"
        "                            RAM for the whole file; the file may then be replaced,\n"
        "                            truncated or deleted safely).  --mmap shares the page\n"
        "                            cache and starts faster, but the server dies (SIGBUS) if\n"
        "                            the file is truncated or rewritten in place while it runs\n"
        "  -a, --alias NAME[,NAME]   model name(s) listed by /v1/models; the first is reported\n"
        "                            in every answer's \"model\" (default: the model's name)\n"
        "      --description TEXT    description in /v1/models (default: arch and file name)\n"
        "      --release-date DATE   release_date in /v1/models, YYYY-MM-DD\n"
        "                            (default: the file's modification date, UTC)\n"
        "      --strict-model        answer 400 \"Unknown model: X\" to a request whose \"model\"\n"
        "                            is not one of those names (default: the loaded model\n"
        "                            answers whatever is asked for)\n"
        "      --confidence KIND     typesafe | reference (default typesafe)\n"
        "      --explain             add the \"clef\" explanation object to answers\n"
        "\n"
        "network:\n"
        "      --host HOST           address to bind (default %s)\n"
        "      --port N              TCP port, 0 = any free one (default %d); the bound\n"
        "                            address is printed on stderr: \"listening on http://H:P\"\n"
        "      --api-key KEY[,KEY]   require \"Authorization: Bearer KEY\" on /v1/ routes;\n"
        "                            repeatable (default: no key, everyone is served)\n"
        "      --api-key-file FILE   read keys from FILE, one per line\n"
        "      --max-connections N   open connections at once (default %d)\n"
        "      --threads-http N      HTTP I/O threads (default %d)\n"
        "\n"
        "limits (a request over one is refused with a detail naming the limit):\n"
        "      --max-body BYTES      largest request body, K/M suffixes allowed; larger → 413\n"
        "                            (default %zu)\n"
        "      --max-questions N     questions per request; more → 400 \"Too many questions.\n"
        "                            Must have at most N questions.\" (default %d)\n"
        "      --max-choices N       options of a choice question; more → 400 \"Too many\n"
        "                            choices. ...\" (default %d, the System One limit)\n"
        "      --max-depth N         JSON nesting depth of a body, 1..%d; deeper → 400\n"
        "                            \"Request body is nested too deeply\" (default %d)\n"
        "  -c, --ctx-size N          token budget per request (prompt + state tokens); a\n"
        "                            state is cut to fit, a schema that does not fit → 400\n"
        "                            max_tokens_exceeded; 0 = 16384 capped at the model's\n"
        "                            context (default 0)\n"
        "      --header-timeout S    a connection must deliver a request's headers within S\n"
        "                            seconds of opening or of its previous answer, else it\n"
        "                            is closed (slow clients, idle keep-alive); 0 = no limit\n"
        "                            (default %s)\n"
        "      --request-timeout S   from its headers, a request's body must arrive and a\n"
        "                            decision worker must start it within S seconds: a slow\n"
        "                            body's connection is closed, a request still queued gets\n"
        "                            529 with retry-after.  A decision already computing is\n"
        "                            not interrupted (-c bounds its cost); 0 = no limit\n"
        "                            (default %s)\n"
        "      --timeout S           idle timeout: a connection with no traffic either way\n"
        "                            for S seconds is closed (not counted while its request\n"
        "                            waits for or runs in a worker); 0 = none (default %d)\n"
        "\n"
        "compute:\n"
        "  -t, --threads N           compute threads of the model, 0 = all cores (default 0)\n"
        "  -np, --parallel N         decision workers, i.e. requests computed at once\n"
        "                            (default %d; --workers is the same flag)\n"
        "      --cache-mb N          cache of backbone states keyed by prompt+state tokens, so\n"
        "                            a request about a state seen before runs only its schema;\n"
        "                            MiB, 0 = off (default 256); hits/misses in /metrics\n"
        "      --queue N             requests that may wait beyond the workers; when all are\n"
        "                            taken the answer is 529 with retry-after (default %d)\n"
        "      --batch N             a free worker takes up to N waiting requests at once;\n"
        "                            their backbone work shares passes (default %d; 1 = off)\n"
        "      --batch-tokens N      backbone tokens per shared pass: past ~256 a bigger pass\n"
        "                            is no faster on a CPU and only delays answers (default %d)\n"
        "      --drain-timeout S     longest wait for requests on shutdown (default %g)\n"
        "\n"
        "  -v, --verbose             log one line per request on stderr\n"
        "  -h, --help                this text\n",
        d.host, d.port, d.max_connections, d.http_threads, d.max_body,
        REQ_DEFAULT_MAX_QUESTIONS, REQ_MAX_CHOICES, REQ_MAX_DEPTH_LIMIT, PYJSON_DEFAULT_MAX_DEPTH,
        hto, rto, d.timeout_s, d.workers, d.queue, d.batch, d.batch_tokens, d.drain_timeout_s);
}

typedef struct serve_args {
    const char *model_path, *alias, *description, *release_date, *host, *confidence;
    const char *key_files[16];
    size_t n_key_files;
    srv_keys keys;
    int port, threads, workers, queue, batch, batch_tokens, http_threads, ctx_size, timeout_s, max_connections;
    int max_questions, max_choices, max_depth;
    int cache_mb;               /* backbone state cache budget, MiB; 0 = off */
    size_t max_body;
    double drain_timeout_s, header_timeout_s, request_timeout_s;
    bool strict_model, explain, verbose, mmap;
} serve_args;

static bool parse_int(const char *flag, const char *s, int lo, int hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "clef serve: %s expects an integer in [%d, %d], got '%s'\n", flag, lo, hi, s);
        return false;
    }
    *out = (int)v;
    return true;
}

static bool parse_size(const char *flag, const char *s, size_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    unsigned long long mul = 1;
    if (*end == 'k' || *end == 'K') mul = 1024, end++;
    else if (*end == 'm' || *end == 'M') mul = 1024 * 1024, end++;
    if (errno || end == s || *end || s[0] == '-' || v == 0 || v > (1ull << 40) / mul) {
        fprintf(stderr, "clef serve: %s expects a positive byte count (K/M allowed), got '%s'\n", flag, s);
        return false;
    }
    *out = (size_t)(v * mul);
    return true;
}

static bool parse_seconds(const char *flag, const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= 0) || v > 86400) {
        fprintf(stderr, "clef serve: %s expects seconds in [0, 86400], got '%s'\n", flag, s);
        return false;
    }
    *out = v;
    return true;
}

static bool flag_is(const char *f, const char *name, const char *alt) {
    return !strcmp(f, name) || (alt && !strcmp(f, alt));
}

static bool takes_value(const char *f) {
    static const char *const flags[] = {
        "-m", "--model", "-a", "--alias", "--description", "--release-date", "--host",
        "--confidence", "--port", "-t", "--threads", "-np", "--parallel", "--workers", "--queue", "--batch", "--batch-tokens",
        "--threads-http", "-c", "--ctx-size", "--timeout", "--max-connections", "--max-body",
        "--drain-timeout", "--api-key", "--api-key-file", "--max-questions", "--max-choices",
        "--max-depth", "--header-timeout", "--request-timeout", "--cache-mb"};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        if (!strcmp(f, flags[i])) return true;
    return false;
}

/* Returns 0 to go on, else the exit status (0 after --help). */
static int parse_args(int argc, char **argv, serve_args *a) {
    srv_config d = srv_default_config();
    *a = (serve_args){.host = d.host, .port = d.port, .workers = d.workers, .queue = d.queue,
                      .batch = d.batch, .batch_tokens = d.batch_tokens,
                      .http_threads = d.http_threads, .timeout_s = d.timeout_s,
                      .max_connections = d.max_connections, .max_body = d.max_body,
                      .drain_timeout_s = d.drain_timeout_s, .confidence = "typesafe",
                      .cache_mb = (int)(CLEF_ENGINE_DEFAULT_CACHE_BYTES >> 20),
                      .header_timeout_s = d.header_timeout_s,
                      .request_timeout_s = d.request_timeout_s};
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
#define IS(a_, b_) flag_is(f, a_, b_)
        if (IS("-h", "--help")) { usage(stdout); return -1; }
        if (IS("--strict-model", NULL)) { a->strict_model = true; continue; }
        if (IS("--explain", NULL)) { a->explain = true; continue; }
        if (IS("-v", "--verbose")) { a->verbose = true; continue; }
        if (IS("--mmap", NULL)) { a->mmap = true; continue; }
        if (!takes_value(f)) {
            fprintf(stderr, "clef serve: unknown flag '%s' (see --help)\n", f);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "clef serve: %s needs a value (see --help)\n", f);
            return 2;
        }
        const char *v = argv[++i];
        bool ok = true;
        clef_error err;
        if (IS("-m", "--model")) a->model_path = v;
        else if (IS("-a", "--alias")) a->alias = v;
        else if (IS("--description", NULL)) a->description = v;
        else if (IS("--release-date", NULL)) a->release_date = v;
        else if (IS("--host", NULL)) a->host = v;
        else if (IS("--confidence", NULL)) a->confidence = v;
        else if (IS("--port", NULL)) ok = parse_int(f, v, 0, 65535, &a->port);
        else if (IS("-t", "--threads")) ok = parse_int(f, v, 0, 4096, &a->threads);
        else if (IS("-np", "--parallel") || IS("--workers", NULL)) ok = parse_int(f, v, 1, 1024, &a->workers);
        else if (IS("--queue", NULL)) ok = parse_int(f, v, 0, 1 << 20, &a->queue);
        else if (IS("--batch", NULL)) ok = parse_int(f, v, 1, 1024, &a->batch);
        else if (IS("--batch-tokens", NULL)) ok = parse_int(f, v, 1, 1 << 24, &a->batch_tokens);
        else if (IS("--cache-mb", NULL)) ok = parse_int(f, v, 0, 1 << 20, &a->cache_mb);
        else if (IS("--threads-http", NULL)) ok = parse_int(f, v, 1, 1024, &a->http_threads);
        else if (IS("-c", "--ctx-size")) ok = parse_int(f, v, 0, INT_MAX, &a->ctx_size);
        else if (IS("--timeout", NULL)) ok = parse_int(f, v, 0, 86400, &a->timeout_s);
        else if (IS("--max-connections", NULL)) ok = parse_int(f, v, 1, 1 << 20, &a->max_connections);
        else if (IS("--max-body", NULL)) ok = parse_size(f, v, &a->max_body);
        else if (IS("--drain-timeout", NULL)) ok = parse_seconds(f, v, &a->drain_timeout_s);
        else if (IS("--header-timeout", NULL)) ok = parse_seconds(f, v, &a->header_timeout_s);
        else if (IS("--request-timeout", NULL)) ok = parse_seconds(f, v, &a->request_timeout_s);
        else if (IS("--max-questions", NULL)) ok = parse_int(f, v, 1, 1 << 24, &a->max_questions);
        else if (IS("--max-choices", NULL)) ok = parse_int(f, v, 1, 1 << 16, &a->max_choices);
        else if (IS("--max-depth", NULL)) ok = parse_int(f, v, 1, REQ_MAX_DEPTH_LIMIT, &a->max_depth);
        else if (IS("--api-key", NULL)) {
            if (srv_keys_add_list(&a->keys, v, &err) != CLEF_OK) {
                fprintf(stderr, "clef serve: %s\n", err.message);
                ok = false;
            }
        } else if (IS("--api-key-file", NULL)) {
            if (a->n_key_files == sizeof a->key_files / sizeof a->key_files[0]) {
                fprintf(stderr, "clef serve: too many --api-key-file flags\n");
                ok = false;
            } else {
                a->key_files[a->n_key_files++] = v;
            }
        } else {
            fprintf(stderr, "clef serve: unknown flag '%s' (see --help)\n", f);
            return 2;
        }
#undef IS
        if (!ok) return 2;
    }
    if (!a->model_path) {
        fprintf(stderr, "clef serve: -m MODEL is required (see --help)\n");
        return 2;
    }
    if (strcmp(a->confidence, "typesafe") && strcmp(a->confidence, "reference")) {
        fprintf(stderr, "clef serve: --confidence must be typesafe or reference, got '%s'\n", a->confidence);
        return 2;
    }
    for (size_t k = 0; k < a->n_key_files; k++) {
        clef_error err;
        if (srv_keys_load_file(&a->keys, a->key_files[k], &err) != CLEF_OK) {
            fprintf(stderr, "clef serve: %s\n", err.message);
            return 2;
        }
    }
    return 0;
}

/* The model file's modification date (UTC), as /v1/models' release_date. */
static void file_date(const char *path, char out[16]) {
    struct stat st;
    struct tm tm;
    time_t t = stat(path, &st) == 0 ? st.st_mtime : time(NULL);
    if (!gmtime_r(&t, &tm) || !strftime(out, 16, "%Y-%m-%d", &tm)) strcpy(out, "1970-01-01");
}

/* Split a comma-separated alias list in place. */
static size_t split_names(char *list, const char **names, size_t max) {
    size_t n = 0;
    for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok && n < max;
         tok = strtok_r(NULL, ",", &save))
        names[n++] = tok;
    return n;
}

/* srv_backend over the public API: decisions go through the engine, whose
 * state cache lets requests about one state share its backbone pass. */
static clef_status backend_decide(void *ctx, const char *json, size_t len,
                                  const clef_decide_options *options, clef_decide_result *result,
                                  clef_error *err) {
    return clef_engine_decide(ctx, json, len, options, result, err);
}

/* Several waiting requests: their backbone work in shared passes. */
static clef_status backend_decide_passes(void *ctx, size_t n, const char *const *jsons,
                                         const size_t *lens, const clef_decide_options *options,
                                         size_t max_tokens, void (*done)(size_t i, void *done_ctx),
                                         void *done_ctx, clef_decide_result *results,
                                         clef_error *err) {
    return clef_engine_decide_passes(ctx, n, jsons, lens, options, max_tokens, done, done_ctx,
                                     results, err);
}

/* The engine's cache counters as Prometheus text (malloc'd). */
static char *backend_metrics(void *ctx) {
    clef_engine_stats st;
    clef_engine_get_stats(ctx, &st);
    char *text = NULL;
    if (asprintf(&text,
                 "# HELP clef_cache_hits_total Requests whose backbone state came from the cache.\n"
                 "# TYPE clef_cache_hits_total counter\nclef_cache_hits_total %llu\n"
                 "# HELP clef_cache_misses_total Requests that ran the backbone from the first token.\n"
                 "# TYPE clef_cache_misses_total counter\nclef_cache_misses_total %llu\n"
                 "# HELP clef_cache_evictions_total States dropped to stay within the budget.\n"
                 "# TYPE clef_cache_evictions_total counter\nclef_cache_evictions_total %llu\n"
                 "# HELP clef_cache_tokens_reused_total Backbone tokens that cache hits did not recompute.\n"
                 "# TYPE clef_cache_tokens_reused_total counter\nclef_cache_tokens_reused_total %llu\n"
                 "# HELP clef_cache_entries States cached now.\n"
                 "# TYPE clef_cache_entries gauge\nclef_cache_entries %llu\n"
                 "# HELP clef_cache_bytes Bytes the cached states hold.\n"
                 "# TYPE clef_cache_bytes gauge\nclef_cache_bytes %llu\n"
                 "# HELP clef_cache_capacity_bytes The cache budget in bytes.\n"
                 "# TYPE clef_cache_capacity_bytes gauge\nclef_cache_capacity_bytes %llu\n",
                 (unsigned long long)st.hits, (unsigned long long)st.misses,
                 (unsigned long long)st.evictions, (unsigned long long)st.tokens_reused,
                 (unsigned long long)st.entries, (unsigned long long)st.bytes,
                 (unsigned long long)st.capacity) < 0)
        return NULL;
    return text;
}

static void backend_result_free(void *ctx, clef_decide_result *result) {
    (void)ctx;
    clef_decide_result_free(result);
}

/* Serve until the first SIGTERM/SIGINT (blocked in every thread, taken here
 * with sigwait), then drain. */
static int serve(const serve_args *a, clef_model *model, srv_config *cfg) {
    clef_engine *engine = NULL;
    srv_server *srv = NULL;
    clef_error err;
    if (clef_engine_new(model, (size_t)a->cache_mb << 20, &engine, &err) != CLEF_OK) {
        fprintf(stderr, "clef serve: %s\n", err.message);
        return 1;
    }
    srv_backend backend = {.ctx = engine, .decide = backend_decide, .result_free = backend_result_free,
                           .metrics_text = backend_metrics, .decide_passes = backend_decide_passes};
    if (srv_start(cfg, &backend, &srv, &err) != CLEF_OK) {
        fprintf(stderr, "clef serve: %s\n", err.message);
        clef_engine_free(engine);
        return 1;
    }
    fprintf(stderr, "clef serve: model '%s' (%s) from %s\n", cfg->model_names[0],
            clef_model_arch(model), a->model_path);
    bool v6 = strchr(a->host, ':') != NULL;   /* an IPv6 literal goes in brackets */
    fprintf(stderr, "clef serve: listening on http://%s%s%s:%d (%d decision worker%s, queue %d, batch %d, %s)\n",
            v6 ? "[" : "", a->host, v6 ? "]" : "", srv_port(srv), a->workers, a->workers == 1 ? "" : "s", a->queue,
            a->batch,
            a->keys.n ? "API keys required" : "no API key");
    fflush(stderr);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    int sig = 0;
    sigwait(&set, &sig);
    fprintf(stderr, "clef serve: %s: draining (signal again to quit at once)\n",
            sig == SIGINT ? "SIGINT" : "SIGTERM");
    fflush(stderr);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);   /* a second signal now ends the process */
    bool drained = srv_shutdown(srv);
    srv_free(srv);
    clef_engine_free(engine);
    if (!drained) fprintf(stderr, "clef serve: drain timed out; waiting requests were dropped\n");
    fprintf(stderr, "clef serve: stopped\n");
    return drained ? 0 : 1;
}

static int run(serve_args *a) {
    /* Before any thread exists, so that every thread inherits the mask. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    clef_model_params mp = clef_model_default_params();
    mp.n_threads = a->threads;
    mp.no_mmap = !a->mmap;   /* a server outlives edits to its file: copy by default */
    clef_model *model = NULL;
    clef_error err;
    if (clef_model_load(a->model_path, &mp, &model, &err) != CLEF_OK) {
        fprintf(stderr, "clef serve: %s\n", err.message);
        return 1;
    }
    int n_ctx = clef_model_n_ctx(model);
    if (n_ctx > 0 && a->ctx_size > n_ctx) {
        fprintf(stderr, "clef serve: --ctx-size %d is over the model's context length %d\n",
                a->ctx_size, n_ctx);
        clef_model_free(model);
        return 2;
    }
    char *aliases = strdup(a->alias ? a->alias : clef_model_name(model));
    const char *names[32];
    size_t n_names = aliases ? split_names(aliases, names, 32) : 0;
    char date[16], desc[512];
    file_date(a->model_path, date);
    const char *base = strrchr(a->model_path, '/');
    snprintf(desc, sizeof desc, "%s decision model served by clef from %s", clef_model_arch(model),
             base ? base + 1 : a->model_path);

    srv_config cfg = srv_default_config();
    cfg.host = a->host;
    cfg.port = a->port;
    cfg.http_threads = a->http_threads;
    cfg.workers = a->workers;
    cfg.queue = a->queue;
    cfg.batch = a->batch;
    cfg.batch_tokens = a->batch_tokens;
    cfg.max_body = a->max_body;
    cfg.timeout_s = a->timeout_s;
    cfg.header_timeout_s = a->header_timeout_s;
    cfg.request_timeout_s = a->request_timeout_s;
    cfg.max_connections = a->max_connections;
    cfg.drain_timeout_s = a->drain_timeout_s;
    cfg.keys = &a->keys;
    cfg.model_names = names;
    cfg.n_model_names = n_names;
    cfg.model_extra_name = clef_model_name(model);
    cfg.model_description = a->description ? a->description : desc;
    cfg.model_release_date = a->release_date ? a->release_date : date;
    cfg.strict_model = a->strict_model;
    cfg.decide = clef_decide_default_options();
    cfg.decide.max_length = a->ctx_size;
    cfg.decide.max_questions = a->max_questions;
    cfg.decide.max_choices = a->max_choices;
    cfg.decide.max_depth = a->max_depth;
    cfg.decide.explain = a->explain;
    cfg.decide.confidence =
        strcmp(a->confidence, "reference") ? CLEF_CONFIDENCE_TYPESAFE : CLEF_CONFIDENCE_REFERENCE;
    cfg.verbose = a->verbose;
    cfg.log = stderr;

    int rc = serve(a, model, &cfg);
    free(aliases);
    clef_model_free(model);
    return rc;
}

int cmd_serve(int argc, char **argv) {
    serve_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc == 0) rc = run(&a);
    else if (rc < 0) rc = 0;
    srv_keys_free(&a.keys);
    return rc;
}
