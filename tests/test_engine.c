/*
 * tests/test_engine.c — clef_engine against clef_decide on the clef-tiny
 * oracle model (../shared/oracle/clef-tiny, F32).
 *
 * The reference is always plain clef_decide (no cache, one request per
 * pass).  An engine must answer the same: same status, same JSON with every
 * probability within 1e-6 (confidences and scores within what that allows;
 * with --explain the logits within 1e-5) — and, where the kernels compute a
 * continued sequence with the same floats, the same bytes (counted and
 * printed: blocked fast kernels round differently when a sequence is cut
 * elsewhere; required with the reference kernels, CLEF_CPU=ref).
 * Covered: every oracle case missed then hit; several question sets on one
 * state; LRU eviction under a tiny byte budget; the stats counters; batches
 * equal serial answers; several threads sharing one small cache.
 */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "clef.h"
#include "testutil.h"

#define TINY ORACLE_DIR "/clef-tiny/"
#define P_TOL 1e-6        /* the engine's contract: |Δp| of every probability */
#define LOGIT_TOL 1e-5    /* --explain's raw logits (|Δp| <= |Δlogit| / 2 and less) */
#define MAX_CASES 32

typedef struct tcase {
    char id[64];
    int max_length;
    const char *raw;      /* request text verbatim (into cases_text) */
    size_t len;
} tcase;

typedef struct fixture {
    clef_model *model;
    char *cases_text;
    tcase cases[MAX_CASES];
    size_t n;
    /* per case, from clef_decide --explain: the cache key (the ids through
     * the state's last token, as text) and its length; NULL for refusals */
    char *key[MAX_CASES];
    int64_t key_len[MAX_CASES];
} fixture;

static clef_decide_options opts_for(int max_length, bool explain);

/* The key of a request as "id,id,...", from clef_decide's --explain body
 * (input_ids up to state_span's end), or NULL when it is refused. */
static char *request_key(clef_model *m, const char *json, size_t len, int max_length,
                         int64_t *key_len) {
    clef_decide_options o = opts_for(max_length, true);
    clef_decide_result r;
    clef_error err = {0};
    if (clef_decide(m, json, len, &o, &r, &err) != CLEF_OK || r.http_status != 200) {
        clef_decide_result_free(&r);
        return NULL;
    }
    json_error_t je;
    json_t *b = json_loads(r.body, 0, &je), *clef = json_object_get(b, "clef");
    json_t *ids = json_object_get(clef, "input_ids");
    int64_t end = (int64_t)json_integer_value(json_array_get(json_object_get(clef, "state_span"), 1));
    char *key = calloc((size_t)end * 12 + 1, 1);
    size_t at = 0;
    for (int64_t t = 0; t < end; t++)
        at += (size_t)sprintf(key + at, "%lld,", (long long)json_integer_value(json_array_get(ids, (size_t)t)));
    *key_len = end;
    json_decref(b);
    clef_decide_result_free(&r);
    return key;
}

/* ---- fixture -------------------------------------------------------------- */

/* The request of a cases.jsonl line, byte for byte: after `"request":` up to
 * the line's last `}` (exclusive). */
static int split_line(char *line, tcase *c) {
    char *r = strstr(line, "\"request\":"), *m = strstr(line, "\"max_length\":");
    char *id = strstr(line, "\"id\":\"");
    if (!r || !m || !id) return -1;
    c->max_length = atoi(m + strlen("\"max_length\":"));
    id += strlen("\"id\":\"");
    size_t k = 0;
    while (id[k] && id[k] != '"' && k + 1 < sizeof c->id) {
        c->id[k] = id[k];
        k++;
    }
    c->id[k] = '\0';
    c->raw = r + strlen("\"request\":");
    char *end = line + strlen(line);
    while (end > c->raw && end[-1] != '}') end--;
    c->len = (size_t)(end - 1 - c->raw);
    return 0;
}

static int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    f->cases_text = tu_read_file(TINY "cases.jsonl", NULL);
    if (!f->cases_text) return -1;
    char *save = NULL;
    for (char *line = strtok_r(f->cases_text, "\n", &save); line && f->n < MAX_CASES;
         line = strtok_r(NULL, "\n", &save))
        if (split_line(line, &f->cases[f->n]) == 0) f->n++;
    if (f->n < 18) return -1;
    clef_model_params p = clef_model_default_params();
    p.n_threads = 2;
    clef_error err = {0};
    if (clef_model_load(TINY "clef-tiny-a-F32.gguf", &p, &f->model, &err) != CLEF_OK) {
        fprintf(stderr, "load: %s\n", err.message);
        return -1;
    }
    for (size_t i = 0; i < f->n; i++)
        f->key[i] = request_key(f->model, f->cases[i].raw, f->cases[i].len,
                                f->cases[i].max_length, &f->key_len[i]);
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    for (size_t i = 0; i < f->n; i++) free(f->key[i]);
    clef_model_free(f->model);
    free(f->cases_text);
    free(f);
    return 0;
}

/* ---- helpers -------------------------------------------------------------- */

