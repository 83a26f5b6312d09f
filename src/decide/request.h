/*
 * decide/request.h — a System One request body, parsed and validated into a
 * plain C struct, or refused with the exact status and body the contract
 * (../shared/spec/systemone.md) prescribes.  No HTTP and no model here.
 *
 * What is checked, in this order (the first failing phase answers):
 *  1. The bytes: empty body → 422 pydantic `missing` at ["body"] (FastAPI's
 *     answer); not JSON / invalid UTF-8 / nested deeper than max_depth /
 *     an integer beyond int64 / a NUL in a key → 400 {"detail": "<sentence>"}.
 *  2. The shape, as TypeSafe's pydantic model reports it: every violation is
 *     listed in one 422 {"detail":[{"type","loc","msg","input"(,"ctx")}...]},
 *     fields in model order (state, model, questions), question errors with
 *     the type tag in the path (["body","questions",id,"score","criteria",1,"str"]).
 *     Free-text slots are str | dict | list: a wrong value yields the three
 *     union-member errors (string_type/"str", dict_type/"dict[any,any]",
 *     list_type/"list[any]").  A missing or null state is `missing`; a question
 *     without "type" is `union_tag_not_found`; empty questions / zero score
 *     levels are `too_short`.
 *     If the shape phase also saw an unknown top-level field or a question
 *     type other than noul/choice/score, the answer is instead 400
 *     {"detail":{"error_type":"api_usage_error","message":"Invalid request."}}.
 *  3. The model name, when params->model_known is set: 400 api_usage_error
 *     "Unknown model: <name>".
 *  4. Limits (plain-string details): more than max_questions questions
 *     ("Too many questions. Must have at most 256 questions."); then in
 *     question order: an empty question id
 *     ("Question key cannot be empty.", checked over all ids first); a noul
 *     whose instructions and criteria sides are all empty in Python's sense
 *     (absent, null, "", [], {}); a choice with 0 or more than max_choices
 *     options (default 255: "Too many choices. Must have at most 255
 *     choices."); a score with more than 10 levels.
 *     With model_known set, a model name containing NUL is unknown.
 * Unknown fields inside a question or inside noul criteria are ignored.
 *
 * Option order is the RENDERED (model) order of clef-model.md §2:
 *   noul   → "true", "false"; descriptions default to the reference's
 *            sentences, replaced by criteria.true/false when that key is
 *            present (an explicit null drops the description);
 *   choice → keys sorted by code point;  score → "0".."n-1" in list order.
 * by_request maps back to the order of the request (choice: JSON key order),
 * which is the order answers list probabilities in.
 */
#ifndef CLEF_DECIDE_REQUEST_H
#define CLEF_DECIDE_REQUEST_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "clef.h"

#define REQ_MAX_CHOICES 255          /* the contract's limit: the default of max_choices */
#define REQ_MAX_SCORE_LEVELS 10
#define REQ_DEFAULT_MAX_QUESTIONS 256
#define REQ_MAX_DEPTH_LIMIT 1024     /* highest max_depth: inside jansson's parser limit
                                        (2048 values) and the renderers' recursion    */

typedef enum req_type {
    REQ_NOUL = 0,      /* also the head's type id */
    REQ_CHOICE = 1,
    REQ_SCORE = 2,
} req_type;

/* "noul", "choice", "score". */
const char *req_type_name(req_type type);

typedef struct req_option {
    const char *id;          /* "true"/"false", the choice key, or "0".."9"          */
    json_t *description;     /* owned reference; NULL = omitted (renders without it)  */
    size_t request_index;    /* this option's position in request order              */
} req_option;

typedef struct req_question {
    const char *id;          /* the question id (its key in "questions")             */
    req_type type;
    json_t *question;        /* borrowed: the question object                        */
    json_t *instructions;    /* borrowed; NULL when absent or null                    */
    size_t n_options;
    req_option *options;     /* [n_options] in rendered order                        */
    size_t *by_request;      /* [n_options]: rendered index of request option k       */
} req_question;

typedef struct req_request {
    json_t *body;            /* owned reference to the parsed body; ids, keys and
                                borrowed values point into it                        */
    const char *model;       /* the request's "model"                                 */
    json_t *state;           /* borrowed: string, object or array                     */
    size_t n_questions;
    req_question *questions; /* [n_questions] in request (JSON) order                */
} req_request;

/* A refusal: what a server sends back. */
typedef struct req_reject {
    int http_status;         /* 400 or 422                                            */
    char *body;              /* NUL-terminated JSON text, owned (req_reject_free)     */
    size_t body_len;
} req_reject;

typedef bool (*req_model_known_fn)(const char *name, void *user);

typedef struct req_params {
    int max_depth;                   /* nesting limit; 0 = PYJSON_DEFAULT_MAX_DEPTH (64),
                                        at most REQ_MAX_DEPTH_LIMIT                      */
    int max_questions;               /* 0 = REQ_DEFAULT_MAX_QUESTIONS                    */
    int max_choices;                 /* 0 = REQ_MAX_CHOICES                              */
    req_model_known_fn model_known;  /* NULL: any model name is accepted                 */
    void *model_known_user;
} req_params;

req_params req_default_params(void);

/* Parse and validate body text json[0..len).  params may be NULL (defaults).
 * CLEF_OK: *out is filled (req_request_free it).
 * CLEF_ERR_REQUEST: the contract refuses the request; *reject holds the
 *   status and body (req_reject_free it); *out is zeroed.
 * Anything else (CLEF_ERR_NOMEM): clef failed, err says why. */
clef_status req_parse(const char *json, size_t len, const req_params *params,
                      req_request *out, req_reject *reject, clef_error *err);

/* Same from an already parsed body (a new reference is taken; the caller
 * keeps its own).  Phase 1 (bytes) is skipped. */
clef_status req_from_json(json_t *body, const req_params *params, req_request *out,
                          req_reject *reject, clef_error *err);

void req_request_free(req_request *req);
void req_reject_free(req_reject *reject);

/* Refusal builders for the layers above (they fill *out, return CLEF_OK or
 * CLEF_ERR_NOMEM):  {"detail": "<text>"}  and
 * {"detail":{"error_type":"<type>","message":"<message>"}} (message NULL: omitted). */
clef_status req_reject_text(int http_status, const char *detail, req_reject *out,
                            clef_error *err);
clef_status req_reject_typed(int http_status, const char *error_type, const char *message,
                             req_reject *out, clef_error *err);

#endif
