/*
 * tests/test_gguf.c — GGUF writer→reader round trips and the oracle files.
 *
 * Round trips check every metadata type (incl. string arrays with empty and
 * NUL-containing strings) and every tensor type the dtype table names.  The
 * oracle part checks facts stated in ../shared/oracle READMEs and that the
 * BF16/Q8_0 files dequantize to the F32 file's weights within the error
 * those formats allow.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "format/gguf.h"
#include "format/gguf_write.h"
#include "kernels/dequant.h"
#include "testutil.h"

/* ---- helpers ------------------------------------------------------------- */

static gguf_file *open_mem(const void *p, size_t n) {
    gguf_file *f = NULL;
    clef_error err = {0};
    clef_status st = gguf_open_memory(p, n, &f, &err);
    if (st != CLEF_OK) fprintf(stderr, "open failed: %s\n", err.message);
    assert_int_equal(st, CLEF_OK);
    assert_non_null(f);
    return f;
}

static gguf_file *open_path(const char *path) {
    gguf_file *f = NULL;
    clef_error err = {0};
    clef_status st = gguf_open(path, &f, &err);
    if (st != CLEF_OK) fprintf(stderr, "open %s failed: %s\n", path, err.message);
    assert_int_equal(st, CLEF_OK);
    return f;
}

static void assert_str(gguf_str s, const char *want) {
    if (!gguf_str_eq(s, want))
        fprintf(stderr, "got '%.*s', want '%s'\n", (int)s.len, s.ptr, want);
    assert_true(gguf_str_eq(s, want));
}

static void check_str_key(const gguf_file *f, const char *key, const char *want) {
    gguf_str s;
    assert_true(gguf_get_str(f, key, &s));
    assert_str(s, want);
}

static int64_t get_i64(const gguf_file *f, const char *key) {
    int64_t v = 0;
    assert_true(gguf_get_i64(f, key, &v));
    return v;
}

/* ---- metadata round trip --------------------------------------------------- */

static const char *const str_elems[] = {"alpha", "", "\xce\xb3\xce\xb5\xce\xb9\xce\xac", "x y", "a\0b"};
static const size_t str_lens[] = {5, 0, 8, 3, 3};

