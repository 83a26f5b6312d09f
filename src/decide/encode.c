/*
 * decide/encode.c — prompt pieces → token ids and spans (see encode.h).
 * The schema is tokenized first (spans relative to its start), then the
 * fixed prefix/suffix and the state; only then is the state budget known and
 * the spans shifted to their final place.
 */
#include "decide/encode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "text/pyjson.h"

static const char PREFIX[] =
    "<|im_start|>system\n"
    "Read the complete state and schema. Decide every field jointly. Each answer must be "
    "exactly one of that field's allowed options."
    "<|im_end|>\n<|im_start|>user\nSTATE:\n";
static const char SUFFIX[] =
    "\n<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nJOINT SCHEMA DECISIONS:";

typedef struct id_vec {
    int32_t *v;
    size_t n, cap;
} id_vec;

static bool vec_append(id_vec *a, const int32_t *ids, size_t n) {
    if (a->n + n > a->cap) {
        size_t cap = a->cap ? a->cap : 256;
        while (cap < a->n + n) cap *= 2;
        int32_t *p = realloc(a->v, cap * sizeof *p);
        if (!p) return false;
        a->v = p;
        a->cap = cap;
    }
    if (n) memcpy(a->v + a->n, ids, n * sizeof *ids);
    a->n += n;
    return true;
}

/* Tokenize text[0..len) on its own and append the ids to a. */
static clef_status piece(id_vec *a, const clef_tokenizer *tok, const char *text, size_t len,
                         const char *what, clef_error *err) {
    int32_t *ids = NULL;
    size_t n = 0;
    clef_status st = clef_tokenize(tok, text, len, true, &ids, &n, err);
    if (st != CLEF_OK) {
        clef_err_wrap(err, "tokenizing the %s", what);
        return st;
    }
    bool ok = vec_append(a, ids, n);
    clef_free(ids);
    return ok ? CLEF_OK : clef_err_set(err, CLEF_ERR_NOMEM, "out of memory encoding the %s", what);
}

static clef_status piece_str(id_vec *a, const clef_tokenizer *tok, const char *s,
                             const char *what, clef_error *err) {
    return piece(a, tok, s, strlen(s), what, err);
}

/* render(v) tokenized as one piece. */
static clef_status piece_render(id_vec *a, const clef_tokenizer *tok, const json_t *v,
                                const char *what, clef_error *err) {
    char *text = NULL;
    size_t len = 0;
    clef_status st = pyjson_render(v, &text, &len, err);
    if (st == CLEF_OK) st = piece(a, tok, text, len, what, err);
    free(text);
    return st;
}

static clef_status field_header(id_vec *a, const clef_tokenizer *tok, size_t index,
                                const req_question *q, clef_error *err) {
    char num[48];
    pyjson_buf b = {0};
    snprintf(num, sizeof num, "\nFIELD %zu\nID: ", index + 1);
    pyjson_buf_append(&b, num, strlen(num));
    pyjson_buf_append(&b, q->id, strlen(q->id));
    pyjson_buf_append(&b, "\nTYPE: ", 7);
    const char *t = req_type_name(q->type);
    pyjson_buf_append(&b, t, strlen(t));
    pyjson_buf_append(&b, "\nINSTRUCTION: ", 14);
    clef_status st = b.failed ? clef_err_set(err, CLEF_ERR_NOMEM, "out of memory")
                              : piece(a, tok, b.data, b.len, "field header", err);
    pyjson_buf_free(&b);
    return st;
}

/* {"option_id": id, "description": d} (description omitted when NULL), rendered. */
static clef_status option_piece(id_vec *a, const clef_tokenizer *tok, const req_option *o,
                                clef_error *err) {
    json_t *obj = json_object();
    if (!obj || json_object_set_new(obj, "option_id", json_string(o->id)) ||
        (o->description && json_object_set(obj, "description", o->description))) {
        json_decref(obj);
        return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory encoding option '%s'", o->id);
    }
    clef_status st = piece_render(a, tok, obj, "option", err);
    json_decref(obj);
    return st;
}

