/* tests/test_request.c — System One request validation: every rule of
 * ../shared/spec/systemone.md, with the exact status and body, and the parsed
 * struct (rendered option order, request order mapping). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "decide/request.h"
#include "testutil.h"

#define NOUL_Q "{\"type\":\"noul\",\"instructions\":\"is it?\"}"
/* a valid body around a questions object */
#define WITH_QS(qs) "{\"model\":\"m\",\"state\":\"s\",\"questions\":" qs "}"

static void expect_reject_p(const char *body, const req_params *p, int status, const char *want) {
    req_request req;
    req_reject rej;
    clef_error err = {0};
    clef_status st = req_parse(body, strlen(body), p, &req, &rej, &err);
    if (st != CLEF_ERR_REQUEST) fail_msg("status %d for %s (%s)", (int)st, body, err.message);
    assert_int_equal(rej.http_status, status);
    assert_string_equal(rej.body, want);
    assert_int_equal(rej.body_len, strlen(want));
    assert_null(req.questions);
    req_reject_free(&rej);
}

static void expect_reject(const char *body, int status, const char *want) {
    expect_reject_p(body, NULL, status, want);
}

static void parse_ok(const char *body, req_request *req) {
    req_reject rej;
    clef_error err = {0};
    clef_status st = req_parse(body, strlen(body), NULL, req, &rej, &err);
    if (st != CLEF_OK) fail_msg("refused (%d %s) %s", rej.http_status, rej.body ? rej.body : "", err.message);
}

static void accepted(const char *body) {
    req_request req;
    parse_ok(body, &req);
    req_request_free(&req);
}

/* ---- 422: shape ------------------------------------------------------------ */

static void test_missing_fields(void **s) {
    (void)s;
    /* the hosted API's own body for this request (recorded by a client's test fixture) */
    expect_reject("{\"state\":\"x\",\"questions\":{\"q\":{\"type\":\"noul\",\"instructions\":\"is it?\"}}}",
                  422,
                  "{\"detail\":[{\"type\":\"missing\",\"loc\":[\"body\",\"model\"],\"msg\":\"Field "
                  "required\",\"input\":{\"state\":\"x\",\"questions\":{\"q\":{\"type\":\"noul\","
                  "\"instructions\":\"is it?\"}}}}]}");
    expect_reject("{\"model\":\"m\",\"questions\":{\"q\":" NOUL_Q "}}", 422,
                  "{\"detail\":[{\"type\":\"missing\",\"loc\":[\"body\",\"state\"],\"msg\":\"Field "
                  "required\",\"input\":{\"model\":\"m\",\"questions\":{\"q\":" NOUL_Q "}}}]}");
    expect_reject("{\"model\":\"m\",\"state\":\"s\"}", 422,
                  "{\"detail\":[{\"type\":\"missing\",\"loc\":[\"body\",\"questions\"],\"msg\":"
                  "\"Field required\",\"input\":{\"model\":\"m\",\"state\":\"s\"}}]}");
    /* every violation, in model field order (state, model, questions) */
    expect_reject("{}", 422,
                  "{\"detail\":[{\"type\":\"missing\",\"loc\":[\"body\",\"state\"],\"msg\":\"Field "
                  "required\",\"input\":{}},{\"type\":\"missing\",\"loc\":[\"body\",\"model\"],"
                  "\"msg\":\"Field required\",\"input\":{}},{\"type\":\"missing\",\"loc\":[\"body\","
                  "\"questions\"],\"msg\":\"Field required\",\"input\":{}}]}");
}

static void test_state_types(void **s) {
    (void)s;
    /* a null state is refused as missing, as the hosted service does */
    expect_reject("{\"model\":\"m\",\"state\":null,\"questions\":{\"q\":" NOUL_Q "}}", 422,
                  "{\"detail\":[{\"type\":\"missing\",\"loc\":[\"body\",\"state\"],\"msg\":\"Field "
                  "required\",\"input\":{\"model\":\"m\",\"state\":null,\"questions\":{\"q\":" NOUL_Q
                  "}}}]}");
    static const char *const bad[] = {"5", "true", "1.5", "false"};
    for (size_t i = 0; i < 4; i++) {
        char body[256], want[1024];
        snprintf(body, sizeof body, "{\"model\":\"m\",\"state\":%s,\"questions\":{\"q\":" NOUL_Q "}}",
                 bad[i]);
        snprintf(want, sizeof want,
                 "{\"detail\":[{\"type\":\"string_type\",\"loc\":[\"body\",\"state\",\"str\"],"
                 "\"msg\":\"Input should be a valid string\",\"input\":%s},{\"type\":\"dict_type\","
                 "\"loc\":[\"body\",\"state\",\"dict[any,any]\"],\"msg\":\"Input should be a valid "
                 "dictionary\",\"input\":%s},{\"type\":\"list_type\",\"loc\":[\"body\",\"state\","
                 "\"list[any]\"],\"msg\":\"Input should be a valid list\",\"input\":%s}]}",
                 bad[i], bad[i], bad[i]);
        expect_reject(body, 422, want);
    }
    /* string (empty too), object and array states are fine */
    accepted("{\"model\":\"m\",\"state\":\"\",\"questions\":{\"q\":" NOUL_Q "}}");
    accepted("{\"model\":\"m\",\"state\":{},\"questions\":{\"q\":" NOUL_Q "}}");
    accepted("{\"model\":\"m\",\"state\":[],\"questions\":{\"q\":" NOUL_Q "}}");
}

