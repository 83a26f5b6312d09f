/* tests/test_encode.c — encode_record against every case of
 * ../shared/oracle/clef-tiny/expected.jsonl: ids, spans, state counts, and the
 * schema-too-long error. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "decide/encode.h"
#include "decide/request.h"
#include "testutil.h"

#define TINY ORACLE_DIR "/clef-tiny/clef-tiny-a-F32.gguf"

static int setup(void **state) {
    clef_tokenizer *tok = NULL;
    clef_error err = {0};
    if (clef_tokenizer_load(TINY, &tok, &err) != CLEF_OK) {
        fprintf(stderr, "cannot load %s: %s\n", TINY, err.message);
        return -1;
    }
    *state = tok;
    return 0;
}

static int teardown(void **state) {
    clef_tokenizer_free(*state);
    return 0;
}

static void span_eq(enc_span got, json_t *want, const char *what) {
    size_t a = (size_t)json_integer_value(json_array_get(want, 0));
    size_t b = (size_t)json_integer_value(json_array_get(want, 1));
    if (got.start != a || got.end != b)
        fail_msg("%s: got [%zu,%zu) want [%zu,%zu)", what, got.start, got.end, a, b);
}

static void check_ok_case(const enc_record *rec, json_t *x, const char *id) {
    json_t *ids = json_object_get(x, "input_ids");
    assert_int_equal(rec->n_ids, json_integer_value(json_object_get(x, "n_tokens")));
    assert_int_equal(rec->n_ids, json_array_size(ids));
    for (size_t i = 0; i < rec->n_ids; i++)
        if (rec->ids[i] != json_integer_value(json_array_get(ids, i)))
            fail_msg("%s: id %zu is %d, want %lld", id, i, rec->ids[i],
                     (long long)json_integer_value(json_array_get(ids, i)));
    span_eq(rec->state_span, json_object_get(x, "state_span"), "state span");
    assert_int_equal(rec->state_tokens, json_integer_value(json_object_get(x, "state_tokens")));
    assert_int_equal(rec->state_tokens_used,
                     json_integer_value(json_object_get(x, "state_tokens_used")));
    assert_int_equal(rec->fixed_tokens, json_integer_value(json_object_get(x, "fixed_tokens")));
    json_t *qs = json_object_get(x, "questions");
    assert_int_equal(rec->n_questions, json_array_size(qs));
    for (size_t i = 0; i < rec->n_questions; i++) {
        json_t *q = json_array_get(qs, i), *os = json_object_get(q, "option_spans");
        assert_int_equal(rec->questions[i].type, json_integer_value(json_object_get(q, "type_id")));
        span_eq(rec->questions[i].question_span, json_object_get(q, "question_span"), "question span");
        assert_int_equal(rec->questions[i].n_options, json_array_size(os));
        for (size_t k = 0; k < json_array_size(os); k++)
            span_eq(rec->questions[i].option_spans[k], json_array_get(os, k), "option span");
    }
}

static void test_oracle_cases(void **state) {
    const clef_tokenizer *tok = *state;
    char *cases = tu_read_file(ORACLE_DIR "/clef-tiny/cases.jsonl", NULL);
    char *exp = tu_read_file(ORACLE_DIR "/clef-tiny/expected.jsonl", NULL);
    assert_non_null(cases);
    assert_non_null(exp);
    int ok = 0, errors = 0;
    for (char *cl = cases, *el = exp; *cl && *el;) {
        char *ce = strchr(cl, '\n'), *ee = strchr(el, '\n');
        json_error_t e;
        json_t *c = json_loadb(cl, (size_t)(ce - cl), 0, &e), *x = json_loadb(el, (size_t)(ee - el), 0, &e);
        assert_non_null(c);
        assert_non_null(x);
        const char *id = json_string_value(json_object_get(c, "id"));
        assert_string_equal(id, json_string_value(json_object_get(x, "id")));
        req_request req;
        req_reject rej;
        assert_int_equal(req_from_json(json_object_get(c, "request"), NULL, &req, &rej, NULL), CLEF_OK);
        size_t max_length = (size_t)json_integer_value(json_object_get(c, "max_length"));
        enc_record rec;
        clef_error err = {0};
        clef_status st = enc_encode(tok, &req, max_length, &rec, &err);
        json_t *xe = json_object_get(x, "error");
        if (xe) {
            assert_int_equal(st, CLEF_ERR_TOO_LONG);
            assert_string_equal(err.message, json_string_value(json_object_get(xe, "message")));
            assert_int_equal(rec.fixed_tokens, json_integer_value(json_object_get(xe, "fixed_length")));
            assert_null(rec.ids);
            json_error_t e2;
            json_t *body = json_loads(ENC_TOO_LONG_BODY, 0, &e2);
            assert_true(json_equal(body, json_object_get(xe, "http_body")));
            assert_int_equal(ENC_TOO_LONG_HTTP_STATUS,
                             json_integer_value(json_object_get(xe, "http_status")));
            json_decref(body);
            errors++;
        } else {
            if (st != CLEF_OK) fail_msg("%s: %s", id, err.message);
            check_ok_case(&rec, x, id);
            ok++;
        }
        enc_record_free(&rec);
        req_request_free(&req);
        json_decref(c);
        json_decref(x);
        cl = ce + 1;
        el = ee + 1;
    }
    assert_int_equal(ok, 17);
    assert_int_equal(errors, 1);
    free(cases);
    free(exp);
}

static req_request parse(const char *body) {
    req_request req;
    req_reject rej;
    if (req_parse(body, strlen(body), NULL, &req, &rej, NULL) != CLEF_OK) fail_msg("refused %s", rej.body);
    return req;
}

/* The state budget: cut from the end, exactly to max_length; default 16384. */
static void test_state_cut(void **state) {
    const clef_tokenizer *tok = *state;
    req_request req = parse("{\"model\":\"m\",\"state\":\"one two three four five six seven eight nine ten\","
                            "\"questions\":{\"q\":{\"type\":\"noul\",\"instructions\":\"?\"}}}");
    enc_record full, cut;
    assert_int_equal(enc_encode(tok, &req, 0, &full, NULL), CLEF_OK);
    assert_int_equal(full.state_tokens, full.state_tokens_used);
    assert_true(full.state_tokens >= 10);
    assert_int_equal(full.n_ids, full.fixed_tokens + full.state_tokens);
    size_t budget = full.fixed_tokens + 3;
    assert_int_equal(enc_encode(tok, &req, budget, &cut, NULL), CLEF_OK);
    assert_int_equal(cut.n_ids, budget);
    assert_int_equal(cut.state_tokens, full.state_tokens);
    assert_int_equal(cut.state_tokens_used, 3);
    /* the first three state tokens are kept, the schema follows them */
    assert_memory_equal(cut.ids, full.ids, (full.state_span.start + 3) * sizeof(int32_t));
    assert_memory_equal(cut.ids + cut.state_span.end, full.ids + full.state_span.end,
                        (full.n_ids - full.state_span.end) * sizeof(int32_t));
    size_t shift = full.state_tokens - 3;
    assert_int_equal(cut.questions[0].question_span.start + shift, full.questions[0].question_span.start);
    assert_int_equal(cut.questions[0].option_spans[1].end + shift, full.questions[0].option_spans[1].end);
    enc_record_free(&cut);
    /* exactly the fixed tokens: zero state tokens, no error */
    assert_int_equal(enc_encode(tok, &req, full.fixed_tokens, &cut, NULL), CLEF_OK);
    assert_int_equal(cut.state_tokens_used, 0);
    assert_int_equal(cut.state_span.start, cut.state_span.end);
    enc_record_free(&cut);
    clef_error err = {0};
    assert_int_equal(enc_encode(tok, &req, full.fixed_tokens - 1, &cut, &err), CLEF_ERR_TOO_LONG);
    assert_non_null(strstr(err.message, "schema requires"));
    enc_record_free(&cut);
    enc_record_free(&full);
    req_request_free(&req);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_oracle_cases),
        cmocka_unit_test(test_state_cut),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
