/*
 * text/bpe.h — byte-level BPE: the GPT-2 byte alphabet, the vocabulary
 * (token string → id), the merge table ((left id, right id) → rank) and the
 * merge loop that turns one pre-tokenized piece into ids.
 *
 * Built from plain arrays of strings, so it needs no GGUF file: tokens[i]
 * is the string of id i (in the byte alphabet for ordinary tokens), and
 * merges[r] is "left right" with rank r (lower merges first).  A merge whose
 * parts or result are not tokens is a format error.  The tok_bpe keeps its
 * own copy of every string.
 *
 * Encoding follows Hugging Face's BPE model: a piece starts as one symbol
 * per byte; repeatedly the adjacent pair with the lowest rank (leftmost on
 * ties) is replaced by its merge result, until no pair has a merge.  A
 * binary heap over a linked list of symbols keeps this O(n log n) per piece.
 *
 * A built tok_bpe is immutable and may be shared by threads; each thread
 * passes its own tok_bpe_scratch.
 */
#ifndef CLEF_TEXT_BPE_H
#define CLEF_TEXT_BPE_H

#include <stddef.h>
#include <stdint.h>

#include "clef.h"

/* A string view (not NUL-terminated; may contain NUL bytes). */
typedef struct tok_strview {
    const char *ptr;
    size_t len;
} tok_strview;

/* ---- the GPT-2 byte alphabet ---- */

/* UTF-8 of the character that stands for byte b; returns its length (1 or 2). */
size_t tok_byte_to_utf8(uint8_t b, char out[2]);

/* Byte that code point cp stands for, or -1 when cp is not in the alphabet. */
int tok_codepoint_to_byte(uint32_t cp);

/* ---- vocabulary and merges ---- */

typedef struct tok_bpe tok_bpe;

/* Build from tokens[0..n_tokens) and merges[0..n_merges).  *out: caller
 * frees with tok_bpe_free.  Duplicate token strings: the first id wins.
 * Duplicate merges: the first (lowest) rank wins. */
clef_status tok_bpe_new(const tok_strview *tokens, size_t n_tokens,
                        const tok_strview *merges, size_t n_merges, tok_bpe **out,
                        clef_error *err);
void tok_bpe_free(tok_bpe *bpe);

size_t tok_bpe_n_tokens(const tok_bpe *bpe);

/* The string of id (id < n_tokens); valid while bpe lives. */
tok_strview tok_bpe_token(const tok_bpe *bpe, int32_t id);

/* Id of the token whose string is s[0..len), or -1. */
int32_t tok_bpe_find(const tok_bpe *bpe, const char *s, size_t len);

/* ---- encoding ---- */

/* Per-caller working memory, grown on demand; zero-initialise it, release
 * with tok_bpe_scratch_free. */
typedef struct tok_bpe_scratch {
    int32_t *sym_id;      /* [cap] current token id of each symbol        */
    int32_t *sym_next;    /* [cap] next live symbol, -1 at the end        */
    int32_t *sym_prev;    /* [cap] previous live symbol, -1 at the start  */
    void *heap;           /* [heap_cap] candidate pairs                    */
    size_t cap, heap_cap;
} tok_bpe_scratch;

void tok_bpe_scratch_free(tok_bpe_scratch *s);

/* A growable id list (caller-owned; free(ids->ids) when done). */
typedef struct tok_ids {
    int32_t *ids;
    size_t n, cap;
} tok_ids;

clef_status tok_ids_push(tok_ids *ids, int32_t id, clef_error *err);

/* Encode piece[0..len) and append its ids.  Fails (CLEF_ERR_UNSUPPORTED)
 * when a byte of the piece has no token in the vocabulary. */
clef_status tok_bpe_encode(const tok_bpe *bpe, const char *piece, size_t len,
                           tok_bpe_scratch *scratch, tok_ids *out, clef_error *err);

#endif