static void test_model_and_questions_types(void **s) {
    (void)s;
    expect_reject("{\"model\":5,\"state\":\"s\",\"questions\":{\"q\":" NOUL_Q "}}", 422,
                  "{\"detail\":[{\"type\":\"string_type\",\"loc\":[\"body\",\"model\"],\"msg\":"
                  "\"Input should be a valid string\",\"input\":5}]}");
    expect_reject("{\"model\":null,\"state\":\"s\",\"questions\":{\"q\":" NOUL_Q "}}", 422,
                  "{\"detail\":[{\"type\":\"string_type\",\"loc\":[\"body\",\"model\"],\"msg\":"
                  "\"Input should be a valid string\",\"input\":null}]}");
    expect_reject(WITH_QS("[]"), 422,
                  "{\"detail\":[{\"type\":\"dict_type\",\"loc\":[\"body\",\"questions\"],\"msg\":"
                  "\"Input should be a valid dictionary\",\"input\":[]}]}");
    /* the hosted API's body for an empty questions map */
    expect_reject(WITH_QS("{}"), 422,
                  "{\"detail\":[{\"type\":\"too_short\",\"loc\":[\"body\",\"questions\"],\"msg\":"
                  "\"Dictionary should have at least 1 item after validation, not 0\",\"input\":{},"
                  "\"ctx\":{\"field_type\":\"Dictionary\",\"min_length\":1,\"actual_length\":0}}]}");
    expect_reject("{\"state\":\"s\",\"questions\":{}}", 422,
                  "{\"detail\":[{\"type\":\"missing\",\"loc\":[\"body\",\"model\"],\"msg\":\"Field "
                  "required\",\"input\":{\"state\":\"s\",\"questions\":{}}},{\"type\":\"too_short\","
                  "\"loc\":[\"body\",\"questions\"],\"msg\":\"Dictionary should have at least 1 item "
                  "after validation, not 0\",\"input\":{},\"ctx\":{\"field_type\":\"Dictionary\","
                  "\"min_length\":1,\"actual_length\":0}}]}");
}

static void test_body_not_object(void **s) {
    (void)s;
    expect_reject("[1,2]", 422,
                  "{\"detail\":[{\"type\":\"model_attributes_type\",\"loc\":[\"body\"],\"msg\":"
                  "\"Input should be a valid dictionary or object to extract fields from\","
                  "\"input\":[1,2]}]}");
    expect_reject("\"text\"", 422,
                  "{\"detail\":[{\"type\":\"model_attributes_type\",\"loc\":[\"body\"],\"msg\":"
                  "\"Input should be a valid dictionary or object to extract fields from\","
                  "\"input\":\"text\"}]}");
}

static void test_question_shape(void **s) {
    (void)s;
    expect_reject(WITH_QS("{\"q\":\"hello\"}"), 422,
                  "{\"detail\":[{\"type\":\"model_attributes_type\",\"loc\":[\"body\",\"questions\","
                  "\"q\"],\"msg\":\"Input should be a valid dictionary or object to extract fields "
                  "from\",\"input\":\"hello\"}]}");
    expect_reject(WITH_QS("{\"q\":{\"instructions\":\"Q?\"}}"), 422,
                  "{\"detail\":[{\"type\":\"union_tag_not_found\",\"loc\":[\"body\",\"questions\","
                  "\"q\"],\"msg\":\"Unable to extract tag using discriminator 'type'\",\"input\":"
                  "{\"instructions\":\"Q?\"},\"ctx\":{\"discriminator\":\"'type'\"}}]}");
    expect_reject(WITH_QS("{\"n\":{\"type\":\"noul\",\"instructions\":5}}"), 422,
                  "{\"detail\":[{\"type\":\"string_type\",\"loc\":[\"body\",\"questions\",\"n\","
                  "\"noul\",\"instructions\",\"str\"],\"msg\":\"Input should be a valid string\","
                  "\"input\":5},{\"type\":\"dict_type\",\"loc\":[\"body\",\"questions\",\"n\",\"noul\","
                  "\"instructions\",\"dict[any,any]\"],\"msg\":\"Input should be a valid dictionary\","
                  "\"input\":5},{\"type\":\"list_type\",\"loc\":[\"body\",\"questions\",\"n\",\"noul\","
                  "\"instructions\",\"list[any]\"],\"msg\":\"Input should be a valid list\",\"input\":"
                  "5}]}");
    /* null instructions are allowed on every type */
    accepted(WITH_QS("{\"c\":{\"type\":\"choice\",\"instructions\":null,\"criteria\":{\"a\":null}}}"));
}

