/*
 * format/gguf.h — read-only access to GGUF v2/v3 files.
 *
 * gguf_open() maps the file, parses and validates the whole header (every
 * metadata value, every tensor record) before it returns, so that later
 * lookups can never read outside the mapping.  A malformed file is refused
 * with a message naming the problem (bad magic, truncated at byte N, tensor
 * 'x' overlaps 'y', ...).  Strings inside the file are not NUL-terminated:
 * they are (pointer, length) views into the mapping, valid until gguf_close().
 *
 * A gguf_file is immutable once open, so lookups may run from several
 * threads at once.  Arrays of arrays are refused (no model uses them).
 *
 * Lookups by key are exact.  Typed getters convert between integer widths
 * when the value fits, and fail (returning false) when the key is missing or
 * the stored type cannot represent the request.
 */
#ifndef CLEF_FORMAT_GGUF_H
#define CLEF_FORMAT_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "clef.h"

typedef enum gguf_vtype {
    GGUF_VT_UINT8 = 0, GGUF_VT_INT8 = 1, GGUF_VT_UINT16 = 2, GGUF_VT_INT16 = 3,
    GGUF_VT_UINT32 = 4, GGUF_VT_INT32 = 5, GGUF_VT_FLOAT32 = 6, GGUF_VT_BOOL = 7,
    GGUF_VT_STRING = 8, GGUF_VT_ARRAY = 9, GGUF_VT_UINT64 = 10, GGUF_VT_INT64 = 11,
    GGUF_VT_FLOAT64 = 12,
} gguf_vtype;

typedef struct gguf_str {
    const char *ptr;   /* into the mapping; NOT NUL-terminated */
    uint64_t len;
} gguf_str;

#define GGUF_MAX_DIMS 4

typedef struct gguf_kv {
    gguf_str key;
    gguf_vtype type;          /* GGUF_VT_ARRAY for arrays                     */
    gguf_vtype arr_type;      /* element type when type == GGUF_VT_ARRAY      */
    uint64_t arr_n;           /* element count when type == GGUF_VT_ARRAY     */
    const uint8_t *data;      /* raw little-endian value bytes in the mapping */
    uint64_t nbytes;          /* size of the raw value bytes                  */
} gguf_kv;

typedef struct gguf_tensor {
    gguf_str name;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* ggml order: ne[0] is the contiguous dimension; unused = 1 */
    uint32_t type;             /* clef_dtype number                              */
    uint64_t offset;           /* from the start of the data section             */
    uint64_t nbytes;
    const void *data;          /* into the mapping, aligned to the file's alignment */
} gguf_tensor;

typedef struct gguf_file gguf_file;

/* Map and validate path.  On failure *out is NULL and err names the problem.
 * The mapping shares the page cache, but a file truncated while it is open
 * makes the next read of a vanished page kill the process with SIGBUS. */
clef_status gguf_open(const char *path, gguf_file **out, clef_error *err);

/* The same, but the whole file is read into anonymous memory owned by the
 * gguf_file (page-aligned, so alignment is as with gguf_open): it costs RAM
 * for the whole file, and the file may then be truncated, rewritten or
 * removed without affecting the open gguf_file. */
clef_status gguf_open_copy(const char *path, gguf_file **out, clef_error *err);

/* The same, over a caller-owned buffer (kept, not copied, until gguf_close):
 * the tests and fuzzers use it to parse files they build in memory.  Tensor
 * data is aligned relative to the buffer start, so absolutely only as far as
 * the buffer itself is aligned. */
clef_status gguf_open_memory(const void *data, size_t size, gguf_file **out, clef_error *err);

void gguf_close(gguf_file *f);

uint32_t gguf_version(const gguf_file *f);
uint64_t gguf_alignment(const gguf_file *f);
uint64_t gguf_file_size(const gguf_file *f);
/* Byte offset of the tensor data section (header end padded to the alignment). */
uint64_t gguf_data_offset(const gguf_file *f);

/* ---- metadata ---- */
uint64_t gguf_kv_count(const gguf_file *f);
const gguf_kv *gguf_kv_at(const gguf_file *f, uint64_t i);
const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key);

bool gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out);
bool gguf_get_i64(const gguf_file *f, const char *key, int64_t *out);
bool gguf_get_f32(const gguf_file *f, const char *key, float *out); /* f32 or f64 */
bool gguf_get_bool(const gguf_file *f, const char *key, bool *out);
bool gguf_get_str(const gguf_file *f, const char *key, gguf_str *out);

/* Array element access (kv->type must be GGUF_VT_ARRAY; i < kv->arr_n).
 * String arrays: the reader indexes element offsets at open time, so
 * gguf_arr_str is O(1). Numeric getters convert like the scalar ones. */
bool gguf_arr_str(const gguf_file *f, const gguf_kv *kv, uint64_t i, gguf_str *out);
bool gguf_arr_i64(const gguf_kv *kv, uint64_t i, int64_t *out);
bool gguf_arr_f32(const gguf_kv *kv, uint64_t i, float *out);

/* ---- tensors ---- */
uint64_t gguf_tensor_count(const gguf_file *f);
const gguf_tensor *gguf_tensor_at(const gguf_file *f, uint64_t i);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);

/* Compare a gguf_str with a C string. */
bool gguf_str_eq(gguf_str s, const char *cstr);

const char *gguf_vtype_name(gguf_vtype t);
/* Bytes of one fixed-size value (u8 .. f64, bool); 0 for string, array, unknown. */
uint64_t gguf_vtype_size(gguf_vtype t);

#endif
