/*
 * tests/test_synth_stream.c — streaming GGUF output (gguf_writer_add_tensor_info
 * + gguf_stream), which synth and quantize write every model with.
 *
 * A streamed file must equal, byte for byte, the file the in-memory writer
 * makes from the same tensors, whatever the chunking; misuse (too few or too
 * many bytes, data-less tensors given to the in-memory writer) is refused
 * and leaves no file behind.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/dtype.h"
#include "format/gguf.h"
#include "format/gguf_write.h"
#include "testutil.h"

static const int64_t ne_a[2] = {8, 3};   /* F32: 96 bytes  */
static const int64_t ne_b[1] = {5};      /* F16: 10 bytes (padded) */
static const int64_t ne_c[2] = {32, 2};  /* Q8_0: 68 bytes */

static uint8_t bytes_a[96], bytes_b[10], bytes_c[68];

static void fill(void) {
    for (size_t i = 0; i < sizeof bytes_a; i++) bytes_a[i] = (uint8_t)(i * 7 + 1);
    for (size_t i = 0; i < sizeof bytes_b; i++) bytes_b[i] = (uint8_t)(200 - i);
    for (size_t i = 0; i < sizeof bytes_c; i++) bytes_c[i] = (uint8_t)(i ^ 0x5a);
}

/* The reference: everything in memory.  b_ref: tensor b added with data. */
static gguf_writer *writer(bool deferred_a, bool deferred_c) {
    gguf_writer *w = gguf_writer_new();
    gguf_writer_add_str(w, "general.architecture", "test");
    gguf_writer_add_u32(w, "test.n", 3);
    if (deferred_a) gguf_writer_add_tensor_info(w, "a", CLEF_DTYPE_F32, 2, ne_a);
    else gguf_writer_add_tensor(w, "a", CLEF_DTYPE_F32, 2, ne_a, bytes_a, sizeof bytes_a);
    gguf_writer_add_tensor(w, "b", CLEF_DTYPE_F16, 1, ne_b, bytes_b, sizeof bytes_b);
    if (deferred_c) gguf_writer_add_tensor_info(w, "c", CLEF_DTYPE_Q8_0, 2, ne_c);
    else gguf_writer_add_tensor(w, "c", CLEF_DTYPE_Q8_0, 2, ne_c, bytes_c, sizeof bytes_c);
    assert_int_equal(gguf_writer_status(w, NULL), CLEF_OK);
    return w;
}

static char *temp_path(const char *name) {
    char *p = tu_write_temp(name, "", 0);
    assert_non_null(p);
    return p;
}

static void test_stream_equals_memory_writer(void **state) {
    (void)state;
    fill();
    gguf_writer *ref = writer(false, false);
    void *mem = NULL;
    size_t mem_len = 0;
    assert_int_equal(gguf_writer_write_memory(ref, &mem, &mem_len, NULL), CLEF_OK);
    /* chunk sizes 1, 7 and "everything at once" (a chunk spanning a and c
     * is impossible here: b sits between them and comes from the writer) */
    size_t chunks[] = {1, 7, 1000};
    for (size_t k = 0; k < 3; k++) {
        gguf_writer *w = writer(true, true);
        char *path = temp_path("stream.gguf");
        gguf_stream *s = NULL;
        clef_error err = {0};
        assert_int_equal(gguf_stream_open(w, path, &s, &err), CLEF_OK);
        assert_int_equal(gguf_stream_tensor(s), 0);
        const uint8_t *srcs[2] = {bytes_a, bytes_c};
        size_t lens[2] = {sizeof bytes_a, sizeof bytes_c};
        for (int t = 0; t < 2; t++) {
            assert_int_equal(gguf_stream_tensor(s), t == 0 ? 0 : 2);
            for (size_t off = 0; off < lens[t]; off += chunks[k]) {
                size_t n = lens[t] - off < chunks[k] ? lens[t] - off : chunks[k];
                assert_int_equal(gguf_stream_write(s, srcs[t] + off, n, &err), CLEF_OK);
            }
        }
        assert_int_equal(gguf_stream_tensor(s), 3);
        assert_int_equal(gguf_stream_close(s, &err), CLEF_OK);
        size_t len = 0;
        char *got = tu_read_file(path, &len);
        assert_non_null(got);
        assert_int_equal(len, mem_len);
        assert_memory_equal(got, mem, len);
        gguf_file *f = NULL;
        assert_int_equal(gguf_open(path, &f, &err), CLEF_OK);
        assert_memory_equal(gguf_find_tensor(f, "c")->data, bytes_c, sizeof bytes_c);
        gguf_close(f);
        free(got);
        unlink(path);
        free(path);
        gguf_writer_free(w);
    }
    free(mem);
    gguf_writer_free(ref);
}