static void test_score_shape(void **s) {
    (void)s;
    /* the hosted API's body for zero levels */
    expect_reject(WITH_QS("{\"q\":{\"type\":\"score\",\"criteria\":[]}}"), 422,
                  "{\"detail\":[{\"type\":\"too_short\",\"loc\":[\"body\",\"questions\",\"q\","
                  "\"score\",\"criteria\"],\"msg\":\"List should have at least 1 item after "
                  "validation, not 0\",\"input\":[],\"ctx\":{\"field_type\":\"List\",\"min_length\":1,"
                  "\"actual_length\":0}}]}");
    expect_reject(WITH_QS("{\"s\":{\"type\":\"score\",\"instructions\":\"Q?\",\"criteria\":[\"a\",null]}}"),
                  422,
                  "{\"detail\":[{\"type\":\"string_type\",\"loc\":[\"body\",\"questions\",\"s\","
                  "\"score\",\"criteria\",1,\"str\"],\"msg\":\"Input should be a valid string\","
                  "\"input\":null},{\"type\":\"dict_type\",\"loc\":[\"body\",\"questions\",\"s\","
                  "\"score\",\"criteria\",1,\"dict[any,any]\"],\"msg\":\"Input should be a valid "
                  "dictionary\",\"input\":null},{\"type\":\"list_type\",\"loc\":[\"body\","
                  "\"questions\",\"s\",\"score\",\"criteria\",1,\"list[any]\"],\"msg\":\"Input should "
                  "be a valid list\",\"input\":null}]}");
    expect_reject(WITH_QS("{\"s\":{\"type\":\"score\"}}"), 422,
                  "{\"detail\":[{\"type\":\"missing\",\"loc\":[\"body\",\"questions\",\"s\",\"score\","
                  "\"criteria\"],\"msg\":\"Field required\",\"input\":{\"type\":\"score\"}}]}");
    expect_reject(WITH_QS("{\"s\":{\"type\":\"score\",\"criteria\":{\"a\":1}}}"), 422,
                  "{\"detail\":[{\"type\":\"list_type\",\"loc\":[\"body\",\"questions\",\"s\","
                  "\"score\",\"criteria\"],\"msg\":\"Input should be a valid list\",\"input\":"
                  "{\"a\":1}}]}");
    /* a shape error wins over a limit: 11 levels with a null one is 422 */
    expect_reject(WITH_QS("{\"s\":{\"type\":\"score\",\"criteria\":[1,\"b\",\"c\",\"d\",\"e\",\"f\",\"g\","
                          "\"h\",\"i\",\"j\",\"k\"]}}"),
                  422,
                  "{\"detail\":[{\"type\":\"string_type\",\"loc\":[\"body\",\"questions\",\"s\","
                  "\"score\",\"criteria\",0,\"str\"],\"msg\":\"Input should be a valid string\","
                  "\"input\":1},{\"type\":\"dict_type\",\"loc\":[\"body\",\"questions\",\"s\","
                  "\"score\",\"criteria\",0,\"dict[any,any]\"],\"msg\":\"Input should be a valid "
                  "dictionary\",\"input\":1},{\"type\":\"list_type\",\"loc\":[\"body\",\"questions\","
                  "\"s\",\"score\",\"criteria\",0,\"list[any]\"],\"msg\":\"Input should be a valid "
                  "list\",\"input\":1}]}");
}

