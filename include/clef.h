/*
 * clef.h — the whole public API of libclef.
 *
 * clef runs "System One" decision models (Clef, Clef-Flash, and plain Qwen3.5
 * backbones) from GGUF files.  Everything an application, the `clef` CLI or
 * the HTTP server needs goes through this header: opaque handles, functions
 * that return a clef_status and fill a caller-owned clef_error with a message
 * naming what went wrong.  There is no global state; handles may be used from
 * several threads only where a function says so.
 *
 * Memory: every pointer a clef_* function returns for the caller to own is
 * released with clef_free() (or the handle's own *_free function).
 */
#ifndef CLEF_H
#define CLEF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status and errors ------------------------------------------------ */

typedef enum clef_status {
    CLEF_OK = 0,
    CLEF_ERR_INVALID_ARG,   /* a caller passed something the API forbids     */
    CLEF_ERR_IO,            /* a file could not be opened, read or mapped    */
    CLEF_ERR_FORMAT,        /* a file is malformed (GGUF, JSON, ...)         */
    CLEF_ERR_UNSUPPORTED,   /* well-formed but not something clef runs       */
    CLEF_ERR_NOMEM,         /* an allocation failed                          */
    CLEF_ERR_REQUEST,       /* a System One request was rejected (see body)  */
    CLEF_ERR_TOO_LONG,      /* input does not fit the model's token budget   */
    CLEF_ERR_INTERNAL,      /* a bug: an invariant did not hold              */
} clef_status;

#define CLEF_ERROR_MESSAGE_MAX 512

/* A caller-owned error record: status plus a human-readable message. */
typedef struct clef_error {
    clef_status status;
    char message[CLEF_ERROR_MESSAGE_MAX];
} clef_error;

/* Short stable name of a status ("ok", "io", "format", ...). */
const char *clef_status_name(clef_status status);

/* Release memory that a clef_* function handed to the caller. */
void clef_free(void *ptr);

/* ---- tokenizer ---------------------------------------------------------- */

typedef struct clef_tokenizer clef_tokenizer;

/* Load the tokenizer described by a GGUF file's tokenizer.ggml.* metadata.
 * Works on vocab-only files as well as full models. */
clef_status clef_tokenizer_load(const char *gguf_path, clef_tokenizer **out,
                                clef_error *err);
void clef_tokenizer_free(clef_tokenizer *tok);

/* Tokenize text[0..len) (may contain NUL bytes).  parse_special: added tokens
 * written in the text (e.g. "<|im_start|>") map to their ids; otherwise they
 * are ordinary text.  *ids is caller-owned (clef_free). */
clef_status clef_tokenize(const clef_tokenizer *tok, const char *text, size_t len,
                          bool parse_special, int32_t **ids, size_t *n_ids,
                          clef_error *err);

/* Decode ids back to bytes; *text is NUL-terminated, *len excludes the NUL. */
clef_status clef_detokenize(const clef_tokenizer *tok, const int32_t *ids, size_t n_ids,
                            char **text, size_t *len, clef_error *err);

size_t clef_tokenizer_vocab_size(const clef_tokenizer *tok);

/* ---- models --------------------------------------------------------------- */

typedef struct clef_model clef_model;

typedef struct clef_model_params {
    int n_threads;          /* worker threads for compute; 0 = all cores     */
    /* false: map the file (shares the page cache; a file truncated or
     * rewritten in place while loaded makes the process die of SIGBUS).
     * true: read it whole into anonymous memory at load (needs RAM for the
     * whole file; the file may then change or vanish). */
    bool no_mmap;
} clef_model_params;

clef_model_params clef_model_default_params(void);

/* Load a model: arch `qwen35` (backbone only) or `clef` (backbone + joint head). */
clef_status clef_model_load(const char *path, const clef_model_params *params,
                            clef_model **out, clef_error *err);
void clef_model_free(clef_model *model);

/* The model's tokenizer (owned by the model). */
const clef_tokenizer *clef_model_tokenizer(const clef_model *model);

int clef_model_n_embd(const clef_model *model);
int clef_model_n_ctx(const clef_model *model);
/* "qwen35" or "clef". */
const char *clef_model_arch(const clef_model *model);
/* general.name, or the file's base name when absent. */
const char *clef_model_name(const clef_model *model);

/* Prefill ids[0..n) as one sequence and write the final-normed hidden state of
 * every position to hidden (n × n_embd floats, row-major, caller-allocated). */
clef_status clef_forward(clef_model *model, const int32_t *ids, size_t n,
                         float *hidden, clef_error *err);

/* ---- decisions (System One) ---------------------------------------------- */

typedef enum clef_confidence_kind {
    CLEF_CONFIDENCE_TYPESAFE = 0,   /* (p_max-1/n)/(1-1/n); score: 1 - E|i-m|/MAD   */
    CLEF_CONFIDENCE_REFERENCE = 1,  /* Cloudflare reference: p(choice) / max p      */
} clef_confidence_kind;

