/*
 * tests/test_synth_common.h — helpers shared by test_synth.c and
 * test_quantize_model.c (static, header-only): the oracle's cases.jsonl
 * requests, writing synth models to temp files, and checking that a
 * System One answer is well formed (every question answered, probabilities
 * in [0, 1] summing to 1).
 */
#ifndef CLEF_TEST_SYNTH_COMMON_H
#define CLEF_TEST_SYNTH_COMMON_H

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clef.h"
#include "testutil.h"

#define SC_MAX_CASES 32

typedef struct sc_case {
    char id[64];
    int max_length;
    char *request;             /* compact JSON, malloc'd */
    json_t *parsed;            /* the request object */
} sc_case;

typedef struct sc_cases {
    sc_case c[SC_MAX_CASES];
    size_t n;
} sc_cases;

static void sc_cases_load(sc_cases *s) {
    memset(s, 0, sizeof *s);
    size_t len = 0;
    char *text = tu_read_file(ORACLE_DIR "/clef-tiny/cases.jsonl", &len);
    assert_non_null(text);
    for (char *line = strtok(text, "\n"); line && s->n < SC_MAX_CASES; line = strtok(NULL, "\n")) {
        json_error_t je;
        json_t *v = json_loads(line, 0, &je);
        assert_non_null(v);
        sc_case *c = &s->c[s->n++];
        snprintf(c->id, sizeof c->id, "%s", json_string_value(json_object_get(v, "id")));
        c->max_length = (int)json_integer_value(json_object_get(v, "max_length"));
        c->parsed = json_incref(json_object_get(v, "request"));
        c->request = json_dumps(c->parsed, JSON_COMPACT);
        json_decref(v);
    }
    free(text);
    assert_true(s->n >= 10);
}

static void sc_cases_free(sc_cases *s) {
    for (size_t i = 0; i < s->n; i++) {
        free(s->c[i].request);
        json_decref(s->c[i].parsed);
    }
}

static char *sc_synth(const char *arch, const char *shape, const char *type, uint64_t seed,
                      const char *name) {
    char *path = tu_write_temp(name, "", 0);
    assert_non_null(path);
    clef_synth_spec spec = {arch, shape, type, seed};
    clef_write_params wp = clef_write_default_params();
    wp.n_threads = 2;
    clef_error err = {0};
    if (clef_synth_model(&spec, path, &wp, &err) != CLEF_OK) fail_msg("synth: %s", err.message);
    return path;
}

static clef_model *sc_load(const char *path) {
    clef_model_params mp = clef_model_default_params();
    mp.n_threads = 2;
    clef_model *m = NULL;
    clef_error err = {0};
    if (clef_model_load(path, &mp, &m, &err) != CLEF_OK) fail_msg("%s: %s", path, err.message);
    return m;
}

/* Options a question of the request has: noul 2, choice its criteria keys,
 * score its criteria levels. */
static size_t sc_n_options(const json_t *q) {
    const char *type = json_string_value(json_object_get(q, "type"));
    if (!strcmp(type, "noul")) return 2;
    const json_t *o = json_object_get(q, "criteria"); /* choice: object; score: array */
    return json_is_array(o) ? json_array_size(o) : json_object_size(o);
}

/* The body answers every question with probabilities that are a distribution. */
static void sc_check_answers(const char *body, const json_t *request) {
    json_error_t je;
    json_t *got = json_loads(body, 0, &je);
    assert_non_null(got);
    const json_t *answers = json_object_get(got, "answers");
    const json_t *qs = json_object_get(request, "questions");
    assert_int_equal(json_object_size(answers), json_object_size(qs));
    const char *key;
    json_t *q;
    json_object_foreach((json_t *)qs, key, q) {
        const json_t *a = json_object_get(answers, key);
        assert_non_null(a);
        assert_string_equal(json_string_value(json_object_get(a, "type")),
                            json_string_value(json_object_get(q, "type")));
        if (!strcmp(json_string_value(json_object_get(q, "type")), "noul")) {
            double p = json_number_value(json_object_get(a, "noul"));
            assert_true(p >= 0 && p <= 1);
            continue;
        }
        const json_t *probs = json_object_get(a, "probabilities");
        assert_int_equal(json_object_size(probs), sc_n_options(q));
        double sum = 0;
        const char *k2;
        json_t *p;
        json_object_foreach((json_t *)probs, k2, p) {
            double v = json_number_value(p);
            assert_true(v >= 0 && v <= 1 && isfinite(v));
            sum += v;
        }
        assert_true(fabs(sum - 1) < 1e-9);
    }
    json_decref(got);
}

/* Decide one case; returns the HTTP status, body in *body (caller frees). */
static int sc_decide(clef_model *m, const sc_case *c, char **body) {
    clef_decide_options o = clef_decide_default_options();
    o.max_length = c->max_length;
    clef_decide_result r;
    clef_error err = {0};
    if (clef_decide(m, c->request, strlen(c->request), &o, &r, &err) != CLEF_OK)
        fail_msg("case %s: %s", c->id, err.message);
    int status = r.http_status;
    *body = strdup(r.body);
    clef_decide_result_free(&r);
    return status;
}

#endif