static void test_choice_shape(void **s) {
    (void)s;
    expect_reject(WITH_QS("{\"d\":{\"type\":\"choice\",\"criteria\":[]}}"), 422,
                  "{\"detail\":[{\"type\":\"dict_type\",\"loc\":[\"body\",\"questions\",\"d\","
                  "\"choice\",\"criteria\"],\"msg\":\"Input should be a valid dictionary\",\"input\":"
                  "[]}]}");
    expect_reject(WITH_QS("{\"intent\":{\"type\":\"choice\"}}"), 422,
                  "{\"detail\":[{\"type\":\"missing\",\"loc\":[\"body\",\"questions\",\"intent\","
                  "\"choice\",\"criteria\"],\"msg\":\"Field required\",\"input\":{\"type\":"
                  "\"choice\"}}]}");
    expect_reject(WITH_QS("{\"d\":{\"type\":\"choice\",\"criteria\":{\"a\":null,\"b\":false}}}"), 422,
                  "{\"detail\":[{\"type\":\"string_type\",\"loc\":[\"body\",\"questions\",\"d\","
                  "\"choice\",\"criteria\",\"b\",\"str\"],\"msg\":\"Input should be a valid string\","
                  "\"input\":false},{\"type\":\"dict_type\",\"loc\":[\"body\",\"questions\",\"d\","
                  "\"choice\",\"criteria\",\"b\",\"dict[any,any]\"],\"msg\":\"Input should be a valid "
                  "dictionary\",\"input\":false},{\"type\":\"list_type\",\"loc\":[\"body\","
                  "\"questions\",\"d\",\"choice\",\"criteria\",\"b\",\"list[any]\"],\"msg\":\"Input "
                  "should be a valid list\",\"input\":false}]}");
}

static void test_noul_shape(void **s) {
    (void)s;
    expect_reject(WITH_QS("{\"n\":{\"type\":\"noul\",\"criteria\":\"yes\"}}"), 422,
                  "{\"detail\":[{\"type\":\"dict_type\",\"loc\":[\"body\",\"questions\",\"n\",\"noul\","
                  "\"criteria\"],\"msg\":\"Input should be a valid dictionary\",\"input\":\"yes\"}]}");
    expect_reject(WITH_QS("{\"n\":{\"type\":\"noul\",\"criteria\":{\"true\":2}}}"), 422,
                  "{\"detail\":[{\"type\":\"string_type\",\"loc\":[\"body\",\"questions\",\"n\","
                  "\"noul\",\"criteria\",\"true\",\"str\"],\"msg\":\"Input should be a valid string\","
                  "\"input\":2},{\"type\":\"dict_type\",\"loc\":[\"body\",\"questions\",\"n\",\"noul\","
                  "\"criteria\",\"true\",\"dict[any,any]\"],\"msg\":\"Input should be a valid "
                  "dictionary\",\"input\":2},{\"type\":\"list_type\",\"loc\":[\"body\",\"questions\","
                  "\"n\",\"noul\",\"criteria\",\"true\",\"list[any]\"],\"msg\":\"Input should be a "
                  "valid list\",\"input\":2}]}");
    /* a stray criteria key and an unknown question field are ignored */
    accepted(WITH_QS("{\"n\":{\"type\":\"noul\",\"temperature\":1,\"criteria\":{\"true\":\"x\",\"maybe\":3}}}"));
}

static void test_errors_across_questions(void **s) {
    (void)s;
    /* errors of several questions, in question order, with non-ASCII echoed raw */
    expect_reject("{\"model\":\"m\",\"state\":\"\xc3\xa9\",\"questions\":{\"b\":{\"type\":\"score\"},"
                  "\"a\":{\"type\":\"choice\",\"criteria\":[]}}}",
                  422,
                  "{\"detail\":[{\"type\":\"missing\",\"loc\":[\"body\",\"questions\",\"b\",\"score\","
                  "\"criteria\"],\"msg\":\"Field required\",\"input\":{\"type\":\"score\"}},{\"type\":"
                  "\"dict_type\",\"loc\":[\"body\",\"questions\",\"a\",\"choice\",\"criteria\"],\"msg\":"
                  "\"Input should be a valid dictionary\",\"input\":[]}]}");
}

/* ---- 400: usage errors ------------------------------------------------------ */

#define INVALID_REQUEST "{\"detail\":{\"error_type\":\"api_usage_error\",\"message\":\"Invalid request.\"}}"

static void test_invalid_request(void **s) {
    (void)s;
    expect_reject("{\"model\":\"m\",\"state\":\"s\",\"questions\":{\"q\":" NOUL_Q "},\"stream\":true}",
                  400, INVALID_REQUEST);
    expect_reject("{\"model\":\"m\",\"state\":\"s\",\"images\":[],\"questions\":{\"q\":" NOUL_Q "}}", 400,
                  INVALID_REQUEST);
    expect_reject(WITH_QS("{\"n\":{\"type\":\"binary\",\"instructions\":\"Q?\"}}"), 400, INVALID_REQUEST);
    expect_reject(WITH_QS("{\"n\":{\"type\":5}}"), 400, INVALID_REQUEST);
    expect_reject(WITH_QS("{\"n\":{\"type\":\"Noul\",\"instructions\":\"Q?\"}}"), 400, INVALID_REQUEST);
    /* a usage error answers even when there are shape errors too */
    expect_reject("{\"state\":\"s\",\"questions\":{\"q\":" NOUL_Q "},\"extra\":1}", 400, INVALID_REQUEST);
}

