/*
 * kernels/matmul.h — products of activations with stored weight matrices.
 *
 * This is the dispatch surface the model code calls for every projection: a
 * weight is described once (mm_weight: its type and bytes, straight from the
 * GGUF mapping) and multiplied by f32 activations.  Faster paths (SIMD,
 * repacked weights, quantized activations) replace the inside of these
 * functions without the model code changing.
 *
 * Layout.  A matrix is stored as ggml stores it: ne[0] = `in` is contiguous,
 * so row r (one output feature) is the `in` elements at data + r*row_bytes.
 * Activations are row-major [T, in], results row-major [T, out]:
 *     y[t, r] = sum_i x[t, i] * W[r, i]
 *
 * Numerics of the reference path: weights are dequantized to f32 exactly
 * (clef_dequantize_row), activations stay f32, dots accumulate in f32 in
 * 8 interleaved partial sums per 1024-element segment.
 */
#ifndef CLEF_KERNELS_MATMUL_H
#define CLEF_KERNELS_MATMUL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/threadpool.h"

typedef struct mm_weight {
    uint32_t type;       /* clef_dtype of the stored elements                  */
    const void *data;    /* row 0; rows are row_bytes apart                    */
    int64_t in;          /* elements per row (ggml ne[0]), a block multiple    */
    int64_t out;         /* rows (ggml ne[1])                                  */
    size_t row_bytes;    /* bytes of one stored row                            */
} mm_weight;

/* Describe a stored [out][in] matrix.  Returns false (w untouched) when the
 * type cannot be computed with or `in` is not a multiple of its block.
 * F32 data is read in place and must be 4-byte aligned (GGUF data is). */
bool mm_weight_init(mm_weight *w, uint32_t type, const void *data, int64_t in, int64_t out);

/* Hot path.  y[T, w->out] = x[T, w->in] · Wᵀ.  Output rows are split across
 * the pool's threads; pool may be NULL (single thread).  x and y must not
 * overlap. */
void mm_matmul(tp_pool *pool, const mm_weight *w, const float *x, float *y, int64_t T);

/* Dequantize row r (0 <= r < out) into dst[in]: an embedding or LM-head row. */
void mm_get_row(const mm_weight *w, int64_t r, float *dst);

/* f32 dot product with the same summation order as mm_matmul's. */
float mm_dot(const float *a, const float *b, int64_t n);

#endif