static clef_decide_options opts_for(int max_length, bool explain) {
    clef_decide_options o = clef_decide_default_options();
    o.max_length = max_length;
    o.explain = explain;
    return o;
}

static clef_engine *engine_new(clef_model *m, size_t bytes) {
    clef_engine *e = NULL;
    clef_error err = {0};
    if (clef_engine_new(m, bytes, &e, &err) != CLEF_OK) fail_msg("engine: %s", err.message);
    return e;
}

static clef_engine_stats stats(clef_engine *e) {
    clef_engine_stats s;
    clef_engine_get_stats(e, &s);
    return s;
}

static void reference(clef_model *m, const char *json, size_t len, const clef_decide_options *o,
                      clef_decide_result *r) {
    clef_error err = {0};
    if (clef_decide(m, json, len, o, r, &err) != CLEF_OK) fail_msg("clef_decide: %s", err.message);
}

static void via_engine(clef_engine *e, const char *json, size_t len, const clef_decide_options *o,
                       clef_decide_result *r) {
    clef_error err = {0};
    if (clef_engine_decide(e, json, len, o, r, &err) != CLEF_OK)
        fail_msg("clef_engine_decide: %s", err.message);
}

/* Largest differences seen. */
typedef struct worst {
    double p, derived, logit;     /* probabilities; confidences and scores; logits */
} worst;

/* Worst |Δ| / tol over the numbers of a and b, INFINITY when their shape,
 * strings or integers differ (tol 0: numbers must be equal). */
static double json_ratio(const json_t *a, const json_t *b, double tol, double *seen) {
    if (json_is_integer(a) && json_is_integer(b))
        return json_integer_value(a) == json_integer_value(b) ? 0.0 : INFINITY;
    if (json_is_real(a) && json_is_real(b)) {
        double d = fabs(json_real_value(a) - json_real_value(b));
        if (seen) *seen = fmax(*seen, d);
        return d == 0.0 ? 0.0 : tol > 0.0 ? d / tol : INFINITY;
    }
    if (json_typeof(a) != json_typeof(b)) return INFINITY;
    double r = 0.0;
    if (json_is_object(a)) {
        if (json_object_size(a) != json_object_size(b)) return INFINITY;
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)a, k, v) {
            json_t *w = json_object_get(b, k);
            r = fmax(r, w ? json_ratio(v, w, tol, seen) : INFINITY);
        }
    } else if (json_is_array(a)) {
        if (json_array_size(a) != json_array_size(b)) return INFINITY;
        for (size_t i = 0; i < json_array_size(a); i++)
            r = fmax(r, json_ratio(json_array_get(a, i), json_array_get(b, i), tol, seen));
    } else if (json_is_string(a)) {
        r = strcmp(json_string_value(a), json_string_value(b)) ? INFINITY : 0.0;
    } else if (!json_equal((json_t *)a, (json_t *)b)) {
        r = INFINITY;
    }
    return r;
}

/* One answer: probabilities (and noul's p) within P_TOL; what is derived
 * from them within what P_TOL allows (choice confidence n/(n−1) ≤ 2 times;
 * score Σ i·p_i and its confidence n(n−1) times); everything else equal. */
static double answer_ratio(const json_t *a, const json_t *b, worst *seen) {
    const char *type = json_string_value(json_object_get(a, "type"));
    double n = (double)json_object_size(json_object_get(a, "probabilities"));
    bool score = type && !strcmp(type, "score");
    double r = 0.0;
    const char *k;
    json_t *v;
    if (json_object_size(a) != json_object_size(b)) return INFINITY;
    json_object_foreach((json_t *)a, k, v) {
        json_t *w = json_object_get(b, k);
        double tol = 0.0;
        if (!strcmp(k, "probabilities") || !strcmp(k, "noul")) tol = P_TOL;
        else if (!strcmp(k, "confidence")) tol = (score ? fmax(n * (n - 1), 2) : 2) * P_TOL;
        else if (!strcmp(k, "score")) tol = fmax(n * (n - 1), 2) * P_TOL;
        r = fmax(r, w ? json_ratio(v, w, tol, !seen ? NULL : tol == P_TOL ? &seen->p : &seen->derived)
                      : INFINITY);
    }
    return r;
}

/* A body against the reference's: answers as above, --explain's logits
 * within LOGIT_TOL (its ids and spans equal), the rest equal. */
static double body_ratio(const json_t *a, const json_t *b, worst *seen) {
    if (!json_is_object(a) || !json_is_object(b) || json_object_size(a) != json_object_size(b))
        return json_ratio(a, b, 0.0, NULL);
    double r = 0.0;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)a, k, v) {
        json_t *w = json_object_get(b, k);
        if (!w) return INFINITY;
        if (!strcmp(k, "answers") && json_is_object(v) && json_is_object(w) &&
            json_object_size(v) == json_object_size(w)) {
            const char *id;
            json_t *ans;
            json_object_foreach(v, id, ans) {
                json_t *other = json_object_get(w, id);
                r = fmax(r, other ? answer_ratio(ans, other, seen) : INFINITY);
            }
        } else {
            r = fmax(r, json_ratio(v, w, !strcmp(k, "clef") ? LOGIT_TOL : 0.0,
                                   seen ? &seen->logit : NULL));
        }
    }
    return r;
}

