/*
 * fuzz/fuzz_request.c — libFuzzer harness for the System One request parser
 * and validator: bytes → req_parse, with the default parameters and with a
 * depth limit of 16 plus a model-name check (only "clef-tiny-a" is known).
 *
 * Invariants (decide/request.h):
 *  - the outcome is CLEF_OK or CLEF_ERR_REQUEST, never an internal failure
 *    (inputs are small, so an "out of memory" here means a bug);
 *  - a refusal is 400 or 422 with a body that is JSON {"detail": ...} of
 *    exactly body_len bytes;
 *  - an accepted request has questions with non-empty ids, the option count
 *    its type allows, noul options true/false, score options "0".."n-1",
 *    choice options in strictly ascending byte order, and by_request the
 *    inverse permutation of request_index;
 *  - req_from_json on the already parsed body answers the same.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "clef.h"
#include "decide/request.h"
#include "fuzzutil.h"
#include "text/pyjson.h"

static bool known_model(const char *name, void *user) {
    (void)user;
    return strcmp(name, "clef-tiny-a") == 0;
}

static void check_reject(const req_reject *r) {
    FUZZ_CHECK(r->http_status == 400 || r->http_status == 422, "refusal status %d",
               r->http_status);
    FUZZ_CHECK(r->body && strlen(r->body) == r->body_len, "refusal body length");
    json_t *v = NULL;
    FUZZ_CHECK(pyjson_loadb(r->body, r->body_len, 0, &v, NULL, 0) == PYJSON_LOAD_OK,
               "refusal body is not JSON: %s", r->body);
    FUZZ_CHECK(json_is_object(v) && json_object_size(v) == 1 && json_object_get(v, "detail"),
               "refusal body is not {\"detail\": ...}: %s", r->body);
    json_decref(v);
}

static void check_question(const req_question *q) {
    FUZZ_CHECK(q->id && q->id[0], "question without an id");
    size_t n = q->n_options;
    switch (q->type) {
    case REQ_NOUL:
        FUZZ_CHECK(n == 2 && !strcmp(q->options[0].id, "true") && !strcmp(q->options[1].id, "false"),
                   "noul '%s' options", q->id);
        break;
    case REQ_CHOICE:
        FUZZ_CHECK(n >= 1 && n <= REQ_MAX_CHOICES, "choice '%s' has %zu options", q->id, n);
        for (size_t k = 1; k < n; k++)
            FUZZ_CHECK(strcmp(q->options[k - 1].id, q->options[k].id) < 0,
                       "choice '%s' options not in code point order", q->id);
        break;
    case REQ_SCORE:
        FUZZ_CHECK(n >= 1 && n <= REQ_MAX_SCORE_LEVELS, "score '%s' has %zu levels", q->id, n);
        for (size_t k = 0; k < n; k++)
            FUZZ_CHECK(q->options[k].id[0] == (char)('0' + k) && !q->options[k].id[1],
                       "score '%s' option %zu is '%s'", q->id, k, q->options[k].id);
        break;
    default: FUZZ_CHECK(false, "question '%s' of type %d", q->id, (int)q->type);
    }
    for (size_t k = 0; k < n; k++) {
        FUZZ_CHECK(q->by_request[k] < n, "by_request out of range");
        FUZZ_CHECK(q->options[q->by_request[k]].request_index == k,
                   "by_request is not the inverse of request_index");
    }
}

static void check_request(const req_request *r) {
    FUZZ_CHECK(r->body && r->model && r->state, "accepted request without body/model/state");
    FUZZ_CHECK(json_is_string(r->state) || json_is_object(r->state) || json_is_array(r->state),
               "state of type %d", json_typeof(r->state));
    FUZZ_CHECK(r->n_questions >= 1, "accepted request without questions");
    for (size_t i = 0; i < r->n_questions; i++) check_question(&r->questions[i]);
}

/* Parse data; returns the status and leaves the refusal in *rej. */
static clef_status parse(const uint8_t *data, size_t size, const req_params *p, req_reject *rej) {
    req_request req;
    clef_error err;
    clef_status st = req_parse((const char *)data, size, p, &req, rej, &err);
    FUZZ_CHECK(st == CLEF_OK || st == CLEF_ERR_REQUEST, "req_parse failed (%d): %s", st,
               err.message);
    if (st == CLEF_OK) check_request(&req);
    else check_reject(rej);
    req_request_free(&req);

    /* The same body already parsed must get the same answer. */
    json_t *body = NULL;
    int depth = p && p->max_depth ? p->max_depth : 0;
    if (pyjson_loadb((const char *)data, size, depth, &body, NULL, 0) == PYJSON_LOAD_OK) {
        req_reject rej2;
        clef_status st2 = req_from_json(body, p, &req, &rej2, &err);
        FUZZ_CHECK(st2 == st, "req_from_json says %d, req_parse %d", st2, st);
        FUZZ_CHECK(st != CLEF_ERR_REQUEST || (rej2.http_status == rej->http_status &&
                                               !strcmp(rej2.body, rej->body)),
                   "req_from_json refuses differently: %s vs %s", rej2.body, rej->body);
        req_request_free(&req);
        req_reject_free(&rej2);
        json_decref(body);
    }
    return st;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    req_reject rej;
    parse(data, size, NULL, &rej);
    req_reject_free(&rej);
    req_params p = req_default_params();
    p.max_depth = 16;
    p.model_known = known_model;
    parse(data, size, &p, &rej);
    req_reject_free(&rej);
    return 0;
}
