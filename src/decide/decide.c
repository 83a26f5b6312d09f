/*
 * decide/decide.c — clef_decide(): one System One request, start to end.
 *
 * The one place where the decision layer meets the model:
 *   body → req_parse (validate) → enc_encode (ids + spans) → backbone
 *   (final-normed hidden states) → head_score (one logit per option) →
 *   ans_response (probabilities, answers) → JSON body.
 * A request the contract refuses is an ordinary outcome (CLEF_OK with a 4xx
 * http_status and the contract's body); only clef's own failures return a
 * non-OK status.  Nothing here keeps state between calls, so any number of
 * threads may decide on one model at once.  The stages are split out
 * (decide/pipeline.h) so the engine's cached and batched backbone answers
 * through the same code.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "decide/answer.h"
#include "decide/encode.h"
#include "decide/pipeline.h"
#include "decide/request.h"
#include "model/head.h"
#include "model/model.h"
#include "text/pyjson.h"

double dec_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

clef_decide_options clef_decide_default_options(void) {
    clef_decide_options o;
    memset(&o, 0, sizeof o);
    o.confidence = CLEF_CONFIDENCE_TYPESAFE;
    return o;
}

void clef_decide_result_free(clef_decide_result *r) {
    if (!r) return;
    free(r->body);
    r->body = NULL;
    r->body_len = 0;
}

/* Hand a refusal's status and body to the result (the body changes owner). */
static void take_reject(clef_decide_result *r, req_reject *reject) {
    r->http_status = reject->http_status;
    r->body = reject->body;
    r->body_len = reject->body_len;
    reject->body = NULL;
}

static clef_status set_body(clef_decide_result *r, int status, const char *text,
                            clef_error *err) {
    r->body = strdup(text);
    if (!r->body) return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory");
    r->body_len = strlen(text);
    r->http_status = status;
    return CLEF_OK;
}

/* req_params.model_known over the caller's accept list (user: the options). */
static bool model_is_accepted(const char *name, void *user) {
    const clef_decide_options *o = user;
    for (size_t i = 0; i < o->n_accept_models; i++)
        if (o->accept_models[i] && !strcmp(o->accept_models[i], name)) return true;
    return false;
}

/* The token budget: the caller's (checked against the context), or 16384
 * capped at the model's context. */
static size_t token_budget(const clef_model *m, const clef_decide_options *o) {
    size_t budget = o->max_length > 0 ? (size_t)o->max_length : ENC_DEFAULT_MAX_LENGTH;
    int n_ctx = clef_model_n_ctx(m);
    if (n_ctx > 0 && budget > (size_t)n_ctx) budget = (size_t)n_ctx;
    return budget;
}

/* Head logits for every option of every question, widened to double.
 * hidden: [n_ids, E] final-normed; logits: [Σ n_options]. */
static clef_status score_questions(const clef_model *m, const enc_record *rec,
                                   const float *hidden, double *logits, size_t n_logits,
                                   clef_error *err) {
    head_rows rows;
    clef_status st = head_rows_from_file(model_gguf(m), model_n_embd(m), &rows, err);
    if (st != CLEF_OK) return st;
    head_question *qs = calloc(rec->n_questions, sizeof *qs);
    head_span *spans = calloc(n_logits, sizeof *spans);
    float *out = calloc(n_logits, sizeof *out);
    if (!qs || !spans || !out) {
        st = clef_err_set(err, CLEF_ERR_NOMEM, "out of memory");
        goto done;
    }
    size_t k = 0;
    for (size_t q = 0; q < rec->n_questions; q++) {
        const enc_question *eq = &rec->questions[q];
        qs[q].type_id = (int)eq->type;
        qs[q].span = (head_span){(int32_t)eq->question_span.start, (int32_t)eq->question_span.end};
        qs[q].n_options = (int)eq->n_options;
        qs[q].options = &spans[k];
        for (size_t o = 0; o < eq->n_options; o++, k++)
            spans[k] = (head_span){(int32_t)eq->option_spans[o].start,
                                   (int32_t)eq->option_spans[o].end};
    }
    st = head_score_on(m->head, model_pool(m), &model_backbone(m)->cpu, &rows, hidden, rec->ids,
                       (int)rec->n_ids, qs, (int)rec->n_questions, out, err);
    for (size_t i = 0; st == CLEF_OK && i < n_logits; i++) logits[i] = out[i];
done:
    free(out);
    free(spans);
    free(qs);
    return st;
}