static void build_metadata(gguf_writer *w) {
    assert_int_equal(gguf_writer_add_u8(w, "t.u8", 200), CLEF_OK);
    assert_int_equal(gguf_writer_add_i8(w, "t.i8", -5), CLEF_OK);
    assert_int_equal(gguf_writer_add_u16(w, "t.u16", 65535), CLEF_OK);
    assert_int_equal(gguf_writer_add_i16(w, "t.i16", -32768), CLEF_OK);
    assert_int_equal(gguf_writer_add_u32(w, "t.u32", 4000000000u), CLEF_OK);
    assert_int_equal(gguf_writer_add_i32(w, "t.i32", -2000000000), CLEF_OK);
    assert_int_equal(gguf_writer_add_u64(w, "t.u64", UINT64_MAX), CLEF_OK);
    assert_int_equal(gguf_writer_add_i64(w, "t.i64", INT64_MIN), CLEF_OK);
    assert_int_equal(gguf_writer_add_f32(w, "t.f32", 1.5f), CLEF_OK);
    assert_int_equal(gguf_writer_add_f64(w, "t.f64", 0.1), CLEF_OK);
    assert_int_equal(gguf_writer_add_bool(w, "t.bool", true), CLEF_OK);
    assert_int_equal(gguf_writer_add_str(w, "t.str", "hello"), CLEF_OK);
    assert_int_equal(gguf_writer_add_str(w, "t.empty", ""), CLEF_OK);
    assert_int_equal(gguf_writer_add_strn(w, "t.nul", "a\0b", 3), CLEF_OK);
    const uint8_t a_u8[] = {0, 1, 255};
    const int8_t a_i8[] = {-128, 127};
    const uint16_t a_u16[] = {1, 65535};
    const int16_t a_i16[] = {-300, 300};
    const uint32_t a_u32[] = {7, 4000000000u};
    const int32_t a_i32[] = {-1, 2, 3, 0};
    const uint64_t a_u64[] = {UINT64_MAX, 5};
    const int64_t a_i64[] = {INT64_MIN, INT64_MAX};
    const float a_f32[] = {0.25f, -3.0f};
    const double a_f64[] = {1e300, -0.5};
    const bool a_bool[] = {true, false, true};
    assert_int_equal(gguf_writer_add_arr(w, "a.u8", GGUF_VT_UINT8, a_u8, 3), CLEF_OK);
    assert_int_equal(gguf_writer_add_arr(w, "a.i8", GGUF_VT_INT8, a_i8, 2), CLEF_OK);
    assert_int_equal(gguf_writer_add_arr(w, "a.u16", GGUF_VT_UINT16, a_u16, 2), CLEF_OK);
    assert_int_equal(gguf_writer_add_arr(w, "a.i16", GGUF_VT_INT16, a_i16, 2), CLEF_OK);
    assert_int_equal(gguf_writer_add_arr(w, "a.u32", GGUF_VT_UINT32, a_u32, 2), CLEF_OK);
    assert_int_equal(gguf_writer_add_arr(w, "a.i32", GGUF_VT_INT32, a_i32, 4), CLEF_OK);
    assert_int_equal(gguf_writer_add_arr(w, "a.u64", GGUF_VT_UINT64, a_u64, 2), CLEF_OK);
    assert_int_equal(gguf_writer_add_arr(w, "a.i64", GGUF_VT_INT64, a_i64, 2), CLEF_OK);
    assert_int_equal(gguf_writer_add_arr(w, "a.f32", GGUF_VT_FLOAT32, a_f32, 2), CLEF_OK);
    assert_int_equal(gguf_writer_add_arr(w, "a.f64", GGUF_VT_FLOAT64, a_f64, 2), CLEF_OK);
    assert_int_equal(gguf_writer_add_arr(w, "a.bool", GGUF_VT_BOOL, a_bool, 3), CLEF_OK);
    assert_int_equal(gguf_writer_add_arr(w, "a.empty", GGUF_VT_INT32, NULL, 0), CLEF_OK);
    assert_int_equal(gguf_writer_add_arr_str(w, "a.str", str_elems, str_lens, 5), CLEF_OK);
    const char *const cstrs[] = {"one", "two"};
    assert_int_equal(gguf_writer_add_arr_str(w, "a.cstr", cstrs, NULL, 2), CLEF_OK);
    assert_int_equal(gguf_writer_add_arr_str(w, "a.nostr", NULL, NULL, 0), CLEF_OK);
}