static bool only_clef(const char *name, void *user) {
    (void)user;
    return strcmp(name, "clef-tiny-a") == 0;
}

static void test_unknown_model(void **s) {
    (void)s;
    req_params p = req_default_params();
    p.model_known = only_clef;
    expect_reject_p("{\"model\":\"jev-9\",\"state\":\"s\",\"questions\":{\"q\":" NOUL_Q "}}", &p, 400,
                    "{\"detail\":{\"error_type\":\"api_usage_error\",\"message\":\"Unknown model: jev-9\"}}");
    expect_reject_p("{\"model\":\"\",\"state\":\"s\",\"questions\":{\"q\":" NOUL_Q "}}", &p, 400,
                    "{\"detail\":{\"error_type\":\"api_usage_error\",\"message\":\"Unknown model: \"}}");
    /* the model check comes before the limits */
    expect_reject_p("{\"model\":\"x\",\"state\":\"s\",\"questions\":{\"d\":{\"type\":\"choice\",\"criteria\":{}}}}",
                    &p, 400,
                    "{\"detail\":{\"error_type\":\"api_usage_error\",\"message\":\"Unknown model: x\"}}");
    req_request req;
    req_reject rej;
    const char *ok = "{\"model\":\"clef-tiny-a\",\"state\":\"s\",\"questions\":{\"q\":" NOUL_Q "}}";
    assert_int_equal(req_parse(ok, strlen(ok), &p, &req, &rej, NULL), CLEF_OK);
    assert_string_equal(req.model, "clef-tiny-a");
    req_request_free(&req);
}

/* ---- 400: limits ---------------------------------------------------------------- */

static void test_noul_needs_content(void **s) {
    (void)s;
    const char *want = "{\"detail\":\"Noul question must have criteria or instructions: n\"}";
    expect_reject(WITH_QS("{\"n\":{\"type\":\"noul\"}}"), 400, want);
    expect_reject(WITH_QS("{\"n\":{\"type\":\"noul\",\"instructions\":\"\"}}"), 400, want);
    expect_reject(WITH_QS("{\"n\":{\"type\":\"noul\",\"instructions\":null,\"criteria\":null}}"), 400, want);
    expect_reject(WITH_QS("{\"n\":{\"type\":\"noul\",\"criteria\":{}}}"), 400, want);
    expect_reject(WITH_QS("{\"n\":{\"type\":\"noul\",\"criteria\":{\"true\":null,\"false\":null}}}"), 400,
                  want);
    expect_reject(WITH_QS("{\"n\":{\"type\":\"noul\",\"instructions\":[],\"criteria\":{\"true\":\"\"}}}"),
                  400, want);
    accepted(WITH_QS("{\"n\":{\"type\":\"noul\",\"criteria\":{\"true\":\"Time-sensitive\"}}}"));
    accepted(WITH_QS("{\"n\":{\"type\":\"noul\",\"criteria\":{\"false\":{\"k\":1}}}}"));
    accepted(WITH_QS("{\"n\":{\"type\":\"noul\",\"instructions\":[\"x\"]}}"));
    /* the first offending question answers */
    expect_reject(WITH_QS("{\"ok\":" NOUL_Q ",\"bad one\":{\"type\":\"noul\"},\"b2\":{\"type\":\"noul\"}}"),
                  400, "{\"detail\":\"Noul question must have criteria or instructions: bad one\"}");
}

static char *choice_body(int n) {
    char *b = malloc(160 + (size_t)n * 16);
    strcpy(b, "{\"model\":\"m\",\"state\":\"s\",\"questions\":{\"d\":{\"type\":\"choice\",\"criteria\":{");
    for (int i = 0; i < n; i++) sprintf(b + strlen(b), "%s\"o%d\":null", i ? "," : "", i);
    strcat(b, "}}}}");
    return b;
}

static char *score_body(int n) {
    char *b = malloc(160 + (size_t)n * 16);
    strcpy(b, "{\"model\":\"m\",\"state\":\"s\",\"questions\":{\"s\":{\"type\":\"score\",\"criteria\":[");
    for (int i = 0; i < n; i++) sprintf(b + strlen(b), "%s\"level %d\"", i ? "," : "", i);
    strcat(b, "]}}}");
    return b;
}