/* One write may cover several deferred tensors in a row. */
static void test_chunk_spans_tensors(void **state) {
    (void)state;
    fill();
    gguf_writer *w = gguf_writer_new();
    gguf_writer_add_tensor_info(w, "a", CLEF_DTYPE_F32, 2, ne_a);
    gguf_writer_add_tensor_info(w, "c", CLEF_DTYPE_Q8_0, 2, ne_c);
    gguf_writer *ref = gguf_writer_new();
    gguf_writer_add_tensor(ref, "a", CLEF_DTYPE_F32, 2, ne_a, bytes_a, sizeof bytes_a);
    gguf_writer_add_tensor(ref, "c", CLEF_DTYPE_Q8_0, 2, ne_c, bytes_c, sizeof bytes_c);
    uint8_t both[sizeof bytes_a + sizeof bytes_c];
    memcpy(both, bytes_a, sizeof bytes_a);
    memcpy(both + sizeof bytes_a, bytes_c, sizeof bytes_c);
    char *path = temp_path("span.gguf");
    gguf_stream *s = NULL;
    assert_int_equal(gguf_stream_open(w, path, &s, NULL), CLEF_OK);
    assert_int_equal(gguf_stream_write(s, both, sizeof both, NULL), CLEF_OK);
    assert_int_equal(gguf_stream_close(s, NULL), CLEF_OK);
    void *mem = NULL;
    size_t mem_len = 0, len = 0;
    assert_int_equal(gguf_writer_write_memory(ref, &mem, &mem_len, NULL), CLEF_OK);
    char *got = tu_read_file(path, &len);
    assert_int_equal(len, mem_len);
    assert_memory_equal(got, mem, len);
    free(got);
    free(mem);
    unlink(path);
    free(path);
    gguf_writer_free(w);
    gguf_writer_free(ref);
}

static void test_incomplete_and_overlong(void **state) {
    (void)state;
    fill();
    clef_error err = {0};
    /* too few bytes: close fails, names the tensor, removes the file */
    gguf_writer *w = writer(true, true);
    char *path = temp_path("short.gguf");
    gguf_stream *s = NULL;
    assert_int_equal(gguf_stream_open(w, path, &s, &err), CLEF_OK);
    assert_int_equal(gguf_stream_write(s, bytes_a, sizeof bytes_a, &err), CLEF_OK);
    assert_int_equal(gguf_stream_write(s, bytes_c, 10, &err), CLEF_OK);
    assert_int_equal(gguf_stream_close(s, &err), CLEF_ERR_INVALID_ARG);
    assert_non_null(strstr(err.message, "tensor 'c' incomplete (10 of 68 bytes"));
    assert_int_equal(access(path, F_OK), -1);
    /* too many: the write fails, and so does close */
    assert_int_equal(gguf_stream_open(w, path, &s, &err), CLEF_OK);
    assert_int_equal(gguf_stream_write(s, bytes_a, sizeof bytes_a, &err), CLEF_OK);
    assert_int_equal(gguf_stream_write(s, bytes_c, sizeof bytes_c, &err), CLEF_OK);
    assert_int_equal(gguf_stream_write(s, bytes_c, 1, &err), CLEF_ERR_INVALID_ARG);
    assert_non_null(strstr(err.message, "past the last tensor"));
    assert_int_equal(gguf_stream_close(s, &err), CLEF_ERR_INVALID_ARG);
    assert_int_equal(access(path, F_OK), -1);
    /* abort removes the partial file */
    assert_int_equal(gguf_stream_open(w, path, &s, &err), CLEF_OK);
    gguf_stream_abort(s);
    assert_int_equal(access(path, F_OK), -1);
    gguf_stream_abort(NULL);
    free(path);
    gguf_writer_free(w);
}

static void test_memory_writer_refuses_deferred(void **state) {
    (void)state;
    fill();
    gguf_writer *w = writer(false, true);
    void *mem = NULL;
    size_t len = 0;
    clef_error err = {0};
    assert_int_equal(gguf_writer_write_memory(w, &mem, &len, &err), CLEF_ERR_INVALID_ARG);
    assert_non_null(strstr(err.message, "tensor 'c' has no data"));
    assert_null(mem);
    gguf_writer_free(w);
    /* a bad shape for a deferred tensor is the usual sticky error */
    w = gguf_writer_new();
    int64_t bad[1] = {33};
    assert_int_equal(gguf_writer_add_tensor_info(w, "q", CLEF_DTYPE_Q8_0, 1, bad), CLEF_ERR_INVALID_ARG);
    assert_int_equal(gguf_writer_status(w, &err), CLEF_ERR_INVALID_ARG);
    assert_non_null(strstr(err.message, "tensor 'q'"));
    gguf_stream *s = NULL;
    assert_int_equal(gguf_stream_open(w, "/nonexistent-dir/x.gguf", &s, &err), CLEF_ERR_INVALID_ARG);
    assert_null(s);
    gguf_writer_free(w);
}

static void test_open_failure(void **state) {
    (void)state;
    gguf_writer *w = gguf_writer_new();
    gguf_stream *s = NULL;
    clef_error err = {0};
    assert_int_equal(gguf_stream_open(w, "/nonexistent-dir/x.gguf", &s, &err), CLEF_ERR_IO);
    assert_null(s);
    assert_non_null(strstr(err.message, "/nonexistent-dir/x.gguf: cannot create"));
    gguf_writer_free(w);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_equals_memory_writer),
        cmocka_unit_test(test_chunk_spans_tensors),
        cmocka_unit_test(test_incomplete_and_overlong),
        cmocka_unit_test(test_memory_writer_refuses_deferred),
        cmocka_unit_test(test_open_failure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
