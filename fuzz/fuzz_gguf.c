/*
 * fuzz/fuzz_gguf.c — libFuzzer harness for the GGUF reader and what reads
 * GGUF metadata: bytes → gguf_open_memory, then every lookup a loader makes.
 *
 * On a file the reader accepts, the harness checks the reader's promise
 * (format/gguf.h: "later lookups can never read outside the mapping"):
 * every key, value, string element and tensor lies inside the input, counts
 * agree with byte sizes, lookups by name find the record they came from.
 * Then it dequantizes the first row of every tensor of a supported type,
 * builds a tokenizer from the metadata (tok_load_gguf) and, when that works,
 * tokenizes and decodes a fixed text with it.  Accepted inputs whose size is
 * a multiple of 16 (a cheap, deterministic sample) also go through the file
 * path (gguf_open on a memfd) and clef_describe_file.
 *
 * The input is copied into a buffer of exactly its size so that AddressSanitizer
 * catches a read one byte past the end (libFuzzer's own buffer is also exact,
 * but the copy keeps the alignment of a malloc'd block like a mapped file).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "clef.h"
#include "core/dtype.h"
#include "fuzzutil.h"
#include "format/gguf.h"
#include "kernels/dequant.h"
#include "text/tokenizer.h"

#define FUZZ_MAX_ROW (1 << 20)   /* longest row dequantized (elements)      */
#define FUZZ_MAX_ELEMS 4096      /* array elements read per kv               */

static const uint8_t *g_lo, *g_hi;   /* the current input, for in_input() */

static bool in_input(const void *p, uint64_t n) {
    const uint8_t *q = p;
    return q >= g_lo && q <= g_hi && n <= (uint64_t)(g_hi - q);
}

/* A NUL-terminated copy of s, or NULL when s holds a NUL (such a name cannot
 * be looked up with the C-string API). */
static char *cstr_of(gguf_str s) {
    if (memchr(s.ptr, 0, (size_t)s.len)) return NULL;
    char *c = malloc((size_t)s.len + 1);
    if (!c) abort();
    memcpy(c, s.ptr, (size_t)s.len);
    c[s.len] = '\0';
    return c;
}

static void walk_array(const gguf_file *f, const gguf_kv *kv) {
    uint64_t esize = gguf_vtype_size(kv->arr_type);
    if (kv->arr_type != GGUF_VT_STRING)
        FUZZ_CHECK(esize && kv->nbytes == kv->arr_n * esize,
                   "array of %s: %llu elements in %llu bytes", gguf_vtype_name(kv->arr_type),
                   (unsigned long long)kv->arr_n, (unsigned long long)kv->nbytes);
    uint64_t n = kv->arr_n < FUZZ_MAX_ELEMS ? kv->arr_n : FUZZ_MAX_ELEMS;
    for (uint64_t i = 0; i < n; i++) {
        gguf_str s;
        int64_t iv;
        float fv;
        if (kv->arr_type == GGUF_VT_STRING) {
            FUZZ_CHECK(gguf_arr_str(f, kv, i, &s), "string element %llu unreadable",
                       (unsigned long long)i);
            FUZZ_CHECK(in_input(s.ptr, s.len), "string element outside the input");
        }
        (void)gguf_arr_i64(kv, i, &iv);
        (void)gguf_arr_f32(kv, i, &fv);
    }
    gguf_str s;
    int64_t iv;
    FUZZ_CHECK(!gguf_arr_str(f, kv, kv->arr_n, &s), "string element past the end readable");
    FUZZ_CHECK(!gguf_arr_i64(kv, kv->arr_n, &iv), "element past the end readable");
}

static void walk_kvs(const gguf_file *f) {
    uint64_t n = gguf_kv_count(f);
    for (uint64_t i = 0; i < n; i++) {
        const gguf_kv *kv = gguf_kv_at(f, i);
        FUZZ_CHECK(kv, "kv %llu of %llu missing", (unsigned long long)i, (unsigned long long)n);
        FUZZ_CHECK(in_input(kv->key.ptr, kv->key.len), "key outside the input");
        FUZZ_CHECK(in_input(kv->data, kv->nbytes), "value outside the input");
        (void)gguf_vtype_name(kv->type);
        if (kv->type == GGUF_VT_ARRAY) walk_array(f, kv);
        else if (kv->type != GGUF_VT_STRING)
            FUZZ_CHECK(kv->nbytes == gguf_vtype_size(kv->type), "scalar of %llu bytes",
                       (unsigned long long)kv->nbytes);
        char *key = cstr_of(kv->key);
        if (!key) continue;
        FUZZ_CHECK(gguf_find_kv(f, key) == kv, "lookup of key '%s' finds another kv", key);
        uint32_t u32;
        int64_t i64;
        float f32;
        bool b;
        gguf_str s;
        (void)gguf_get_u32(f, key, &u32);
        (void)gguf_get_i64(f, key, &i64);
        (void)gguf_get_f32(f, key, &f32);
        (void)gguf_get_bool(f, key, &b);
        if (gguf_get_str(f, key, &s)) FUZZ_CHECK(in_input(s.ptr, s.len), "string value outside");
        free(key);
    }
    FUZZ_CHECK(!gguf_kv_at(f, n), "kv past the end");
}

