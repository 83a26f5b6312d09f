/*
 * model/qwen35.h — the Qwen3.5 hybrid backbone (Gated DeltaNet + gated
 * attention), prefill only: token ids in, final-normed hidden states out.
 *
 * The equations are ../shared/spec/qwen35-backbone.md; the names below are
 * the GGUF tensor names without "blk.N." and ".weight".  Shapes are in
 * the math order used by the comments: "[in] -> [out]" for a matrix (ggml
 * ne = [in, out]), [n] for a vector.  E hidden, F FFN, H/Hkv attention
 * heads of D, Hk/Hv DeltaNet key/value heads of Dk/Dv, K conv taps.
 *
 * Weights point into the GGUF mapping (or into f32 copies the clef_model
 * owns), so a qwen35_model is valid as long as the model that loaded it.
 */
#ifndef CLEF_MODEL_QWEN35_H
#define CLEF_MODEL_QWEN35_H

#include <stdbool.h>
#include <stdint.h>

#include "clef.h"
#include "core/cpu.h"
#include "core/threadpool.h"
#include "kernels/matmul.h"

struct clef_model;

typedef struct qwen35_config {
    int n_embd;            /* E: hidden size                                     */
    int n_layer;           /* trunk blocks run (nextn / MTP blocks excluded)     */
    int n_ff;              /* F: SwiGLU inner size                               */
    int n_vocab;           /* rows of token_embd                                 */
    int n_ctx;             /* context_length: longest sequence accepted          */
    float rms_eps;         /* every RMSNorm (and the q/k L2 norms) adds this     */
    /* gated full attention */
    int n_head;            /* H: query heads                                     */
    int n_head_kv;         /* Hkv: key/value heads, H % Hkv == 0                 */
    int head_dim;          /* D: key = value length                              */
    int n_rot;             /* rotary dims at the start of each head (even, <= D) */
    float rope_base;       /* θ base                                             */
    int rope_sections[4];  /* MRoPE pairs per stream (time, height, width, extra) */
    /* Gated DeltaNet */
    int conv_kernel;       /* K: causal conv taps over time                      */
    int ssm_n_k_head;      /* Hk: key heads (ssm.group_count)                    */
    int ssm_n_v_head;      /* Hv: value heads (ssm.time_step_rank), Hv % Hk == 0 */
    int ssm_k_dim;         /* Dk: key head size (ssm.state_size)                 */
    int ssm_v_dim;         /* Dv: value head size (ssm.inner_size / Hv)          */
    int conv_dim;          /* 2·Hk·Dk + Hv·Dv: channels of qkv / the conv        */
} qwen35_config;

typedef struct qwen35_layer {
    bool recurrent;                 /* Gated DeltaNet (true) or gated attention   */
    const float *attn_norm;         /* [E]                                        */
    const float *post_attention_norm; /* [E]                                      */
    /* Gated DeltaNet (recurrent) */
    mm_weight attn_qkv;             /* [E] -> [conv_dim]: q | k | v               */
    mm_weight attn_gate;            /* [E] -> [Hv·Dv]: z, the output gate         */
    mm_weight ssm_beta;             /* [E] -> [Hv]                                */
    mm_weight ssm_alpha;            /* [E] -> [Hv]                                */
    const float *ssm_conv1d;        /* [conv_dim][K]                              */
    const float *ssm_dt_bias;       /* [Hv]                                       */
    const float *ssm_a;             /* [Hv]: −exp(A_log)                          */
    const float *ssm_norm;          /* [Dv], shared by all value heads            */
    mm_weight ssm_out;              /* [Hv·Dv] -> [E]                             */
    /* gated attention */
    mm_weight attn_q;               /* [E] -> [H][2D]: per head query | gate      */
    mm_weight attn_k;               /* [E] -> [Hkv·D]                             */
    mm_weight attn_v;               /* [E] -> [Hkv·D]                             */
    mm_weight attn_output;          /* [H·D] -> [E]                               */
    const float *attn_q_norm;       /* [D]                                        */
    const float *attn_k_norm;       /* [D]                                        */
    /* SwiGLU FFN */
    mm_weight ffn_gate;             /* [E] -> [F]                                 */
    mm_weight ffn_up;               /* [E] -> [F]                                 */
    mm_weight ffn_down;             /* [F] -> [E]                                 */
} qwen35_layer;

typedef struct qwen35_model {
    qwen35_config cfg;
    mm_weight token_embd;           /* [E] x V rows: row id = embedding of id     */
    const float *output_norm;       /* [E]                                        */
    mm_weight output;               /* [E] -> [V]; token_embd when tied (LM head, read by rows) */
    bool output_tied;               /* no output.weight in the file               */
    qwen35_layer *layers;           /* [n_layer], owned (qwen35_free)             */
    /* The kernels every forward runs on: chosen once by qwen35_load from the
     * CPU and the CLEF_CPU environment variable (core/cpu.h). */
    cpu_target cpu;
    char weight_type[48];           /* layer matrices' types by bytes, "BF16", "Q4_K+Q6_K" */
    uint64_t matrix_bytes;          /* stored bytes of the layer matrices          */
    uint64_t matrix_params;         /* their elements                              */
} qwen35_model;

/* Read the hyperparameters under "<arch>." and look up every tensor with
 * its expected shape; choose the kernels (CLEF_CPU=ref|avx2|avx2+vnni|
 * avx512|amx|neon|auto, read here once; a value the CPU cannot honour is an
 * error).  Small f32 copies (for vectors not stored as F32) are owned by
 * `owner`.  On failure err names the key or tensor. */
