/*
 * tests/test_gguf_copy.c — copy-on-load (gguf_open_copy, and
 * clef_model_params.no_mmap): the copy holds the same bytes as the mapped
 * file, keeps tensor data aligned, and survives the file being truncated
 * under it (a mapping would die of SIGBUS on the next read).  A model
 * loaded this way and then truncated computes exactly what the mapped
 * original computes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "clef.h"
#include "format/gguf.h"
#include "testutil.h"

#define TINY ORACLE_DIR "/clef-tiny/clef-tiny-a-F32.gguf"

/* A private copy of the tiny model (path malloc'd). */
static char *copy_tiny(const char *name) {
    size_t len = 0;
    char *bytes = tu_read_file(TINY, &len);
    assert_non_null(bytes);
    char *path = tu_write_temp(name, bytes, len);
    free(bytes);
    assert_non_null(path);
    return path;
}

static void expect_same_tensors(const gguf_file *a, const gguf_file *b) {
    assert_int_equal(gguf_tensor_count(a), gguf_tensor_count(b));
    for (uint64_t i = 0; i < gguf_tensor_count(a); i++) {
        const gguf_tensor *ta = gguf_tensor_at(a, i), *tb = gguf_tensor_at(b, i);
        assert_int_equal(ta->name.len, tb->name.len);
        assert_memory_equal(ta->name.ptr, tb->name.ptr, ta->name.len);
        assert_int_equal(ta->nbytes, tb->nbytes);
        if (memcmp(ta->data, tb->data, ta->nbytes))
            fail_msg("tensor %.*s differs in the copy", (int)ta->name.len, ta->name.ptr);
        assert_int_equal((uintptr_t)tb->data % gguf_alignment(b), 0);
    }
}

static void test_copy_survives_truncation(void **s) {
    (void)s;
    char *path = copy_tiny("copy-trunc.gguf");
    gguf_file *orig = NULL, *copy = NULL;
    clef_error err = {0};
    assert_int_equal(gguf_open(TINY, &orig, &err), CLEF_OK);
    assert_int_equal(gguf_open_copy(path, &copy, &err), CLEF_OK);
    assert_int_equal(gguf_file_size(copy), gguf_file_size(orig));
    assert_int_equal(gguf_kv_count(copy), gguf_kv_count(orig));
    expect_same_tensors(orig, copy);
    assert_int_equal(truncate(path, 0), 0);
    expect_same_tensors(orig, copy);   /* every byte read again after the truncation */
    gguf_str name;
    assert_true(gguf_get_str(copy, "general.name", &name));
    assert_true(gguf_str_eq(name, "clef-random-tiny-a"));
    gguf_close(copy);
    gguf_close(orig);
    unlink(path);
    free(path);
}

static void test_copy_errors(void **s) {
    (void)s;
    gguf_file *f = (gguf_file *)1;
    clef_error err = {0};
    assert_int_equal(gguf_open_copy("/nonexistent/x.gguf", &f, &err), CLEF_ERR_IO);
    assert_null(f);
    assert_non_null(strstr(err.message, "/nonexistent/x.gguf"));
    char *empty = tu_write_temp("copy-empty.gguf", "", 0);
    assert_int_equal(gguf_open_copy(empty, &f, &err), CLEF_ERR_FORMAT);
    assert_null(f);
    char *half = copy_tiny("copy-half.gguf");
    assert_int_equal(truncate(half, 4096), 0);   /* header whole, tensors cut: refused at open */
    assert_int_equal(gguf_open_copy(half, &f, &err), CLEF_ERR_FORMAT);
    assert_null(f);
    assert_non_null(strstr(err.message, "copy-half.gguf"));
    unlink(empty);
    unlink(half);
    free(empty);
    free(half);
}

/* Hidden states of a few ids through a model loaded from path. */
static float *forward(const char *path, bool no_mmap, bool truncate_first, size_t *n_out) {
    clef_model_params p = clef_model_default_params();
    p.n_threads = 1;
    p.no_mmap = no_mmap;
    clef_model *m = NULL;
    clef_error err = {0};
    if (clef_model_load(path, &p, &m, &err) != CLEF_OK) fail_msg("load %s: %s", path, err.message);
    if (truncate_first) assert_int_equal(truncate(path, 0), 0);
    static const int32_t ids[] = {1, 17, 230, 5, 99, 400, 2};
    size_t n = sizeof ids / sizeof ids[0] * (size_t)clef_model_n_embd(m);
    float *h = calloc(n, sizeof *h);
    assert_non_null(h);
    assert_int_equal(clef_forward(m, ids, sizeof ids / sizeof ids[0], h, &err), CLEF_OK);
    clef_model_free(m);
    *n_out = n;
    return h;
}

static void test_model_no_mmap(void **s) {
    (void)s;
    assert_false(clef_model_default_params().no_mmap);
    char *path = copy_tiny("copy-model.gguf");
    size_t na, nb;
    float *want = forward(TINY, false, false, &na);
    float *got = forward(path, true, true, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(want, got, na * sizeof *want);   /* the same weights: bit-identical */
    free(want);
    free(got);
    unlink(path);
    free(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_copy_survives_truncation),
        cmocka_unit_test(test_copy_errors),
        cmocka_unit_test(test_model_no_mmap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
