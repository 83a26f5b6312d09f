/*
 * decide/answer.c — softmax, confidences and the System One answer objects
 * (contract in answer.h).
 */
#include "decide/answer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

ans_options ans_default_options(void) {
    return (ans_options){.confidence = CLEF_CONFIDENCE_TYPESAFE, .round_decimals = -1};
}

clef_status ans_softmax(const double *logits, size_t n, double *p, clef_error *err) {
    double mx = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        if (isnan(logits[i]) || logits[i] == INFINITY)
            return clef_err_set(err, CLEF_ERR_INTERNAL, "logit %zu of %zu is %g", i, n, logits[i]);
        if (logits[i] > mx) mx = logits[i];
    }
    if (n == 0 || mx == -INFINITY)
        return clef_err_set(err, CLEF_ERR_INTERNAL, "softmax over %zu logits with none finite", n);
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += (p[i] = exp(logits[i] - mx));
    for (size_t i = 0; i < n; i++) p[i] /= sum;
    return CLEF_OK;
}

static size_t first_argmax(const double *p, size_t n) {
    size_t m = 0;
    for (size_t i = 1; i < n; i++)
        if (p[i] > p[m]) m = i;
    return m;
}

double ans_choice_confidence_typesafe(const double *p, size_t n) {
    if (n <= 1) return 1.0;
    double pmax = p[first_argmax(p, n)];
    double c = (pmax - 1.0 / (double)n) / (1.0 - 1.0 / (double)n);
    return c < 0 ? 0 : c > 1 ? 1 : c;
}

double ans_score_confidence_typesafe(const double *p, size_t n) {
    if (n <= 1) return 1.0;
    size_t m = first_argmax(p, n);
    double mid = ((double)n - 1.0) / 2.0, mad = 0, spread = 0;
    for (size_t i = 0; i < n; i++) {
        mad += fabs((double)i - mid);
        spread += p[i] * fabs((double)i - (double)m);
    }
    mad /= (double)n;
    double c = 1.0 - spread / mad;
    return c < 0 ? 0 : c;
}

double ans_round(double x, int decimals) {
    if (decimals < 0 || !isfinite(x)) return x;
    /* glibc prints the exact binary value, rounding half-even on ties:
     * the same decimal Python's round() computes. */
    if (decimals > 1074) return x;   /* every double is exact with 1074 places */
    char buf[1500];                  /* 309 integer digits + point + 1074 places */
    snprintf(buf, sizeof buf, "%.*f", decimals, x);
    return strtod(buf, NULL);
}

static json_t *num(double x, const ans_options *o) { return json_real(ans_round(x, o->round_decimals)); }

/* Sets *ok false on allocation failure. */
static void put(json_t *obj, const char *key, json_t *v, bool *ok) {
    if (!v || json_object_set_new(obj, key, v)) *ok = false;
}

static json_t *noul_answer(const double *p, const ans_options *o, bool *ok) {
    json_t *a = json_object();
    if (!a) { *ok = false; return NULL; }
    put(a, "type", json_string("noul"), ok);
    put(a, "noul", num(p[0], o), ok);   /* rendered order: true first */
    return a;
}

static json_t *choice_answer(const req_question *q, const double *p, const ans_options *o,
                             bool *ok) {
    json_t *a = json_object(), *probs = json_object();
    if (!a || !probs) { json_decref(a); json_decref(probs); *ok = false; return NULL; }
    size_t best = q->by_request[0];
    for (size_t k = 0; k < q->n_options; k++) {
        size_t r = q->by_request[k];
        if (p[r] > p[best]) best = r;   /* strict: the first maximum in request order wins */
        put(probs, q->options[r].id, num(p[r], o), ok);
    }
    double conf = o->confidence == CLEF_CONFIDENCE_REFERENCE
                      ? p[best]
                      : ans_choice_confidence_typesafe(p, q->n_options);
    put(a, "type", json_string("choice"), ok);
    put(a, "choice", json_string(q->options[best].id), ok);
    put(a, "probabilities", probs, ok);
    put(a, "confidence", num(conf, o), ok);
    return a;
}

static json_t *score_answer(const req_question *q, const double *p, const ans_options *o,
                            bool *ok) {
    json_t *a = json_object(), *legend = json_object(), *probs = json_object();
    if (!a || !legend || !probs) {
        json_decref(a); json_decref(legend); json_decref(probs);
        *ok = false;
        return NULL;
    }
    double score = 0;
    for (size_t i = 0; i < q->n_options; i++) {
        score += (double)i * p[i];
        put(legend, q->options[i].id, json_incref(q->options[i].description), ok);
        put(probs, q->options[i].id, num(p[i], o), ok);
    }
    double conf = o->confidence == CLEF_CONFIDENCE_REFERENCE
                      ? p[first_argmax(p, q->n_options)]
                      : ans_score_confidence_typesafe(p, q->n_options);
    put(a, "type", json_string("score"), ok);
    put(a, "score", num(score, o), ok);
    put(a, "legend", legend, ok);
    put(a, "probabilities", probs, ok);
    put(a, "confidence", num(conf, o), ok);
    return a;
}

clef_status ans_question(const req_question *q, const double *logits, const ans_options *opts,
                         json_t **out, clef_error *err) {
    ans_options o = opts ? *opts : ans_default_options();
    *out = NULL;
    if (!q || !logits || q->n_options == 0)
        return clef_err_set(err, CLEF_ERR_INVALID_ARG, "ans_question: no options");
    double *p = malloc(q->n_options * sizeof *p);
    if (!p) return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory");
    clef_status st = ans_softmax(logits, q->n_options, p, err);
    if (st != CLEF_OK) {
        free(p);
        clef_err_wrap(err, "question '%s'", q->id);
        return st;
    }
    bool ok = true;
    json_t *a = q->type == REQ_NOUL     ? noul_answer(p, &o, &ok)
                : q->type == REQ_CHOICE ? choice_answer(q, p, &o, &ok)
                                        : score_answer(q, p, &o, &ok);
    free(p);
    if (!ok || !a) {
        json_decref(a);
        return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory building answer '%s'", q->id);
    }
    *out = a;
    return CLEF_OK;
}

clef_status ans_response(const req_request *req, const double *logits, size_t n_logits,
                         const char *model_name, int64_t input_tokens, const ans_options *opts,
                         json_t **out, clef_error *err) {
    *out = NULL;
    size_t need = 0;
    for (size_t i = 0; i < req->n_questions; i++) need += req->questions[i].n_options;
    if (need != n_logits)
        return clef_err_set(err, CLEF_ERR_INTERNAL, "%zu logits for a schema of %zu options",
                            n_logits, need);
    json_t *answers = json_object();
    if (!answers) return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory");
    size_t off = 0;
    for (size_t i = 0; i < req->n_questions; i++) {
        json_t *a;
        clef_status st = ans_question(&req->questions[i], logits + off, opts, &a, err);
        if (st != CLEF_OK) { json_decref(answers); return st; }
        if (json_object_set_new(answers, req->questions[i].id, a)) {
            json_decref(answers);
            return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory");
        }
        off += req->questions[i].n_options;
    }
    json_t *r = json_pack("{s:s,s:o,s:{s:I,s:i}}", "model", model_name ? model_name : "",
                          "answers", answers, "usage", "input_tokens", (json_int_t)input_tokens,
                          "output_tokens", 0);
    if (!r) return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory");
    *out = r;
    return CLEF_OK;
}
