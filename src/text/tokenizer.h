/*
 * text/tokenizer.h — the byte-level BPE tokenizer of Qwen vocabularies
 * (GGUF `tokenizer.ggml.model` = "gpt2", `pre` = "qwen2" or "qwen35"), and
 * the internal entry points the model loader and the prompt encoder use.
 * The public functions (clef_tokenizer_load, clef_tokenize, ...) are
 * declared in clef.h and implemented in tokenizer.c on top of these.
 *
 * Encoding, as Hugging Face tokenizers does it for these vocabularies:
 *   1. with parse_special, split the raw text on added tokens (GGUF token
 *      type CONTROL or USER_DEFINED), longest match at each position; each
 *      match is its id;
 *   2. NFC-normalise every other segment on its own (utf8proc);
 *   3. pre-tokenize the segment (text/pretok.h);
 *   4. encode each piece with byte-level BPE (text/bpe.h).
 * No BOS/EOS is added.  Text must be valid UTF-8 (checked up front; the
 * error names the byte offset) and may contain NUL bytes.
 *
 * Decoding: ordinary tokens map back through the GPT-2 byte alphabet; added
 * (CONTROL / USER_DEFINED) tokens decode to their text verbatim.
 *
 * A loaded clef_tokenizer is immutable: every function here that takes a
 * const clef_tokenizer may run on several threads at once.
 */
#ifndef CLEF_TEXT_TOKENIZER_H
#define CLEF_TEXT_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "clef.h"
#include "format/gguf.h"
#include "text/pretok.h"

/* GGUF tokenizer.ggml.token_type values. */
typedef enum tok_type {
    TOK_TYPE_NORMAL = 1,
    TOK_TYPE_UNKNOWN = 2,
    TOK_TYPE_CONTROL = 3,
    TOK_TYPE_USER_DEFINED = 4,
    TOK_TYPE_UNUSED = 5,
    TOK_TYPE_BYTE = 6,
} tok_type;

/* Build a tokenizer from an open GGUF file's tokenizer.ggml.* metadata.
 * Everything needed is copied: f may be closed afterwards.  *out: caller
 * frees with clef_tokenizer_free.  Errors name the key that was missing or
 * wrong (CLEF_ERR_FORMAT), or the unsupported model/pre value
 * (CLEF_ERR_UNSUPPORTED). */
clef_status tok_load_gguf(const gguf_file *f, clef_tokenizer **out, clef_error *err);

/* The same, splitting with *pre_override instead of the file's
 * tokenizer.ggml.pre when pre_override is non-NULL (the pre key must still
 * be present and known).  Why: spec/clef-model.md §2 — Clef checkpoints
 * split with the Qwen2 regex although llama.cpp's converter may label
 * them "qwen35"; the model loader follows the checkpoint. */
clef_status tok_load_gguf_ex(const gguf_file *f, const tok_pre_kind *pre_override,
                             clef_tokenizer **out, clef_error *err);

/* Number of tokens (ids 0..n-1); the same as clef_tokenizer_vocab_size. */
size_t tok_n_tokens(const clef_tokenizer *tok);

/* Id of the token whose string is s[0..len) exactly (e.g. "<|im_start|>"),
 * or -1.  Ordinary tokens are spelled in the byte alphabet ("Ġthe"). */
int32_t tok_find(const clef_tokenizer *tok, const char *s, size_t len);

/* The stored string of id (NULL when id is out of range); valid while tok
 * lives; *len receives its length. */
const char *tok_token_str(const clef_tokenizer *tok, int32_t id, size_t *len);

/* GGUF token type of id (TOK_TYPE_*), 0 when id is out of range. */
int tok_token_type(const clef_tokenizer *tok, int32_t id);

/* tokenizer.ggml.bos_token_id / eos_token_id, -1 when absent. */
int32_t tok_bos(const clef_tokenizer *tok);
int32_t tok_eos(const clef_tokenizer *tok);

tok_pre_kind tok_pre(const clef_tokenizer *tok);

/* Append the ids of text[0..len) to the growable array (*ids, *n_ids,
 * *cap) — what clef_tokenize does, for callers that build one id list from
 * several pieces.  *ids is realloc'd as needed (start from NULL, 0, 0; the
 * caller frees it with free/clef_free).  On failure *n_ids is restored to
 * its value before the call. */
clef_status tok_encode_append(const clef_tokenizer *tok, const char *text, size_t len,
                              bool parse_special, int32_t **ids, size_t *n_ids,
                              size_t *cap, clef_error *err);

/* Check that text[0..len) is valid UTF-8; the error (CLEF_ERR_INVALID_ARG)
 * names the byte offset of the first invalid sequence. */
clef_status tok_check_utf8(const char *text, size_t len, clef_error *err);

#endif
