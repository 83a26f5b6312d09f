/*
 * model/model.h — struct clef_model (opaque in clef.h) and the internal API
 * the decision head, the decision layer and the speed work use.
 *
 * A clef_model owns: the GGUF mapping every weight points into, the thread
 * pool, the backbone, the tokenizer, the decision head (arch `clef`), and
 * f32 copies of small tensors stored in other types.  It is immutable after
 * clef_model_load, so any number of threads may run forwards on it at once
 * (they take turns on the pool).
 */
#ifndef CLEF_MODEL_MODEL_H
#define CLEF_MODEL_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "clef.h"
#include "core/threadpool.h"
#include "format/gguf.h"
#include "kernels/matmul.h"
#include "model/qwen35.h"

struct head_model;

struct clef_model {
    gguf_file *gguf;               /* the mapping; owned                          */
    char arch[16];                 /* "qwen35" or "clef"                          */
    char *name;                    /* general.name, else the file's base name     */
    tp_pool *pool;                 /* compute threads; owned                      */
    qwen35_model backbone;
    clef_tokenizer *tokenizer;     /* owned; NULL when the file has no tokenizer.ggml.* */

    /* ---- decision head: written and freed by src/model/head.* ---------- */
    struct head_model *head;       /* NULL for qwen35                             */

    float **owned;                 /* [n_owned] f32 copies (model_tensor_f32)     */
    size_t n_owned;
};

/* ---- what the head and the decision layer read ---- */

const gguf_file *model_gguf(const clef_model *m);
tp_pool *model_pool(const clef_model *m);
const qwen35_model *model_backbone(const clef_model *m);
/* E: width of every hidden-state row. */
int model_n_embd(const clef_model *m);
/* The LM head matrix [E] x V rows (output.weight, or token_embd when tied):
 * mm_get_row(model_output(m), id, dst[E]) reads the row of token id. */
const mm_weight *model_output(const clef_model *m);

/* Prefill several independent sequences in one pass (see qwen35_forward). */
clef_status model_forward_batch(clef_model *m, const qwen35_seq *seqs, int n_seq,
                                clef_error *err);

/* ---- tensor lookup for loaders (backbone and head) ----
 * Shapes are ggml ne[] (ne[0] contiguous); trailing 1s are ignored, so a
 * [W] tensor matches an expected [W, 1] and the reverse.  Errors name the
 * tensor: "tensor 'blk.3.attn_k.weight': expected [64,64] got [64,32]". */

/* The tensor `name` (NULL when absent; no error). */
const gguf_tensor *model_find(const clef_model *m, const char *name);

/* Tensor `name` with shape ne[0..n_dims); missing or other shape is an error. */
clef_status model_tensor(const clef_model *m, const char *name, int n_dims, const int64_t *ne,
                         const gguf_tensor **out, clef_error *err);

/* A matrix [in] -> [out] (ne = [in, out]) of any computable type. */
clef_status model_matrix(const clef_model *m, const char *name, int64_t in, int64_t out,
                         mm_weight *w, clef_error *err);

/* A tensor of n_dims (<= 4) as f32: the mapping itself when stored F32,
 * else a converted copy the model owns.  Elements in ggml order. */
clef_status model_tensor_f32(clef_model *m, const char *name, int n_dims, const int64_t *ne,
                             const float **out, clef_error *err);

/* A vector [n] as f32 (model_tensor_f32 with one dimension). */
clef_status model_vector(clef_model *m, const char *name, int64_t n, const float **out,
                         clef_error *err);

#endif
