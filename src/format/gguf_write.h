/*
 * format/gguf_write.h — building GGUF v3 files (little-endian).
 *
 * A builder: create a writer, add metadata and tensors in the order they
 * should appear, then write to a file or a malloc'd buffer.  Tensor data is
 * laid out in insertion order, each tensor at an offset that is a multiple of
 * the alignment (32 unless gguf_writer_set_alignment says otherwise), each
 * padded with zeros to the alignment, so what this writes is what gguf_open
 * accepts.
 *
 * Errors are sticky: every add_* returns a status, and the first failure
 * (a duplicate key, a tensor whose byte count does not match its type and
 * shape, out of memory) is kept and returned again by gguf_writer_write_*,
 * so callers may check once at the end.
 *
 * Ownership: the writer copies keys, names and strings.  gguf_writer_add_tensor
 * copies the data; gguf_writer_add_tensor_ref borrows it, and the bytes must
 * stay valid until the writer is written or freed (for large models that are
 * already mapped).
 *
 * Files too large to hold in memory are streamed: declare tensors without
 * data (gguf_writer_add_tensor_info), open a gguf_stream, which writes the
 * header, then hand it each such tensor's bytes in order, in any chunks.
 */
#ifndef CLEF_FORMAT_GGUF_WRITE_H
#define CLEF_FORMAT_GGUF_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "clef.h"
#include "format/gguf.h"

typedef struct gguf_writer gguf_writer;

/* NULL when out of memory.  Free with gguf_writer_free. */
gguf_writer *gguf_writer_new(void);
void gguf_writer_free(gguf_writer *w);

/* The first error recorded (CLEF_OK if none); copies its message to err. */
clef_status gguf_writer_status(const gguf_writer *w, clef_error *err);

/* Set the data alignment (non-zero power of two) and record it as the
 * `general.alignment` u32 key at this point of the metadata.  Must come
 * before the first tensor. */
clef_status gguf_writer_set_alignment(gguf_writer *w, uint32_t alignment);

/* ---- metadata: keys are NUL-terminated, must be unique and non-empty ---- */
clef_status gguf_writer_add_u8(gguf_writer *w, const char *key, uint8_t v);
clef_status gguf_writer_add_i8(gguf_writer *w, const char *key, int8_t v);
clef_status gguf_writer_add_u16(gguf_writer *w, const char *key, uint16_t v);
clef_status gguf_writer_add_i16(gguf_writer *w, const char *key, int16_t v);
clef_status gguf_writer_add_u32(gguf_writer *w, const char *key, uint32_t v);
clef_status gguf_writer_add_i32(gguf_writer *w, const char *key, int32_t v);
clef_status gguf_writer_add_u64(gguf_writer *w, const char *key, uint64_t v);
clef_status gguf_writer_add_i64(gguf_writer *w, const char *key, int64_t v);
clef_status gguf_writer_add_f32(gguf_writer *w, const char *key, float v);
clef_status gguf_writer_add_f64(gguf_writer *w, const char *key, double v);
clef_status gguf_writer_add_bool(gguf_writer *w, const char *key, bool v);
clef_status gguf_writer_add_str(gguf_writer *w, const char *key, const char *s);
/* A string of len bytes (may contain NUL). */
clef_status gguf_writer_add_strn(gguf_writer *w, const char *key, const char *s, size_t len);

/* An array of n fixed-size elements of elem_type (not STRING/ARRAY), given as
 * a C array of the matching type (uint8_t, int32_t, float, bool, ...). */
clef_status gguf_writer_add_arr(gguf_writer *w, const char *key, gguf_vtype elem_type,
                                const void *elems, uint64_t n);
/* An array of n strings; lens NULL means each is NUL-terminated. */
clef_status gguf_writer_add_arr_str(gguf_writer *w, const char *key, const char *const *strs,
                                    const size_t *lens, uint64_t n);

/* ---- tensors ---- */

/* Add a tensor of type `type` (clef_dtype) and shape ne[0..n_dims) in ggml
 * order (ne[0] contiguous).  nbytes must equal the size implied by type and
 * shape. */
clef_status gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t type,
                                   uint32_t n_dims, const int64_t *ne, const void *data,
                                   size_t nbytes);
clef_status gguf_writer_add_tensor_ref(gguf_writer *w, const char *name, uint32_t type,
                                       uint32_t n_dims, const int64_t *ne, const void *data,
                                       size_t nbytes);

/* A tensor whose bytes are supplied later through a gguf_stream (the
 * offsets are known from type and shape).  A writer holding such tensors
 * can only be written with gguf_stream_open. */
clef_status gguf_writer_add_tensor_info(gguf_writer *w, const char *name, uint32_t type,
                                        uint32_t n_dims, const int64_t *ne);

/* ---- output ---- */

/* Write the whole file to path (created or truncated). */
clef_status gguf_writer_write_file(const gguf_writer *w, const char *path, clef_error *err);
/* The whole file in a malloc'd buffer; caller frees *out with free(). */
clef_status gguf_writer_write_memory(const gguf_writer *w, void **out, size_t *len,
                                     clef_error *err);

/* ---- streaming output ----
 * gguf_stream_open writes the header (and any leading tensors that have
 * data) to path; then gguf_stream_write takes the bytes of the tensors added
 * with gguf_writer_add_tensor_info, in tensor order, in chunks of any size
 * (a chunk may span tensors).  Tensors that have data are written by the
 * stream when their turn comes, and padding between tensors is added.  The
 * writer must stay alive and unchanged until the stream is closed.  On any
 * failure the stream stays failed (sticky) and gguf_stream_close reports it.
 * The stream is owned by the caller: gguf_stream_close or gguf_stream_abort
 * frees it. */
typedef struct gguf_stream gguf_stream;

clef_status gguf_stream_open(const gguf_writer *w, const char *path, gguf_stream **out,
                             clef_error *err);
/* Index of the tensor the next bytes belong to (the tensor count when done). */
uint64_t gguf_stream_tensor(const gguf_stream *s);
clef_status gguf_stream_write(gguf_stream *s, const void *p, size_t n, clef_error *err);
/* Finish: fails (and removes the file) unless every tensor was completed. */
clef_status gguf_stream_close(gguf_stream *s, clef_error *err);
/* Give up: close and remove the partial file.  NULL is allowed. */
void gguf_stream_abort(gguf_stream *s);

#endif
