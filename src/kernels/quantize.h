/*
 * kernels/quantize.h — f32 rows into stored weight types (the inverse of
 * kernels/dequant.h).
 *
 * The block quantizers follow llama.cpp's reference ("_ref") algorithms,
 * the ones llama-quantize uses when no importance matrix is given:
 *   Q8_0  d = amax/127, q = round(x/d) (half away from zero).  Bytes equal
 *         llama-quantize's.
 *   Q4_K  per 32-element sub-block a least-squares fit of scale and min over
 *   Q5_K  a small search of grid widths (weights |x| + rms), then the 8
 *         scales and mins are themselves quantized to 6 bits against the
 *         block's f16 d / dmin, and x is re-rounded on the final grid.
 *   Q6_K  per 16-element sub-block a symmetric fit (weights x²) with a
 *         search of 18 grid widths, scales quantized to int8 against f16 d.
 *   F16 / BF16  round to nearest even (NaN stays a quiet NaN).  F32 copies.
 * Rounding inside the K-quants is round-half-to-even (llama.cpp's
 * nearest_int).  Non-finite inputs give unspecified (but memory-safe) blocks.
 *
 * dst may be any address (blocks are written byte by byte); src and dst
 * must not overlap.  Pure functions: safe from any number of threads.
 */
#ifndef CLEF_KERNELS_QUANTIZE_H
#define CLEF_KERNELS_QUANTIZE_H

#include <stdbool.h>
#include <stdint.h>

/* Quantize n elements of src (n a multiple of the type's block size) into
 * dst as type `type` (a clef_dtype: F32, F16, BF16, Q8_0, Q4_K, Q5_K,
 * Q6_K).  dst receives clef_dtype_row_bytes(type, n) bytes.  Returns false
 * for another type or a bad n. */
bool clef_quantize_row(uint32_t type, const float *src, void *dst, int64_t n);

/* Whether clef_quantize_row can produce `type`. */
bool clef_quantize_supported(uint32_t type);

#endif