static void check_metadata(const gguf_file *f) {
    uint32_t u32;
    int64_t i64;
    float f32;
    bool b;
    gguf_str s;
    assert_int_equal(gguf_kv_count(f), 14 + 15);
    /* Scalars, and conversions between integer widths where the value fits. */
    assert_true(gguf_get_u32(f, "t.u8", &u32) && u32 == 200);
    assert_int_equal(get_i64(f, "t.u8"), 200);
    assert_false(gguf_get_u32(f, "t.i8", &u32)); /* -5 does not fit u32 */
    assert_int_equal(get_i64(f, "t.i8"), -5);
    assert_int_equal(get_i64(f, "t.u16"), 65535);
    assert_int_equal(get_i64(f, "t.i16"), -32768);
    assert_true(gguf_get_u32(f, "t.u32", &u32) && u32 == 4000000000u);
    assert_int_equal(get_i64(f, "t.i32"), -2000000000);
    assert_false(gguf_get_i64(f, "t.u64", &i64)); /* 2^64-1 does not fit i64 */
    assert_false(gguf_get_u32(f, "t.u64", &u32));
    assert_true(get_i64(f, "t.i64") == INT64_MIN);
    assert_true(gguf_get_f32(f, "t.f32", &f32) && f32 == 1.5f);
    assert_true(gguf_get_f32(f, "t.f64", &f32) && f32 == (float)0.1);
    assert_false(gguf_get_f32(f, "t.u32", &f32)); /* integers are not floats */
    assert_true(gguf_get_bool(f, "t.bool", &b) && b);
    assert_false(gguf_get_bool(f, "t.u8", &b));
    check_str_key(f, "t.str", "hello");
    check_str_key(f, "t.empty", "");
    assert_true(gguf_get_str(f, "t.nul", &s));
    assert_true(s.len == 3 && memcmp(s.ptr, "a\0b", 3) == 0);
    assert_false(gguf_get_str(f, "t.u8", &s));
    assert_false(gguf_get_str(f, "missing", &s));
    assert_false(gguf_get_u32(f, "a.u32", &u32)); /* arrays are not scalars */
    assert_null(gguf_find_kv(f, "t.str2"));
    assert_null(gguf_find_kv(f, "t.st"));

    const gguf_kv *kv = gguf_find_kv(f, "t.u16");
    assert_non_null(kv);
    assert_int_equal(kv->type, GGUF_VT_UINT16);
    assert_int_equal(kv->nbytes, 2);
    assert_true(kv->data[0] == 0xff && kv->data[1] == 0xff);

    /* Fixed-size arrays. */
    static const struct { const char *key; gguf_vtype t; uint64_t n; int64_t first, last; } ia[] = {
        {"a.u8", GGUF_VT_UINT8, 3, 0, 255},       {"a.i8", GGUF_VT_INT8, 2, -128, 127},
        {"a.u16", GGUF_VT_UINT16, 2, 1, 65535},   {"a.i16", GGUF_VT_INT16, 2, -300, 300},
        {"a.u32", GGUF_VT_UINT32, 2, 7, 4000000000ll}, {"a.i32", GGUF_VT_INT32, 4, -1, 0},
        {"a.i64", GGUF_VT_INT64, 2, INT64_MIN, INT64_MAX},
    };
    for (size_t i = 0; i < sizeof ia / sizeof ia[0]; i++) {
        kv = gguf_find_kv(f, ia[i].key);
        assert_non_null(kv);
        assert_int_equal(kv->type, GGUF_VT_ARRAY);
        assert_int_equal(kv->arr_type, ia[i].t);
        assert_int_equal(kv->arr_n, ia[i].n);
        assert_true(gguf_arr_i64(kv, 0, &i64) && i64 == ia[i].first);
        assert_true(gguf_arr_i64(kv, ia[i].n - 1, &i64) && i64 == ia[i].last);
        assert_false(gguf_arr_i64(kv, ia[i].n, &i64)); /* out of range */
        assert_false(gguf_arr_f32(kv, 0, &f32));
    }
    kv = gguf_find_kv(f, "a.u64");
    assert_false(gguf_arr_i64(kv, 0, &i64)); /* 2^64-1 */
    assert_true(gguf_arr_i64(kv, 1, &i64) && i64 == 5);
    kv = gguf_find_kv(f, "a.f32");
    assert_true(gguf_arr_f32(kv, 0, &f32) && f32 == 0.25f);
    assert_true(gguf_arr_f32(kv, 1, &f32) && f32 == -3.0f);
    assert_false(gguf_arr_i64(kv, 0, &i64));
    kv = gguf_find_kv(f, "a.f64");
    assert_true(gguf_arr_f32(kv, 1, &f32) && f32 == -0.5f);
    assert_true(gguf_arr_f32(kv, 0, &f32) && isinf(f32)); /* 1e300 overflows f32 */
    kv = gguf_find_kv(f, "a.bool");
    assert_int_equal(kv->arr_type, GGUF_VT_BOOL);
    assert_true(kv->nbytes == 3 && kv->data[0] == 1 && kv->data[1] == 0 && kv->data[2] == 1);
    kv = gguf_find_kv(f, "a.empty");
    assert_true(kv->arr_n == 0 && kv->nbytes == 0);
    assert_false(gguf_arr_i64(kv, 0, &i64));

    /* String arrays. */
    kv = gguf_find_kv(f, "a.str");
    assert_int_equal(kv->arr_type, GGUF_VT_STRING);
    assert_int_equal(kv->arr_n, 5);
    for (uint64_t i = 0; i < 5; i++) {
        assert_true(gguf_arr_str(f, kv, i, &s));
        assert_int_equal(s.len, str_lens[i]);
        assert_true(memcmp(s.ptr, str_elems[i], str_lens[i]) == 0);
    }
    assert_false(gguf_arr_str(f, kv, 5, &s));
    assert_false(gguf_arr_i64(kv, 0, &i64));
    assert_false(gguf_arr_str(f, gguf_find_kv(f, "a.u8"), 0, &s));
    kv = gguf_find_kv(f, "a.cstr");
    assert_true(gguf_arr_str(f, kv, 1, &s));
    assert_str(s, "two");
    kv = gguf_find_kv(f, "a.nostr");
    assert_true(kv->arr_n == 0 && kv->arr_type == GGUF_VT_STRING);
    assert_false(gguf_arr_str(f, kv, 0, &s));
    /* kvs are iterable in insertion order */
    assert_true(gguf_str_eq(gguf_kv_at(f, 0)->key, "t.u8"));
    assert_true(gguf_str_eq(gguf_kv_at(f, 28)->key, "a.nostr"));
    assert_null(gguf_kv_at(f, 29));
}