static json_t *span_json(enc_span s) { return json_pack("[II]", (json_int_t)s.start, (json_int_t)s.end); }

/* The --explain object: what the model saw and what the head said. */
static json_t *explain_json(const req_request *req, const enc_record *rec, const double *logits) {
    json_t *ids = json_array();
    for (size_t i = 0; i < rec->n_ids; i++) json_array_append_new(ids, json_integer(rec->ids[i]));
    json_t *questions = json_array();
    size_t k = 0;
    for (size_t q = 0; q < rec->n_questions; q++) {
        const enc_question *eq = &rec->questions[q];
        json_t *spans = json_array(), *opt_ids = json_array(), *lg = json_array();
        for (size_t o = 0; o < eq->n_options; o++, k++) {
            json_array_append_new(spans, span_json(eq->option_spans[o]));
            json_array_append_new(opt_ids, json_string(req->questions[q].options[o].id));
            json_array_append_new(lg, json_real(logits[k]));
        }
        json_array_append_new(questions,
                              json_pack("{s:s,s:s,s:o,s:o,s:o,s:o}", "id", req->questions[q].id,
                                        "type", req_type_name(req->questions[q].type),
                                        "question_span", span_json(eq->question_span),
                                        "option_spans", spans, "option_ids", opt_ids,
                                        "logits", lg));
    }
    return json_pack("{s:o,s:I,s:I,s:I,s:o,s:o}", "input_ids", ids, "state_tokens",
                     (json_int_t)rec->state_tokens, "state_tokens_used",
                     (json_int_t)rec->state_tokens_used, "fixed_tokens",
                     (json_int_t)rec->fixed_tokens, "state_span", span_json(rec->state_span),
                     "questions", questions);
}

/* Head + answers for an encoded request whose hidden states are in; fills
 * the 200 body. */
static clef_status answer(const clef_model *m, const req_request *req, const enc_record *rec,
                          const float *hidden, const clef_decide_options *o,
                          clef_decide_result *r, clef_error *err) {
    size_t n_logits = 0;
    for (size_t q = 0; q < rec->n_questions; q++) n_logits += rec->questions[q].n_options;
    double *logits = calloc(n_logits, sizeof *logits);
    json_t *body = NULL;
    clef_status st = CLEF_OK;
    if (!logits) {
        st = clef_err_set(err, CLEF_ERR_NOMEM, "out of memory for %zu logits", n_logits);
        goto done;
    }
    double t = dec_now_ms();
    st = score_questions(m, rec, hidden, logits, n_logits, err);
    if (st != CLEF_OK) goto done;
    ans_options ao = ans_default_options();
    ao.confidence = o->confidence;
    const char *name = o->model_name ? o->model_name : clef_model_name(m);
    st = ans_response(req, logits, n_logits, name, (int64_t)rec->n_ids, &ao, &body, err);
    if (st != CLEF_OK) goto done;
    if (o->explain) json_object_set_new(body, "clef", explain_json(req, rec, logits));
    st = pyjson_dumps(body, 0, &r->body, &r->body_len, err);
    r->head_ms = dec_now_ms() - t;
    if (st == CLEF_OK) r->http_status = 200;
done:
    json_decref(body);
    free(logits);
    return st;
}

void dec_job_free(dec_job *job) {
    if (!job) return;
    if (job->needs_backbone) {
        enc_record_free(&job->rec);
        req_request_free(&job->req);
    }
    free(job->hidden);
    memset(job, 0, sizeof *job);
}

/* Encode a parsed request; a schema that does not fit is answered here. */
static clef_status encode(const clef_model *m, dec_job *job, clef_decide_result *r,
                          clef_error *err) {
    double t = dec_now_ms();
    clef_error enc_err;
    clef_status st = enc_encode(clef_model_tokenizer(m), &job->req, token_budget(m, &job->opts),
                                &job->rec, &enc_err);
    r->tokenize_ms = dec_now_ms() - t;
    if (st == CLEF_ERR_TOO_LONG) {
        r->input_tokens = (int64_t)job->rec.fixed_tokens;
        return set_body(r, ENC_TOO_LONG_HTTP_STATUS, ENC_TOO_LONG_BODY, err);
    }
    if (st != CLEF_OK) {
        if (err) *err = enc_err;
        return st;
    }
    r->input_tokens = (int64_t)job->rec.n_ids;
    r->state_tokens = (int64_t)job->rec.state_tokens;
    r->state_tokens_used = (int64_t)job->rec.state_tokens_used;
    job->hidden = malloc(job->rec.n_ids * (size_t)model_n_embd(m) * sizeof *job->hidden);
    job->needs_backbone = true; /* rec and req are the job's from here on */
    if (!job->hidden)
        return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory for %zu hidden states",
                            job->rec.n_ids);
    return CLEF_OK;
}

