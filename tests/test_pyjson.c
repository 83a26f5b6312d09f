/* tests/test_pyjson.c — Python json.dumps spelling and the body loader.
 * Expected texts were produced by CPython's json module (3.11), not by clef. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "testutil.h"
#include "text/pyjson.h"

static void check_double(double x, const char *want) {
    char buf[PYJSON_DOUBLE_MAX];
    size_t n = pyjson_format_double(x, buf);
    assert_string_equal(buf, want);
    assert_int_equal(n, strlen(want));
}

static void test_double_repr(void **state) {
    (void)state;
    check_double(1.0, "1.0");
    check_double(1e-05, "1e-05");
    check_double(0.0001, "0.0001");
    check_double(2.5e16, "2.5e+16");
    check_double(1e16, "1e+16");
    check_double(1e15, "1000000000000000.0");
    check_double(9999999999999998.0, "9999999999999998.0");
    check_double(100000.0, "100000.0");
    check_double(-0.0, "-0.0");
    check_double(0.0, "0.0");
    check_double(1.1, "1.1");
    check_double(0.1, "0.1");
    check_double(0.30000000000000004, "0.30000000000000004");
    check_double(1e100, "1e+100");
    check_double(-1.5e-300, "-1.5e-300");
    check_double(3.14159, "3.14159");
    check_double(123456789.125, "123456789.125");
    check_double(1.2345678901234568e+17, "1.2345678901234568e+17");
    check_double(5e-324, "5e-324");
    check_double(1.7976931348623157e308, "1.7976931348623157e+308");
    check_double(0.3261728016315807, "0.3261728016315807");
    /* 2^-1017: the nearest 16-digit decimal lies below it and outside its
     * (narrow, power-of-two) lower rounding half-interval */
    check_double(ldexp(1.0, -1017), "7.120236347223045e-307");
    check_double(INFINITY, "Infinity");
    check_double(-INFINITY, "-Infinity");
    check_double(NAN, "NaN");
}

static char *dumps(const json_t *v, unsigned flags) {
    char *out = NULL;
    size_t n = 0;
    clef_error err = {0};
    assert_int_equal(pyjson_dumps(v, flags, &out, &n, &err), CLEF_OK);
    assert_int_equal(n, strlen(out));
    return out;
}

static json_t *load(const char *text) {
    json_t *v = NULL;
    char msg[256];
    assert_int_equal(pyjson_loadb(text, strlen(text), 0, &v, msg, sizeof msg), PYJSON_LOAD_OK);
    return v;
}

/* load text, dump it (flags), compare with want */
static void roundtrip(const char *text, unsigned flags, const char *want) {
    json_t *v = load(text);
    char *s = dumps(v, flags);
    assert_string_equal(s, want);
    free(s);
    json_decref(v);
}

static void test_escapes(void **state) {
    (void)state;
    roundtrip("\"q \\\" b \\\\ n \\n r \\r t \\t b \\b f \\f c1 \\u0001 c1f \\u001f del \\u007f "
              "ls \\u2028 e \\u00e9 / \\/\"",
              PYJSON_SORT_KEYS,
              "\"q \\\" b \\\\ n \\n r \\r t \\t b \\b f \\f c1 \\u0001 c1f \\u001f del \x7f "
              "ls \xe2\x80\xa8 e \xc3\xa9 / /\"");
    /* astral characters, escaped as a surrogate pair or raw, come out raw */
    roundtrip("[\"\\ud83d\\ude00\", \"\xf0\x9f\x98\x80\"]", 0,
              "[\"\xf0\x9f\x98\x80\",\"\xf0\x9f\x98\x80\"]");
}

static void test_nul_in_string(void **state) {
    (void)state;
    json_t *v = load("{\"k\": \"a\\u0000b\"}");
    char *s = dumps(v, PYJSON_SORT_KEYS);
    assert_string_equal(s, "{\"k\":\"a\\u0000b\"}");
    free(s);
    /* render of a bare string keeps the NUL byte */
    char *r = NULL;
    size_t n = 0;
    assert_int_equal(pyjson_render(json_object_get(v, "k"), &r, &n, NULL), CLEF_OK);
    assert_int_equal(n, 3);
    assert_memory_equal(r, "a\0b", 3);
    free(r);
    json_decref(v);
}