static void test_metadata_roundtrip(void **state) {
    (void)state;
    gguf_writer *w = gguf_writer_new();
    build_metadata(w);
    void *buf;
    size_t len;
    clef_error err = {0};
    assert_int_equal(gguf_writer_write_memory(w, &buf, &len, &err), CLEF_OK);
    gguf_file *f = open_mem(buf, len);
    assert_int_equal(gguf_version(f), 3);
    assert_int_equal(gguf_alignment(f), 32);
    assert_int_equal(gguf_tensor_count(f), 0);
    assert_int_equal(gguf_file_size(f), len);
    check_metadata(f);

    /* A kv of one file is not an element of another. */
    gguf_file *g = open_mem(buf, len);
    gguf_str s;
    assert_false(gguf_arr_str(g, gguf_find_kv(f, "a.str"), 0, &s));
    gguf_close(g);
    gguf_close(f);

    /* v2 has the same layout; the reader accepts it. */
    ((uint8_t *)buf)[4] = 2;
    f = open_mem(buf, len);
    assert_int_equal(gguf_version(f), 2);
    check_metadata(f);
    gguf_close(f);
    free(buf);
    gguf_writer_free(w);
}

/* ---- tensors round trip ---------------------------------------------------- */

static void test_tensor_roundtrip(void **state) {
    (void)state;
    for (int pass = 0; pass < 2; pass++) {
        uint32_t align = pass ? 64 : 32;
        gguf_writer *w = gguf_writer_new();
        if (pass) assert_int_equal(gguf_writer_set_alignment(w, align), CLEF_OK);
        assert_int_equal(gguf_writer_add_str(w, "general.architecture", "test"), CLEF_OK);
        uint8_t *datas[CLEF_DTYPE_COUNT] = {0};
        uint64_t sizes[CLEF_DTYPE_COUNT] = {0};
        int n_types = 0;
        for (uint32_t t = 0; t < CLEF_DTYPE_COUNT; t++) {
            const clef_dtype_info *info = clef_dtype_get(t);
            if (!info->name) continue;
            /* ne = [2 blocks, 3, 1+t%2]: varying dims and odd byte counts */
            int64_t ne[3] = {2 * (int64_t)info->block_size, 3, 1 + t % 2};
            uint32_t nd = t % 2 ? 3 : 2;
            uint64_t row;
            assert_true(clef_dtype_row_bytes(t, (uint64_t)ne[0], &row));
            sizes[t] = row * 3 * (uint64_t)ne[2];
            datas[t] = malloc(sizes[t]);
            for (uint64_t i = 0; i < sizes[t]; i++) datas[t][i] = (uint8_t)(i * 31 + t);
            char name[32];
            snprintf(name, sizeof name, "w.%s", info->name);
            clef_status st = t % 3 ? gguf_writer_add_tensor(w, name, t, nd, ne, datas[t], sizes[t])
                                   : gguf_writer_add_tensor_ref(w, name, t, nd, ne, datas[t], sizes[t]);
            assert_int_equal(st, CLEF_OK);
            n_types++;
        }
        void *buf;
        size_t len;
        clef_error err = {0};
        assert_int_equal(gguf_writer_write_memory(w, &buf, &len, &err), CLEF_OK);
        assert_int_equal(len % align, 0);

        /* Same bytes through a real file and gguf_open (mmap). */
        char *path = tu_write_temp("roundtrip.gguf", "", 0);
        assert_int_equal(gguf_writer_write_file(w, path, &err), CLEF_OK);
        size_t flen;
        char *fbytes = tu_read_file(path, &flen);
        assert_int_equal(flen, len);
        assert_memory_equal(fbytes, buf, len);
        free(fbytes);

        gguf_file *fm = open_mem(buf, len);
        gguf_file *ff = open_path(path);
        for (int which = 0; which < 2; which++) {
            gguf_file *f = which ? ff : fm;
            assert_int_equal(gguf_alignment(f), align);
            assert_int_equal(gguf_tensor_count(f), n_types);
            assert_int_equal(gguf_data_offset(f) % align, 0);
            for (uint32_t t = 0; t < CLEF_DTYPE_COUNT; t++) {
                const clef_dtype_info *info = clef_dtype_get(t);
                if (!info->name) continue;
                char name[32];
                snprintf(name, sizeof name, "w.%s", info->name);
                const gguf_tensor *ten = gguf_find_tensor(f, name);
                assert_non_null(ten);
                assert_int_equal(ten->type, t);
                assert_int_equal(ten->n_dims, t % 2 ? 3 : 2);
                assert_int_equal(ten->ne[0], 2 * (int64_t)info->block_size);
                assert_int_equal(ten->ne[1], 3);
                assert_int_equal(ten->ne[2], 1 + t % 2);
                assert_int_equal(ten->ne[3], 1);
                assert_int_equal(ten->nbytes, sizes[t]);
                assert_int_equal(ten->offset % align, 0);
                assert_memory_equal(ten->data, datas[t], sizes[t]);
            }
        }
        const gguf_tensor *t0 = gguf_tensor_at(fm, 0);
        assert_int_equal((const uint8_t *)t0->data - (const uint8_t *)buf,
                         gguf_data_offset(fm) + t0->offset);
        assert_null(gguf_tensor_at(fm, (uint64_t)n_types));
        assert_null(gguf_find_tensor(fm, "w.nothing"));
        check_str_key(fm, "general.architecture", "test");
        gguf_close(fm);
        gguf_close(ff);
        remove(path);
        free(path);
        free(buf);
        for (int t = 0; t < CLEF_DTYPE_COUNT; t++) free(datas[t]);
        gguf_writer_free(w);
    }
}