static void test_choice_limits(void **s) {
    (void)s;
    expect_reject(WITH_QS("{\"d\":{\"type\":\"choice\",\"criteria\":{}}}"), 400,
                  "{\"detail\":\"Choice question must have at least one choice: d\"}");
    char *b = choice_body(256);
    expect_reject(b, 400, "{\"detail\":\"Too many choices. Must have at most 255 choices.\"}");
    free(b);
    b = choice_body(255);
    req_request req;
    parse_ok(b, &req);
    assert_int_equal(req.questions[0].n_options, 255);
    req_request_free(&req);
    free(b);
    accepted(WITH_QS("{\"d\":{\"type\":\"choice\",\"criteria\":{\"yes\":null}}}"));
    accepted(WITH_QS("{\"d\":{\"type\":\"choice\",\"criteria\":{\"\":null}}}"));   /* option "" */
}

static void test_score_limits(void **s) {
    (void)s;
    char *b = score_body(11);
    expect_reject(b, 400, "{\"detail\":\"Too many score levels. Must have at most 10 levels.\"}");
    free(b);
    b = score_body(10);
    req_request req;
    parse_ok(b, &req);
    assert_int_equal(req.questions[0].n_options, 10);
    assert_string_equal(req.questions[0].options[9].id, "9");
    req_request_free(&req);
    free(b);
    b = score_body(1);
    accepted(b);
    free(b);
}

static void test_empty_question_key(void **s) {
    (void)s;
    expect_reject(WITH_QS("{\"\":" NOUL_Q "}"), 400, "{\"detail\":\"Question key cannot be empty.\"}");
    /* checked over all ids before the per-question limits */
    expect_reject(WITH_QS("{\"n\":{\"type\":\"noul\"},\"\":" NOUL_Q "}"), 400,
                  "{\"detail\":\"Question key cannot be empty.\"}");
    accepted(WITH_QS("{\"  \":" NOUL_Q "}"));   /* spaces are a key */
}

/* ---- 400/422: the bytes ------------------------------------------------------ */

static void expect_detail_prefix(const char *body, size_t len, int status, const char *prefix) {
    req_request req;
    req_reject rej;
    assert_int_equal(req_parse(body, len, NULL, &req, &rej, NULL), CLEF_ERR_REQUEST);
    assert_int_equal(rej.http_status, status);
    json_error_t e;
    json_t *v = json_loads(rej.body, 0, &e);
    assert_non_null(v);
    const char *d = json_string_value(json_object_get(v, "detail"));
    assert_non_null(d);
    if (strncmp(d, prefix, strlen(prefix))) fail_msg("detail '%s' lacks '%s'", d, prefix);
    json_decref(v);
    req_reject_free(&rej);
}

static void test_not_json(void **s) {
    (void)s;
    expect_detail_prefix("{\"model\":", 9, 400, "Request body is not valid JSON: ");
    expect_detail_prefix("model=x", 7, 400, "Request body is not valid JSON: ");
    expect_detail_prefix("{\"a\":1}{", 8, 400, "Request body is not valid JSON: ");
    expect_detail_prefix("{\"state\":\"\\ud800\"}", 18, 400, "Request body is not valid JSON: ");
    expect_detail_prefix("{\"state\":\"\xc3\x28\"}", 14, 400, "Request body is not valid UTF-8: ");
    expect_detail_prefix("{\"state\":{\"n\":123456789012345678901234567890}}", 46, 400,
                         "Request body has a number out of range (integers must fit in 64 bits): ");
    expect_detail_prefix("{\"state\":{\"a\\u0000b\":1}}", 24, 400,
                         "Request body has an object key containing NUL: ");
    /* FastAPI's answer to an empty body */
    expect_reject("", 422,
                  "{\"detail\":[{\"type\":\"missing\",\"loc\":[\"body\"],\"msg\":\"Field required\","
                  "\"input\":null}]}");
    expect_reject("  \r\n", 422,
                  "{\"detail\":[{\"type\":\"missing\",\"loc\":[\"body\"],\"msg\":\"Field required\","
                  "\"input\":null}]}");
}

static char *deep_state(int depth) {
    /* body (1) + state array levels */
    char *b = malloc((size_t)depth * 2 + 128);
    strcpy(b, "{\"model\":\"m\",\"questions\":{\"q\":" NOUL_Q "},\"state\":");
    size_t n = strlen(b);
    for (int i = 0; i < depth - 1; i++) b[n++] = '[';
    for (int i = 0; i < depth - 1; i++) b[n++] = ']';
    strcpy(b + n, "}");
    return b;
}

