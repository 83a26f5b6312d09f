/* tests/test_answer.c — logits → System One answers, against
 * ../shared/spec/confidence-vectors.json and the oracle's probs/response. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "decide/answer.h"
#include "decide/request.h"
#include "testutil.h"
#include "text/pyjson.h"

#define SPEC_DIR "../shared/spec"

static void near(double got, double want, double tol, const char *what) {
    if (!(fabs(got - want) <= tol)) fail_msg("%s: got %.17g want %.17g (tol %g)", what, got, want, tol);
}

static void test_confidence_vectors(void **s) {
    (void)s;
    json_error_t e;
    json_t *doc = json_load_file(SPEC_DIR "/confidence-vectors.json", 0, &e);
    assert_non_null(doc);
    json_t *vecs = json_object_get(doc, "vectors");
    assert_true(json_array_size(vecs) >= 10);
    size_t idx;
    json_t *v;
    json_array_foreach(vecs, idx, v) {
        json_t *pj = json_object_get(v, "probabilities");
        size_t n = json_array_size(pj);
        double p[16];
        for (size_t i = 0; i < n; i++) p[i] = json_number_value(json_array_get(pj, i));
        bool choice = strcmp(json_string_value(json_object_get(v, "type")), "choice") == 0;
        double c = choice ? ans_choice_confidence_typesafe(p, n) : ans_score_confidence_typesafe(p, n);
        /* formula values are printed with up to 6 decimals; documented ones with 2 */
        near(c, json_number_value(json_object_get(v, "formula_confidence")), 5e-7, "formula");
        near(c, json_number_value(json_object_get(v, "documented_confidence")), 0.011, "documented");
        json_t *es = json_object_get(v, "expected_score");
        if (es) {
            double sc = 0;
            for (size_t i = 0; i < n; i++) sc += (double)i * p[i];
            near(sc, json_number_value(es), 1e-9, "score");
        }
    }
    json_decref(doc);
    double one = 1.0;
    assert_true(ans_choice_confidence_typesafe(&one, 1) == 1.0);
    assert_true(ans_score_confidence_typesafe(&one, 1) == 1.0);
}

static void test_softmax(void **s) {
    (void)s;
    double x[3] = {1000.0, 1000.0, -INFINITY}, p[3];
    assert_int_equal(ans_softmax(x, 3, p, NULL), CLEF_OK);   /* no overflow: max subtracted */
    near(p[0], 0.5, 1e-15, "p0");
    near(p[1], 0.5, 1e-15, "p1");
    assert_true(p[2] == 0.0);
    double bad[2] = {0.0, NAN};
    clef_error err = {0};
    assert_int_equal(ans_softmax(bad, 2, p, &err), CLEF_ERR_INTERNAL);
    assert_non_null(strstr(err.message, "logit 1"));
    double none[2] = {-INFINITY, -INFINITY};
    assert_int_equal(ans_softmax(none, 2, p, NULL), CLEF_ERR_INTERNAL);
}

static void test_round(void **s) {
    (void)s;
    /* values from CPython's round() */
    assert_true(ans_round(2.675, 2) == 2.67);
    assert_true(ans_round(0.125, 2) == 0.12);
    assert_true(ans_round(0.375, 2) == 0.38);
    assert_true(ans_round(1.00005, 4) == 1.0001);
    assert_true(ans_round(5e-05, 4) == 0.0001);
    assert_true(ans_round(0.00015, 4) == 0.0001);
    assert_true(ans_round(0.3261728016315807, 4) == 0.3262);
    assert_true(ans_round(2.5, 0) == 2.0);
    assert_true(ans_round(-1.23456, 3) == -1.235);
    assert_true(ans_round(1e300, 4) == 1e300);
    double z = ans_round(-0.5, 0);
    assert_true(z == 0.0 && signbit(z));
    assert_true(ans_round(0.123456, -1) == 0.123456);
}

static req_request parse(const char *body) {
    req_request req;
    req_reject rej;
    clef_error err = {0};
    if (req_parse(body, strlen(body), NULL, &req, &rej, &err) != CLEF_OK)
        fail_msg("refused: %s %s", rej.body ? rej.body : "", err.message);
    return req;
}

static char *dump(const json_t *v) {
    char *out = NULL;
    assert_int_equal(pyjson_dumps(v, 0, &out, NULL, NULL), CLEF_OK);
    return out;
}