typedef struct clef_decide_options {
    int max_length;                 /* token budget; 0 = 16384 capped at n_ctx      */
    clef_confidence_kind confidence;
    bool explain;                   /* add a "clef" object: ids, spans, logits      */
    const char *model_name;         /* name reported in "model"; NULL = model's     */
    /* When n_accept_models > 0, a request naming any other model is refused
     * with 400 "Unknown model: X" (a server's --strict-model). */
    const char *const *accept_models;
    size_t n_accept_models;
    /* Request limits (a request over one gets 400 naming it); 0 = default. */
    int max_questions;              /* questions per request; 0 = 256               */
    int max_choices;                /* options of a choice question; 0 = 255        */
    int max_depth;                  /* JSON nesting of the body; 0 = 64 (max 1024)  */
} clef_decide_options;

clef_decide_options clef_decide_default_options(void);

/* The outcome of one request.  http_status/body are what a server sends:
 * 200 with the System One response, or the contract's error status and body
 * (400/422 ...).  Timings are wall-clock milliseconds per stage. */
typedef struct clef_decide_result {
    int http_status;
    char *body;                     /* NUL-terminated JSON; clef_decide_result_free */
    size_t body_len;
    int64_t input_tokens;           /* tokens sent to the backbone                   */
    int64_t state_tokens;           /* state tokens before any cut                   */
    int64_t state_tokens_used;      /* state tokens after the cut                    */
    double parse_ms, tokenize_ms, backbone_ms, head_ms;
} clef_decide_result;

/* Validate, encode and answer one System One request body (JSON text of len
 * bytes).  A request the contract rejects is NOT a failure of this call: it
 * returns CLEF_OK with result->http_status 4xx and the error body.  A non-OK
 * status means clef itself failed (out of memory, model error): err says why.
 * Safe to call from several threads on one model. */
clef_status clef_decide(clef_model *model, const char *json, size_t len,
                        const clef_decide_options *options, clef_decide_result *result,
                        clef_error *err);
void clef_decide_result_free(clef_decide_result *result);

/* ---- engine: decisions with a state cache and batching -------------------- */

/* An engine answers System One requests exactly as clef_decide does (the
 * same bodies), and remembers, per distinct state, the backbone after the
 * state's last token: a later request about the same state (same model
 * prefix and state tokens after any cut, any questions) runs only its
 * schema and suffix through the backbone.  Several requests can also share
 * one backbone pass (clef_engine_decide_batch).  The cache is bounded in
 * bytes, least recently used entries go first.  All functions are safe to
 * call from several threads at once on one engine. */
typedef struct clef_engine clef_engine;

/* A sensible cache budget for a server. */
#define CLEF_ENGINE_DEFAULT_CACHE_BYTES ((size_t)256 << 20)

typedef struct clef_engine_stats {
    uint64_t hits;            /* requests whose state came from the cache        */
    uint64_t misses;          /* requests that ran the backbone from token 0     */
    uint64_t inserts;         /* states added to the cache                       */
    uint64_t evictions;       /* states dropped to stay within the budget        */
    uint64_t entries;         /* states cached now                               */
    uint64_t bytes;           /* bytes they hold now (<= capacity)               */
    uint64_t capacity;        /* the budget in bytes                             */
    uint64_t tokens_reused;   /* backbone tokens that hits did not recompute     */
} clef_engine_stats;

/* An engine on model (borrowed: free the engine before the model) with a
 * cache of at most cache_bytes (0: no caching, batching only).  The model
 * must be able to decide (arch clef).  *out: clef_engine_free. */
clef_status clef_engine_new(clef_model *model, size_t cache_bytes, clef_engine **out,
                            clef_error *err);
void clef_engine_free(clef_engine *engine);

/* clef_decide through the engine's cache: same contract, same result. */
clef_status clef_engine_decide(clef_engine *engine, const char *json, size_t len,
                               const clef_decide_options *options, clef_decide_result *result,
                               clef_error *err);

/* n requests (jsons[i] of lens[i] bytes) with the same options, their
 * backbone work in one pass: results[i] is what clef_engine_decide gives for
 * request i (refusals included); backbone_ms is the shared pass's.  A
 * non-OK status means clef failed for the batch: every result is then empty
 * (nothing to free) and err says why. */
clef_status clef_engine_decide_batch(clef_engine *engine, size_t n, const char *const *jsons,
                                     const size_t *lens, const clef_decide_options *options,
                                     clef_decide_result *results, clef_error *err);

/* Called by clef_engine_decide_passes as soon as results[i] is final. */
typedef void (*clef_engine_done_fn)(size_t i, void *ctx);

/* clef_engine_decide_batch for a server's queue: the requests' backbone work
 * runs in passes of at most max_tokens backbone tokens (0: no limit; a
 * request larger than that runs in a pass of its own), in request order,
 * because once a pass fills the matrix kernels a bigger one is no faster
 * and only delays the answers in it.  done(i, ctx) (NULL: none) is called
 * on the calling thread as each result is final: refusals at once, the
 * others after their pass; results[i] then belongs to the caller.  A non-OK
 * status means clef failed: results not handed to done are empty. */
