/*
 * model/synth.h — random-weight models of named shapes, written straight to
 * a GGUF file (benchmarks, tests, and files far larger than memory).
 *
 * A synth model is a real `qwen35` or `clef` GGUF: every key the loaders
 * read, a byte-level BPE vocabulary (256 byte tokens, generated merges over
 * letters, the Qwen added tokens <|endoftext|> <|im_start|> <|im_end|>
 * <think> </think>, then [PADn] rows up to the vocabulary size), backbone
 * tensors in llama.cpp's order and, for `clef`, the decision head in the
 * layout of ../shared/oracle/clef-tiny.  Its answers mean nothing.
 *
 * Weights: matrices N(0, 1/fan_in) (std 1/sqrt(ne[0])), token_embd N(0, 1),
 * RMS/LayerNorm weights 1 + N(0, 0.1²), biases N(0, 0.02²), ssm_conv1d
 * std 1/sqrt(K), ssm_a = −U(1, 16) (−exp(A_log), A_log in [0, ln 16]),
 * ssm_dt.bias U(−6.9, −2.3) (softplus⁻¹ of dt in ~[1e-3, 0.1]),
 * decision.scales the oracle's [e^1.6, e^2.5, σ(0.3)].  "Normal" values are
 * Irwin–Hall sums of four 16-bit uniforms (unit variance, |z| <= 3.47):
 * integer arithmetic, so the same seed gives the same bytes on any machine.
 * Every element is a pure function of (seed, tensor name, index), so rows
 * are generated on all threads in any order.
 *
 * Stored types follow model/quantize_model.h's recipe; the head keeps 2-D
 * tensors BF16 (F32 when the file type is F32) and 1-D ones F32, as the
 * published Clef quantizations do.
 */
#ifndef CLEF_MODEL_SYNTH_H
#define CLEF_MODEL_SYNTH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "clef.h"
#include "model/quantize_model.h"

typedef struct synth_shape {
    const char *name;
    /* backbone (spec/qwen35-backbone.md names) */
    int n_embd, n_layer, n_ff;
    int n_head, n_head_kv, head_dim, n_rot;
    int rope_sections[4];
    int conv_kernel, ssm_k_head, ssm_v_head, ssm_head_dim;
    int full_attn_interval;
    int n_vocab, n_ctx;
    /* decision head (arch clef) */
    int head_width, head_routing, head_decoder, head_heads, head_ff;
} synth_shape;

/* "tiny", "small", "0.8b", "flash"; NULL when unknown. */
const synth_shape *synth_find_shape(const char *name);

/* The generated vocabulary: tokens[n] (with lens) and their GGUF token
 * types, merges[n_merges] ("left right").  Depends only on n_vocab. */
typedef struct synth_vocab {
    char **tokens;
    size_t *lens;
    int32_t *types;
    size_t n;
    char **merges;
    size_t n_merges;
    int32_t id_endoftext, id_im_start, id_im_end;
} synth_vocab;

clef_status synth_vocab_build(int n_vocab, synth_vocab *out, clef_error *err);
void synth_vocab_free(synth_vocab *v);

/* Sizes of a model without writing it (tensor data only, no padding):
 * head_bytes counts the decision head's tensors. */
typedef struct synth_summary {
    size_t n_tensors;
    uint64_t n_elements;
    uint64_t data_bytes;
    uint64_t head_bytes;
} synth_summary;

clef_status synth_summarize(const char *arch, const synth_shape *shape, qm_ftype ftype,
                            synth_summary *out, clef_error *err);

/* Write the model to path (streamed tensor by tensor).  arch "clef" or
 * "qwen35".  log (may be NULL) gets a line per tensor. */
clef_status synth_write(const char *arch, const synth_shape *shape, qm_ftype ftype, uint64_t seed,
                        const char *path, int n_threads, FILE *log, clef_error *err);

#endif
