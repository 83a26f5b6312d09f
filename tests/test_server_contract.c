/*
 * tests/test_server_contract.c — `$CLEF_BIN serve` on the tiny oracle model,
 * checked over raw HTTP against the System One contract
 * (../shared/spec/systemone.md): every route, status, body and header it
 * names, the oracle answers of ../shared/oracle/clef-tiny, the CLI's flags,
 * and shutdown on SIGTERM/SIGINT.
 *
 * Servers run on 127.0.0.1 with --port 0 (the bound port is read from the
 * "listening on" line); the group teardown kills any still running.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>

#include "test_server_client.h"
#include "testutil.h"

#define TINY ORACLE_DIR "/clef-tiny/clef-tiny-a-F32.gguf"
#define CASES ORACLE_DIR "/clef-tiny/cases.jsonl"
#define EXPECTED ORACLE_DIR "/clef-tiny/expected.jsonl"
#define MAX_CASES 32
#define MODEL_NAME "clef-random-tiny-a"   /* the file's general.name */

/* Answers are compared with the float64 oracle; the F32 runtime is within
 * ~1e-6 of it (stats.json), the wire loses nothing. */
#define PROB_TOL 1e-4

typedef struct oracle_case {
    char id[64];
    int max_length;
    char *request;      /* verbatim request text */
    json_t *expected;   /* expected.jsonl line */
} oracle_case;

typedef struct world {
    hc_server open;     /* no keys, not strict: the model's own name      */
    hc_server guarded;  /* keys, aliases, --strict-model, --max-body 64K  */
    hc_server short_;   /* -c 320                                          */
    char *key_file;
    oracle_case cases[MAX_CASES];
    size_t n_cases;
} world;

/* ---- oracle files ------------------------------------------------------------ */

/* cases.jsonl keeps each request verbatim as the line's last member. */
static bool load_cases(world *w) {
    char *text = tu_read_file(CASES, NULL);
    char *exp = tu_read_file(EXPECTED, NULL);
    if (!text || !exp) return false;
    char *save = NULL, *esave = NULL;
    char *eline = strtok_r(exp, "\n", &esave);
    for (char *line = strtok_r(text, "\n", &save); line && w->n_cases < MAX_CASES;
         line = strtok_r(NULL, "\n", &save), eline = strtok_r(NULL, "\n", &esave)) {
        oracle_case *c = &w->cases[w->n_cases];
        json_t *j = json_loads(line, 0, NULL);
        const char *req = strstr(line, "\"request\":");
        if (!j || !req || !eline) return false;
        snprintf(c->id, sizeof c->id, "%s", json_string_value(json_object_get(j, "id")));
        c->max_length = (int)json_integer_value(json_object_get(j, "max_length"));
        json_decref(j);
        req += strlen("\"request\":");
        size_t len = strlen(req);
        while (len && (req[len - 1] == '\r' || req[len - 1] == ' ')) len--;
        if (!len || req[len - 1] != '}') return false;
        c->request = strndup(req, len - 1);   /* drop the line's closing brace */
        c->expected = json_loads(eline, 0, NULL);
        if (!c->request || !c->expected) return false;
        if (strcmp(json_string_value(json_object_get(c->expected, "id")), c->id)) return false;
        w->n_cases++;
    }
    free(text);
    free(exp);
    return w->n_cases > 0;
}

static const oracle_case *find_case(const world *w, const char *id) {
    for (size_t i = 0; i < w->n_cases; i++)
        if (!strcmp(w->cases[i].id, id)) return &w->cases[i];
    fail_msg("no oracle case '%s'", id);
    return NULL;
}

/* ---- fixture ------------------------------------------------------------------- */