/* The writer refuses what the reader would refuse, and keeps the first error. */
static void test_writer_errors(void **state) {
    (void)state;
    gguf_writer *w = gguf_writer_new();
    clef_error err = {0};
    float x[32] = {0};
    int64_t ne[2] = {32, 1};
    assert_int_equal(gguf_writer_add_u32(w, "k", 1), CLEF_OK);
    assert_int_equal(gguf_writer_add_tensor(w, "t", CLEF_DTYPE_F32, 1, ne, x, sizeof x), CLEF_OK);
    assert_int_not_equal(gguf_writer_set_alignment(w, 64), CLEF_OK); /* after a tensor */
    assert_int_equal(gguf_writer_status(w, &err), CLEF_ERR_INVALID_ARG);
    assert_non_null(strstr(err.message, "before adding tensors"));
    gguf_writer_free(w);

    w = gguf_writer_new();
    assert_int_equal(gguf_writer_add_u32(w, "k", 1), CLEF_OK);
    assert_int_not_equal(gguf_writer_add_u32(w, "k", 2), CLEF_OK);
    assert_int_not_equal(gguf_writer_add_u32(w, "other", 2), CLEF_OK); /* sticky */
    void *buf;
    size_t len;
    assert_int_not_equal(gguf_writer_write_memory(w, &buf, &len, &err), CLEF_OK);
    assert_non_null(strstr(err.message, "duplicate metadata key 'k'"));
    gguf_writer_free(w);

    static const struct { uint32_t type, nd; int64_t ne0; size_t nbytes; const char *msg; } bad[] = {
        {CLEF_DTYPE_F32, 1, 32, 64, "byte count does not match"},
        {CLEF_DTYPE_Q8_0, 1, 16, 17, "not a multiple"},
        {99, 1, 32, 128, "unknown type"},
        {CLEF_DTYPE_F32, 0, 32, 128, "n_dims"},
        {CLEF_DTYPE_F32, 1, 0, 0, "bad dimension"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        w = gguf_writer_new();
        int64_t ne1[1] = {bad[i].ne0};
        assert_int_not_equal(gguf_writer_add_tensor(w, "t", bad[i].type, bad[i].nd, ne1, x, bad[i].nbytes),
                             CLEF_OK);
        gguf_writer_status(w, &err);
        if (!strstr(err.message, bad[i].msg)) fprintf(stderr, "message: %s\n", err.message);
        assert_non_null(strstr(err.message, bad[i].msg));
        gguf_writer_free(w);
    }
    w = gguf_writer_new();
    assert_int_equal(gguf_writer_add_tensor(w, "t", CLEF_DTYPE_F32, 1, ne, x, sizeof x), CLEF_OK);
    assert_int_not_equal(gguf_writer_add_tensor(w, "t", CLEF_DTYPE_F32, 1, ne, x, sizeof x), CLEF_OK);
    gguf_writer_status(w, &err);
    assert_non_null(strstr(err.message, "duplicate tensor name 't'"));
    gguf_writer_free(w);
    w = gguf_writer_new();
    assert_int_not_equal(gguf_writer_set_alignment(w, 48), CLEF_OK);
    assert_int_not_equal(gguf_writer_add_str(w, "", "x"), CLEF_OK);
    gguf_writer_free(w);
}

/* ---- the oracle files --------------------------------------------------------- */

#define CLEF_TINY ORACLE_DIR "/clef-tiny/clef-tiny-a-"

static void check_tensor(const gguf_file *f, const char *name, uint32_t type, uint32_t nd,
                         int64_t ne0, int64_t ne1) {
    const gguf_tensor *t = gguf_find_tensor(f, name);
    if (!t) fprintf(stderr, "missing tensor %s\n", name);
    assert_non_null(t);
    assert_int_equal(t->type, type);
    assert_int_equal(t->n_dims, nd);
    assert_int_equal(t->ne[0], ne0);
    assert_int_equal(t->ne[1], ne1);
}

static void check_clef_tiny_common(const gguf_file *f) {
    /* Facts from oracle/clef-tiny/README.md "The model". */
    assert_int_equal(gguf_version(f), 3);
    check_str_key(f, "general.architecture", "clef");
    check_str_key(f, "tokenizer.ggml.model", "gpt2");
    check_str_key(f, "tokenizer.ggml.pre", "qwen2");
    check_str_key(f, "clef.decision.type", "clef");
    assert_int_equal(get_i64(f, "clef.embedding_length"), 64);
    assert_int_equal(get_i64(f, "clef.block_count"), 4);
    assert_int_equal(get_i64(f, "clef.feed_forward_length"), 128);
    assert_int_equal(get_i64(f, "clef.attention.head_count"), 4);
    assert_int_equal(get_i64(f, "clef.attention.head_count_kv"), 2);
    assert_int_equal(get_i64(f, "clef.ssm.conv_kernel"), 4);
    assert_int_equal(get_i64(f, "clef.decision.routing_block_count"), 2);
    assert_int_equal(get_i64(f, "clef.decision.block_count"), 2);
    assert_int_equal(get_i64(f, "tokenizer.ggml.bos_token_id"), 785);
    assert_int_equal(get_i64(f, "tokenizer.ggml.eos_token_id"), 787);
    float v;
    assert_true(gguf_get_f32(f, "clef.rope.freq_base", &v) && v == 1e7f);
    assert_true(gguf_get_f32(f, "clef.attention.layer_norm_rms_epsilon", &v) && v == 1e-6f);
    assert_true(gguf_get_f32(f, "clef.attention.layer_norm_epsilon", &v) && v == 1e-5f);
    bool b;
    assert_true(gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &b) && !b);
    const gguf_kv *sec = gguf_find_kv(f, "clef.rope.dimension_sections");
    assert_non_null(sec);
    int64_t want_sec[4] = {2, 1, 1, 0}, x;
    assert_int_equal(sec->arr_n, 4);
    for (int i = 0; i < 4; i++) assert_true(gguf_arr_i64(sec, (uint64_t)i, &x) && x == want_sec[i]);
    /* 832 token rows: bytes, 529 merges, added tokens from 785, [PADn] to the end. */
    const gguf_kv *tok = gguf_find_kv(f, "tokenizer.ggml.tokens");
    assert_non_null(tok);
    assert_int_equal(tok->arr_n, 832);
    gguf_str s;
    assert_true(gguf_arr_str(f, tok, 786, &s));
    assert_str(s, "<|im_start|>");
    assert_true(gguf_arr_str(f, tok, 789, &s));
    assert_str(s, "</think>");
    assert_true(gguf_arr_str(f, tok, 831, &s));
    assert_str(s, "[PAD831]");
    assert_true(gguf_arr_str(f, tok, 0, &s));
    assert_str(s, "!"); /* GPT-2 bytes_to_unicode order starts at '!' */
    assert_int_equal(gguf_find_kv(f, "tokenizer.ggml.merges")->arr_n, 529);
    assert_int_equal(gguf_tensor_count(f), 164);
    check_tensor(f, "output_norm.weight", CLEF_DTYPE_F32, 1, 64, 1);
    check_tensor(f, "blk.0.ssm_conv1d.weight", CLEF_DTYPE_F32, 2, 4, 128);
}