/* Whether two bodies agree within the tolerances (thread-safe). */
static bool bodies_agree(const char *ref, const char *body, worst *seen) {
    json_error_t je;
    json_t *a = json_loads(ref, 0, &je), *b = json_loads(body, 0, &je);
    bool ok = a && b && body_ratio(a, b, seen) <= 1.0;
    json_decref(a);
    json_decref(b);
    return ok;
}

static worst seen_all; /* over the whole run (main thread only) */

/* r (engine) answers as ref (clef_decide); counts byte-identical bodies. */
static void check_same(const char *what, const clef_decide_result *ref,
                       const clef_decide_result *r, int *identical) {
    if (r->http_status != ref->http_status)
        fail_msg("%s: status %d, clef_decide %d", what, r->http_status, ref->http_status);
    assert_non_null(r->body);
    assert_int_equal(r->input_tokens, ref->input_tokens);
    assert_int_equal(r->state_tokens_used, ref->state_tokens_used);
    json_error_t je;
    json_t *a = json_loads(ref->body, 0, &je), *b = json_loads(r->body, 0, &je);
    assert_non_null(a);
    assert_non_null(b);
    double d = body_ratio(a, b, &seen_all);
    if (!(d <= 1.0)) fail_msg("%s: bodies differ (%g x the tolerance)\n%s\n%s", what, d, ref->body, r->body);
    json_decref(a);
    json_decref(b);
    if (identical && ref->body_len == r->body_len && !memcmp(ref->body, r->body, r->body_len))
        (*identical)++;
}

/* A request about `state` (a JSON value) asking `questions` (a JSON object). */
static char *make_request(json_t *state, json_t *questions) {
    json_t *req = json_pack("{s:s,s:O,s:O}", "model", "clef-tiny-a", "state", state,
                            "questions", questions);
    char *text = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    return text;
}

static json_t *case_json(const tcase *c) {
    json_error_t je;
    json_t *j = json_loadb(c->raw, c->len, 0, &je);
    if (!j) fail_msg("case %s: %s", c->id, je.text);
    return j;
}

static const tcase *find_case(const fixture *f, const char *id) {
    for (size_t i = 0; i < f->n; i++)
        if (!strcmp(f->cases[i].id, id)) return &f->cases[i];
    fail_msg("no case %s", id);
    return NULL;
}

/* ---- tests ---------------------------------------------------------------- */

/* Whether key was seen before (and note it). */
static bool seen_before(const char **seen, size_t *n_seen, const char *key) {
    for (size_t k = 0; k < *n_seen; k++)
        if (!strcmp(seen[k], key)) return true;
    seen[(*n_seen)++] = key;
    return false;
}

/* Every oracle case, twice, with and without --explain (the explain object
 * adds the ids and the raw logits to the comparison): a state's first
 * request misses (some cases share a state), every later one hits. */
static void test_every_case_miss_then_hit(void **state) {
    fixture *f = *state;
    clef_engine *e = engine_new(f->model, CLEF_ENGINE_DEFAULT_CACHE_BYTES);
    int identical = 0, compared = 0;
    uint64_t hits = 0, misses = 0, reused = 0;
    const char *seen[MAX_CASES];
    size_t n_seen = 0;
    for (int explain = 0; explain < 2; explain++)
        for (size_t i = 0; i < f->n; i++) {
            const tcase *c = &f->cases[i];
            clef_decide_options o = opts_for(c->max_length, explain);
            clef_decide_result ref, r[2];
            reference(f->model, c->raw, c->len, &o, &ref);
            for (int k = 0; k < 2; k++) {
                bool hit = f->key[i] && seen_before(seen, &n_seen, f->key[i]);
                clef_engine_stats s0 = stats(e);
                via_engine(e, c->raw, c->len, &o, &r[k]);
                clef_engine_stats s1 = stats(e);
                char what[96];
                snprintf(what, sizeof what, "%s (explain %d) call %d", c->id, explain, k);
                check_same(what, &ref, &r[k], &identical);
                compared++;
                /* refusals never reach the backbone or the cache */
                assert_int_equal(s1.hits - s0.hits, f->key[i] && hit);
                assert_int_equal(s1.misses - s0.misses, f->key[i] && !hit);
                hits += f->key[i] && hit;
                misses += f->key[i] && !hit;
                if (f->key[i] && hit) reused += (uint64_t)f->key_len[i];
                clef_decide_result_free(&r[k]);
            }
            assert_int_equal(ref.http_status == 200, f->key[i] != NULL);
            clef_decide_result_free(&ref);
        }
    clef_engine_stats s = stats(e);
    printf("[engine] %d of %d engine bodies byte-identical to clef_decide; %llu hits, %llu misses, "
           "%llu entries, %llu bytes\n", identical, compared, (unsigned long long)s.hits,
           (unsigned long long)s.misses, (unsigned long long)s.entries, (unsigned long long)s.bytes);
    assert_int_equal(s.hits, hits);
    assert_int_equal(s.misses, misses);
    assert_int_equal(s.inserts, n_seen);
    assert_int_equal(s.entries, n_seen);
    assert_int_equal(s.evictions, 0);
    assert_true(s.bytes > 0 && s.bytes <= s.capacity);
    assert_int_equal(s.capacity, CLEF_ENGINE_DEFAULT_CACHE_BYTES);
    assert_int_equal(s.tokens_reused, reused);
    clef_engine_free(e);
}

