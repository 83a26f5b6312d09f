/*
 * fuzz/fuzz_encode.c — libFuzzer harness for the prompt encoder: bytes →
 * req_parse → enc_encode with the clef-tiny tokenizer and a small budget.
 *
 * Every accepted request is encoded with max_length 512; the result must
 * satisfy decide/encode.h: n_ids = fixed_tokens + state_tokens_used <=
 * max_length, the state span is [prefix, prefix + used), every question and
 * option span lies inside the ids after the state, in order, and every id
 * is in the vocabulary.  A CLEF_ERR_TOO_LONG answer must report
 * fixed_tokens > max_length.  When the state was not cut and is at least two
 * tokens, it is encoded again with a budget one token short of the whole,
 * which must cut exactly one token from the end and change nothing else.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "clef.h"
#include "decide/encode.h"
#include "decide/request.h"
#include "fuzzutil.h"
#include "text/tokenizer.h"

#define FUZZ_MAX_LENGTH 512

static clef_tokenizer *g_tok;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    clef_error err;
    if (clef_tokenizer_load(fuzz_model_path(), &g_tok, &err) != CLEF_OK)
        FUZZ_SETUP_FAIL("%s", err.message);
    return 0;
}

static void check_span(enc_span s, size_t lo, size_t hi, const char *what) {
    FUZZ_CHECK(lo <= s.start && s.start <= s.end && s.end <= hi, "%s span [%zu,%zu) outside [%zu,%zu)",
               what, s.start, s.end, lo, hi);
}

static void check_record(const req_request *req, const enc_record *r, size_t max_length) {
    size_t vocab = clef_tokenizer_vocab_size(g_tok);
    FUZZ_CHECK(r->n_ids == r->fixed_tokens + r->state_tokens_used && r->n_ids <= max_length,
               "%zu ids = %zu fixed + %zu state, budget %zu", r->n_ids, r->fixed_tokens,
               r->state_tokens_used, max_length);
    FUZZ_CHECK(r->state_tokens_used <= r->state_tokens, "used more state than there is");
    FUZZ_CHECK(r->state_tokens_used == r->state_tokens ||
                   r->n_ids == max_length,
               "state cut although %zu of %zu ids are free", max_length - r->n_ids, max_length);
    FUZZ_CHECK(r->state_span.end - r->state_span.start == r->state_tokens_used,
               "state span length");
    for (size_t i = 0; i < r->n_ids; i++)
        FUZZ_CHECK(r->ids[i] >= 0 && (size_t)r->ids[i] < vocab, "id %d outside the vocabulary",
                   r->ids[i]);
    FUZZ_CHECK(r->n_questions == req->n_questions, "question count");
    size_t at = r->state_span.end;
    for (size_t i = 0; i < r->n_questions; i++) {
        const enc_question *q = &r->questions[i];
        FUZZ_CHECK(q->type == req->questions[i].type && q->n_options == req->questions[i].n_options,
                   "question %zu type/option count", i);
        check_span(q->question_span, at, r->n_ids, "question");
        at = q->question_span.end;
        for (size_t k = 0; k < q->n_options; k++) {
            check_span(q->option_spans[k], at, r->n_ids, "option");
            FUZZ_CHECK(q->option_spans[k].end > q->option_spans[k].start, "empty option span");
            at = q->option_spans[k].end;
        }
    }
}

/* The state cut by one token: same prefix, one state id less, same schema. */
static void check_cut(const req_request *req, const enc_record *full) {
    size_t max_length = full->n_ids - 1;
    enc_record cut;
    clef_error err;
    FUZZ_CHECK(enc_encode(g_tok, req, max_length, &cut, &err) == CLEF_OK, "cut encode: %s",
               err.message);
    check_record(req, &cut, max_length);
    size_t keep = full->state_span.end - 1;
    FUZZ_CHECK(cut.n_ids == max_length && cut.state_tokens_used == full->state_tokens - 1,
               "cutting one token: %zu ids, %zu state", cut.n_ids, cut.state_tokens_used);
    FUZZ_CHECK(!memcmp(cut.ids, full->ids, keep * sizeof *cut.ids) &&
                   !memcmp(cut.ids + keep, full->ids + keep + 1,
                           (full->n_ids - keep - 1) * sizeof *cut.ids),
               "the cut changed more than the last state token");
    enc_record_free(&cut);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    req_request req;
    req_reject rej;
    clef_error err;
    if (req_parse((const char *)data, size, NULL, &req, &rej, &err) != CLEF_OK) {
        req_reject_free(&rej);
        return 0;
    }
    enc_record rec;
    clef_status st = enc_encode(g_tok, &req, FUZZ_MAX_LENGTH, &rec, &err);
    if (st == CLEF_ERR_TOO_LONG) {
        FUZZ_CHECK(rec.fixed_tokens > FUZZ_MAX_LENGTH && !rec.ids, "TOO_LONG with %zu fixed tokens",
                   rec.fixed_tokens);
    } else {
        FUZZ_CHECK(st == CLEF_OK, "enc_encode failed (%d): %s", st, err.message);
        check_record(&req, &rec, FUZZ_MAX_LENGTH);
        if (rec.state_tokens_used == rec.state_tokens && rec.state_tokens >= 2)
            check_cut(&req, &rec);
    }
    enc_record_free(&rec);
    req_request_free(&req);
    return 0;
}