static void test_key_order(void **state) {
    (void)state;
    /* code point order: "" < "B" < "a" < "é" < U+FF21 < U+1F600 (UTF-16 order would
     * put the surrogate pair of U+1F600 before U+FF21) */
    roundtrip("{\"\\ud83d\\ude00\":1,\"\\uff21\":2,\"\\u00e9\":3,\"a\":4,\"B\":5,\"\":6,\"ab\":7}",
              PYJSON_SORT_KEYS,
              "{\"\":6,\"B\":5,\"a\":4,\"ab\":7,\"\xc3\xa9\":3,\"\xef\xbc\xa1\":2,"
              "\"\xf0\x9f\x98\x80\":1}");
    /* without sort_keys: insertion order */
    roundtrip("{\"b\":1,\"a\":{\"d\":[1,{\"z\":null,\"y\":true}],\"c\":false}}", 0,
              "{\"b\":1,\"a\":{\"d\":[1,{\"z\":null,\"y\":true}],\"c\":false}}");
    roundtrip("{\"b\":1,\"a\":{\"d\":[1,{\"z\":null,\"y\":true}],\"c\":false}}", PYJSON_SORT_KEYS,
              "{\"a\":{\"c\":false,\"d\":[1,{\"y\":true,\"z\":null}]},\"b\":1}");
}

static void test_numbers_from_text(void **state) {
    (void)state;
    roundtrip("[1.0, 1e-05, 2.5e16, 1E5, -0.0, -0, 1.10, 0.30000000000000004, 1e100, 42, -7, "
              "9223372036854775807, -9223372036854775808, 1e-7, 123456789012345678901234567890.0]",
              0,
              "[1.0,1e-05,2.5e+16,100000.0,-0.0,0,1.1,0.30000000000000004,1e+100,42,-7,"
              "9223372036854775807,-9223372036854775808,1e-07,1.2345678901234568e+29]");
}

static void test_empty_containers_and_literals(void **state) {
    (void)state;
    roundtrip("{\"a\":[],\"b\":{},\"c\":[[]],\"d\":true,\"e\":false,\"f\":null,\"g\":\"\"}",
              PYJSON_SORT_KEYS,
              "{\"a\":[],\"b\":{},\"c\":[[]],\"d\":true,\"e\":false,\"f\":null,\"g\":\"\"}");
}

static void test_duplicate_keys_python_semantics(void **state) {
    (void)state;
    /* Python: {"a":3,"b":2} — last value, first position */
    roundtrip("{\"a\":1,\"b\":2,\"a\":3}", 0, "{\"a\":3,\"b\":2}");
}

static void test_render(void **state) {
    (void)state;
    json_t *v = load("[\"x\", \"a \\\"b\\\"\", {\"z\":1,\"a\":[1.5,\"\\u00e9\"]}, 3, null]");
    const char *want[] = {"x", "a \"b\"", "{\"a\":[1.5,\"\xc3\xa9\"],\"z\":1}", "3", "null"};
    for (size_t i = 0; i < 5; i++) {
        char *r = NULL;
        size_t n = 0;
        assert_int_equal(pyjson_render(json_array_get(v, i), &r, &n, NULL), CLEF_OK);
        assert_string_equal(r, want[i]);
        assert_int_equal(n, strlen(want[i]));
        free(r);
    }
    json_decref(v);
}

/* The oracle's state_object_nested state, rendered as CPython renders it. */
static void test_oracle_nested_state(void **state) {
    (void)state;
    size_t len = 0;
    char *all = tu_read_file(ORACLE_DIR "/clef-tiny/cases.jsonl", &len);
    assert_non_null(all);
    char *line = strstr(all, "{\"id\":\"state_object_nested\"");
    assert_non_null(line);
    char *end = strchr(line, '\n');
    json_t *c = NULL;
    assert_int_equal(pyjson_loadb(line, (size_t)(end - line), 0, &c, NULL, 0), PYJSON_LOAD_OK);
    json_t *st = json_object_get(json_object_get(c, "request"), "state");
    char *r = NULL;
    assert_int_equal(pyjson_render(st, &r, NULL, NULL), CLEF_OK);
    assert_string_equal(
        r,
        "{\"\":\"empty key\",\"alpha\":{\"a\":null,\"b\":\"b\xc3\xa9\",\"y\":[3,2,1]},\"escapes\":"
        "\"quote \\\" backslash \\\\ newline \\n tab \\t ctrl \\u0001 del \x7f ls \xe2\x80\xa8 "
        "end\",\"flags\":[true,false,null],\"numbers\":{\"big\":2.5e+16,\"exp\":100000.0,\"float\":"
        "1.0,\"int\":42,\"neg\":-7,\"negzero\":-0.0,\"pi\":3.14159,\"small\":1e-05,\"sum\":0."
        "30000000000000004,\"tenth\":0.1,\"trail\":1.1},\"zeta\":1,\"\xc3\x89"
        "clair\":\"caf\xc3\xa9 \xf0\x9f\x98\x80 \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\",\"\xef\xbc"
        "\xa1\":\"fullwidth A\",\"\xf0\x9f\x98\x80\":\"emoji key\"}");
    free(r);
    json_decref(c);
    free(all);
}

