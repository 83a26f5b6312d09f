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

#include "core/cpu.h"
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

/* The same two operations on the kernels of `path` (the delta rule: of the
 * target cpu, whose broadcast form its GEMMs take).
 * gdn_conv1d_silu_ex: vectorised over channels (same sums in the same order;
 * the SiLU uses the vector e^x).
 * gdn_delta_rule_ex: ref runs gdn_delta_rule; other paths the chunked form
 * (below), falling back to gdn_delta_rule if scratch cannot be allocated.
 *
 * Chunked form (llama.cpp / FLA's WY representation, chunks of
 * GDN_CHUNK tokens).  In a chunk of n tokens of one head with start state S0,
 * G_t = Σ_{s≤t} g_s, γ_t = e^{G_t}:
 *   (I + A) Δ = R,  A[t][s] = β_t·e^{G_t−G_s}·k_t·k_s (s < t),
 *                   R_t = β_t (v_t − γ_t·S0ᵀk_t)           (rows δ_t of Δ)
 *   o_t = γ_t·S0ᵀq_t + Σ_{s≤t} e^{G_t−G_s}(q_t·k_s) δ_s
 *   S_n = γ_n·S0 + Σ_s e^{G_n−G_s} k_s δ_sᵀ
 * which is the sequential recurrence regrouped: (I + A)⁻¹ comes from
 * forward substitution on the n x n system, everything else is small GEMMs
 * (mm_gemm_nn / mm_gemm_nt).  Chunks break at GDN_CHUNK-multiples of the
 * position and at sequence starts, so a sequence continued from a state
 * saved at such a multiple sees the same chunks as the uninterrupted run.
 * Value heads are dealt to threads from a shared counter. */
#define GDN_CHUNK 64
void gdn_conv1d_silu_ex(cpu_path path, tp_pool *pool, const float *hist, const float *w,
                        const int32_t *pos, int64_t T, int64_t C, int K, float *out);
void gdn_delta_rule_ex(const cpu_target *cpu, tp_pool *pool, const float *q, const float *k,
                       const float *v, int64_t ld, const float *g, const float *beta,
                       const int32_t *pos, int64_t T, int Hk, int Hv, int Dk, int Dv, float *S,
                       float *o);

#endif
