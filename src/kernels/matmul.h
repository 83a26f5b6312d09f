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
 *
 * Fast paths (mm_matmul_ex, chosen by a cpu_target; core/cpu.h).  Precision
 * follows the weights the way llama.cpp's CPU backend does:
 *   F32 weights     f32 activations, f32 FMA
 *   BF16 weights    activations rounded to BF16 (dpbf16 on avx512+bf16,
 *                   else the rounded values in f32 FMA)
 *   Q8_0, Q4_K, Q5_K, Q6_K   activations quantized to int8 with one f32
 *                   scale per block, as llama.cpp does: 32 for Q8_0 (Q8_0's
 *                   layout, the scale rounded through f16), 256 for the
 *                   K-quants (Q8_K's); integer dots by vpdpbusd on zmm
 *                   (avx512+vnni) or ymm (avx2+vnni), vpmaddubsw (avx2),
 *                   SDOT / SMMLA (neon+dot); neon without SDOT dequantizes
 *                   the weights for f32 activations
 *   F16 weights     dequantized, f32 activations
 *   f32_act BF16 / F16   f32 activations; on avx512 and amx the rows widened
 *                   in registers in a dot tile whose lanes sum like the f32
 *                   one's, so the bits are those of the f32 decoding
 * On amx (kernels/simd_amx.c) the products run on tiles: BF16 weights by
 * TDPBF16PS on BF16 activations (f32 accumulation over k); Q8_0 by TDPBSSD
 * on the same per-32 int8 activations, each block's integer dot scaled in
 * f32; the K-quants in byte planes with activations quantized per 256
 * (llama.cpp's Q8_K granularity for them), one scale step per super-block
 * (mm_act_block says which).
 * Weights are not repacked at load: each call packs the panel of rows it is
 * about to use (48 rows x ≤ 2048 k; AMX BF16: 32 rows x all of k; AMX
 * K-quants: 64 rows x ≤ 1024 k) into a per-thread buffer in the kernel's
 * layout (kernels/simd.h).  That costs one pass over the weights per call
 * and no second copy of the model in memory.  Skipping it entirely (timing
 * only, weights never read) made a 512-token forward no faster on amx and 4%
 * faster on avx512, and a 16-token one twice as fast; but packing at load
 * instead (measured on avx512, not kept) gained 10% at 16 tokens and nothing
 * from 64 on for Q8_0 (18% more bytes), and lost for the K-quants and BF16
 * (1.8-2.2x the bytes): short products are bound by reading the weights
 * from memory, not by the pack's work.  So on avx512 the int8 tiles prefetch,
 * while they run, the stored rows their thread packs next (mm_prefetch).
 * Every output element is summed in an order fixed by the shapes, so
 * results do not depend on the thread count.
 */
#ifndef CLEF_KERNELS_MATMUL_H
#define CLEF_KERNELS_MATMUL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/cpu.h"
#include "core/threadpool.h"

typedef struct mm_weight {
    uint32_t type;       /* clef_dtype of the stored elements                  */
    const void *data;    /* row 0; rows are row_bytes apart                    */
    int64_t in;          /* elements per row (ggml ne[0]), a block multiple    */
    int64_t out;         /* rows (ggml ne[1])                                  */
    size_t row_bytes;    /* bytes of one stored row                            */
    bool f32_act;        /* BF16 / F16: multiply the f32 activations as they
                            are, the products of w's f32 decoding (the
                            decision head, which the reference computes in
                            f32); mm_weight_init: false                       */
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

/* Scratch of the fast paths: activations converted for the kernel and each
 * thread's packed panel.  Zero-initialise; the owner frees it
 * (mm_workspace_free).  One workspace serves one caller at a time. */
typedef struct mm_workspace {
    void *buf;
    size_t cap;
} mm_workspace;

/* Bytes mm_matmul_ex needs for w, T tokens and n_threads threads (0 for ref). */
size_t mm_workspace_bytes(const cpu_target *tg, const mm_weight *w, int64_t T, int n_threads);
/* Grow ws to at least `bytes` (64-byte aligned).  false: out of memory. */
bool mm_workspace_reserve(mm_workspace *ws, size_t bytes);
void mm_workspace_free(mm_workspace *ws);

/* y[T, w->out] = x[T, w->in] · Wᵀ on the kernels of tg.  ws may be NULL or
 * too small: it is grown (a NULL ws is a temporary one); when memory runs
 * out the reference path computes the product instead. */
void mm_matmul_ex(const cpu_target *tg, tp_pool *pool, const mm_weight *w, const float *x,
                  float *y, int64_t T, mm_workspace *ws);

/* What tg computes w with: "f32", "bf16" or "int8" (activation precision). */
const char *mm_precision(const cpu_target *tg, const mm_weight *w);

/* For an "int8" product: elements per activation scale, 32 (Q8_0), or 256
 * for the K-quants (llama.cpp's Q8_K blocks). */
int mm_act_block(const cpu_target *tg, const mm_weight *w);

/* Small dense products on one thread, for attention and the delta rule
 * (f32; tg NULL or path ref: plain loops, avx2/avx512/amx/neon: register-tiled
 * FMA kernels in the target's broadcast form):
 *   mm_gemm_nn:  C[i][j] = (add ? C[i][j] : 0) + Σ_k A[i·rsa + k·csa] · B[k·ldb + j]
 *   mm_gemm_nt:  C[i][j] = (add ? C[i][j] : 0) + Σ_k A[i·lda + k] · B[j·ldb + k]
 * for i < m, j < n, k < kdim; C row-major with leading dimension ldc.  A's
 * two strides let mm_gemm_nn read Aᵀ in place (rsa = 1, csa = ld). */
void mm_gemm_nn(const cpu_target *tg, int64_t m, int64_t n, int64_t kdim, const float *A,
                int64_t rsa, int64_t csa, const float *B, int64_t ldb, float *C, int64_t ldc,
                bool add);
void mm_gemm_nt(const cpu_target *tg, int64_t m, int64_t n, int64_t kdim, const float *A,
                int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc, bool add);

/* dst[c·ldd + r] = src[r·lds + c] for r < rows, c < cols (f32, exact). */
void mm_transpose(const cpu_target *tg, int64_t rows, int64_t cols, const float *src,
                  int64_t lds, float *dst, int64_t ldd);

#endif
