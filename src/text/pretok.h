/*
 * text/pretok.h — the pre-tokenizer: split text into the pieces that BPE
 * then encodes one by one.
 *
 * A tok_pretok is one compiled PCRE2 pattern, chosen by the GGUF
 * `tokenizer.ggml.pre` name.  Splitting follows Hugging Face's
 * Split(regex, Isolated): every match is a piece, and any text between
 * matches is a piece of its own (in practice the patterns match every
 * character, so there are no gaps).
 *
 * `\s` in the reference patterns means Unicode White_Space (it includes
 * U+0085 and excludes U+FEFF); PCRE2's own \s differs, so the patterns here
 * spell the set out as an explicit class.
 *
 * Contract: the text must already be valid UTF-8 (the caller validates; the
 * match runs with PCRE2_NO_UTF_CHECK) and may contain NUL bytes.  A compiled
 * tok_pretok is immutable: several threads may split with it at once.
 */
#ifndef CLEF_TEXT_PRETOK_H
#define CLEF_TEXT_PRETOK_H

#include <stddef.h>

#include "clef.h"

typedef enum tok_pre_kind {
    TOK_PRE_QWEN2 = 0,   /* Qwen2 / Qwen3: letters only in words         */
    TOK_PRE_QWEN35 = 1,  /* Qwen3.5: combining marks join letters (\p{M}) */
} tok_pre_kind;

typedef struct tok_pretok tok_pretok;

/* Map a GGUF `tokenizer.ggml.pre` value (name[0..len), not NUL-terminated)
 * to a kind; fails with CLEF_ERR_UNSUPPORTED naming the value. */
clef_status tok_pre_kind_from_name(const char *name, size_t len, tok_pre_kind *out,
                                   clef_error *err);

/* Compile the pattern for kind (JIT when available).  *out: caller frees
 * with tok_pretok_free. */
clef_status tok_pretok_new(tok_pre_kind kind, tok_pretok **out, clef_error *err);
void tok_pretok_free(tok_pretok *p);

tok_pre_kind tok_pretok_kind(const tok_pretok *p);

/* Called once per piece, in text order; piece points into the text given
 * to tok_pretok_split.  A non-OK return stops the split and is returned. */
typedef clef_status (*tok_piece_fn)(void *ctx, const char *piece, size_t len,
                                    clef_error *err);

/* Split text[0..len) into pieces (none for len 0). */
clef_status tok_pretok_split(const tok_pretok *p, const char *text, size_t len,
                             tok_piece_fn fn, void *ctx, clef_error *err);

#endif
