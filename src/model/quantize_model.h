/*
 * model/quantize_model.h — which stored type each tensor of a model gets
 * (llama-quantize's recipes), and re-encoding a GGUF model file.
 *
 * Recipe (llama.cpp src/llama-quant.cpp, no importance matrix, not "pure"):
 *   - Only tensors of >= 2 dimensions (trailing 1s ignored) whose name ends
 *     in "weight" and is not a norm ("_norm.weight"), ssm_conv1d,
 *     ffn_gate_inp, token_types / position embeddings are converted.  The
 *     decision head ("decision.*", "dec.*", "token_types.*", and the older
 *     "clef.*" names) is never converted: published Clef files keep it in
 *     BF16/F32, so every other tensor keeps its stored type and bytes.
 *   - F32 / F16 / BF16 file types: every converted tensor gets that type.
 *   - Q8_0 / Q4_K_M / Q5_K_M / Q6_K: the base type, except
 *       output.weight (and token_embd when there is no output.weight):
 *         Q6_K (Q8_0 for the Q8_0 type, or when ne[0] % 256 != 0);
 *       Q4_K_M / Q5_K_M: attn_v-like tensors (attn_v, attn_qkv, attn_kv_b)
 *         and ffn_down get Q6_K where use_more_bits(i, n) holds:
 *         i < n/8 || i >= 7n/8 || (i − n/8) % 3 == 2, with i the tensor's
 *         ordinal among its kind in (layer, name) order over the backbone,
 *         n the number of attn_v-like tensors / the block count;
 *       token_embd with an output.weight keeps the base type.
 *     A K-quant on a tensor whose ne[0] is not a multiple of 256 falls back
 *     to Q8_0 (llama.cpp picks Q5_0/Q5_1/Q8_0; clef writes no Q5_0/Q5_1);
 *     a tensor whose ne[0] is not a multiple of 32 then gets F16 (as
 *     llama.cpp does).
 *
 * File types are numbered as llama.cpp's llama_ftype (general.file_type).
 */
#ifndef CLEF_MODEL_QUANTIZE_MODEL_H
#define CLEF_MODEL_QUANTIZE_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "clef.h"
#include "core/threadpool.h"
#include "format/gguf_write.h"

typedef enum qm_ftype {
    QM_FTYPE_F32 = 0,
    QM_FTYPE_F16 = 1,
    QM_FTYPE_Q8_0 = 7,
    QM_FTYPE_Q4_K_M = 15,
    QM_FTYPE_Q5_K_M = 17,
    QM_FTYPE_Q6_K = 18,
    QM_FTYPE_BF16 = 32,
} qm_ftype;

/* "F32", "F16", "BF16", "Q8_0", "Q4_K_M", "Q5_K_M", "Q6_K" (case-insensitive). */
bool qm_ftype_parse(const char *name, qm_ftype *out);
const char *qm_ftype_name(qm_ftype ftype);

/* What the recipe looks at of one tensor. */
typedef struct qm_tensor_desc {
    const char *name;
    uint32_t type;             /* stored (or, for synth, natural) clef_dtype */
    uint32_t n_dims;
    int64_t ne[4];
} qm_tensor_desc;

/* Whether the recipe converts this tensor at all (see the header comment). */
bool qm_tensor_convertible(const qm_tensor_desc *t);

/* The stored type of every tensor of a model under ftype: out[i] for
 * tensors[i].  n_layer is the backbone's block count (the ffn_down
 * positions are counted against it); <= 0 means "count the ffn_down
 * tensors".  Unconverted tensors keep tensors[i].type. */
clef_status qm_choose_types(qm_ftype ftype, const qm_tensor_desc *tensors, size_t n,
                            int64_t n_layer, uint32_t *out, clef_error *err);

/* ---- writing rows ---- */

/* Produce row r (0 <= r < n_rows) of a tensor as f32 into dst[ne0].  Called
 * from several threads at once, for rows in any order; must not fail. */
typedef void (*qm_row_fn)(void *ctx, int64_t r, float *dst);

/* Encode n_rows rows of ne0 elements as `type` and write them to s (the
 * stream's current tensor), a chunk of rows at a time shared over pool
 * (NULL: this thread).  Memory: one chunk (<= 32 MiB) plus a row per thread. */
clef_status qm_write_rows(gguf_stream *s, tp_pool *pool, uint32_t type, int64_t ne0,
                          int64_t n_rows, qm_row_fn fn, void *ctx, clef_error *err);

/* ---- whole files ---- */

/* Re-encode the model at in_path into out_path (streamed; the input stays
 * mapped, the output is never held whole): metadata copied in order with
 * general.file_type set and general.quantization_version = 2, tensors in
 * input order with the types qm_choose_types gives.  Tensors that keep
 * their type are copied byte for byte; others go through f32.  log (may be
 * NULL) gets one line per tensor. */
clef_status qm_quantize_file(const char *in_path, const char *out_path, qm_ftype ftype,
                             int n_threads, FILE *log, clef_error *err);

#endif