static void test_oracle_clef_tiny(void **state) {
    (void)state;
    static const struct { const char *file; uint32_t mat; } v[] = {
        {CLEF_TINY "F32.gguf", CLEF_DTYPE_F32},
        {CLEF_TINY "BF16.gguf", CLEF_DTYPE_BF16},
        {CLEF_TINY "Q8_0.gguf", CLEF_DTYPE_Q8_0},
    };
    for (size_t i = 0; i < 3; i++) {
        gguf_file *f = open_path(v[i].file);
        check_clef_tiny_common(f);
        check_tensor(f, "token_embd.weight", v[i].mat, 2, 64, 832);
        check_tensor(f, "output.weight", v[i].mat, 2, 64, 832);
        check_tensor(f, "blk.0.attn_qkv.weight", v[i].mat, 2, 64, 128);
        /* scorer_out: 2-D [W,1] in F32/BF16, 1-D [W] in Q8_0 (README table). */
        const gguf_tensor *so = gguf_find_tensor(f, "decision.scorer_out.weight");
        assert_non_null(so);
        assert_int_equal(so->type, CLEF_DTYPE_F32);
        assert_int_equal(so->ne[0], 32);
        assert_int_equal(so->n_dims, v[i].mat == CLEF_DTYPE_Q8_0 ? 1 : 2);
        gguf_close(f);
    }
}

