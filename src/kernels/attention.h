/*
 * kernels/attention.h — causal softmax attention with grouped K/V heads.
 *
 * Online (streaming) softmax over blocks of keys, so no [T x T] score matrix
 * exists: memory is O(D) per query row.  Queries come one chunk at a time;
 * keys and values are the whole buffer written so far.  Several independent
 * sequences may share the buffers: a query at global index q0+t with
 * position pos[t] in its sequence sees the keys at global indices
 * [q0+t−pos[t], q0+t] — its own sequence up to itself.
 */
#ifndef CLEF_KERNELS_ATTENTION_H
#define CLEF_KERNELS_ATTENTION_H

#include <stdint.h>

#include "core/cpu.h"
#include "core/threadpool.h"

/* Largest head dimension attn_causal accepts (the model checks at load). */
#define ATTN_MAX_HEAD_DIM 1024

/*   q    [Tq][H][D]: queries of global tokens q0 .. q0+Tq−1
 *   k, v [N][Hkv][D]: keys/values of global tokens 0 .. q0+Tq−1 (at least)
 *   out  [Tq][H][D]: softmax(q·kᵀ·scale)·v, causal within the sequence
 * Query head i uses K/V head i / (H / Hkv); H must be a multiple of Hkv. */
void attn_causal(tp_pool *pool, const float *q, const float *k, const float *v,
                 const int32_t *pos, int64_t q0, int64_t Tq, int H, int Hkv, int D,
                 float scale, float *out);

/* attn_causal on the kernels of the target cpu.  ref: attn_causal itself.  Other
 * paths: per work item (one K/V head, up to ATTN_QBLOCK query tokens of one
 * sequence, all the query heads that share the K/V head) the scores of a
 * block of ATTN_FAST_KEYS keys are one small GEMM computed transposed
 * (Pᵀ = K·Qᵀ, mm_gemm_nn), the online softmax runs along its rows with the
 * vector e^x, and P·V is another mm_gemm_nn.  Key blocks start at the sequence's first key, as in
 * attn_causal, so a query's result does not depend on which other queries
 * share its call.  Items go to threads from a shared counter, costliest
 * first.  Scratch: O(ATTN_QBLOCK · group · D) per thread; without it
 * attn_causal runs instead. */
#define ATTN_QBLOCK 64
#define ATTN_FAST_KEYS 128
void attn_causal_ex(const cpu_target *cpu, tp_pool *pool, const float *q, const float *k,
                    const float *v, const int32_t *pos, int64_t q0, int64_t Tq, int H, int Hkv,
                    int D, float scale, float *out);

#endif
