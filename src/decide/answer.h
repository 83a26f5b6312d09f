/*
 * decide/answer.h — head logits → System One answers (systemone.md
 * "Response", clef-model.md §5).
 *
 * Per question, logits arrive in RENDERED option order (req_question.options);
 * probabilities are a float64 softmax over them (max subtracted first).
 *   noul   → {"type":"noul","noul": p(true)}
 *   choice → {"type":"choice","choice": first key with the highest p in
 *             REQUEST order, "probabilities": {key: p} in request order,
 *             "confidence": c}
 *   score  → {"type":"score","score": Σ i·p_i, "legend": {"0": level 0 as
 *             sent, ...}, "probabilities": {"0": p_0, ...}, "confidence": c}
 * Confidence (clef_confidence_kind):
 *   TYPESAFE   choice (p_max − 1/n)/(1 − 1/n), 1 when n = 1;
 *              score max(0, 1 − Σ p_i·|i − m| / MAD), m the first most likely
 *              level, MAD = (1/n)·Σ |i − (n−1)/2|; 1 when n = 1.
 *   REFERENCE  p(choice) / max p (Cloudflare's reference).
 * Values are unrounded unless ans_options.round_decimals >= 0, which rounds
 * every number as Python's round(x, d) does (the reference uses 4).
 */
#ifndef CLEF_DECIDE_ANSWER_H
#define CLEF_DECIDE_ANSWER_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "clef.h"
#include "decide/request.h"

typedef struct ans_options {
    clef_confidence_kind confidence;
    int round_decimals;              /* < 0: no rounding (default) */
} ans_options;

ans_options ans_default_options(void);

/* p[i] = exp(x_i − max x) / Σ: a float64 softmax.  Every logit must be
 * finite or −inf, with at least one finite (CLEF_ERR_INTERNAL otherwise). */
clef_status ans_softmax(const double *logits, size_t n, double *p, clef_error *err);

/* The confidences above on probabilities p[0..n) (score: level order). */
double ans_choice_confidence_typesafe(const double *p, size_t n);
double ans_score_confidence_typesafe(const double *p, size_t n);

/* Python round(x, decimals): the exact binary value rounded half-even to
 * `decimals` places, then the nearest double. */
double ans_round(double x, int decimals);

/* One answer object (new reference in *out) from logits[0..q->n_options) in
 * rendered order.  opts NULL = defaults. */
clef_status ans_question(const req_question *q, const double *logits, const ans_options *opts,
                         json_t **out, clef_error *err);

/* The whole 200 body as a json_t (new reference):
 *   {"model": model_name, "answers": {id: answer ...}, "usage":
 *    {"input_tokens": input_tokens, "output_tokens": 0}}
 * logits: every question's logits concatenated in request order of the
 * questions, each in rendered option order (n = Σ n_options). */
clef_status ans_response(const req_request *req, const double *logits, size_t n_logits,
                         const char *model_name, int64_t input_tokens, const ans_options *opts,
                         json_t **out, clef_error *err);

#endif