static int group_setup(void **state) {
    signal(SIGPIPE, SIG_IGN);
    world *w = calloc(1, sizeof *w);
    *state = w;
    if (!load_cases(w)) {
        fprintf(stderr, "cannot read %s / %s\n", CASES, EXPECTED);
        return -1;
    }
    static const char keys[] = "\n  key-from-file  \r\n";
    w->key_file = tu_write_temp("serve-keys.txt", keys, sizeof keys - 1);
    const char *open_args[] = {"-m", TINY, "-np", "2", NULL};
    const char *guarded_args[] = {"-m", TINY, "--alias", "clef-flash,clef-tiny-a", "--strict-model",
                                  "--api-key", "key-one", "--api-key-file", w->key_file,
                                  "--max-body", "64K", "--release-date", "2026-09-15",
                                  "--description", "tiny test model", NULL};
    const char *short_args[] = {"-m", TINY, "-c", "320", NULL};
    if (!hc_server_start(&w->open, open_args) || !hc_server_start(&w->guarded, guarded_args) ||
        !hc_server_start(&w->short_, short_args))
        return -1;
    return 0;
}

static int group_teardown(void **state) {
    world *w = *state;
    if (!w) return 0;
    hc_server_stop(&w->open, SIGKILL);
    hc_server_stop(&w->guarded, SIGKILL);
    hc_server_stop(&w->short_, SIGKILL);
    for (size_t i = 0; i < w->n_cases; i++) {
        free(w->cases[i].request);
        json_decref(w->cases[i].expected);
    }
    if (w->key_file) unlink(w->key_file);
    free(w->key_file);
    free(w);
    return 0;
}

/* ---- assertions -------------------------------------------------------------------- */

static void expect_common(const hc_resp *r, int status) {
    char v[512];
    if (r->status != status)
        fail_msg("expected HTTP %d, got %d\n%s%s", status, r->status, r->head ? r->head : "",
                 r->body ? r->body : "");
    assert_non_null(hc_header(r, "x-typesafe-request-id", v, sizeof v));
    if (!hc_is_request_id(v)) fail_msg("bad request id '%s'", v);
    assert_non_null(hc_header(r, "content-type", v, sizeof v));
    bool metrics = r->body && !strncmp(r->body, "# HELP", 6);
    assert_string_equal(v, metrics ? "text/plain; version=0.0.4; charset=utf-8" : "application/json");
}

static void expect_exact(const hc_resp *r, int status, const char *body) {
    expect_common(r, status);
    assert_string_equal(r->body, body);
}

static json_t *body_json(const hc_resp *r) {
    json_error_t e;
    json_t *j = json_loadb(r->body, r->body_len, 0, &e);
    if (!j) fail_msg("response body is not JSON (%s): %s", e.text, r->body);
    return j;
}

static void expect_close(double got, double want, const char *what) {
    if (!(fabs(got - want) <= PROB_TOL)) fail_msg("%s: got %.9g, oracle %.9g", what, got, want);
}

/* Probabilities: same keys in the same order, finite, in [0,1], summing to 1. */
static void expect_probabilities(json_t *got, json_t *want, const char *qid) {
    assert_true(json_is_object(got));
    assert_int_equal(json_object_size(got), json_object_size(want));
    void *ig = json_object_iter(got), *iw = json_object_iter(want);
    double sum = 0;
    for (; ig && iw; ig = json_object_iter_next(got, ig), iw = json_object_iter_next(want, iw)) {
        assert_string_equal(json_object_iter_key(ig), json_object_iter_key(iw));
        double p = json_number_value(json_object_iter_value(ig));
        assert_true(json_is_number(json_object_iter_value(ig)) && isfinite(p) && p >= 0 && p <= 1);
        sum += p;
        expect_close(p, json_number_value(json_object_iter_value(iw)), qid);
    }
    assert_true(fabs(sum - 1) <= 1e-6);
}

static void expect_answer(json_t *got, json_t *want, const char *qid) {
    const char *type = json_string_value(json_object_get(want, "type"));
    assert_string_equal(json_string_value(json_object_get(got, "type")), type);
    if (!strcmp(type, "noul")) {
        assert_int_equal(json_object_size(got), 2);   /* type + noul, nothing else */
        expect_close(json_number_value(json_object_get(got, "noul")),
                     json_number_value(json_object_get(want, "noul")), qid);
        return;
    }
    expect_probabilities(json_object_get(got, "probabilities"), json_object_get(want, "probabilities"), qid);
    expect_close(json_number_value(json_object_get(got, "confidence")),
                 json_number_value(json_object_get(want, "confidence")), qid);
    if (!strcmp(type, "choice")) {
        assert_string_equal(json_string_value(json_object_get(got, "choice")),
                            json_string_value(json_object_get(want, "choice")));
    } else {
        expect_close(json_number_value(json_object_get(got, "score")),
                     json_number_value(json_object_get(want, "score")), qid);
        assert_true(json_equal(json_object_get(got, "legend"), json_object_get(want, "legend")));
    }
}

