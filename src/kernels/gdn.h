/*
 * kernels/gdn.h — the Gated DeltaNet (linear attention) recurrences:
 * the causal depthwise convolution over time and the gated delta rule.
 *
 * Both work on one chunk of consecutive tokens at a time and carry what the
 * next chunk needs (the last K−1 input rows; the per-head state S), so a long
 * prefill needs no [T]-sized buffers here.  Tokens of several independent
 * sequences may share a chunk: pos[t] is token t's position in its own
 * sequence, and a token with pos 0 starts from zero history (the conv reads
 * no earlier rows, the state is reset).  Sequences are contiguous and their
 * positions count up from 0 (callers guarantee it).
 */
#ifndef CLEF_KERNELS_GDN_H
#define CLEF_KERNELS_GDN_H

#include <stdint.h>

#include "core/threadpool.h"

/* Largest Dk / Dv the kernels accept (the model checks at load). */
#define GDN_MAX_HEAD_DIM 1024

/* Causal depthwise conv1d then SiLU, no bias.
 *   hist [K−1+T][C]: the K−1 input rows before the chunk, then its T rows
 *   w    [C][K]: ggml ssm_conv1d (ne0 = K); w[ch][K−1] weighs the current token
 *   out  [T][C]: out[t][ch] = silu(Σ_k hist[t+k][ch]·w[ch][k]), rows before
 *        the token's sequence start counting as zero.
 * To carry history, the caller then moves hist rows [T, T+K−1) to the top
 * (gdn_conv_shift does it). */
void gdn_conv1d_silu(tp_pool *pool, const float *hist, const float *w, const int32_t *pos,
                     int64_t T, int64_t C, int K, float *out);

/* Keep the last K−1 rows of hist [K−1+T][C] as the first K−1 rows. */
void gdn_conv_shift(float *hist, int64_t T, int64_t C, int K);

/* Gated delta rule, sequential in time, f32.
 *   q, k  [T][ld]: key-head vectors at q + t·ld + hk·Dk (Hk heads, L2-normalised)
 *   v     [T][ld]: value-head vectors at v + t·ld + h·Dv (Hv heads)
 *   g     [T][Hv]: log decay (≤ 0);  beta [T][Hv]: write strength in (0, 1)
 *   S     [Hv][Dk][Dv]: state in/out, reset to zero at a token with pos 0
 *   o     [T][Hv][Dv]: o_t = Sᵀ(q_t / sqrt(Dk)) after the update
 * Value head h reads key head h % Hk (llama.cpp's tiled head order). Per
 * token and head:  S ← e^g·S;  δ = β·(v − Sᵀk);  S ← S + k δᵀ. */
void gdn_delta_rule(tp_pool *pool, const float *q, const float *k, const float *v, int64_t ld,
                    const float *g, const float *beta, const int32_t *pos, int64_t T,
                    int Hk, int Hv, int Dk, int Dv, float *S, float *o);

#endif
