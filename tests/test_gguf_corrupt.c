/*
 * tests/test_gguf_corrupt.c — the GGUF reader refuses malformed files.
 *
 * Each case builds a valid file with the writer, damages it in one specific
 * way, and checks that gguf_open_memory fails with a non-OK status and a
 * message naming the problem.  Every parse runs on an exact-size heap copy,
 * so under ASan a single byte read past the end is caught.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "format/gguf.h"
#include "format/gguf_write.h"
#include "testutil.h"

typedef struct blob {
    uint8_t *p;
    size_t n;
} blob;

/* The base file.  with_align adds general.alignment = 32 (the default, so the
 * layout is otherwise the same). */
static blob make_base(bool with_align) {
    gguf_writer *w = gguf_writer_new();
    assert_non_null(w);
    if (with_align) assert_int_equal(gguf_writer_set_alignment(w, 32), CLEF_OK);
    gguf_writer_add_str(w, "general.architecture", "test");
    gguf_writer_add_u32(w, "t.u32", 7);
    gguf_writer_add_bool(w, "t.bool", true);
    gguf_writer_add_u32(w, "t.aaa", 1);
    gguf_writer_add_u32(w, "t.bbb", 2);
    const uint8_t u8s[] = {1, 2, 3};
    gguf_writer_add_arr(w, "t.u8s", GGUF_VT_UINT8, u8s, 3);
    const bool bools[] = {true, false};
    gguf_writer_add_arr(w, "t.bools", GGUF_VT_BOOL, bools, 2);
    const char *const strs[] = {"ab", "cde", "f"};
    gguf_writer_add_arr_str(w, "t.strs", strs, NULL, 3);
    float a[16] = {0}, b[8] = {0};
    uint8_t q[68] = {0};
    int64_t ne_a[2] = {8, 2}, ne_b[1] = {8}, ne_q[2] = {32, 2};
    gguf_writer_add_tensor(w, "w.a", CLEF_DTYPE_F32, 2, ne_a, a, sizeof a);
    gguf_writer_add_tensor(w, "w.b", CLEF_DTYPE_F32, 1, ne_b, b, sizeof b);
    gguf_writer_add_tensor(w, "w.q", CLEF_DTYPE_Q8_0, 2, ne_q, q, sizeof q);
    blob out;
    void *p;
    clef_error err = {0};
    assert_int_equal(gguf_writer_write_memory(w, &p, &out.n, &err), CLEF_OK);
    out.p = p;
    gguf_writer_free(w);
    return out;
}

/* Offset of the first occurrence of s in the blob (must exist). */
static size_t find(blob b, const char *s) {
    size_t n = strlen(s);
    for (size_t i = 0; i + n <= b.n; i++)
        if (!memcmp(b.p + i, s, n)) return i;
    fail_msg("pattern '%s' not in the file", s);
    return 0;
}