/* A 200 System One body against the oracle's response. */
static void expect_response(const hc_resp *r, const oracle_case *c, const char *model) {
    expect_common(r, 200);
    json_t *got = body_json(r);
    json_t *want = json_object_get(c->expected, "response");
    assert_string_equal(json_string_value(json_object_get(got, "model")), model);
    json_t *ga = json_object_get(got, "answers"), *wa = json_object_get(want, "answers");
    assert_int_equal(json_object_size(ga), json_object_size(wa));
    void *ig = json_object_iter(ga), *iw = json_object_iter(wa);
    for (; ig && iw; ig = json_object_iter_next(ga, ig), iw = json_object_iter_next(wa, iw)) {
        assert_string_equal(json_object_iter_key(ig), json_object_iter_key(iw));   /* JSON order kept */
        expect_answer(json_object_iter_value(ig), json_object_iter_value(iw), json_object_iter_key(iw));
    }
    json_t *u = json_object_get(got, "usage");
    assert_true(json_is_integer(json_object_get(u, "input_tokens")));
    assert_true(json_is_integer(json_object_get(u, "output_tokens")));
    assert_int_equal(json_integer_value(json_object_get(u, "input_tokens")),
                     json_integer_value(json_object_get(json_object_get(want, "usage"), "input_tokens")));
    assert_int_equal(json_integer_value(json_object_get(u, "output_tokens")), 0);
    json_decref(got);
}

static const char NOT_FOUND[] = "{\"detail\":\"Not Found\"}";
static const char METHOD[] = "{\"detail\":\"Method Not Allowed\"}";
static const char AUTH_MISSING[] =
    "{\"detail\":{\"error_type\":\"authentication_error\",\"message\":"
    "\"Must supply an API key! Check your request and try again.\"}}";
static const char AUTH_WRONG[] =
    "{\"detail\":{\"error_type\":\"authentication_error\",\"message\":"
    "\"Cannot authenticate with the server. Please check your API key and try again.\"}}";
static const char INVALID[] =
    "{\"detail\":{\"error_type\":\"api_usage_error\",\"message\":\"Invalid request.\"}}";
static const char TOO_MANY_TOKENS[] = "{\"detail\":{\"error_type\":\"max_tokens_exceeded\"}}";
#define KEY1 "Authorization: Bearer key-one\r\n"
#define KEY2 "Authorization: Bearer key-from-file\r\n"

/* ---- answers ----------------------------------------------------------------------- */

static void test_oracle_answers(void **state) {
    world *w = *state;
    size_t n = 0;
    for (size_t i = 0; i < w->n_cases; i++) {
        const oracle_case *c = &w->cases[i];
        if (c->max_length != 16384) continue;
        hc_resp r;
        assert_true(hc_post(w->open.port, NULL, c->request, &r));
        expect_response(&r, c, MODEL_NAME);
        char v[512];
        assert_non_null(hc_header(&r, "server-timing", v, sizeof v));
        assert_non_null(strstr(v, "parse;dur="));
        assert_non_null(strstr(v, "tokenize;dur="));
        assert_non_null(strstr(v, "backbone;dur="));
        assert_non_null(strstr(v, "head;dur="));
        assert_null(hc_header(&r, "x-clef-state-tokens", v, sizeof v));   /* nothing cut */
        hc_free(&r);
        n++;
    }
    assert_true(n >= 16);
}