/* Options a caller may get wrong: a budget past the context, negative limits. */
static clef_status check_options(const clef_model *m, const clef_decide_options *o,
                                 clef_error *err) {
    int n_ctx = clef_model_n_ctx(m);
    if (o->max_length < 0 || (n_ctx > 0 && o->max_length > n_ctx))
        return clef_err_set(err, CLEF_ERR_INVALID_ARG,
                            "max_length %d is outside 1..%d (the model's context length)",
                            o->max_length, n_ctx);
    if (o->max_questions < 0 || o->max_choices < 0 || o->max_depth < 0 ||
        o->max_depth > REQ_MAX_DEPTH_LIMIT)
        return clef_err_set(err, CLEF_ERR_INVALID_ARG,
                            "request limits must be 0 (default) or positive, max_depth at most "
                            "%d (got max_questions %d, max_choices %d, max_depth %d)",
                            REQ_MAX_DEPTH_LIMIT, o->max_questions, o->max_choices, o->max_depth);
    return CLEF_OK;
}

clef_status dec_prepare(const clef_model *m, const char *json, size_t len,
                        const clef_decide_options *options, dec_job *job,
                        clef_decide_result *r, clef_error *err) {
    memset(r, 0, sizeof *r);
    memset(job, 0, sizeof *job);
    if (!m || (!json && len))
        return clef_err_set(err, CLEF_ERR_INVALID_ARG, "clef_decide: model or body is NULL");
    if (!m->head)
        return clef_err_set(err, CLEF_ERR_UNSUPPORTED,
                            "model '%s' (arch %s) has no decision head: decisions need a clef file",
                            clef_model_name(m), clef_model_arch(m));
    if (!clef_model_tokenizer(m))
        return clef_err_set(err, CLEF_ERR_UNSUPPORTED, "model '%s' has no tokenizer metadata",
                            clef_model_name(m));
    job->opts = options ? *options : clef_decide_default_options();
    const clef_decide_options *o = &job->opts;
    clef_status st = check_options(m, o, err);
    if (st != CLEF_OK) return st;

    double t = dec_now_ms();
    req_params params = req_default_params();
    if (o->max_depth > 0) params.max_depth = o->max_depth;
    if (o->max_questions > 0) params.max_questions = o->max_questions;
    if (o->max_choices > 0) params.max_choices = o->max_choices;
    if (o->n_accept_models > 0) {
        params.model_known = model_is_accepted;
        params.model_known_user = (void *)o;   /* read-only in model_is_accepted */
    }
    req_reject reject = {0};
    st = req_parse(json ? json : "", len, &params, &job->req, &reject, err);
    r->parse_ms = dec_now_ms() - t;
    if (st == CLEF_ERR_REQUEST) {
        take_reject(r, &reject);
        return CLEF_OK;
    }
    if (st != CLEF_OK) return st;
    st = encode(m, job, r, err);
    if (!job->needs_backbone) req_request_free(&job->req);
    if (st != CLEF_OK) clef_decide_result_free(r);
    return st;
}

clef_status dec_finish(const clef_model *m, dec_job *job, clef_decide_result *r,
                       clef_error *err) {
    if (!job->needs_backbone || !job->hidden)
        return clef_err_set(err, CLEF_ERR_INTERNAL, "dec_finish: the request has no hidden states");
    clef_status st = answer(m, &job->req, &job->rec, job->hidden, &job->opts, r, err);
    if (st != CLEF_OK) clef_decide_result_free(r);
    return st;
}

clef_status clef_decide(clef_model *m, const char *json, size_t len,
                        const clef_decide_options *options, clef_decide_result *r,
                        clef_error *err) {
    dec_job job;
    clef_status st = dec_prepare(m, json, len, options, &job, r, err);
    if (st == CLEF_OK && job.needs_backbone) {
        double t = dec_now_ms();
        qwen35_seq seq = {.ids = job.rec.ids, .n = (int64_t)job.rec.n_ids, .hidden = job.hidden};
        st = model_forward_batch(m, &seq, 1, err);
        r->backbone_ms = dec_now_ms() - t;
        if (st == CLEF_OK) st = dec_finish(m, &job, r, err);
        else clef_decide_result_free(r);
    }
    dec_job_free(&job);
    return st;
}