static void test_depth_limit(void **s) {
    (void)s;
    char *b = deep_state(64);
    accepted(b);
    free(b);
    b = deep_state(65);
    expect_detail_prefix(b, strlen(b), 400, "Request body is nested too deeply: ");
    req_params p = req_default_params();
    p.max_depth = 100;
    req_request req;
    req_reject rej;
    assert_int_equal(req_parse(b, strlen(b), &p, &req, &rej, NULL), CLEF_OK);
    req_request_free(&req);
    free(b);
}

/* ---- the parsed struct ------------------------------------------------------ */

static void test_struct_choice_order(void **s) {
    (void)s;
    req_request req;
    parse_ok("{\"model\":\"clef\",\"state\":{\"k\":1},\"questions\":{\"dept\":{\"type\":\"choice\","
             "\"instructions\":{\"q\":\"Which?\"},\"criteria\":{\"technical\":\"Bugs\",\"billing\":"
             "{\"what\":\"Pay\"},\"sales\":null,\"\xc3\xa9t\xc3\xa9\":\"summer\",\"Zeta\":\"z\","
             "\"10\":null,\"9\":null}}}}",
             &req);
    assert_string_equal(req.model, "clef");
    assert_true(json_is_object(req.state));
    assert_int_equal(req.n_questions, 1);
    const req_question *q = &req.questions[0];
    assert_string_equal(q->id, "dept");
    assert_int_equal(q->type, REQ_CHOICE);
    assert_true(json_is_object(q->instructions));
    /* code point order: digits, upper case, lower case, non-ASCII */
    static const char *const rendered[] = {"10", "9", "Zeta", "billing", "sales", "technical",
                                           "\xc3\xa9t\xc3\xa9"};
    static const size_t req_index[] = {5, 6, 4, 1, 2, 0, 3};
    assert_int_equal(q->n_options, 7);
    for (size_t r = 0; r < 7; r++) {
        assert_string_equal(q->options[r].id, rendered[r]);
        assert_int_equal(q->options[r].request_index, req_index[r]);
        assert_int_equal(q->by_request[req_index[r]], r);
    }
    assert_null(q->options[0].description);             /* "10": null */
    assert_null(q->options[4].description);             /* sales: null */
    assert_string_equal(json_string_value(q->options[5].description), "Bugs");
    assert_true(json_is_object(q->options[3].description));
    req_request_free(&req);
}

static void test_struct_noul_and_score(void **s) {
    (void)s;
    req_request req;
    parse_ok(WITH_QS("{\"a\":{\"type\":\"noul\",\"instructions\":\"Q?\"},"
                     "\"b\":{\"type\":\"noul\",\"criteria\":{\"false\":\"No\"}},"
                     "\"c\":{\"type\":\"noul\",\"instructions\":null,\"criteria\":{\"true\":null,\"false\":[1]}},"
                     "\"d\":{\"type\":\"score\",\"instructions\":\"\",\"criteria\":[\"low\",{\"l\":\"hi\"}]}}"),
             &req);
    assert_int_equal(req.n_questions, 4);
    const req_question *a = &req.questions[0], *b = &req.questions[1], *c = &req.questions[2],
                       *d = &req.questions[3];
    assert_string_equal(a->options[0].id, "true");
    assert_string_equal(a->options[1].id, "false");
    assert_string_equal(json_string_value(a->options[0].description),
                        "The proposition is true or the answer is yes.");
    assert_string_equal(json_string_value(a->options[1].description),
                        "The proposition is false or the answer is no.");
    assert_string_equal(json_string_value(b->options[0].description),
                        "The proposition is true or the answer is yes.");
    assert_string_equal(json_string_value(b->options[1].description), "No");
    assert_null(b->instructions);
    assert_null(c->instructions);
    assert_null(c->options[0].description);              /* explicit null drops it */
    assert_true(json_is_array(c->options[1].description));
    assert_int_equal(d->type, REQ_SCORE);
    assert_string_equal(json_string_value(d->instructions), "");
    assert_int_equal(d->n_options, 2);
    assert_string_equal(d->options[0].id, "0");
    assert_string_equal(d->options[1].id, "1");
    assert_true(json_is_object(d->options[1].description));
    assert_int_equal(d->by_request[1], 1);
    req_request_free(&req);
}