static pyjson_load_status load_status(const char *text, size_t len, int depth, char *msg) {
    json_t *v = (json_t *)1;
    pyjson_load_status st = pyjson_loadb(text, len, depth, &v, msg, 256);
    if (st != PYJSON_LOAD_OK) assert_null(v);
    json_decref(v);
    return st;
}

static void test_load_errors(void **state) {
    (void)state;
    char msg[256];
    assert_int_equal(load_status("", 0, 0, msg), PYJSON_LOAD_EMPTY);
    assert_int_equal(load_status(" \n\t", 3, 0, msg), PYJSON_LOAD_EMPTY);
    assert_int_equal(load_status("{", 1, 0, msg), PYJSON_LOAD_SYNTAX);
    assert_non_null(strstr(msg, "line 1"));
    assert_int_equal(load_status("{\"a\":1} x", 9, 0, msg), PYJSON_LOAD_SYNTAX);
    assert_int_equal(load_status("[NaN]", 5, 0, msg), PYJSON_LOAD_SYNTAX);
    assert_int_equal(load_status("\"\\ud800\"", 8, 0, msg), PYJSON_LOAD_SYNTAX);
    assert_int_equal(load_status("[\"a\xff\"]", 5, 0, msg), PYJSON_LOAD_UTF8);
    assert_non_null(strstr(msg, "UTF-8"));
    assert_int_equal(load_status("[9223372036854775808]", 21, 0, msg), PYJSON_LOAD_RANGE);
    assert_int_equal(load_status("[-9223372036854775809]", 22, 0, msg), PYJSON_LOAD_RANGE);
    assert_int_equal(load_status("[1e400]", 7, 0, msg), PYJSON_LOAD_RANGE);
    assert_int_equal(load_status("{\"a\\u0000\":1}", 13, 0, msg), PYJSON_LOAD_NUL_KEY);
    /* a UTF-8 byte order mark is accepted, as json.loads(bytes) does */
    assert_int_equal(load_status("\xef\xbb\xbf[1]", 6, 0, msg), PYJSON_LOAD_OK);
}

static char *nested(int depth) {
    char *s = malloc((size_t)depth * 2 + 1);
    for (int i = 0; i < depth; i++) s[i] = '[';
    for (int i = 0; i < depth; i++) s[depth + i] = ']';
    s[2 * depth] = '\0';
    return s;
}

static void test_depth_limit(void **state) {
    (void)state;
    char msg[256];
    char *s = nested(PYJSON_DEFAULT_MAX_DEPTH);
    assert_int_equal(load_status(s, strlen(s), 0, msg), PYJSON_LOAD_OK);
    free(s);
    s = nested(PYJSON_DEFAULT_MAX_DEPTH + 1);
    assert_int_equal(load_status(s, strlen(s), 0, msg), PYJSON_LOAD_DEPTH);
    assert_non_null(strstr(msg, "64"));
    free(s);
    s = nested(3);
    assert_int_equal(load_status(s, strlen(s), 3, msg), PYJSON_LOAD_OK);
    assert_int_equal(load_status(s, strlen(s), 2, msg), PYJSON_LOAD_DEPTH);
    free(s);
    s = nested(5000);   /* beyond jansson's own parser limit */
    assert_int_equal(load_status(s, strlen(s), 0, msg), PYJSON_LOAD_DEPTH);
    free(s);
    json_t *v = load("{\"a\":[1,{\"b\":[]}],\"c\":2}");
    assert_int_equal(pyjson_depth(v), 4);
    json_decref(v);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_double_repr),
        cmocka_unit_test(test_escapes),
        cmocka_unit_test(test_nul_in_string),
        cmocka_unit_test(test_key_order),
        cmocka_unit_test(test_numbers_from_text),
        cmocka_unit_test(test_empty_containers_and_literals),
        cmocka_unit_test(test_duplicate_keys_python_semantics),
        cmocka_unit_test(test_render),
        cmocka_unit_test(test_oracle_nested_state),
        cmocka_unit_test(test_load_errors),
        cmocka_unit_test(test_depth_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