static void test_state_cut_and_budget(void **state) {
    world *w = *state;
    const oracle_case *c = find_case(w, "long_state_truncated_320");
    hc_resp r;
    assert_true(hc_post(w->short_.port, NULL, c->request, &r));
    expect_response(&r, c, MODEL_NAME);
    char v[128], want[128];
    snprintf(want, sizeof want, "sent=%lld; used=%lld",
             (long long)json_integer_value(json_object_get(c->expected, "state_tokens")),
             (long long)json_integer_value(json_object_get(c->expected, "state_tokens_used")));
    assert_non_null(hc_header(&r, "x-clef-state-tokens", v, sizeof v));
    assert_string_equal(v, want);
    hc_free(&r);
    /* eight_questions' schema alone is over 320 tokens. */
    assert_true(hc_post(w->short_.port, NULL, find_case(w, "eight_questions")->request, &r));
    expect_exact(&r, 400, TOO_MANY_TOKENS);
    hc_free(&r);
}

/* ---- errors -------------------------------------------------------------------- */

#define Q_NOUL "{\"q\":{\"type\":\"noul\",\"instructions\":\"Is it?\"}}"

static void test_request_errors(void **state) {
    world *w = *state;
    int port = w->open.port;
    hc_resp r;
    static const struct {
        const char *body;
        int status;
        const char *exact;  /* NULL: only status, request id and a detail */
    } cases[] = {
        {"{\"model\":\"m\",\"state\":\"s\",\"questions\":" Q_NOUL ",\"extra\":1}", 400, INVALID},
        {"{\"model\":\"m\",\"state\":\"s\",\"questions\":{\"q\":{\"type\":\"poll\",\"criteria\":{}}}}", 400, INVALID},
        {"{\"model\":\"m\",\"state\":\"s\",\"questions\":{\"q\":{\"type\":\"noul\"}}}", 400,
         "{\"detail\":\"Noul question must have criteria or instructions: q\"}"},
        {"{\"model\":\"m\",\"state\":\"s\",\"questions\":{\"q\":{\"type\":\"choice\",\"criteria\":{}}}}", 400,
         "{\"detail\":\"Choice question must have at least one choice: q\"}"},
        {"{\"model\":\"m\",\"state\":\"s\",\"questions\":{\"q\":{\"type\":\"score\",\"criteria\":"
         "[\"0\",\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\",\"10\"]}}}", 400,
         "{\"detail\":\"Too many score levels. Must have at most 10 levels.\"}"},
        {"{\"model\":\"m\",\"state\":\"s\",\"questions\":{\"q\":{\"type\":\"score\",\"criteria\":[]}}}", 422, NULL},
        {"{\"model\":\"m\",\"state\":null,\"questions\":" Q_NOUL "}", 422, NULL},
        {"{\"model\":\"m\",\"state\":3,\"questions\":" Q_NOUL "}", 422, NULL},
        {"{\"model\":\"m\",\"state\":\"s\",\"questions\":{}}", 422, NULL},
        {"{\"model\":\"m\",\"state\":\"s\",\"questions\":{\"q\":{\"type\":\"choice\",\"criteria\":[\"a\"]}}}", 422, NULL},
        {"{\"model\":\"m\",\"state\":\"s\"", 400, NULL},
        {"not json at all", 400, NULL},
        {"", 422, NULL},   /* FastAPI's answer to a missing body */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_true(hc_post(port, NULL, cases[i].body, &r));
        if (cases[i].exact) {
            expect_exact(&r, cases[i].status, cases[i].exact);
        } else {
            expect_common(&r, cases[i].status);
            json_t *j = body_json(&r);
            assert_non_null(json_object_get(j, "detail"));
            if (cases[i].status == 422) {   /* pydantic-shaped: a list with loc paths */
                json_t *d = json_array_get(json_object_get(j, "detail"), 0);
                assert_true(json_is_array(json_object_get(d, "loc")));
                assert_string_equal(json_string_value(json_array_get(json_object_get(d, "loc"), 0)), "body");
            }
            json_decref(j);
        }
        hc_free(&r);
    }
    /* A missing field names itself. */
    assert_true(hc_post(port, NULL, "{\"state\":\"s\",\"questions\":" Q_NOUL "}", &r));
    expect_common(&r, 422);
    json_t *j = body_json(&r);
    json_t *d = json_array_get(json_object_get(j, "detail"), 0);
    assert_string_equal(json_string_value(json_object_get(d, "type")), "missing");
    assert_string_equal(json_string_value(json_object_get(d, "msg")), "Field required");
    assert_string_equal(json_string_value(json_array_get(json_object_get(d, "loc"), 1)), "model");
    json_decref(j);
    hc_free(&r);
    /* 256 options. */
    char *big = malloc(256 * 16 + 128);
    int n = sprintf(big, "{\"model\":\"m\",\"state\":\"s\",\"questions\":{\"q\":{\"type\":\"choice\",\"criteria\":{");
    for (int k = 0; k < 256; k++) n += sprintf(big + n, "%s\"o%d\":null", k ? "," : "", k);
    strcpy(big + n, "}}}}");
    assert_true(hc_post(port, NULL, big, &r));
    expect_exact(&r, 400, "{\"detail\":\"Too many choices. Must have at most 255 choices.\"}");
    hc_free(&r);
    free(big);
    /* Without --strict-model any model name is answered by the loaded model. */
    assert_true(hc_post(port, NULL, "{\"model\":\"jev-latest\",\"state\":\"s\",\"questions\":" Q_NOUL "}", &r));
    expect_common(&r, 200);
    assert_non_null(strstr(r.body, "{\"model\":\"" MODEL_NAME "\","));
    hc_free(&r);
}

