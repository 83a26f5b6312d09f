/*
 * decide/encode.h — the reference `encode_record`: a validated request →
 * the token ids the backbone reads, plus the spans the joint head pools.
 *
 * Layout (clef-model.md §2), every piece tokenized ON ITS OWN with
 * clef_tokenize(parse_special = true) and the ids concatenated:
 *   prefix  "<|im_start|>system\n" SYS "<|im_end|>\n<|im_start|>user\nSTATE:\n"
 *   state   render(state), cut from the END (its first tokens are kept) to fit
 *           max_length − fixed_tokens
 *   schema  "\n\nSCHEMA FIELDS:\n", then per question i (1-based):
 *           "\nFIELD i\nID: <id>\nTYPE: <type>\nINSTRUCTION: "
 *           [question span] render(instructions; "" / absent / null → the id)
 *           "\nALLOWED OPTIONS:\n", per option k (1-based, rendered order):
 *           "OPTION k: " [option span] render({"option_id":id,"description":d})
 *           (no "description" key when d is NULL) "\n"; then "END FIELD\n"
 *   suffix  "\n<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nJOINT SCHEMA DECISIONS:"
 * Spans are [start, end) indices into the final ids.
 */
#ifndef CLEF_DECIDE_ENCODE_H
#define CLEF_DECIDE_ENCODE_H

#include <stddef.h>
#include <stdint.h>

#include "clef.h"
#include "decide/request.h"

#define ENC_DEFAULT_MAX_LENGTH 16384

/* What a server answers when the schema alone does not fit (CLEF_ERR_TOO_LONG). */
#define ENC_TOO_LONG_HTTP_STATUS 400
#define ENC_TOO_LONG_BODY "{\"detail\":{\"error_type\":\"max_tokens_exceeded\"}}"

typedef struct enc_span {
    size_t start, end;            /* [start, end) in enc_record.ids */
} enc_span;

typedef struct enc_question {
    req_type type;                /* head type id: noul 0, choice 1, score 2 */
    enc_span question_span;       /* the rendered instructions                */
    size_t n_options;             /* = the request question's n_options       */
    enc_span *option_spans;       /* [n_options], rendered option order       */
} enc_question;

typedef struct enc_record {
    int32_t *ids;                 /* [n_ids] model input                                  */
    size_t n_ids;
    enc_span state_span;          /* where the (cut) state sits                           */
    size_t state_tokens;          /* state tokens before the cut                          */
    size_t state_tokens_used;     /* after the cut                                        */
    size_t fixed_tokens;          /* prefix + schema + suffix (set on TOO_LONG as well)   */
    size_t n_questions;
    enc_question *questions;      /* [n_questions], request order (= req->questions)      */
} enc_record;

/* Encode req for a model whose budget is max_length tokens (0 = 16384).
 * CLEF_OK: *out filled (enc_record_free it).
 * CLEF_ERR_TOO_LONG: prefix + schema + suffix alone exceed max_length; err's
 *   message is the reference's "schema requires N tokens before state;
 *   maximum is M", out->fixed_tokens = N and nothing else is allocated; a
 *   server answers ENC_TOO_LONG_HTTP_STATUS with ENC_TOO_LONG_BODY.
 * Other statuses: tokenizer or memory failure (err says which piece). */
clef_status enc_encode(const clef_tokenizer *tok, const req_request *req, size_t max_length,
                       enc_record *out, clef_error *err);

void enc_record_free(enc_record *rec);

#endif