/* Several question sets on one state: the first set misses, the others hit
 * whenever the state's cut is the same (state_tokens_used), and every answer
 * is clef_decide's. */
static void test_question_sets_on_one_state(void **state) {
    fixture *f = *state;
    const char *states[] = {"noul_basic", "state_object_nested", "state_array_messages",
                            "state_empty_string", "special_tokens_and_nfc", "long_state_truncated_320"};
    const char *questions[] = {"mixed_three_spec_example", "choice_12_unsorted", "score_10_levels",
                               "noul_criteria", "eight_questions", "choice_one_option"};
    clef_engine *e = engine_new(f->model, CLEF_ENGINE_DEFAULT_CACHE_BYTES);
    int identical = 0, compared = 0;
    for (size_t si = 0; si < sizeof states / sizeof *states; si++) {
        const tcase *sc = find_case(f, states[si]);
        json_t *sj = case_json(sc);
        int64_t used_seen[8];
        int n_seen = 0;
        for (size_t qi = 0; qi < sizeof questions / sizeof *questions; qi++) {
            json_t *qj = case_json(find_case(f, questions[qi]));
            char *text = make_request(json_object_get(sj, "state"), json_object_get(qj, "questions"));
            clef_decide_options o = opts_for(sc->max_length, true);
            clef_decide_result ref, r;
            reference(f->model, text, strlen(text), &o, &ref);
            clef_engine_stats s0 = stats(e);
            via_engine(e, text, strlen(text), &o, &r);
            clef_engine_stats s1 = stats(e);
            char what[160];
            snprintf(what, sizeof what, "state of %s, questions of %s", states[si], questions[qi]);
            check_same(what, &ref, &r, &identical);
            compared++;
            if (ref.http_status == 200) {
                bool seen = false;
                for (int k = 0; k < n_seen; k++) seen = seen || used_seen[k] == ref.state_tokens_used;
                assert_int_equal(s1.hits - s0.hits, seen ? 1 : 0);
                assert_int_equal(s1.misses - s0.misses, seen ? 0 : 1);
                if (!seen && n_seen < 8) used_seen[n_seen++] = ref.state_tokens_used;
            }
            clef_decide_result_free(&ref);
            clef_decide_result_free(&r);
            free(text);
            json_decref(qj);
        }
        json_decref(sj);
    }
    clef_engine_stats s = stats(e);
    printf("[engine] question sets: %d of %d byte-identical; %llu hits, %llu misses\n", identical,
           compared, (unsigned long long)s.hits, (unsigned long long)s.misses);
    assert_true(s.hits >= 5 * 5); /* five untruncated states, five later question sets each */
    clef_engine_free(e);
}

/* Three states of one question set: the bytes each entry counts, alone. */
static void entry_bytes(clef_model *m, char *const *reqs, int n, uint64_t *bytes) {
    clef_decide_options o = opts_for(0, false);
    for (int i = 0; i < n; i++) {
        clef_engine *e = engine_new(m, CLEF_ENGINE_DEFAULT_CACHE_BYTES);
        clef_decide_result r;
        via_engine(e, reqs[i], strlen(reqs[i]), &o, &r);
        clef_decide_result_free(&r);
        bytes[i] = stats(e).bytes;
        assert_true(bytes[i] > 0);
        clef_engine_free(e);
    }
}

/* Decide reqs[i] and expect a hit (1) or a miss (0). */
static void expect(clef_engine *e, clef_model *m, const char *req, int hit) {
    clef_decide_options o = opts_for(0, false);
    clef_decide_result ref, r;
    reference(m, req, strlen(req), &o, &ref);
    clef_engine_stats s0 = stats(e);
    via_engine(e, req, strlen(req), &o, &r);
    clef_engine_stats s1 = stats(e);
    check_same("lru", &ref, &r, NULL);
    assert_int_equal(s1.hits - s0.hits, hit);
    assert_int_equal(s1.misses - s0.misses, 1 - hit);
    assert_true(s1.bytes <= s1.capacity);
    clef_decide_result_free(&ref);
    clef_decide_result_free(&r);
}

