/*
 * model/head.h — the Clef joint schema head (spec clef-model.md §3, §4).
 *
 * The head turns the backbone's final-normed hidden states of one prompt into
 * one logit per allowed option of every question, all questions scored
 * jointly: the options of all questions route over the prompt as one query
 * set, and the question "fields" attend to each other in the decoder.  No
 * vocabulary logits are formed; the LM head (output.weight) is only read row
 * by row, through a head_rows reader, for the options' lexical vectors.
 *
 * Shapes (E backbone width, W head width, F head FFN width, T tokens):
 *   hidden [T, E] row-major f32, as clef_forward writes it.
 *   logits: one per option, questions in the given order, options of a
 *   question in their (rendered) order; softmax per question is the caller's.
 *
 * Ownership: head_load allocates a head_model, freed with head_free.  Its
 * F32, BF16 and F16 matrices are read in place in the gguf mapping (any
 * other type is copied to f32), as a head_rows' rows are: both are valid
 * only while that file stays open.
 *
 * Threads: a loaded head_model is read-only; head_score may run on several
 * threads at once with the same head (it allocates its own scratch; a shared
 * pool serialises their jobs, see core/threadpool.h).
 */
#ifndef CLEF_MODEL_HEAD_H
#define CLEF_MODEL_HEAD_H

#include <stdint.h>

#include "clef.h"
#include "core/cpu.h"
#include "core/threadpool.h"
#include "format/gguf.h"

typedef struct head_model head_model;

/* Hyperparameters of a loaded head. */
typedef struct head_hparams {
    int n_embd;        /* E: backbone width the head reads              */
    int width;         /* W: head width                                 */
    int n_ff;          /* F: FFN width of routing and decoder layers    */
    int n_head;        /* attention heads (W % n_head == 0)             */
    int n_routing;     /* R: routing blocks, dec.blk.0 .. R-1           */
    int n_decoder;     /* L: decoder layers, dec.blk.R .. R+L-1         */
    float norm_eps;    /* LayerNorm eps (clef.attention.layer_norm_epsilon) */
} head_hparams;

/* Row reader for the matrix whose rows give the options' lexical vectors:
 * output.weight (ggml ne [E, V]), or token_embd.weight when a file has no
 * output.weight.  Rows are dequantized one at a time on demand. */
typedef struct head_rows {
    uint32_t type;        /* clef_dtype of the stored rows                 */
    const void *data;     /* n_rows rows of row_bytes bytes each           */
    int64_t row_len;      /* elements per row (= E)                        */
    int64_t n_rows;       /* rows (vocabulary size V)                      */
    uint64_t row_bytes;   /* bytes of one stored row                       */
} head_rows;

/* A [start, end) token range of the prompt. */
typedef struct head_span {
    int32_t start;
    int32_t end;
} head_span;

enum { HEAD_TYPE_NOUL = 0, HEAD_TYPE_CHOICE = 1, HEAD_TYPE_SCORE = 2 };

/* One question: its type, the span of its instruction text, and the spans
 * of its option objects (rendered order). */
typedef struct head_question {
    int type_id;               /* HEAD_TYPE_*                               */
    head_span span;            /* instruction span                          */
    int n_options;             /* >= 1                                      */
    const head_span *options;  /* n_options spans (caller-owned)            */
} head_question;

/* Load the head of a `clef` GGUF: reads clef.decision.routing_block_count,
 * clef.decision.block_count, clef.decision.head_count and
 * clef.attention.layer_norm_epsilon, then every head tensor, checking its
 * shape (ggml order; trailing 1s ignored, so scorer_out may be [W] or [W,1]).
 * A missing or mis-shaped tensor is refused with CLEF_ERR_FORMAT naming it
 * ("decision head: tensor 'dec.blk.2.attn_q.weight' missing"); a type clef
 * cannot dequantize with CLEF_ERR_UNSUPPORTED.  *out is NULL on failure. */
clef_status head_load(const gguf_file *f, head_model **out, clef_error *err);

void head_free(head_model *h);

const head_hparams *head_get_hparams(const head_model *h);

/* A reader over one GGUF tensor of ne [n_embd, V] (any dequantizable type). */
clef_status head_rows_from_tensor(const gguf_tensor *t, int64_t n_embd, head_rows *out,
                                  clef_error *err);

/* The reader the head uses for a model file: output.weight, or
 * token_embd.weight when output.weight is absent (tied embeddings). */
clef_status head_rows_from_file(const gguf_file *f, int64_t n_embd, head_rows *out,
                                clef_error *err);

/* Dequantize row `row` (0 <= row < n_rows) into dst[row_len]. */
clef_status head_rows_get(const head_rows *r, int64_t row, float *dst, clef_error *err);

/* Total number of options over qs[0..n_questions) (the logits' length). */
int head_count_options(const head_question *qs, int n_questions);

/* Score one prompt.  hidden: [T, E] final-normed hidden states; ids[T]: the
 * prompt's token ids (option spans read their rows of `rows`); qs: the
 * questions in request order.  Writes head_count_options(qs, n) logits.
 * Spans must be non-empty and inside [0, T), ids inside [0, rows->n_rows),
 * type_id in 0..2; anything else is CLEF_ERR_INVALID_ARG naming the
 * question / option. */
clef_status head_score(const head_model *h, const head_rows *rows, const float *hidden,
                       const int32_t *ids, int T, const head_question *qs, int n_questions,
                       float *logits, clef_error *err);

/* head_score with its products on the model's kernels: cpu (NULL or the
 * ref path: the reference dots) and pool (NULL: this thread) share them
 * out.  Every output is summed in an order fixed by the shapes, so the
 * logits do not depend on the pool's size; a fast path differs from the
 * reference only by f32 rounding (test_head checks both against the
 * oracle).  head_score is this with neither. */
clef_status head_score_on(const head_model *h, tp_pool *pool, const cpu_target *cpu,
                          const head_rows *rows, const float *hidden, const int32_t *ids, int T,
                          const head_question *qs, int n_questions, float *logits,
                          clef_error *err);

#endif
