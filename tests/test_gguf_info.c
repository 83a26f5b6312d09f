/*
 * tests/test_gguf_info.c — `clef info` and clef_describe_file.
 *
 * The CLI runs on the Q8_0 oracle file (facts from its README), on a
 * missing and a corrupt file (message on stderr, exit 1); the library call
 * runs on a writer-built file to check how values are spelled (escaped and
 * cut strings, summarized arrays, full-range integers, shortest floats).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clef.h"
#include "core/dtype.h"
#include "format/gguf_write.h"
#include "testutil.h"

static void expect_line(const char *out, const char *line) {
    if (!strstr(out, line)) fprintf(stderr, "missing \"%s\" in output:\n%s\n", line, out);
    assert_non_null(strstr(out, line));
}

static char *run_info(const char *args, int *status) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s info %s 2>&1", tu_clef_bin(), args);
    char *out = tu_run(cmd, status);
    assert_non_null(out);
    return out;
}

static void test_info_oracle_q8_0(void **state) {
    (void)state;
    int status = -1;
    char *out = run_info(ORACLE_DIR "/clef-tiny/clef-tiny-a-Q8_0.gguf", &status);
    assert_int_equal(status, 0);
    expect_line(out, "GGUF version: 3\n");
    expect_line(out, "architecture: clef\n");
    expect_line(out, "name: clef-random-tiny-a\n");
    expect_line(out, "file type: 7 (mostly Q8_0)\n");
    expect_line(out, "hyperparameters (clef.*):\n");
    expect_line(out, "  clef.embedding_length = 64\n");
    expect_line(out, "  clef.rope.freq_base = 1e+07\n");
    expect_line(out, "  clef.attention.layer_norm_rms_epsilon = 1e-06\n");
    expect_line(out, "  clef.rope.dimension_sections = [i32 x 4] 2, 1, 1, 0\n");
    expect_line(out, "  clef.decision.type = \"clef\"\n");
    expect_line(out, "  tokens: 832\n");
    expect_line(out, "  merges: 529\n");
    expect_line(out, "  bos: 785 \"<|endoftext|>\"\n");
    expect_line(out, "  eos: 787 \"<|im_end|>\"\n");
    /* README: 5 added tokens, the <|…|> ones CONTROL, <think>/</think> USER_DEFINED */
    expect_line(out, "  added tokens: 5 (3 control, 2 user-defined)\n");
    expect_line(out, "tensors: 164\n");
    /* Q8_0 [64, 832]: 832 rows of 2 blocks of 34 bytes = 56576 */
    assert_non_null(strstr(out, "  token_embd.weight "));
    const char *row = strstr(out, "  token_embd.weight ");
    const char *eol = strchr(row, '\n');
    char line[200];
    snprintf(line, sizeof line, "%.*s", (int)(eol - row), row);
    assert_non_null(strstr(line, " Q8_0 "));
    assert_non_null(strstr(line, "[64, 832]"));
    assert_non_null(strstr(line, " 56576"));
    /* the 1-D scorer_out of the Q8_0 file (README) */
    row = strstr(out, "  decision.scorer_out.weight ");
    assert_non_null(row);
    eol = strchr(row, '\n');
    snprintf(line, sizeof line, "%.*s", (int)(eol - row), row);
    assert_non_null(strstr(line, " F32 "));
    assert_non_null(strstr(line, "[32] "));
    expect_line(out, "total: 164 tensors, ");
    expect_line(out, "types: F32 131 Q8_0 33\n");
    free(out);
}