static void test_lru_eviction(void **state) {
    fixture *f = *state;
    json_t *q = json_pack("{s:{s:s,s:s}}", "urgent", "type", "noul", "instructions", "Urgent?");
    char *req[3];
    const char *texts[3] = {"The first customer wrote about a refund.",
                            "A second customer asked about shipping.",
                            "The third message complains about billing."};
    for (int i = 0; i < 3; i++) {
        json_t *s = json_string(texts[i]);
        req[i] = make_request(s, q);
        json_decref(s);
    }
    uint64_t b[3];
    entry_bytes(f->model, req, 3, b);
    /* any two fit, all three do not */
    size_t cap = (size_t)(b[0] + b[1] + b[2] - 1);
    clef_engine *e = engine_new(f->model, cap);
    expect(e, f->model, req[0], 0);
    expect(e, f->model, req[1], 0);
    expect(e, f->model, req[0], 1);   /* 0 is now the most recent        */
    expect(e, f->model, req[2], 0);   /* evicts 1, the least recent      */
    clef_engine_stats s = stats(e);
    assert_int_equal(s.evictions, 1);
    assert_int_equal(s.entries, 2);
    assert_int_equal(s.bytes, b[0] + b[2]);
    expect(e, f->model, req[0], 1);
    expect(e, f->model, req[2], 1);
    expect(e, f->model, req[1], 0);   /* evicts 0 (least recent now)     */
    expect(e, f->model, req[2], 1);
    expect(e, f->model, req[0], 0);
    s = stats(e);
    assert_int_equal(s.evictions, 3);
    assert_int_equal(s.entries, 2);
    assert_int_equal(s.bytes, b[0] + b[2]);
    assert_int_equal(s.inserts, 5);
    clef_engine_free(e);

    /* a budget below any entry keeps nothing and still answers right */
    e = engine_new(f->model, (size_t)(b[0] < b[1] ? b[0] : b[1]) / 2);
    for (int k = 0; k < 2; k++) expect(e, f->model, req[1], 0);
    s = stats(e);
    assert_int_equal(s.entries, 0);
    assert_int_equal(s.bytes, 0);
    assert_int_equal(s.inserts, 0);
    clef_engine_free(e);
    e = engine_new(f->model, 0);
    expect(e, f->model, req[2], 0);
    expect(e, f->model, req[2], 0);
    assert_int_equal(stats(e).entries, 0);
    clef_engine_free(e);
    for (int i = 0; i < 3; i++) free(req[i]);
    json_decref(q);
}

/* Every 16384-budget case plus refusals in one batch, on a cold and then a
 * warm cache and without a cache: each result is clef_decide's. */
static void test_batch_equals_serial(void **state) {
    fixture *f = *state;
    const char *jsons[MAX_CASES + 4] = {0};
    size_t lens[MAX_CASES + 4] = {0};
    size_t n = 0, n_seen = 0;
    const char *seen[MAX_CASES];
    for (size_t i = 0; i < f->n; i++)
        if (f->cases[i].max_length == 16384) {
            jsons[n] = f->cases[i].raw;
            lens[n++] = f->cases[i].len;
            if (f->key[i]) seen_before(seen, &n_seen, f->key[i]);
        }
    /* a duplicate (same state twice in one pass), broken JSON, an empty body */
    assert_true(n >= 10);
    jsons[n] = jsons[0];
    lens[n++] = lens[0];
    jsons[n] = "{\"state\": ";
    lens[n] = strlen(jsons[n]);
    n++;
    jsons[n] = "";
    lens[n++] = 0;
    clef_decide_options o = opts_for(0, true);
    clef_decide_result ref[MAX_CASES + 4], got[MAX_CASES + 4];
    for (size_t i = 0; i < n; i++) reference(f->model, jsons[i], lens[i], &o, &ref[i]);
    const size_t budgets[] = {CLEF_ENGINE_DEFAULT_CACHE_BYTES, 0};
    for (size_t bi = 0; bi < 2; bi++) {
        clef_engine *e = engine_new(f->model, budgets[bi]);
        for (int pass = 0; pass < 2; pass++) {
            clef_error err = {0};
            if (clef_engine_decide_batch(e, n, jsons, lens, &o, got, &err) != CLEF_OK)
                fail_msg("batch: %s", err.message);
            int identical = 0;
            for (size_t i = 0; i < n; i++) {
                char what[64];
                snprintf(what, sizeof what, "batch item %zu pass %d", i, pass);
                check_same(what, &ref[i], &got[i], &identical);
                clef_decide_result_free(&got[i]);
            }
            clef_engine_stats s = stats(e);
            printf("[engine] batch of %zu (budget %zu) pass %d: %d byte-identical; hits %llu misses %llu\n",
                   n, budgets[bi], pass, identical, (unsigned long long)s.hits,
                   (unsigned long long)s.misses);
        }
        clef_engine_stats s = stats(e);
        size_t decided = n - 2; /* all but the two refusals */
        if (budgets[bi]) {
            /* pass 0: all miss (shared states too: one pass); pass 1: all hit */
            assert_int_equal(s.misses, decided);
            assert_int_equal(s.hits, decided);
            assert_int_equal(s.entries, n_seen);
            assert_true(n_seen < decided); /* the duplicate at least */
        } else {
            assert_int_equal(s.misses, 2 * decided);
            assert_int_equal(s.entries, 0);
        }
        clef_engine_free(e);
    }
    for (size_t i = 0; i < n; i++) clef_decide_result_free(&ref[i]);

    /* an empty batch, and bad arguments */
    clef_engine *e = engine_new(f->model, 1024);
    clef_error err = {0};
    assert_int_equal(clef_engine_decide_batch(e, 0, NULL, NULL, &o, got, &err), CLEF_OK);
    assert_int_equal(clef_engine_decide_batch(e, 1, NULL, lens, &o, got, &err), CLEF_ERR_INVALID_ARG);
    /* a failure of clef itself fails the whole batch and leaves no results */
    clef_decide_options bad = opts_for(1 << 30, false);
    assert_int_equal(clef_engine_decide_batch(e, 2, jsons, lens, &bad, got, &err), CLEF_ERR_INVALID_ARG);
    assert_null(got[0].body);
    assert_null(got[1].body);
    clef_engine_free(e);
}