clef_status qwen35_load(struct clef_model *owner, const char *arch, qwen35_model *out,
                        clef_error *err);
void qwen35_free(qwen35_model *m);

/* One sequence of a batch: n ids in, n x E final-normed floats out. */
typedef struct qwen35_seq {
    const int32_t *ids;             /* [n], each in [0, n_vocab)                  */
    int64_t n;                      /* >= 1, <= n_ctx                             */
    float *hidden;                  /* [n][E], caller-allocated                   */
} qwen35_seq;

/* The backbone's memory of a sequence after its first n tokens: everything
 * the tokens at positions n, n+1, ... read of them.  Per layer:
 *   DeltaNet   conv [K−1][conv_dim]: conv inputs (qkv) of the tokens at
 *              positions n−K+1 .. n−1, zero rows for positions below 0;
 *              S [Hv][Dk][Dv]: the delta-rule state after position n−1
 *   attention  k, v [n][Hkv][D]: keys (normed, rotated) and values of all n
 * A filled state is only read by the forward, so any number of forwards may
 * continue from one state at once.  qwen35_state_free releases it. */
typedef struct qwen35_layer_state {
    float *conv, *S;                /* DeltaNet layers; NULL on attention layers  */
    float *k, *v;                   /* attention layers; NULL on DeltaNet layers  */
} qwen35_layer_state;

typedef struct qwen35_state {
    int64_t n;                      /* tokens summarised = the next position      */
    int n_layer;
    qwen35_layer_state *layers;     /* [n_layer], views into data                 */
    float *data;                    /* every layer's floats, one block            */
    size_t bytes;                   /* heap bytes this state holds in all         */
} qwen35_state;

/* Heap bytes of a state of n tokens for m: what qwen35_state_new allocates
 * (a cache's accounting). */
size_t qwen35_state_bytes(const qwen35_model *m, int64_t n);

/* A zeroed state of n >= 1 tokens shaped for m.  *out: caller-owned. */
clef_status qwen35_state_new(const qwen35_model *m, int64_t n, qwen35_state **out,
                             clef_error *err);
void qwen35_state_free(qwen35_state *s);

/* What one sequence of a batch continues from and keeps (qwen35_forward_carry). */
typedef struct qwen35_carry {
    /* NULL: the ids start at position 0.  Else they continue the sequence that
     * past summarises: ids[0] is at position past->n (past->n + n <= n_ctx). */
    const qwen35_state *past;
    /* NULL, or a state from qwen35_state_new with past_n < save->n <=
     * past_n + n (past_n = past ? past->n : 0): filled with the state at
     * position save->n, i.e. after ids[save->n − past_n − 1]. */
    qwen35_state *save;
} qwen35_carry;

/* Default tokens per chunk: bounds scratch memory independent of T. */
#define QWEN35_DEFAULT_CHUNK 512

/* Prefill n_seq independent sequences in one pass (their tokens share every
 * matmul; the recurrences and attention keep them apart).  chunk: tokens
 * per step (<= 0: QWEN35_DEFAULT_CHUNK) — results do not depend on it beyond
 * float rounding.  Validates ids and lengths; allocates its own scratch, so
 * concurrent calls on one model are safe (they share the pool in turns). */
clef_status qwen35_forward(const qwen35_model *m, tp_pool *pool, const qwen35_seq *seqs,
                           int n_seq, int64_t chunk, clef_error *err);

/* qwen35_forward where sequence s continues carry[s].past and/or saves its
 * state into carry[s].save (carry NULL: every sequence fresh, nothing saved).
 * The hidden states written are those of the ids given (n rows); a past's
 * rows are the caller's to keep.  On the ref kernels, continuing computes
 * every float as the uninterrupted run would (the kernels see the same rows
 * in the same order), so the hidden states are the same as one forward over
 * past + ids.  The faster kernels agree with that to float rounding: their
 * chunked delta rule cuts a sequence at multiples of GDN_CHUNK positions and
 * at the save point, so only a save point off those multiples changes where
 * a chunk ends. */
clef_status qwen35_forward_carry(const qwen35_model *m, tp_pool *pool, const qwen35_seq *seqs,
                                 const qwen35_carry *carry, int n_seq, int64_t chunk,
                                 clef_error *err);

/* Where a forward's time went (qwen35_forward_stats adds to it).  Seconds of
 * wall time; FLOPs counted from the shapes: matmuls 2·in·out per token,
 * attention 4·D·H per (query, visible key), delta rule 7·Dk·Dv·Hv per token
 * (the sequential recurrence's multiply-adds: decay, Sᵀk, update, Sᵀq). */
typedef struct qwen35_stats {
    double total_s;
    double matmul_s, attention_s, delta_s;  /* delta: conv + delta rule          */
    double head_s;                          /* final norm into the caller's rows */
    double matmul_flop, attention_flop, delta_flop;
} qwen35_stats;

/* qwen35_forward_carry that also accumulates timings into *stats (NULL: none). */
clef_status qwen35_forward_stats(const qwen35_model *m, tp_pool *pool, const qwen35_seq *seqs,
                                 const qwen35_carry *carry, int n_seq, int64_t chunk,
                                 qwen35_stats *stats, clef_error *err);

#endif