static void test_info_errors(void **state) {
    (void)state;
    int status = -1;
    char *out = run_info("/nonexistent/model.gguf", &status);
    assert_int_equal(status, 1);
    expect_line(out, "clef info: /nonexistent/model.gguf: cannot open");
    free(out);

    /* A file whose first tensor claims type 99. */
    gguf_writer *w = gguf_writer_new();
    float x[4] = {0};
    int64_t ne[1] = {4};
    gguf_writer_add_str(w, "general.architecture", "test");
    gguf_writer_add_tensor(w, "w", CLEF_DTYPE_F32, 1, ne, x, sizeof x);
    void *buf;
    size_t len;
    assert_int_equal(gguf_writer_write_memory(w, &buf, &len, NULL), CLEF_OK);
    gguf_writer_free(w);
    /* tensor record: u64 name length 1, "w", u32 n_dims 1, u64 ne[0], u32 type */
    static const uint8_t rec[] = {1, 0, 0, 0, 0, 0, 0, 0, 'w', 1, 0, 0, 0};
    uint8_t *p = memmem(buf, len, rec, sizeof rec);
    assert_non_null(p);
    p[sizeof rec + 8] = 99;
    char *path = tu_write_temp("info-bad.gguf", buf, len);
    free(buf);
    out = run_info(path, &status);
    assert_int_equal(status, 1);
    expect_line(out, "clef info: ");
    expect_line(out, "tensor 'w': unknown type 99");
    free(out);
    remove(path);
    free(path);

    out = run_info("", &status);
    assert_int_equal(status, 2);
    expect_line(out, "clef info: missing MODEL");
    free(out);
}

static void test_describe_values(void **state) {
    (void)state;
    gguf_writer *w = gguf_writer_new();
    gguf_writer_add_str(w, "general.architecture", "toy");
    gguf_writer_add_strn(w, "general.name", "a\"b\\c\nd\x01", 8);
    gguf_writer_add_u64(w, "toy.big", UINT64_MAX);
    gguf_writer_add_i64(w, "toy.neg", INT64_MIN);
    gguf_writer_add_f32(w, "toy.eps", 1e-5f);
    gguf_writer_add_f64(w, "toy.tenth", 0.1);
    gguf_writer_add_bool(w, "toy.flag", true);
    int32_t many[20];
    for (int i = 0; i < 20; i++) many[i] = i - 3;
    gguf_writer_add_arr(w, "toy.many", GGUF_VT_INT32, many, 20);
    const char *const strs[] = {"x", "y\tz"};
    gguf_writer_add_arr_str(w, "toy.names", strs, NULL, 2);
    char longs[200];
    memset(longs, 'q', sizeof longs);
    gguf_writer_add_strn(w, "toy.long", longs, sizeof longs);
    gguf_writer_add_u32(w, "other.key", 5);
    uint16_t h[256] = {0};
    int64_t ne[2] = {128, 2};
    gguf_writer_add_tensor(w, "blk.0.w", CLEF_DTYPE_BF16, 2, ne, h, sizeof h);
    char *path = tu_write_temp("describe.gguf", "", 0);
    assert_int_equal(gguf_writer_write_file(w, path, NULL), CLEF_OK);
    gguf_writer_free(w);

    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    clef_error err = {0};
    assert_int_equal(clef_describe_file(path, mem, &err), CLEF_OK);
    fclose(mem);
    expect_line(text, "architecture: toy\n");
    expect_line(text, "  general.name = \"a\\\"b\\\\c\\nd\\x01\"\n");
    expect_line(text, "hyperparameters (toy.*):\n");
    expect_line(text, "  toy.big = 18446744073709551615\n");
    expect_line(text, "  toy.neg = -9223372036854775808\n");
    expect_line(text, "  toy.eps = 1e-05\n");
    expect_line(text, "  toy.tenth = 0.1\n");
    expect_line(text, "  toy.flag = true\n");
    expect_line(text, "  toy.many = [i32 x 20] -3, -2, -1, 0, 1, 2, 3, 4, ...\n");
    expect_line(text, "  toy.names = [string x 2] \"x\", \"y\\tz\"\n");
    expect_line(text, "... (200 bytes)\n");
    expect_line(text, "other metadata:\n  other.key = 5\n");
    expect_line(text, "[128, 2]");
    expect_line(text, "total: 1 tensors, 256 elements, 512 bytes");
    expect_line(text, "types: BF16 1\n");
    assert_null(strstr(text, "tokenizer:")); /* no tokenizer keys, no section */
    free(text);

    mem = open_memstream(&text, &len);
    assert_int_not_equal(clef_describe_file("/nonexistent.gguf", mem, &err), CLEF_OK);
    fclose(mem);
    free(text);
    assert_non_null(strstr(err.message, "/nonexistent.gguf"));
    remove(path);
    free(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_info_oracle_q8_0),
        cmocka_unit_test(test_info_errors),
        cmocka_unit_test(test_describe_values),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