static void test_shapes_and_ties(void **s) {
    (void)s;
    /* choice keys in request order b, a (rendered a, b); equal logits: the first
     * in REQUEST order wins */
    req_request req = parse("{\"model\":\"m\",\"state\":\"s\",\"questions\":{"
                            "\"n\":{\"type\":\"noul\",\"instructions\":\"?\"},"
                            "\"c\":{\"type\":\"choice\",\"criteria\":{\"b\":null,\"a\":\"x\"}},"
                            "\"r\":{\"type\":\"score\",\"criteria\":[\"lo\",{\"k\":[1]},\"hi\"]}}}");
    double logits[7] = {0, 0, /* c rendered a,b */ 0, 0, /* r */ 0, 0, 0};
    json_t *resp;
    assert_int_equal(ans_response(&req, logits, 7, "clef-tiny-a", 211, NULL, &resp, NULL), CLEF_OK);
    char *text = dump(resp);
    assert_string_equal(
        text,
        "{\"model\":\"clef-tiny-a\",\"answers\":{\"n\":{\"type\":\"noul\",\"noul\":0.5},\"c\":{\"type\":"
        "\"choice\",\"choice\":\"b\",\"probabilities\":{\"b\":0.5,\"a\":0.5},\"confidence\":0.0},"
        "\"r\":{\"type\":\"score\",\"score\":1.0,\"legend\":{\"0\":\"lo\",\"1\":{\"k\":[1]},\"2\":"
        "\"hi\"},\"probabilities\":{\"0\":0.3333333333333333,\"1\":0.3333333333333333,\"2\":"
        "0.3333333333333333},\"confidence\":0.0}},\"usage\":{\"input_tokens\":211,\"output_tokens\":0}}");
    free(text);
    json_decref(resp);

    /* logits follow rendered order: a (rendered 0) high → choice a */
    double l2[7] = {2, 0, 5, 0, 0, 9, 0};
    ans_options o = ans_default_options();
    o.confidence = CLEF_CONFIDENCE_REFERENCE;
    o.round_decimals = 4;
    assert_int_equal(ans_response(&req, l2, 7, "m", 1, &o, &resp, NULL), CLEF_OK);
    json_t *ans = json_object_get(resp, "answers");
    near(json_real_value(json_object_get(json_object_get(ans, "n"), "noul")), 0.8808, 0, "noul");
    json_t *c = json_object_get(ans, "c");
    assert_string_equal(json_string_value(json_object_get(c, "choice")), "a");
    near(json_real_value(json_object_get(c, "confidence")), 0.9933, 0, "reference p(choice)");
    json_t *r = json_object_get(ans, "r");
    near(json_real_value(json_object_get(r, "confidence")), 0.9998, 0, "reference max p");
    near(json_real_value(json_object_get(r, "score")), 1.0, 0, "score");
    json_decref(resp);

    /* wrong logit count is an internal error, not an answer */
    clef_error err = {0};
    assert_int_equal(ans_response(&req, l2, 6, "m", 1, NULL, &resp, &err), CLEF_ERR_INTERNAL);
    assert_null(resp);
    req_request_free(&req);
}