static void test_oracle_qwen35_and_vocab(void **state) {
    (void)state;
    gguf_file *f = open_path(ORACLE_DIR "/qwen35/qwen35-tiny.gguf");
    check_str_key(f, "general.architecture", "qwen35");
    check_str_key(f, "tokenizer.ggml.pre", "qwen35");
    assert_int_equal(get_i64(f, "qwen35.embedding_length"), 64);
    assert_int_equal(get_i64(f, "qwen35.block_count"), 4);
    assert_int_equal(gguf_find_kv(f, "tokenizer.ggml.tokens")->arr_n, 959);
    assert_null(gguf_find_tensor(f, "output.weight")); /* tied embeddings */
    check_tensor(f, "token_embd.weight", CLEF_DTYPE_F32, 2, 64, 959);
    gguf_close(f);

    f = open_path(ORACLE_DIR "/tokenizer/qwen3-vocab.gguf");
    assert_int_equal(gguf_tensor_count(f), 0);
    check_str_key(f, "tokenizer.ggml.model", "gpt2");
    check_str_key(f, "tokenizer.ggml.pre", "qwen2");
    const gguf_kv *tok = gguf_find_kv(f, "tokenizer.ggml.tokens");
    assert_int_equal(tok->arr_n, 151669);
    assert_int_equal(gguf_find_kv(f, "tokenizer.ggml.merges")->arr_n, 151387);
    assert_int_equal(gguf_find_kv(f, "tokenizer.ggml.token_type")->arr_n, 151669);
    gguf_str s;
    assert_true(gguf_arr_str(f, tok, 151643, &s));
    assert_str(s, "<|endoftext|>");
    assert_true(gguf_arr_str(f, tok, (uint64_t)get_i64(f, "tokenizer.ggml.eos_token_id"), &s));
    assert_str(s, "<|im_end|>");
    assert_true(gguf_arr_str(f, tok, 151668, &s));
    assert_str(s, "</think>");
    gguf_close(f);
}