static void put_u32(blob b, size_t at, uint32_t v) {
    for (int i = 0; i < 4; i++) b.p[at + i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(blob b, size_t at, uint64_t v) {
    for (int i = 0; i < 8; i++) b.p[at + i] = (uint8_t)(v >> (8 * i));
}

/* Positions inside a kv record / tensor record found by name. */
static size_t key_len_at(blob b, const char *key) { return find(b, key) - 8; }
static size_t key_type_at(blob b, const char *key) { return find(b, key) + strlen(key); }
static size_t key_value_at(blob b, const char *key) { return key_type_at(b, key) + 4; }
static size_t t_ndims_at(blob b, const char *name) { return find(b, name) + strlen(name); }
static size_t t_ne_at(blob b, const char *name, int d) { return t_ndims_at(b, name) + 4 + 8 * (size_t)d; }
/* type and offset follow the n_dims dimensions */
static size_t t_type_at(blob b, const char *name, int nd) { return t_ne_at(b, name, nd); }
static size_t t_offset_at(blob b, const char *name, int nd) { return t_ne_at(b, name, nd) + 4; }

/* Parse the first n bytes of b from an exact-size copy; must fail with a
 * message containing want. */
static void expect_fail_n(blob b, size_t n, const char *want, const char *label) {
    uint8_t *copy = malloc(n ? n : 1);
    assert_non_null(copy);
    if (n) memcpy(copy, b.p, n);
    gguf_file *f = (gguf_file *)(uintptr_t)1;
    clef_error err = {0};
    clef_status st = gguf_open_memory(copy, n, &f, &err);
    if (st == CLEF_OK || !strstr(err.message, want))
        fprintf(stderr, "case %s: status %s, message \"%s\", wanted \"%s\"\n", label,
                clef_status_name(st), err.message, want);
    assert_int_not_equal(st, CLEF_OK);
    assert_int_equal(err.status, st);
    assert_null(f);
    assert_non_null(strstr(err.message, want));
    if (st == CLEF_OK) gguf_close(f);
    free(copy);
}

static void expect_fail(blob b, const char *want, const char *label) {
    expect_fail_n(b, b.n, want, label);
}

static void test_base_is_valid(void **state) {
    (void)state;
    for (int al = 0; al < 2; al++) {
        blob b = make_base(al);
        gguf_file *f = NULL;
        clef_error err = {0};
        assert_int_equal(gguf_open_memory(b.p, b.n, &f, &err), CLEF_OK);
        assert_int_equal(gguf_tensor_count(f), 3);
        assert_int_equal(gguf_kv_count(f), 8 + al);
        gguf_close(f);
        free(b.p);
    }
}

/* ---- one damage per case ------------------------------------------------------ */

typedef void (*damage_fn)(blob b);

static void d_magic(blob b) { b.p[0] = 'X'; }
static void d_magic_lower(blob b) { memcpy(b.p, "gguf", 4); }
static void d_version1(blob b) { put_u32(b, 4, 1); }
static void d_version0(blob b) { put_u32(b, 4, 0); }
static void d_version4(blob b) { put_u32(b, 4, 4); }
static void d_version_huge(blob b) { put_u32(b, 4, 0xffffffffu); }
static void d_big_endian(blob b) { put_u32(b, 4, 0x03000000u); }
static void d_tensor_count_huge(blob b) { put_u64(b, 8, UINT64_MAX / 2); }
static void d_tensor_count_plus1(blob b) { put_u64(b, 8, 4); }
static void d_kv_count_huge(blob b) { put_u64(b, 16, (uint64_t)1 << 40); }
static void d_kv_count_minus1(blob b) { put_u64(b, 16, 7); } /* the last kv read as a tensor */
static void d_key_len_huge(blob b) { put_u64(b, 24, (uint64_t)1 << 40); }
static void d_key_len_over_cap(blob b) { put_u64(b, 24, 70000); }
static void d_key_len_past_eof(blob b) { put_u64(b, 24, 60000); }
static void d_key_empty(blob b) { put_u64(b, key_len_at(b, "t.u32"), 0); }
static void d_key_nul(blob b) { b.p[find(b, "t.u32") + 1] = 0; }
static void d_str_len_past_eof(blob b) { put_u64(b, key_value_at(b, "general.architecture"), 1u << 20); }
static void d_str_len_huge(blob b) { put_u64(b, key_value_at(b, "general.architecture"), (uint64_t)1 << 62); }
static void d_value_type(blob b) { put_u32(b, key_type_at(b, "t.u32"), 13); }
static void d_value_type_huge(blob b) { put_u32(b, key_type_at(b, "t.u32"), 0x80000000u); }
static void d_arr_elem_type(blob b) { put_u32(b, key_value_at(b, "t.u8s"), 42); }
static void d_arr_of_arr(blob b) { put_u32(b, key_value_at(b, "t.u8s"), GGUF_VT_ARRAY); }
static void d_arr_count_huge(blob b) { put_u64(b, key_value_at(b, "t.u8s") + 4, (uint64_t)1 << 50); }
static void d_str_arr_count_huge(blob b) { put_u64(b, key_value_at(b, "t.strs") + 4, UINT64_MAX); }
/* element 1 ("cde") claims 10^6 bytes */
static void d_str_arr_elem(blob b) { put_u64(b, find(b, "cde") - 8, 1000000); }
static void d_bool7(blob b) { b.p[key_value_at(b, "t.bool")] = 7; }
static void d_bool_arr2(blob b) { b.p[key_value_at(b, "t.bools") + 12 + 1] = 2; }
static void d_dup_key(blob b) { memcpy(b.p + find(b, "t.bbb"), "t.aaa", 5); }
static void d_dup_tensor(blob b) { memcpy(b.p + find(b, "w.b"), "w.a", 3); }
static void d_tname_empty(blob b) { put_u64(b, find(b, "w.b") - 8, 0); }
static void d_tname_long(blob b) { put_u64(b, find(b, "w.b") - 8, 300); }
static void d_ndims0(blob b) { put_u32(b, t_ndims_at(b, "w.a"), 0); }
static void d_ndims5(blob b) { put_u32(b, t_ndims_at(b, "w.a"), 5); }
static void d_ne0(blob b) { put_u64(b, t_ne_at(b, "w.a", 1), 0); }
static void d_ne_negative(blob b) { put_u64(b, t_ne_at(b, "w.a", 1), UINT64_MAX); }
static void d_ne_overflow(blob b) {
    put_u64(b, t_ne_at(b, "w.a", 0), (uint64_t)1 << 32);
    put_u64(b, t_ne_at(b, "w.a", 1), (uint64_t)1 << 32);
}
/* 2^61 F32 elements: the count fits int64, the byte size (2^63) does not fit the file */
static void d_bytes_huge(blob b) { put_u64(b, t_ne_at(b, "w.b", 0), (uint64_t)1 << 61); }
static void d_ttype_unknown(blob b) { put_u32(b, t_type_at(b, "w.a", 2), 99); }
static void d_ttype_gap(blob b) { put_u32(b, t_type_at(b, "w.a", 2), 4); } /* Q4_2: removed */
static void d_block_multiple(blob b) { put_u32(b, t_type_at(b, "w.a", 2), CLEF_DTYPE_Q8_0); }
static void d_offset_misaligned(blob b) { put_u64(b, t_offset_at(b, "w.b", 1), 64 + 4); }
static void d_offset_past_eof(blob b) { put_u64(b, t_offset_at(b, "w.q", 2), 1u << 20); }
static void d_offset_wrap(blob b) { put_u64(b, t_offset_at(b, "w.q", 2), UINT64_MAX - 31); }
static void d_overlap(blob b) { put_u64(b, t_offset_at(b, "w.b", 1), 32); } /* inside w.a [0,64) */
static void d_same_offset(blob b) { put_u64(b, t_offset_at(b, "w.q", 2), 0); }
static void d_ne_grows_into_next(blob b) { put_u64(b, t_ne_at(b, "w.a", 1), 3); } /* 96 bytes */

static const struct {
    const char *label;
    damage_fn damage;
    bool with_align;
    const char *want;
} cases[] = {
    {"bad magic", d_magic, false, "bad magic"},
    {"lower-case magic", d_magic_lower, false, "bad magic"},
    {"version 1", d_version1, false, "GGUF version 1 is not supported"},
    {"version 0", d_version0, false, "unsupported GGUF version 0"},
    {"version 4", d_version4, false, "unsupported GGUF version 4"},
    {"version huge", d_version_huge, false, "unsupported GGUF version 4294967295"},
    {"big-endian", d_big_endian, false, "big-endian"},
    {"tensor count huge", d_tensor_count_huge, false, "tensor count 9223372036854775807 is more than"},
    {"tensor count one too many", d_tensor_count_plus1, false, "empty tensor name at byte"},
    {"kv count huge", d_kv_count_huge, false, "kv count 1099511627776 is more than"},
    {"kv count one too few", d_kv_count_minus1, false, "tensor 't.strs': n_dims 9 is not in 1..4"},
    {"key length huge", d_key_len_huge, false, "metadata key at byte 24: length 1099511627776 exceeds"},
    {"key length over the cap", d_key_len_over_cap, false, "length 70000 exceeds the limit of 65535"},
    {"key length past EOF", d_key_len_past_eof, false, "truncated at byte 32: metadata key needs 60000 bytes"},
    {"empty key", d_key_empty, false, "empty metadata key"},
    {"NUL in key", d_key_nul, false, "contains a NUL byte"},
    {"string past EOF", d_str_len_past_eof, false, "key 'general.architecture': truncated"},
    {"string length huge", d_str_len_huge, false, "key 'general.architecture': string value at byte"},
    {"unknown value type", d_value_type, false, "key 't.u32': unknown value type 13"},
    {"value type huge", d_value_type_huge, false, "unknown value type 2147483648"},
    {"unknown array element type", d_arr_elem_type, false, "key 't.u8s': unknown array element type 42"},
    {"array of arrays", d_arr_of_arr, false, "key 't.u8s': arrays of arrays are not supported"},
    {"array count huge", d_arr_count_huge, false, "key 't.u8s': array of 1125899906842624 u8 values"},
    {"string array count huge", d_str_arr_count_huge, false, "key 't.strs': array of 18446744073709551615 strings"},
    {"string element past EOF", d_str_arr_elem, false, "key 't.strs' element 1: truncated"},
    {"bool 7", d_bool7, false, "key 't.bool': bool value 7"},
    {"bool array element 2", d_bool_arr2, false, "key 't.bools': bool value 2"},
    {"duplicate key", d_dup_key, false, "duplicate metadata key 't.aaa'"},
    {"duplicate tensor", d_dup_tensor, false, "duplicate tensor name 'w.a'"},
    {"empty tensor name", d_tname_empty, false, "empty tensor name"},
    {"tensor name too long", d_tname_long, false, "tensor name at byte"},
    {"n_dims 0", d_ndims0, false, "tensor 'w.a': n_dims 0 is not in 1..4"},
    {"n_dims 5", d_ndims5, false, "tensor 'w.a': n_dims 5 is not in 1..4"},
    {"ne 0", d_ne0, false, "tensor 'w.a': dimension 1 is 0"},
    {"ne above int64", d_ne_negative, false, "tensor 'w.a': dimension 1 is 18446744073709551615"},
    {"ne product overflow", d_ne_overflow, false, "tensor 'w.a': element count overflows"},
    {"byte size past the file", d_bytes_huge, false, "tensor 'w.b': data"},
    {"unknown tensor type", d_ttype_unknown, false, "tensor 'w.a': unknown type 99"},
    {"retired tensor type", d_ttype_gap, false, "tensor 'w.a': unknown type 4"},
    {"ne[0] not a block multiple", d_block_multiple, false, "tensor 'w.a': ne[0] = 8 is not a multiple of the Q8_0 block size 32"},
    {"misaligned offset", d_offset_misaligned, false, "tensor 'w.b': offset 68 is not a multiple of the alignment 32"},
    {"offset past EOF", d_offset_past_eof, false, "tensor 'w.q': data [1048576, +68) ends past the file end"},
    {"offset wraps around", d_offset_wrap, false, "tensor 'w.q': data"},
    {"overlapping tensors", d_overlap, false, "tensor 'w.b' (offset 32) overlaps tensor 'w.a' [0, 64)"},
    {"same offset", d_same_offset, false, "overlaps tensor"},
    {"tensor grows into the next", d_ne_grows_into_next, false, "overlaps tensor 'w.a'"},
};

static void test_corruptions(void **state) {
    (void)state;
    size_t n = sizeof cases / sizeof cases[0];
    assert_true(n >= 30);
    for (size_t i = 0; i < n; i++) {
        blob b = make_base(cases[i].with_align);
        cases[i].damage(b);
        expect_fail(b, cases[i].want, cases[i].label);
        free(b.p);
    }
}

/* general.alignment must be a u32 power of two. */
static void test_alignment_key(void **state) {
    (void)state;
    static const struct { uint32_t type, value; const char *want; } al[] = {
        {GGUF_VT_UINT32, 0, "general.alignment 0 is not a non-zero power of two"},
        {GGUF_VT_UINT32, 3, "general.alignment 3 is not a non-zero power of two"},
        {GGUF_VT_UINT32, 48, "general.alignment 48 is not"},
        {GGUF_VT_INT32, 32, "general.alignment must be u32, not i32"},
        {GGUF_VT_FLOAT32, 32, "general.alignment must be u32, not f32"},
    };
    for (size_t i = 0; i < sizeof al / sizeof al[0]; i++) {
        blob b = make_base(true);
        put_u32(b, key_type_at(b, "general.alignment"), al[i].type);
        put_u32(b, key_value_at(b, "general.alignment"), al[i].value);
        expect_fail(b, al[i].want, "alignment");
        free(b.p);
    }
    /* A larger alignment than the layout was written with misaligns the data. */
    blob b = make_base(true);
    put_u32(b, key_value_at(b, "general.alignment"), 64);
    expect_fail(b, "tensor 'w.q': offset 96 is not a multiple of the alignment 64", "alignment 64");
    free(b.p);
}

/* Cutting the file anywhere before the end of the last tensor's data fails;
 * every cut inside the header is a truncation, named with its byte offset. */
static void test_truncations(void **state) {
    (void)state;
    blob b = make_base(false);
    gguf_file *f = NULL;
    assert_int_equal(gguf_open_memory(b.p, b.n, &f, NULL), CLEF_OK);
    size_t data_start = (size_t)gguf_data_offset(f);
    const gguf_tensor *last = gguf_find_tensor(f, "w.q");
    size_t data_end = data_start + (size_t)(last->offset + last->nbytes);
    gguf_close(f);
    expect_fail_n(b, 0, "empty file", "cut at 0");
    for (size_t n = 1; n < 4; n++) expect_fail_n(b, n, "bad magic", "cut in magic");
    for (size_t n = 4; n < data_start; n++) {
        char label[32];
        snprintf(label, sizeof label, "cut at %zu", n);
        expect_fail_n(b, n, "truncated", label);
    }
    for (size_t n = data_start; n < data_end; n++) expect_fail_n(b, n, "ends past the file end", "cut in data");
    /* The zero padding after the last tensor is optional. */
    assert_int_equal(gguf_open_memory(b.p, data_end, &f, NULL), CLEF_OK);
    gguf_close(f);
    free(b.p);
}

/* Flipping any single header byte must never crash or read out of bounds;
 * if the damaged file still opens, its tensors lie inside the buffer. */
static void test_header_bit_flips(void **state) {
    (void)state;
    blob b = make_base(true);
    gguf_file *f = NULL;
    assert_int_equal(gguf_open_memory(b.p, b.n, &f, NULL), CLEF_OK);
    size_t header = (size_t)gguf_data_offset(f);
    gguf_close(f);
    static const uint8_t flips[] = {0x01, 0x80, 0xff};
    int refused = 0;
    for (size_t i = 0; i < header; i++) {
        for (size_t k = 0; k < sizeof flips; k++) {
            uint8_t *copy = malloc(b.n);
            memcpy(copy, b.p, b.n);
            copy[i] ^= flips[k];
            clef_error err = {0};
            if (gguf_open_memory(copy, b.n, &f, &err) == CLEF_OK) {
                for (uint64_t t = 0; t < gguf_tensor_count(f); t++) {
                    const gguf_tensor *ten = gguf_tensor_at(f, t);
                    assert_true((const uint8_t *)ten->data >= copy);
                    assert_true((const uint8_t *)ten->data + ten->nbytes <= copy + b.n);
                }
                gguf_close(f);
            } else {
                assert_true(err.message[0] != '\0');
                refused++;
            }
            free(copy);
        }
    }
    /* Most header bytes matter (some only change a name or a value). */
    assert_true(refused > (int)header);
    free(b.p);
}

static void test_open_path_errors(void **state) {
    (void)state;
    gguf_file *f = (gguf_file *)(uintptr_t)1;
    clef_error err = {0};
    assert_int_equal(gguf_open("/nonexistent/clef/x.gguf", &f, &err), CLEF_ERR_IO);
    assert_null(f);
    assert_non_null(strstr(err.message, "/nonexistent/clef/x.gguf: cannot open"));
    assert_int_equal(gguf_open("/tmp", &f, &err), CLEF_ERR_IO);
    assert_non_null(strstr(err.message, "not a regular file"));
    char *path = tu_write_temp("empty.gguf", "", 0);
    assert_int_not_equal(gguf_open(path, &f, &err), CLEF_OK);
    assert_non_null(strstr(err.message, "empty file"));
    assert_non_null(strstr(err.message, path)); /* the path prefixes the message */
    remove(path);
    free(path);
    /* A damaged file on disk: the message names the file and the problem. */
    blob b = make_base(false);
    d_ttype_unknown(b);
    path = tu_write_temp("bad.gguf", b.p, b.n);
    assert_int_equal(gguf_open(path, &f, &err), CLEF_ERR_FORMAT);
    assert_non_null(strstr(err.message, "unknown type 99"));
    assert_non_null(strstr(err.message, "bad.gguf"));
    remove(path);
    free(path);
    free(b.p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_base_is_valid),
        cmocka_unit_test(test_corruptions),
        cmocka_unit_test(test_alignment_key),
        cmocka_unit_test(test_truncations),
        cmocka_unit_test(test_header_bit_flips),
        cmocka_unit_test(test_open_path_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