/* ---- routes, auth, strict model, limits ------------------------------------------ */

static void test_routes(void **state) {
    world *w = *state;
    hc_resp r;
    char v[128];
    int ports[] = {w->open.port, w->guarded.port};
    for (int i = 0; i < 2; i++) {
        assert_true(hc_request(ports[i], "GET", "/v2/anything", NULL, NULL, &r));
        expect_exact(&r, 404, NOT_FOUND);
        hc_free(&r);
        assert_true(hc_request(ports[i], "GET", "/v1/systemone", NULL, NULL, &r));
        expect_exact(&r, 405, METHOD);
        assert_non_null(hc_header(&r, "allow", v, sizeof v));
        assert_string_equal(v, "POST");
        hc_free(&r);
        assert_true(hc_request(ports[i], "DELETE", "/v1/models", NULL, NULL, &r));
        expect_exact(&r, 405, METHOD);
        hc_free(&r);
        assert_true(hc_request(ports[i], "GET", "/healthz", NULL, NULL, &r));
        expect_exact(&r, 200, "{\"status\":\"ok\"}");
        hc_free(&r);
    }
    assert_true(hc_request(w->open.port, "GET", "/v1/models", NULL, NULL, &r));
    expect_common(&r, 200);
    json_t *j = body_json(&r);
    json_t *m = json_array_get(json_object_get(j, "models"), 0);
    assert_int_equal(json_array_size(json_object_get(j, "models")), 1);
    assert_string_equal(json_string_value(json_object_get(m, "name")), MODEL_NAME);
    assert_true(json_is_string(json_object_get(m, "description")));
    const char *date = json_string_value(json_object_get(m, "release_date"));
    assert_non_null(date);
    int y, mo, d;
    assert_int_equal(sscanf(date, "%4d-%2d-%2d", &y, &mo, &d), 3);
    assert_int_equal(strlen(date), 10);
    json_decref(j);
    hc_free(&r);
    assert_true(hc_request(w->guarded.port, "GET", "/v1/models", KEY2, NULL, &r));
    expect_exact(&r, 200,
                 "{\"models\":[{\"name\":\"clef-flash\",\"description\":\"tiny test model\",\"release_date\":\"2026-09-15\"},"
                 "{\"name\":\"clef-tiny-a\",\"description\":\"tiny test model\",\"release_date\":\"2026-09-15\"}]}");
    hc_free(&r);
}