/* clef_engine_decide_passes: what done saw. */
typedef struct done_log {
    size_t order[MAX_CASES + 4];
    int calls[MAX_CASES + 4];
    size_t n;
} done_log;

static void log_done(size_t i, void *ctx) {
    done_log *d = ctx;
    d->calls[i]++;
    d->order[d->n++] = i;
}

/* Passes of one request, of ~2 requests and unbounded: each result is
 * clef_decide's and reaches done exactly once; refusals come first; a state
 * a pass computed is a hit for later passes of the same call. */
static void test_passes(void **state) {
    fixture *f = *state;
    const char *jsons[MAX_CASES + 4] = {0};
    size_t lens[MAX_CASES + 4] = {0}, n = 0, n_seen = 0, longest = 0;
    const char *seen[MAX_CASES];
    for (size_t i = 0; i < f->n; i++)
        if (f->cases[i].max_length == 16384 && f->key[i]) {
            jsons[n] = f->cases[i].raw;
            lens[n++] = f->cases[i].len;
            seen_before(seen, &n_seen, f->key[i]);
            if (f->cases[i].len > longest) longest = f->cases[i].len;
        }
    jsons[n] = jsons[0];            /* the same state again, later in the call */
    lens[n++] = lens[0];
    jsons[n] = "[]";                /* refusals at the end */
    lens[n] = 2;
    n++;
    jsons[n] = "{\"state\": ";
    lens[n] = strlen(jsons[n]);
    n++;
    const size_t decided = n - 2;
    clef_decide_options o = opts_for(0, true);
    clef_decide_result ref[MAX_CASES + 4], got[MAX_CASES + 4];
    for (size_t i = 0; i < n; i++) reference(f->model, jsons[i], lens[i], &o, &ref[i]);
    const size_t max_tokens[] = {1, longest / 2, 0};
    for (size_t t = 0; t < 3; t++) {
        clef_engine *e = engine_new(f->model, CLEF_ENGINE_DEFAULT_CACHE_BYTES);
        done_log d = {0};
        clef_error err = {0};
        if (clef_engine_decide_passes(e, n, jsons, lens, &o, max_tokens[t], log_done, &d, got, &err) != CLEF_OK)
            fail_msg("passes of %zu tokens: %s", max_tokens[t], err.message);
        assert_int_equal(d.n, n);
        assert_true(d.order[0] == n - 2 && d.order[1] == n - 1);
        int identical = 0;
        for (size_t i = 0; i < n; i++) {
            assert_int_equal(d.calls[i], 1);
            char what[64];
            snprintf(what, sizeof what, "item %zu, passes of %zu tokens", i, max_tokens[t]);
            check_same(what, &ref[i], &got[i], &identical);
            clef_decide_result_free(&got[i]);
        }
        clef_engine_stats s = stats(e);
        printf("[engine] passes of <= %zu tokens: %d byte-identical; hits %llu misses %llu\n",
               max_tokens[t], identical, (unsigned long long)s.hits, (unsigned long long)s.misses);
        assert_int_equal(s.hits + s.misses, decided);
        if (max_tokens[t] == 1) assert_int_equal(s.misses, n_seen);   /* one request per pass */
        if (max_tokens[t] == 0) assert_int_equal(s.misses, decided);  /* one pass: no hits */
        clef_engine_free(e);
    }
    for (size_t i = 0; i < n; i++) clef_decide_result_free(&ref[i]);
}

/* An answer must not depend on what else shares its pass: without a cache
 * every request runs from token 0, alone or batched, so each body is the
 * same bytes as clef_decide's for it alone, on whatever kernels run here
 * (sequences that straddle the backbone's chunk boundaries included). */