clef_status clef_engine_decide_passes(clef_engine *engine, size_t n, const char *const *jsons,
                                      const size_t *lens, const clef_decide_options *options,
                                      size_t max_tokens, clef_engine_done_fn done, void *ctx,
                                      clef_decide_result *results, clef_error *err);

/* Backbone tokens per pass past which batching stops paying on CPUs: at
 * ~256 rows the matrix products already reach their tile throughput
 * (clef bench -b, README "Batching"). */
#define CLEF_ENGINE_DEFAULT_PASS_TOKENS 256

void clef_engine_get_stats(clef_engine *engine, clef_engine_stats *out);

/* ---- measuring speed (clef bench) ----------------------------------------- */

/* What a loaded model computes with.  Strings are owned by the model. */
typedef struct clef_model_info {
    const char *kernels;      /* CPU path chosen at load (CLEF_CPU=ref|avx2|avx2+vnni|
                               * avx512|amx|neon|auto): "ref", "avx2+vnni",
                               * "avx512+bf16+vnni", ...                                  */
    const char *weight_type;  /* backbone layer matrices' types, most bytes first:
                               * "BF16", "Q4_K+Q6_K", ...                                 */
    const char *precision;    /* activations the largest matrix meets: "f32", "bf16", "int8" */
    int n_threads, n_layer, n_vocab;
    uint64_t matrix_bytes;    /* stored bytes of the layer matrices                        */
    uint64_t matrix_params;   /* their elements                                            */
} clef_model_info;

void clef_model_get_info(const clef_model *model, clef_model_info *info);

/* Where one forward's time went: wall seconds by stage (the rest of total_s
 * is norms, activations, rotary, copies: "other") and FLOPs counted from the
 * shapes (matmuls 2·in·out per token; attention 4·D·H per query and visible
 * key; delta rule 7·Dk·Dv·Hv per token).  head_s: the final norm, plus, for
 * a model with a decision head and a prompt of >= 64 tokens, one scoring of
 * four synthetic questions (14 options) over it. */
typedef struct clef_forward_stats {
    double total_s, matmul_s, attention_s, delta_s, head_s;
    double matmul_flop, attention_flop, delta_flop;
} clef_forward_stats;

/* clef_forward that also fills *stats (overwritten). */
clef_status clef_forward_profiled(clef_model *model, const int32_t *ids, size_t n, float *hidden,
                                  clef_forward_stats *stats, clef_error *err);

/* n_seq independent prompts of n tokens each (ids [n_seq][n], hidden
 * [n_seq][n][n_embd]) in one backbone pass, as a server batches requests:
 * their tokens share every matrix product.  *stats covers the whole pass
 * (the head is scored once per prompt of >= 64 tokens). */
clef_status clef_forward_batch_profiled(clef_model *model, size_t n_seq, const int32_t *ids,
                                        size_t n, float *hidden, clef_forward_stats *stats,
                                        clef_error *err);

/* This machine's arithmetic peak in GFLOP/s (GOP/s for int8) on the model's
 * threads for the instruction its largest matrices use (f32 FMA, vdpbf16ps,
 * vpdpbusd), measured for about `seconds` with register-resident loops. */
double clef_model_peak_gflops(clef_model *model, double seconds);

/* ---- file inspection ------------------------------------------------------ */

/* Print architecture, hyperparameters, tokenizer summary and a tensor table
 * of any GGUF file to out (what `clef info` shows). */
clef_status clef_describe_file(const char *path, FILE *out, clef_error *err);

/* ---- writing model files ---------------------------------------------------- */

/* Weight-type recipes by name: "F32", "F16", "BF16", "Q8_0", "Q4_K_M",
 * "Q5_K_M", "Q6_K" (llama-quantize's choices per tensor; the decision head
 * is never re-encoded).  Both writers stream: memory stays bounded by a
 * chunk of rows, whatever the model's size. */
typedef struct clef_write_params {
    int n_threads;          /* threads encoding rows; 0 = all cores          */
    FILE *log;              /* one progress line per tensor; NULL = silent   */
} clef_write_params;

clef_write_params clef_write_default_params(void);

/* Re-encode the GGUF model at in_path into out_path with recipe `type`:
 * metadata copied with general.file_type set, tensors in file order. */
clef_status clef_quantize_file(const char *in_path, const char *out_path, const char *type,
                               const clef_write_params *params, clef_error *err);

/* A random-weight model (benchmarks and tests: its answers mean nothing).
 * arch "clef" (backbone + decision head) or "qwen35"; shape "tiny" (like the
 * oracle's clef-tiny), "small" (hidden 256: every K-quant path), "0.8b"
 * (Qwen3.5-0.8B-shaped), "flash" (Clef-Flash-shaped); type as above.
 * Same arguments, same bytes. */
typedef struct clef_synth_spec {
    const char *arch;
    const char *shape;
    const char *type;
    uint64_t seed;
} clef_synth_spec;

clef_status clef_synth_model(const clef_synth_spec *spec, const char *out_path,
                             const clef_write_params *params, clef_error *err);

#ifdef __cplusplus
}
#endif
#endif /* CLEF_H */