static void test_auth(void **state) {
    world *w = *state;
    int port = w->guarded.port;
    const char *good = find_case(w, "noul_basic")->request;
    hc_resp r;
    assert_true(hc_post(port, NULL, good, &r));
    expect_exact(&r, 403, AUTH_MISSING);
    hc_free(&r);
    assert_true(hc_post(port, "Authorization: Basic a2V5LW9uZQ==\r\n", good, &r));
    expect_exact(&r, 403, AUTH_MISSING);
    hc_free(&r);
    assert_true(hc_post(port, "Authorization: key-one\r\n", good, &r));
    expect_exact(&r, 403, AUTH_MISSING);
    hc_free(&r);
    assert_true(hc_post(port, "Authorization: Bearer key-two\r\n", good, &r));
    expect_exact(&r, 401, AUTH_WRONG);
    hc_free(&r);
    /* Auth before the body: a broken body is not looked at. */
    assert_true(hc_post(port, "Authorization: Bearer key-two\r\n", "{broken", &r));
    expect_exact(&r, 401, AUTH_WRONG);
    hc_free(&r);
    assert_true(hc_post(port, NULL, "{broken", &r));
    expect_exact(&r, 403, AUTH_MISSING);
    hc_free(&r);
    assert_true(hc_request(port, "GET", "/v1/models", NULL, NULL, &r));
    expect_exact(&r, 403, AUTH_MISSING);
    hc_free(&r);
    assert_true(hc_request(port, "GET", "/v1/models", "Authorization: Bearer nope\r\n", NULL, &r));
    expect_exact(&r, 401, AUTH_WRONG);
    hc_free(&r);
    /* Both keys work; the body is then validated as usual. */
    assert_true(hc_post(port, KEY2, "{broken", &r));
    expect_common(&r, 400);
    hc_free(&r);
    static const char *const keys[] = {KEY1, KEY2, "Authorization: bearer key-one\r\n"};
    for (int i = 0; i < 3; i++) {
        char body[512];
        /* noul_basic names clef-tiny-a, the second alias. */
        snprintf(body, sizeof body, "%s", good);
        assert_true(hc_post(port, keys[i], body, &r));
        expect_response(&r, find_case(w, "noul_basic"), "clef-flash");
        hc_free(&r);
    }
}

static void test_strict_model(void **state) {
    world *w = *state;
    int port = w->guarded.port;
    hc_resp r;
    assert_true(hc_post(port, KEY1, "{\"model\":\"jev-latest\",\"state\":\"s\",\"questions\":" Q_NOUL "}", &r));
    expect_exact(&r, 400, "{\"detail\":{\"error_type\":\"api_usage_error\",\"message\":\"Unknown model: jev-latest\"}}");
    hc_free(&r);
    static const char *const names[] = {"clef-flash", "clef-tiny-a", MODEL_NAME};
    for (int i = 0; i < 3; i++) {
        char body[256];
        snprintf(body, sizeof body, "{\"model\":\"%s\",\"state\":\"s\",\"questions\":" Q_NOUL "}", names[i]);
        assert_true(hc_post(port, KEY1, body, &r));
        expect_common(&r, 200);
        assert_non_null(strstr(r.body, "{\"model\":\"clef-flash\","));
        hc_free(&r);
    }
    /* Shape errors still come first. */
    assert_true(hc_post(port, KEY1, "{\"model\":\"jev-latest\",\"state\":null,\"questions\":" Q_NOUL "}", &r));
    expect_common(&r, 422);
    hc_free(&r);
}

static void test_body_limit(void **state) {
    world *w = *state;
    int port = w->guarded.port;
    size_t n = 64 * 1024 + 1;
    char *body = malloc(n + 1);
    memset(body, ' ', n);
    body[0] = '{';
    body[n - 1] = '}';
    body[n] = '\0';
    hc_resp r;
    /* Declared too long: refused from the headers (the body is never read). */
    int fd = hc_connect(port);
    char head[256];
    snprintf(head, sizeof head, "POST /v1/systemone HTTP/1.1\r\nHost: x\r\n" KEY1 "Content-Length: %zu\r\n\r\n", n);
    assert_true(hc_send(fd, head, strlen(head)));
    assert_true(hc_read(fd, &r, false));
    expect_exact(&r, 413, "{\"detail\":\"Request body too large: the limit is 65536 bytes.\"}");
    hc_free(&r);
    close(fd);
    /* One byte less is read and validated (it is not a System One request). */
    body[n - 2] = '}';
    body[n - 1] = '\0';
    assert_true(hc_post(port, KEY1, body, &r));
    expect_common(&r, 422);
    hc_free(&r);
    free(body);
}