/* Dequantize a whole tensor (rows are whole blocks, so the tensor is one row). */
static float *dequant_tensor(const gguf_tensor *t, int64_t *n) {
    *n = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
    float *out = malloc((size_t)*n * sizeof *out);
    assert_true(clef_dequantize_row(t->type, t->data, out, *n));
    return out;
}

/* Q8_0 of x: d = amax/127 stored as f16, q = round(x/d), x' = f16(d)*q.
 * |x - x'| ≤ |x - d q| + |q| |d - f16(d)| ≤ d/2 + 127 d 2^-11  (f16 keeps 11
 * significant bits, so its rounding is ≤ 2^-11 relative), i.e. ≤ 0.5621 d.
 * BF16 keeps 8 significant bits: half an ulp is ≤ 2^-8 |x|. */
static void test_oracle_dequant_matches_f32(void **state) {
    (void)state;
    gguf_file *ref = open_path(CLEF_TINY "F32.gguf");
    const char *variants[] = {CLEF_TINY "Q8_0.gguf", CLEF_TINY "BF16.gguf"};
    for (int v = 0; v < 2; v++) {
        gguf_file *f = open_path(variants[v]);
        int n_quant = 0;
        double worst = 0; /* largest error as a fraction of its bound */
        for (uint64_t i = 0; i < gguf_tensor_count(f); i++) {
            const gguf_tensor *t = gguf_tensor_at(f, i);
            char name[128];
            snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
            const gguf_tensor *r = gguf_find_tensor(ref, name);
            assert_non_null(r);
            assert_int_equal(r->type, CLEF_DTYPE_F32);
            int64_t n, nr;
            float *x = dequant_tensor(t, &n), *want = dequant_tensor(r, &nr);
            assert_int_equal(n, nr);
            if (t->type == CLEF_DTYPE_F32) {
                assert_memory_equal(x, want, (size_t)n * sizeof *x); /* kept exactly */
            } else if (t->type == CLEF_DTYPE_Q8_0) {
                n_quant++;
                for (int64_t b = 0; b < n; b += 32) {
                    float amax = 0;
                    for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(want[b + j]));
                    double bound = 0.5621 * amax / 127.0 + 1e-9;
                    for (int j = 0; j < 32; j++) {
                        double e = fabs((double)x[b + j] - want[b + j]);
                        if (e / bound > worst) worst = e / bound;
                        assert_true(e <= bound);
                    }
                }
            } else {
                assert_int_equal(t->type, CLEF_DTYPE_BF16);
                n_quant++;
                for (int64_t j = 0; j < n; j++) {
                    double bound = ldexp(fabs((double)want[j]), -8);
                    double e = fabs((double)x[j] - want[j]);
                    if (bound > 0 && e / bound > worst) worst = e / bound;
                    assert_true(e <= bound);
                }
            }
            free(x);
            free(want);
        }
        assert_int_equal(n_quant, 33); /* README: 33 backbone matrices quantized */
        /* The bound is tight enough to matter: real errors come near it. */
        assert_true(worst > 0.5);
        gguf_close(f);
    }
    gguf_close(ref);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_metadata_roundtrip),
        cmocka_unit_test(test_tensor_roundtrip),
        cmocka_unit_test(test_writer_errors),
        cmocka_unit_test(test_oracle_clef_tiny),
        cmocka_unit_test(test_oracle_qwen35_and_vocab),
        cmocka_unit_test(test_oracle_dequant_matches_f32),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