static clef_status encode_question(id_vec *s, const clef_tokenizer *tok, size_t index,
                                   const req_question *q, enc_question *eq, clef_error *err) {
    clef_status st = field_header(s, tok, index, q, err);
    if (st != CLEF_OK) return st;
    eq->type = q->type;
    eq->question_span.start = s->n;
    const json_t *ins = q->instructions;
    bool fallback = !ins || (json_is_string(ins) && json_string_length(ins) == 0);
    st = fallback ? piece_str(s, tok, q->id, "instructions", err)
                  : piece_render(s, tok, ins, "instructions", err);
    if (st != CLEF_OK) return st;
    eq->question_span.end = s->n;
    if ((st = piece_str(s, tok, "\nALLOWED OPTIONS:\n", "schema", err)) != CLEF_OK) return st;
    eq->n_options = q->n_options;
    eq->option_spans = calloc(q->n_options ? q->n_options : 1, sizeof *eq->option_spans);
    if (!eq->option_spans) return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory");
    for (size_t k = 0; k < q->n_options; k++) {
        char head[48];
        snprintf(head, sizeof head, "OPTION %zu: ", k + 1);
        if ((st = piece_str(s, tok, head, "schema", err)) != CLEF_OK) return st;
        eq->option_spans[k].start = s->n;
        if ((st = option_piece(s, tok, &q->options[k], err)) != CLEF_OK) return st;
        eq->option_spans[k].end = s->n;
        if ((st = piece_str(s, tok, "\n", "schema", err)) != CLEF_OK) return st;
    }
    return piece_str(s, tok, "END FIELD\n", "schema", err);
}

void enc_record_free(enc_record *rec) {
    if (!rec) return;
    for (size_t i = 0; i < rec->n_questions && rec->questions; i++)
        free(rec->questions[i].option_spans);
    free(rec->questions);
    free(rec->ids);
    *rec = (enc_record){0};
}

static void shift(enc_span *sp, size_t by) {
    sp->start += by;
    sp->end += by;
}

clef_status enc_encode(const clef_tokenizer *tok, const req_request *req, size_t max_length,
                       enc_record *out, clef_error *err) {
    *out = (enc_record){0};
    if (!tok || !req) return clef_err_set(err, CLEF_ERR_INVALID_ARG, "enc_encode: NULL argument");
    if (max_length == 0) max_length = ENC_DEFAULT_MAX_LENGTH;
    id_vec schema = {0}, prefix = {0}, suffix = {0}, state = {0};
    clef_status st = CLEF_OK;

    out->questions = calloc(req->n_questions ? req->n_questions : 1, sizeof *out->questions);
    if (!out->questions) { st = clef_err_set(err, CLEF_ERR_NOMEM, "out of memory"); goto done; }
    out->n_questions = req->n_questions;
    st = piece_str(&schema, tok, "\n\nSCHEMA FIELDS:\n", "schema", err);
    for (size_t i = 0; st == CLEF_OK && i < req->n_questions; i++)
        st = encode_question(&schema, tok, i, &req->questions[i], &out->questions[i], err);
    if (st == CLEF_OK) st = piece(&prefix, tok, PREFIX, sizeof PREFIX - 1, "prompt prefix", err);
    if (st == CLEF_OK) st = piece(&suffix, tok, SUFFIX, sizeof SUFFIX - 1, "prompt suffix", err);
    if (st == CLEF_OK) st = piece_render(&state, tok, req->state, "state", err);
    if (st != CLEF_OK) goto done;

    size_t fixed = prefix.n + schema.n + suffix.n;
    out->fixed_tokens = fixed;
    out->state_tokens = state.n;
    if (fixed > max_length) {
        st = clef_err_set(err, CLEF_ERR_TOO_LONG,
                          "schema requires %zu tokens before state; maximum is %zu", fixed,
                          max_length);
        goto done;
    }
    size_t used = state.n < max_length - fixed ? state.n : max_length - fixed;
    out->state_tokens_used = used;
    out->state_span = (enc_span){prefix.n, prefix.n + used};
    size_t offset = prefix.n + used;
    for (size_t i = 0; i < out->n_questions; i++) {
        shift(&out->questions[i].question_span, offset);
        for (size_t k = 0; k < out->questions[i].n_options; k++)
            shift(&out->questions[i].option_spans[k], offset);
    }
    id_vec all = {0};
    if (!vec_append(&all, prefix.v, prefix.n) || !vec_append(&all, state.v, used) ||
        !vec_append(&all, schema.v, schema.n) || !vec_append(&all, suffix.v, suffix.n)) {
        free(all.v);
        st = clef_err_set(err, CLEF_ERR_NOMEM, "out of memory assembling %zu ids", fixed + used);
        goto done;
    }
    out->ids = all.v;
    out->n_ids = all.n;

done:
    free(schema.v);
    free(prefix.v);
    free(suffix.v);
    free(state.v);
    if (st != CLEF_OK) {
        size_t keep_fixed = out->fixed_tokens, keep_state = out->state_tokens;
        enc_record_free(out);
        if (st == CLEF_ERR_TOO_LONG) {
            out->fixed_tokens = keep_fixed;
            out->state_tokens = keep_state;
        }
    }
    return st;
}