static void test_metrics(void **state) {
    world *w = *state;
    /* A server of its own, so that the counts are exactly ours. */
    hc_server s;
    const char *args[] = {"-m", TINY, NULL};
    assert_true(hc_server_start(&s, args));
    hc_resp r;
    const oracle_case *c = find_case(w, "noul_basic");
    for (int i = 0; i < 3; i++) {
        assert_true(hc_post(s.port, NULL, c->request, &r));
        expect_common(&r, 200);
        hc_free(&r);
    }
    assert_true(hc_post(s.port, NULL, "{}", &r));
    expect_common(&r, 422);
    hc_free(&r);
    assert_true(hc_request(s.port, "GET", "/metrics", NULL, NULL, &r));
    expect_common(&r, 200);
    char want[128];
    assert_non_null(strstr(r.body, "\nclef_requests_total{route=\"/v1/systemone\",status=\"200\"} 3\n"));
    assert_non_null(strstr(r.body, "\nclef_requests_total{route=\"/v1/systemone\",status=\"422\"} 1\n"));
    snprintf(want, sizeof want, "\nclef_tokens_total{kind=\"input\"} %lld\n",
             3 * (long long)json_integer_value(json_object_get(c->expected, "n_tokens")));
    assert_non_null(strstr(r.body, want));
    for (const char *st = "parse\0tokenize\0backbone\0head\0queue\0total\0"; *st; st += strlen(st) + 1) {
        snprintf(want, sizeof want, "\nclef_stage_duration_seconds_count{stage=\"%s\"} 3\n", st);
        assert_non_null(strstr(r.body, want));
    }
    assert_non_null(strstr(r.body, "\nclef_queue_depth 0\n"));
    /* The same state three times: one backbone pass from token 0, two hits. */
    assert_non_null(strstr(r.body, "\nclef_cache_misses_total 1\n"));
    assert_non_null(strstr(r.body, "\nclef_cache_hits_total 2\n"));
    assert_non_null(strstr(r.body, "\nclef_cache_entries 1\n"));
    hc_free(&r);
    assert_int_equal(hc_server_stop(&s, SIGTERM), 0);

    /* --cache-mb 0: every request runs the whole prompt, answers unchanged. */
    const char *off[] = {"-m", TINY, "--cache-mb", "0", NULL};
    assert_true(hc_server_start(&s, off));
    for (int i = 0; i < 2; i++) {
        assert_true(hc_post(s.port, NULL, c->request, &r));
        expect_response(&r, c, MODEL_NAME);
        hc_free(&r);
    }
    assert_true(hc_request(s.port, "GET", "/metrics", NULL, NULL, &r));
    assert_non_null(strstr(r.body, "\nclef_cache_hits_total 0\n"));
    hc_free(&r);
    assert_int_equal(hc_server_stop(&s, SIGTERM), 0);
}

/* ---- the CLI and signals -------------------------------------------------------- */