static void dequant_first_row(const gguf_tensor *t) {
    const clef_dtype_info *info = clef_dtype_get(t->type);
    FUZZ_CHECK(info && info->name, "accepted tensor of unknown type %u", t->type);
    int64_t ne0 = t->ne[0];
    uint64_t row_bytes;
    if (!info->supported || ne0 <= 0 || ne0 > FUZZ_MAX_ROW) return;
    if (!clef_dtype_row_bytes(t->type, (uint64_t)ne0, &row_bytes) || row_bytes > t->nbytes)
        return; /* an empty tensor ([n, 0]) has no first row */
    float *row = malloc((size_t)ne0 * sizeof *row);
    if (!row) abort();
    (void)clef_dequantize_row(t->type, t->data, row, ne0);
    free(row);
}

static void walk_tensors(const gguf_file *f) {
    uint64_t n = gguf_tensor_count(f);
    for (uint64_t i = 0; i < n; i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        FUZZ_CHECK(t, "tensor %llu missing", (unsigned long long)i);
        FUZZ_CHECK(in_input(t->name.ptr, t->name.len), "tensor name outside the input");
        FUZZ_CHECK(t->n_dims <= GGUF_MAX_DIMS, "tensor with %u dims", t->n_dims);
        FUZZ_CHECK(in_input(t->data, t->nbytes), "tensor '%.*s' data outside the input",
                   (int)t->name.len, t->name.ptr);
        uint64_t elems = 1, bytes;
        bool fits = true;
        for (int d = 0; d < GGUF_MAX_DIMS; d++) {
            FUZZ_CHECK(t->ne[d] >= 0, "negative dimension");
            fits = fits && !__builtin_mul_overflow(elems, (uint64_t)t->ne[d], &elems);
        }
        FUZZ_CHECK(fits && clef_dtype_row_bytes(t->type, elems, &bytes) && bytes == t->nbytes,
                   "tensor '%.*s': nbytes %llu does not match its shape", (int)t->name.len,
                   t->name.ptr, (unsigned long long)t->nbytes);
        char *name = cstr_of(t->name);
        if (name) {
            FUZZ_CHECK(gguf_find_tensor(f, name) == t, "lookup of tensor '%s' finds another", name);
            free(name);
        }
        dequant_first_row(t);
    }
    FUZZ_CHECK(!gguf_tensor_at(f, n), "tensor past the end");
}

/* A tokenizer built from hostile metadata must still encode and decode. */
static void try_tokenizer(const gguf_file *f) {
    clef_tokenizer *tok = NULL;
    clef_error err;
    if (tok_load_gguf(f, &tok, &err) != CLEF_OK) {
        FUZZ_CHECK(!tok && err.message[0], "failed tokenizer load without a message");
        return;
    }
    static const char text[] = "Hi <|im_start|>user\n caf\xC3\xA9 123  \xF0\x9F\x98\x80!";
    for (int special = 0; special < 2; special++) {
        int32_t *ids = NULL;
        size_t n = 0;
        if (clef_tokenize(tok, text, sizeof text - 1, special, &ids, &n, &err) == CLEF_OK) {
            char *back = NULL;
            size_t len = 0;
            FUZZ_CHECK(clef_detokenize(tok, ids, n, &back, &len, &err) == CLEF_OK,
                       "ids from clef_tokenize do not decode: %s", err.message);
            clef_free(back);
        }
        clef_free(ids);
    }
    clef_tokenizer_free(tok);
}

/* The mmap path and `clef info` on the same bytes. */
static void try_file_path(const uint8_t *data, size_t size) {
    int fd = memfd_create("fuzz_gguf", MFD_CLOEXEC);
    if (fd < 0) return;
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    if (write(fd, data, size) == (ssize_t)size) {
        gguf_file *f = NULL;
        clef_error err;
        FUZZ_CHECK(gguf_open(path, &f, &err) == CLEF_OK, "gguf_open refuses what "
                   "gguf_open_memory accepted: %s", err.message);
        gguf_close(f);
        FILE *out = fopen("/dev/null", "w");
        if (out) {
            FUZZ_CHECK(clef_describe_file(path, out, &err) == CLEF_OK, "describe failed: %s",
                       err.message);
            fclose(out);
        }
    }
    close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy) return 0;
    if (size) memcpy(copy, data, size);
    g_lo = copy;
    g_hi = copy + size;
    gguf_file *f = NULL;
    clef_error err;
    clef_status st = gguf_open_memory(copy, size, &f, &err);
    if (st != CLEF_OK) {
        FUZZ_CHECK(!f && err.message[0], "refusal without a message (status %d)", st);
    } else {
        FUZZ_CHECK(gguf_file_size(f) == size, "file size %llu for %zu bytes",
                   (unsigned long long)gguf_file_size(f), size);
        FUZZ_CHECK(gguf_data_offset(f) <= size || gguf_tensor_count(f) == 0,
                   "data section starts past the end");
        walk_kvs(f);
        walk_tensors(f);
        try_tokenizer(f);
        gguf_close(f);
        if ((size & 15) == 0) try_file_path(copy, size);
    }
    free(copy);
    return 0;
}