static void test_batch_is_invariant(void **state) {
    fixture *f = *state;
    const char *jsons[MAX_CASES] = {0};
    size_t lens[MAX_CASES] = {0}, n = 0;
    for (size_t i = 0; i < f->n; i++)
        if (f->cases[i].max_length == 16384) {
            jsons[n] = f->cases[i].raw;
            lens[n++] = f->cases[i].len;
        }
    clef_decide_options o = opts_for(0, true);
    clef_decide_result ref[MAX_CASES], got[MAX_CASES];
    for (size_t i = 0; i < n; i++) reference(f->model, jsons[i], lens[i], &o, &ref[i]);
    clef_engine *e = engine_new(f->model, 0);
    const size_t max_tokens[] = {0, 700};
    for (size_t t = 0; t < 2; t++) {
        clef_error err = {0};
        if (clef_engine_decide_passes(e, n, jsons, lens, &o, max_tokens[t], NULL, NULL, got, &err) != CLEF_OK)
            fail_msg("passes: %s", err.message);
        for (size_t i = 0; i < n; i++) {
            if (got[i].body_len != ref[i].body_len || memcmp(got[i].body, ref[i].body, ref[i].body_len))
                fail_msg("request %zu of %zu, passes of %zu tokens: batched\n%s\nalone\n%s", i, n,
                         max_tokens[t], got[i].body, ref[i].body);
            clef_decide_result_free(&got[i]);
        }
    }
    clef_engine_free(e);
    for (size_t i = 0; i < n; i++) clef_decide_result_free(&ref[i]);
}

/* ---- threads ---- */

typedef struct worker {
    clef_engine *engine;
    const fixture *f;
    const clef_decide_result *refs;  /* [f->n] clef_decide's, max_length per case */
    int first, rounds;
    int failures;
    int decided;                     /* requests that reached the backbone */
    char why[CLEF_ERROR_MESSAGE_MAX + 64];
} worker;

static void *work(void *arg) {
    worker *w = arg;
    const fixture *f = w->f;
    for (int k = 0; k < w->rounds; k++) {
        size_t i = (size_t)(w->first + 5 * k) % f->n, j = (i + 1) % f->n;
        const tcase *c = &f->cases[i];
        clef_decide_options o = opts_for(c->max_length, false);
        clef_decide_result r[2];
        clef_error err = {0};
        clef_status st;
        size_t n = 1;
        if (k % 3 == 2 && f->cases[j].max_length == c->max_length) {
            const char *jsons[2] = {c->raw, f->cases[j].raw};
            size_t lens[2] = {c->len, f->cases[j].len};
            n = 2;
            st = clef_engine_decide_batch(w->engine, 2, jsons, lens, &o, r, &err);
        } else {
            st = clef_engine_decide(w->engine, c->raw, c->len, &o, &r[0], &err);
        }
        for (size_t t = 0; t < n; t++) {
            const clef_decide_result *ref = &w->refs[t ? j : i];
            w->decided += ref->http_status == 200;
            if (st != CLEF_OK) {
                snprintf(w->why, sizeof w->why, "case %zu: %s", i, err.message);
                w->failures++;
                break;
            }
            if (r[t].http_status != ref->http_status || !bodies_agree(ref->body, r[t].body, NULL)) {
                snprintf(w->why, sizeof w->why, "case %zu: body differs", t ? j : i);
                w->failures++;
            }
            clef_decide_result_free(&r[t]);
        }
    }
    return NULL;
}

/* Four threads on one engine whose cache holds only a few states, so
 * entries are evicted while other threads read them.  Bodies must be the
 * serial ones byte for byte (a data race would show as a difference or,
 * under ASan/TSan, as a report). */
static void test_threads_share_a_small_cache(void **state) {
    fixture *f = *state;
    clef_decide_result *refs = calloc(f->n, sizeof *refs);
    for (size_t i = 0; i < f->n; i++) {
        clef_decide_options o = opts_for(f->cases[i].max_length, false);
        reference(f->model, f->cases[i].raw, f->cases[i].len, &o, &refs[i]);
    }
    /* about three entries' worth */
    clef_engine *probe = engine_new(f->model, CLEF_ENGINE_DEFAULT_CACHE_BYTES);
    clef_decide_result r;
    clef_decide_options o = opts_for(0, false);
    via_engine(probe, f->cases[0].raw, f->cases[0].len, &o, &r);
    clef_decide_result_free(&r);
    size_t cap = (size_t)stats(probe).bytes * 3;
    clef_engine_free(probe);

    clef_engine *e = engine_new(f->model, cap);
    enum { N_THREADS = 4 };
    worker w[N_THREADS];
    pthread_t th[N_THREADS];
    for (int t = 0; t < N_THREADS; t++) {
        w[t] = (worker){.engine = e, .f = f, .refs = refs, .first = t, .rounds = 12};
        assert_int_equal(pthread_create(&th[t], NULL, work, &w[t]), 0);
    }
    for (int t = 0; t < N_THREADS; t++) pthread_join(th[t], NULL);
    for (int t = 0; t < N_THREADS; t++)
        if (w[t].failures) fail_msg("thread %d: %d failures, last: %s", t, w[t].failures, w[t].why);
    clef_engine_stats s = stats(e);
    printf("[engine] threads: hits %llu misses %llu evictions %llu entries %llu bytes %llu/%llu\n",
           (unsigned long long)s.hits, (unsigned long long)s.misses, (unsigned long long)s.evictions,
           (unsigned long long)s.entries, (unsigned long long)s.bytes, (unsigned long long)s.capacity);
    int decided = 0;
    for (int t = 0; t < N_THREADS; t++) decided += w[t].decided;
    assert_int_equal(s.hits + s.misses, decided);
    assert_true(s.bytes <= s.capacity);
    assert_true(s.evictions > 0);
    clef_engine_free(e);
    for (size_t i = 0; i < f->n; i++) clef_decide_result_free(&refs[i]);
    free(refs);
}

