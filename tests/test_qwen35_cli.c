/*
 * tests/test_qwen35_cli.c — `clef forward` end to end: --ids and --text on
 * the qwen35 oracle models, the dump file's layout (T x H little-endian
 * f32) checked against the oracle's hidden states (1e-3, the README's F32
 * tolerance), the JSON line on stdout, and the usage / input errors.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "testutil.h"

#define HIDDEN_TOL 1e-3
#define TINY ORACLE_DIR "/qwen35/qwen35-tiny.gguf"

typedef struct prompt {
    json_t *root;
    const char *text;
    json_t *tokens, *hidden;
    size_t n, E;
} prompt;

static void prompt_read(const char *file, prompt *p) {
    char path[256];
    snprintf(path, sizeof path, ORACLE_DIR "/qwen35/%s", file);
    p->root = json_load_file(path, 0, NULL);
    assert_non_null(p->root);
    p->text = json_string_value(json_object_get(p->root, "prompt"));
    p->tokens = json_object_get(p->root, "tokens");
    p->hidden = json_object_get(p->root, "hidden");
    p->n = json_array_size(p->tokens);
    p->E = (size_t)json_integer_value(json_object_get(p->root, "n_embd"));
}

/* The dump at path against the prompt's hidden states: max |Δ|. */
static double compare_dump(const char *path, const prompt *p) {
    size_t len;
    unsigned char *b = (unsigned char *)tu_read_file(path, &len);
    assert_non_null(b);
    assert_int_equal(len, p->n * p->E * 4);
    double worst = 0;
    for (size_t t = 0; t < p->n; t++)
        for (size_t e = 0; e < p->E; e++) {
            const unsigned char *q = b + 4 * (t * p->E + e);
            uint32_t u = (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24;
            float f;
            memcpy(&f, &u, 4);
            double want = json_number_value(json_array_get(json_array_get(p->hidden, t), e));
            double d = fabs(f - want);
            if (!(d <= worst)) worst = d;
        }
    free(b);
    return worst;
}

static char *run(const char *args, int *status) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s forward %s 2>/dev/null", tu_clef_bin(), args);
    char *out = tu_run(cmd, status);
    assert_non_null(out);
    return out;
}

static void test_ids(void **state) {
    (void)state;
    const char *files[] = {"qwen35-tiny.p3.json", "qwen35-small.p2.json"};
    const char *models[] = {"qwen35-tiny.gguf", "qwen35-small.gguf"};
    for (int i = 0; i < 2; i++) {
        prompt p;
        prompt_read(files[i], &p);
        char *ids = json_dumps(p.tokens, JSON_COMPACT);
        char *dump = tu_write_temp("ids.f32", "", 0);
        char args[6000], expect[64];
        snprintf(args, sizeof args, "-m " ORACLE_DIR "/qwen35/%s --ids '%s' --dump %s -t 2", models[i], ids, dump);
        int st;
        char *out = run(args, &st);
        assert_int_equal(st, 0);
        snprintf(expect, sizeof expect, "{\"n_tokens\":%zu,\"n_embd\":%zu}\n", p.n, p.E);
        assert_string_equal(out, expect);
        double d = compare_dump(dump, &p);
        printf("[forward --ids] %s: max|dhidden| %.3g\n", files[i], d);
        assert_true(d <= HIDDEN_TOL);
        free(out);
        free(ids);
        free(dump);
        json_decref(p.root);
    }
}

/* text in single quotes for sh: ' becomes '\'' */
static void shell_quote(const char *text, char *out, size_t cap) {
    size_t n = 0;
    out[n++] = '\'';
    for (const char *c = text; *c && n + 5 < cap; c++) {
        if (*c == '\'') {
            memcpy(out + n, "'\\''", 4);
            n += 4;
        } else {
            out[n++] = *c;
        }
    }
    out[n++] = '\'';
    out[n] = '\0';
}

/* --text must tokenize as llama.cpp did: same hidden states as the oracle. */
static void test_text(void **state) {
    (void)state;
    const char *files[] = {"qwen35-tiny.p0.json", "qwen35-tiny.p2.json", "qwen35-small.p2.json"};
    const char *models[] = {"qwen35-tiny.gguf", "qwen35-tiny.gguf", "qwen35-small.gguf"};
    for (int i = 0; i < 3; i++) {
        prompt p;
        prompt_read(files[i], &p);
        char *dump = tu_write_temp("text.f32", "", 0);
        char quoted[4096], args[6000];
        shell_quote(p.text, quoted, sizeof quoted);
        snprintf(args, sizeof args, "-m " ORACLE_DIR "/qwen35/%s --text %s --dump %s", models[i], quoted, dump);
        int st;
        char *out = run(args, &st);
        assert_int_equal(st, 0);
        double d = compare_dump(dump, &p);
        printf("[forward --text] %s: max|dhidden| %.3g\n", files[i], d);
        assert_true(d <= HIDDEN_TOL);
        free(out);
        free(dump);
        json_decref(p.root);
    }
}

static void test_errors(void **state) {
    (void)state;
    int st;
    char *out;
    const char *usage_errors[] = {
        "",                                                   /* nothing */
        "-m " TINY " --dump /tmp/x",                          /* no input */
        "-m " TINY " --ids '[1]' --text hi --dump /tmp/x",    /* both inputs */
        "-m " TINY " --ids '[1]'",                            /* no dump */
        "-m " TINY " --ids '[1]' --dump /tmp/x -t many",      /* bad thread count */
        "-m " TINY " --ids '[1]' --dump /tmp/x --bogus 1",    /* unknown option */
    };
    for (size_t i = 0; i < sizeof usage_errors / sizeof usage_errors[0]; i++) {
        out = run(usage_errors[i], &st);
        if (st != 2) fail_msg("'%s': exit %d, expected 2", usage_errors[i], st);
        free(out);
    }
    char *dump = tu_write_temp("err.f32", "", 0);
    char args[512];
    const char *run_errors[] = {"--ids '[1,959]'", "--ids '[]'", "--ids '[1.5]'", "--ids 'nope'"};
    for (size_t i = 0; i < sizeof run_errors / sizeof run_errors[0]; i++) {
        snprintf(args, sizeof args, "-m " TINY " %s --dump %s", run_errors[i], dump);
        out = run(args, &st);
        if (st != 1) fail_msg("'%s': exit %d, expected 1", run_errors[i], st);
        assert_string_equal(out, "");
        free(out);
    }
    out = run("-m /nonexistent.gguf --ids '[1]' --dump /tmp/x", &st);
    assert_int_equal(st, 1);
    free(out);
    out = run("--help", &st);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "--dump"));
    free(out);
    free(dump);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ids),
        cmocka_unit_test(test_text),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
