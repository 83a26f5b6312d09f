/*
 * kernels/ops.h — the small per-row operations of a transformer block:
 * normalisations, activations, softmax, rotary embedding, embedding lookup.
 *
 * Conventions: rows are contiguous f32 vectors; "in place" functions may be
 * given the same pointer for input and output.  Arithmetic is f32 except
 * where a comment says otherwise (reductions for norms accumulate in double,
 * which costs nothing here and removes order dependence).
 */
#ifndef CLEF_KERNELS_OPS_H
#define CLEF_KERNELS_OPS_H

#include <math.h>
#include <stdint.h>

#include "core/threadpool.h"
#include "kernels/matmul.h"

/* y = x / sqrt(mean(x²) + eps) · w, for n_rows rows of n elements (x, y
 * [n_rows][n]; w [n], shared by all rows).  x == y allowed. */
void op_rmsnorm(float *y, const float *x, const float *w, int64_t n, int64_t n_rows, float eps);

/* x = x / max(‖x‖₂, eps), for n_rows rows of n, in place (ggml_l2_norm). */
void op_l2norm(float *x, int64_t n, int64_t n_rows, float eps);

/* Scalar forms, shared by the kernels. */
static inline float op_sigmoid1(float x) { return 1.0f / (1.0f + expf(-x)); }
static inline float op_silu1(float x) { return x / (1.0f + expf(-x)); }
static inline float op_softplus1(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* Elementwise over n values, in place. */
void op_silu(float *x, int64_t n);
void op_sigmoid(float *x, int64_t n);
void op_softplus(float *x, int64_t n);   /* log(1 + e^x); x above 20 passes through */

/* x[i] = silu(x[i]) * g[i]: SwiGLU's gate times up, n values. */
void op_silu_mul(float *x, const float *g, int64_t n);

/* Softmax over one row of n values, in place (max-subtracted). */
void op_softmax(float *x, int64_t n);

/* Rotary position embedding, NeoX pairing, on x [T][n_head][head_dim]:
 * for each head the first n_rot dims rotate in pairs (i, i + n_rot/2) by
 * angle pos·base^(−2i/n_rot); dims from n_rot on pass through.
 * sections: the MRoPE split of the n_rot/2 pairs between the position
 * streams (time, height, width, extra), interleaved as llama.cpp's IMROPE
 * assigns them; text tokens have position pos[t] in the first three streams
 * and 0 in the fourth, so a pair sections do not cover is not rotated.
 * sections all zero: plain NeoX rotary (every pair uses pos).
 * n_rot must be even and at most OP_ROPE_MAX_DIMS. */
#define OP_ROPE_MAX_DIMS 1024
void op_rope_neox(float *x, int64_t T, int n_head, int head_dim, int n_rot,
                  const int32_t *pos, float base, const int sections[4]);

/* The stream (0 = time, 1 = height, 2 = width, 3 = extra) that rotary pair
 * i takes its position from, as op_rope_neox uses it. */
int op_rope_pair_stream(const int sections[4], int i);

/* The same operations on the kernels of `path` (core/cpu.h).  ref: exactly
 * the functions above.  avx2/avx512/amx: vectorised, with a polynomial e^x
 * within 2 ulp of libm's (kernels/simd.h) and norms' sums of squares in
 * double in another order — float-rounding differences only.  Rows (norms)
 * or elements are shared out over pool (NULL: this thread) when there are
 * enough of them; every value is computed the same way either way. */
void op_rmsnorm_ex(cpu_path path, tp_pool *pool, float *y, const float *x, const float *w,
                   int64_t n, int64_t n_rows, float eps);
void op_l2norm_ex(cpu_path path, tp_pool *pool, float *x, int64_t n, int64_t n_rows, float eps);
void op_sigmoid_ex(cpu_path path, tp_pool *pool, float *x, int64_t n);
void op_silu_mul_ex(cpu_path path, tp_pool *pool, float *x, const float *g, int64_t n); /* silu(x)·g */
void op_mul_silu_ex(cpu_path path, tp_pool *pool, float *x, const float *g, int64_t n); /* x·silu(g) */
void op_mul_sigmoid_ex(cpu_path path, tp_pool *pool, float *x, const float *g, int64_t n); /* x·σ(g) */
void op_exp_ex(cpu_path path, const float *x, float *y, int64_t n);      /* y = e^x      */
/* op_l2norm_ex on `per` rows of n at x + g·ld, for each group g < groups
 * (per-head norms inside wider token rows). */
void op_l2norm_groups_ex(cpu_path path, tp_pool *pool, float *x, int64_t n, int64_t per,
                         int64_t groups, int64_t ld, float eps);
/* x[r·ldx + i] *= σ(g[r·ldg + i]) for r < rows, i < n. */
void op_mul_sigmoid_rows_ex(cpu_path path, tp_pool *pool, float *x, int64_t ldx, const float *g,
                            int64_t ldg, int64_t n, int64_t rows);

/* out[t][0..w->in) = row ids[t] of w (an embedding table [V][E]).  Every
 * id must be in [0, w->out): the caller validates. */
void op_embed(const mm_weight *w, const int32_t *ids, int64_t n, float *out);

#endif