/* With the reference kernels (CLEF_CPU=ref: every kernel computes a row the
 * same way whatever its chunk or segment), a continued backbone is exact:
 * every engine body, missed, hit or batched, is clef_decide's byte for byte. */
static void test_reference_kernels_byte_identical(void **state) {
    fixture *f = *state;
    setenv("CLEF_CPU", "ref", 1);
    clef_model_params p = clef_model_default_params();
    p.n_threads = 2;
    clef_model *m = NULL;
    clef_error err = {0};
    clef_status st = clef_model_load(TINY "clef-tiny-a-F32.gguf", &p, &m, &err);
    unsetenv("CLEF_CPU");
    if (st != CLEF_OK) fail_msg("load: %s", err.message);
    clef_engine *e = engine_new(m, CLEF_ENGINE_DEFAULT_CACHE_BYTES);
    const char *jsons[MAX_CASES];
    size_t lens[MAX_CASES], n = 0;
    clef_decide_result refs[MAX_CASES], got[MAX_CASES];
    clef_decide_options o = opts_for(0, true);
    for (size_t i = 0; i < f->n; i++) {
        const tcase *c = &f->cases[i];
        clef_decide_options oc = opts_for(c->max_length, true);
        clef_decide_result ref, r;
        reference(m, c->raw, c->len, &oc, &ref);
        for (int k = 0; k < 2; k++) {
            via_engine(e, c->raw, c->len, &oc, &r);
            if (r.body_len != ref.body_len || memcmp(r.body, ref.body, ref.body_len))
                fail_msg("%s call %d: not byte-identical\n%s\n%s", c->id, k, ref.body, r.body);
            clef_decide_result_free(&r);
        }
        clef_decide_result_free(&ref);
        if (c->max_length == 16384) {
            jsons[n] = c->raw;
            lens[n] = c->len;
            reference(m, c->raw, c->len, &o, &refs[n++]);
        }
    }
    clef_engine *cold = engine_new(m, CLEF_ENGINE_DEFAULT_CACHE_BYTES);
    clef_engine *engines[2] = {cold, e}; /* every item missed, then every item hit */
    for (int k = 0; k < 2; k++) {
        if (clef_engine_decide_batch(engines[k], n, jsons, lens, &o, got, &err) != CLEF_OK)
            fail_msg("batch: %s", err.message);
        for (size_t i = 0; i < n; i++) {
            if (got[i].body_len != refs[i].body_len || memcmp(got[i].body, refs[i].body, refs[i].body_len))
                fail_msg("batch item %zu (%s engine): not byte-identical", i, k ? "warm" : "cold");
            clef_decide_result_free(&got[i]);
        }
    }
    for (size_t i = 0; i < n; i++) clef_decide_result_free(&refs[i]);
    clef_engine_free(cold);
    clef_engine_free(e);
    clef_model_free(m);
}

static void test_refusals(void **state) {
    fixture *f = *state;
    clef_error err = {0};
    clef_engine *e = NULL;
    assert_int_equal(clef_engine_new(NULL, 0, &e, &err), CLEF_ERR_INVALID_ARG);
    assert_null(e);
    clef_model *plain = NULL;
    clef_model_params p = clef_model_default_params();
    p.n_threads = 1;
    assert_int_equal(clef_model_load(ORACLE_DIR "/qwen35/qwen35-tiny.gguf", &p, &plain, &err), CLEF_OK);
    assert_int_equal(clef_engine_new(plain, 1024, &e, &err), CLEF_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.message, "cannot decide"));
    assert_null(e);
    clef_model_free(plain);
    clef_engine_free(NULL);
    clef_engine_stats s;
    clef_engine_get_stats(NULL, &s);
    assert_int_equal(s.capacity, 0);
    (void)f;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_case_miss_then_hit),
        cmocka_unit_test(test_question_sets_on_one_state),
        cmocka_unit_test(test_lru_eviction),
        cmocka_unit_test(test_batch_equals_serial),
        cmocka_unit_test(test_passes),
        cmocka_unit_test(test_batch_is_invariant),
        cmocka_unit_test(test_threads_share_a_small_cache),
        cmocka_unit_test(test_reference_kernels_byte_identical),
        cmocka_unit_test(test_refusals),
    };
    int failed = cmocka_run_group_tests(tests, setup, teardown);
    printf("[engine] largest differences from clef_decide: probabilities %g, confidences and "
           "scores %g, explain logits %g\n", seen_all.p, seen_all.derived, seen_all.logit);
    return failed;
}