/* Feed the oracle's logits; compare probabilities and the response. */
static void check_case(json_t *request, json_t *x) {
    req_request req;
    req_reject rej;
    assert_int_equal(req_from_json(request, NULL, &req, &rej, NULL), CLEF_OK);
    json_t *xq = json_object_get(x, "questions");
    double logits[4096];
    size_t n = 0;
    for (size_t i = 0; i < json_array_size(xq); i++) {
        json_t *qi = json_array_get(xq, i), *lj = json_object_get(qi, "logits"),
               *pj = json_object_get(qi, "probs");
        double p[REQ_MAX_CHOICES];
        for (size_t k = 0; k < json_array_size(lj); k++)
            logits[n + k] = json_number_value(json_array_get(lj, k));
        assert_int_equal(ans_softmax(logits + n, json_array_size(lj), p, NULL), CLEF_OK);
        for (size_t k = 0; k < json_array_size(pj); k++)
            near(p[k], json_number_value(json_array_get(pj, k)), 1e-12, "probs");
        n += json_array_size(lj);
    }
    json_t *want = json_object_get(x, "response");
    json_int_t ntok = json_integer_value(json_object_get(x, "n_tokens"));
    json_t *got, *ref;
    assert_int_equal(ans_response(&req, logits, n, "clef-tiny-a", ntok, NULL, &got, NULL), CLEF_OK);
    ans_options ro = {.confidence = CLEF_CONFIDENCE_REFERENCE, .round_decimals = 4};
    assert_int_equal(ans_response(&req, logits, n, "clef-tiny-a", ntok, &ro, &ref, NULL), CLEF_OK);
    assert_true(json_equal(json_object_get(got, "usage"), json_object_get(want, "usage")));
    assert_string_equal(json_string_value(json_object_get(got, "model")), "clef-tiny-a");
    json_t *ga = json_object_get(got, "answers"), *wa = json_object_get(want, "answers"),
           *ra = json_object_get(ref, "answers"), *wr = json_object_get(x, "reference_answers");
    assert_int_equal(json_object_size(ga), json_object_size(wa));
    void *gi = json_object_iter(ga), *wi = json_object_iter(wa);
    for (; gi && wi; gi = json_object_iter_next(ga, gi), wi = json_object_iter_next(wa, wi)) {
        assert_string_equal(json_object_iter_key(gi), json_object_iter_key(wi));   /* same order */
        json_t *g = json_object_iter_value(gi), *w = json_object_iter_value(wi);
        const char *type = json_string_value(json_object_get(w, "type"));
        assert_string_equal(json_string_value(json_object_get(g, "type")), type);
        if (!strcmp(type, "noul")) {
            assert_int_equal(json_object_size(g), 2);
            near(json_real_value(json_object_get(g, "noul")),
                 json_number_value(json_object_get(w, "noul")), 1e-12, "noul");
        } else {
            if (!strcmp(type, "choice"))
                assert_string_equal(json_string_value(json_object_get(g, "choice")),
                                    json_string_value(json_object_get(w, "choice")));
            else {
                near(json_real_value(json_object_get(g, "score")),
                     json_number_value(json_object_get(w, "score")), 1e-12, "score");
                assert_true(json_equal(json_object_get(g, "legend"), json_object_get(w, "legend")));
            }
            near(json_real_value(json_object_get(g, "confidence")),
                 json_number_value(json_object_get(w, "confidence")), 1e-12, "confidence");
            json_t *gp = json_object_get(g, "probabilities"), *wp = json_object_get(w, "probabilities");
            assert_int_equal(json_object_size(gp), json_object_size(wp));
            void *a = json_object_iter(gp), *b = json_object_iter(wp);
            for (; a && b; a = json_object_iter_next(gp, a), b = json_object_iter_next(wp, b)) {
                assert_string_equal(json_object_iter_key(a), json_object_iter_key(b));
                near(json_real_value(json_object_iter_value(a)),
                     json_number_value(json_object_iter_value(b)), 1e-12, "probability");
            }
            /* the Cloudflare reference confidence, and its 4-decimal answers
             * (computed there from a float32 softmax: one rounding step apart at most) */
            json_t *rg = json_object_get(ra, json_object_iter_key(gi));
            json_t *rw = json_object_get(wr, json_object_iter_key(gi));
            near(json_real_value(json_object_get(rg, "confidence")),
                 json_number_value(json_object_get(w, "reference_confidence")), 5e-5 + 1e-12,
                 "reference confidence");
            near(json_real_value(json_object_get(rg, "confidence")),
                 json_number_value(json_object_get(rw, "confidence")), 1e-4 + 1e-12,
                 "reference_answers confidence");
        }
    }
    json_decref(got);
    json_decref(ref);
    req_request_free(&req);
}

static void test_oracle_answers(void **s) {
    (void)s;
    char *cases = tu_read_file(ORACLE_DIR "/clef-tiny/cases.jsonl", NULL);
    char *exp = tu_read_file(ORACLE_DIR "/clef-tiny/expected.jsonl", NULL);
    assert_non_null(cases);
    assert_non_null(exp);
    int checked = 0;
    for (char *cl = cases, *el = exp; *cl && *el;) {
        char *ce = strchr(cl, '\n'), *ee = strchr(el, '\n');
        json_error_t e;
        json_t *c = json_loadb(cl, (size_t)(ce - cl), 0, &e), *x = json_loadb(el, (size_t)(ee - el), 0, &e);
        assert_non_null(c);
        assert_non_null(x);
        if (json_object_get(x, "response")) {
            check_case(json_object_get(c, "request"), x);
            checked++;
        }
        json_decref(c);
        json_decref(x);
        cl = ce + 1;
        el = ee + 1;
    }
    assert_int_equal(checked, 17);
    free(cases);
    free(exp);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_confidence_vectors),
        cmocka_unit_test(test_softmax),
        cmocka_unit_test(test_round),
        cmocka_unit_test(test_shapes_and_ties),
        cmocka_unit_test(test_oracle_answers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