static void test_struct_question_order_and_duplicates(void **s) {
    (void)s;
    req_request req;
    /* JSON order kept; a repeated id keeps its first position and its last value */
    parse_ok(WITH_QS("{\"z\":" NOUL_Q ",\"a\":{\"type\":\"score\",\"criteria\":[\"x\"]},\"z\":"
                     "{\"type\":\"choice\",\"criteria\":{\"k\":null}}}"),
             &req);
    assert_int_equal(req.n_questions, 2);
    assert_string_equal(req.questions[0].id, "z");
    assert_int_equal(req.questions[0].type, REQ_CHOICE);
    assert_string_equal(req.questions[1].id, "a");
    assert_int_equal(req.questions[1].type, REQ_SCORE);
    req_request_free(&req);
}

static void test_from_json_and_builders(void **s) {
    (void)s;
    json_error_t e;
    json_t *body = json_loads(WITH_QS("{\"q\":" NOUL_Q "}"), 0, &e);
    req_request req;
    req_reject rej;
    assert_int_equal(req_from_json(body, NULL, &req, &rej, NULL), CLEF_OK);
    json_decref(body);   /* the request keeps its own reference */
    assert_string_equal(json_string_value(req.state), "s");
    req_request_free(&req);

    assert_int_equal(req_reject_text(400, "x \"y\"", &rej, NULL), CLEF_OK);
    assert_string_equal(rej.body, "{\"detail\":\"x \\\"y\\\"\"}");
    req_reject_free(&rej);
    assert_int_equal(req_reject_typed(400, "max_tokens_exceeded", NULL, &rej, NULL), CLEF_OK);
    assert_string_equal(rej.body, "{\"detail\":{\"error_type\":\"max_tokens_exceeded\"}}");
    req_reject_free(&rej);
}

/* Every oracle case validates, with the oracle's question ids and option order. */
static void test_oracle_cases_validate(void **s) {
    (void)s;
    char *cases = tu_read_file(ORACLE_DIR "/clef-tiny/cases.jsonl", NULL);
    char *exp = tu_read_file(ORACLE_DIR "/clef-tiny/expected.jsonl", NULL);
    assert_non_null(cases);
    assert_non_null(exp);
    char *cl = cases, *el = exp;
    int n = 0;
    while (*cl && *el) {
        char *ce = strchr(cl, '\n'), *ee = strchr(el, '\n');
        json_error_t e;
        json_t *c = json_loadb(cl, (size_t)(ce - cl), 0, &e);
        json_t *x = json_loadb(el, (size_t)(ee - el), 0, &e);
        assert_non_null(c);
        assert_non_null(x);
        req_request req;
        req_reject rej;
        assert_int_equal(req_from_json(json_object_get(c, "request"), NULL, &req, &rej, NULL), CLEF_OK);
        json_t *xq = json_object_get(x, "questions");
        if (xq) {
            assert_int_equal(req.n_questions, json_array_size(xq));
            for (size_t i = 0; i < req.n_questions; i++) {
                json_t *qi = json_array_get(xq, i);
                assert_string_equal(req.questions[i].id, json_string_value(json_object_get(qi, "id")));
                assert_int_equal(req.questions[i].type,
                                 json_integer_value(json_object_get(qi, "type_id")));
                json_t *ids = json_object_get(qi, "option_ids");
                assert_int_equal(req.questions[i].n_options, json_array_size(ids));
                for (size_t k = 0; k < json_array_size(ids); k++)
                    assert_string_equal(req.questions[i].options[k].id,
                                        json_string_value(json_array_get(ids, k)));
            }
        }
        req_request_free(&req);
        json_decref(c);
        json_decref(x);
        cl = ce + 1;
        el = ee + 1;
        n++;
    }
    assert_int_equal(n, 18);
    free(cases);
    free(exp);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_missing_fields),
        cmocka_unit_test(test_state_types),
        cmocka_unit_test(test_model_and_questions_types),
        cmocka_unit_test(test_body_not_object),
        cmocka_unit_test(test_question_shape),
        cmocka_unit_test(test_score_shape),
        cmocka_unit_test(test_choice_shape),
        cmocka_unit_test(test_noul_shape),
        cmocka_unit_test(test_errors_across_questions),
        cmocka_unit_test(test_invalid_request),
        cmocka_unit_test(test_unknown_model),
        cmocka_unit_test(test_noul_needs_content),
        cmocka_unit_test(test_choice_limits),
        cmocka_unit_test(test_score_limits),
        cmocka_unit_test(test_empty_question_key),
        cmocka_unit_test(test_not_json),
        cmocka_unit_test(test_depth_limit),
        cmocka_unit_test(test_struct_choice_order),
        cmocka_unit_test(test_struct_noul_and_score),
        cmocka_unit_test(test_struct_question_order_and_duplicates),
        cmocka_unit_test(test_from_json_and_builders),
        cmocka_unit_test(test_oracle_cases_validate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