static void test_cli_flags(void **state) {
    (void)state;
    char cmd[1024];
    int st;
    snprintf(cmd, sizeof cmd, "timeout 60 %s serve --help", hc_clef_bin());
    char *out = tu_run(cmd, &st);
    assert_int_equal(st, 0);
    static const char *const flags[] = {
        "-m, --model", "-a, --alias", "--host", "--port", "-t, --threads", "-np, --parallel",
        "--workers", "--queue", "--threads-http", "-c, --ctx-size", "--api-key ", "--api-key-file",
        "--strict-model", "--max-body", "--timeout", "--max-connections", "--drain-timeout",
        "--confidence", "--explain", "--description", "--release-date", "--verbose", "529",
        "default 127.0.0.1", "default 8080", "default 1048576", "default 64"};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        if (!strstr(out, flags[i])) fail_msg("serve --help does not mention '%s'", flags[i]);
    free(out);
    static const struct {
        const char *args;
        int status;
        const char *msg;
    } bad[] = {
        {"", 2, "-m MODEL is required"},
        {"-m " TINY " --bogus", 2, "unknown flag '--bogus'"},
        {"-m " TINY " --port 70000", 2, "--port"},
        {"-m " TINY " --queue -1", 2, "--queue"},
        {"-m " TINY " --max-body 0", 2, "--max-body"},
        {"-m " TINY " --confidence loud", 2, "--confidence"},
        {"-m " TINY " --api-key-file /nonexistent/keys", 2, "/nonexistent/keys"},
        {"-m " TINY " --api-key a,,b", 2, "empty API key"},
        {"-m " TINY " -c 100000000", 2, "context length"},
        {"-m /nonexistent/model.gguf", 1, "/nonexistent/model.gguf"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(cmd, sizeof cmd, "timeout 60 %s serve %s 2>&1", hc_clef_bin(), bad[i].args);
        out = tu_run(cmd, &st);
        if (st != bad[i].status || !strstr(out, bad[i].msg))
            fail_msg("'clef serve %s': status %d, output:\n%s", bad[i].args, st, out);
        free(out);
    }
}

static void test_port_in_use(void **state) {
    world *w = *state;
    char cmd[512], port[16];
    snprintf(port, sizeof port, "%d", w->open.port);
    snprintf(cmd, sizeof cmd, "timeout 60 %s serve -m %s --port %s 2>&1", hc_clef_bin(), TINY, port);
    int st;
    char *out = tu_run(cmd, &st);
    assert_int_equal(st, 1);
    assert_non_null(strstr(out, "cannot listen on 127.0.0.1:"));
    free(out);
}

/* SIGTERM while a request is half sent: the server finishes it, then exits 0. */
static void test_drain_on_sigterm(void **state) {
    world *w = *state;
    hc_server s;
    const char *args[] = {"-m", TINY, NULL};
    assert_true(hc_server_start(&s, args));
    const char *body = find_case(w, "noul_basic")->request;
    int fd = hc_connect(s.port);
    char head[256];
    snprintf(head, sizeof head, "POST /v1/systemone HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                                "Content-Length: %zu\r\nConnection: close\r\n\r\n", strlen(body));
    assert_true(hc_send(fd, head, strlen(head)));
    /* "100 Continue" says the server has taken the request in. */
    char buf[256] = {0};
    size_t got = 0;
    while (!strstr(buf, "\r\n\r\n") && got < sizeof buf - 1) {
        struct pollfd p = {fd, POLLIN, 0};
        assert_true(poll(&p, 1, HC_TIMEOUT_MS) == 1);
        ssize_t n = recv(fd, buf + got, sizeof buf - 1 - got, 0);
        assert_true(n > 0);
        got += (size_t)n;
    }
    assert_true(!strncmp(buf, "HTTP/1.1 100", 12));
    kill(s.pid, SIGTERM);
    hc_sleep_ms(100);   /* let the drain begin; the answer must come either way */
    assert_true(hc_send(fd, body, strlen(body)));
    hc_resp r;
    assert_true(hc_read(fd, &r, false));
    expect_response(&r, find_case(w, "noul_basic"), MODEL_NAME);
    hc_free(&r);
    close(fd);
    assert_int_equal(hc_server_stop(&s, 0), 0);   /* already stopping: only wait (a second signal would kill it) */
}

static void test_sigint(void **state) {
    (void)state;
    hc_server s;
    const char *args[] = {"-m", TINY, "--api-key", "k", NULL};
    assert_true(hc_server_start(&s, args));
    hc_resp r;
    assert_true(hc_request(s.port, "GET", "/healthz", NULL, NULL, &r));
    expect_exact(&r, 200, "{\"status\":\"ok\"}");
    hc_free(&r);
    assert_int_equal(hc_server_stop(&s, SIGINT), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_oracle_answers),
        cmocka_unit_test(test_state_cut_and_budget),
        cmocka_unit_test(test_request_errors),
        cmocka_unit_test(test_routes),
        cmocka_unit_test(test_auth),
        cmocka_unit_test(test_strict_model),
        cmocka_unit_test(test_body_limit),
        cmocka_unit_test(test_metrics),
        cmocka_unit_test(test_cli_flags),
        cmocka_unit_test(test_port_in_use),
        cmocka_unit_test(test_drain_on_sigterm),
        cmocka_unit_test(test_sigint),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
