/*
 * text/pretok.c — the pre-tokenizer patterns and the PCRE2 split loop.
 *
 * The reference patterns are written for the Rust/Oniguruma engines used by
 * Hugging Face tokenizers.  Two things differ in PCRE2 and are handled here:
 * `\s`/`\S` (spelled out as the White_Space class below), and leftover text
 * between matches (emitted as its own piece, as Split(Isolated) does).
 */
#include "text/pretok.h"

#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/error.h"

struct tok_pretok {
    tok_pre_kind kind;
    pcre2_code *code;
};

/* Unicode White_Space (what the reference engine's \s matches). */
#define WS "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}" \
           "\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

/* Contractions, words (with one leading non-letter), single digits,
 * punctuation runs, newline runs, whitespace not followed by text, other
 * whitespace — tried in this order at each position. */
static const char pattern_qwen2[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)"
    "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+"
    "|\\p{N}"
    "| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*"
    "|[" WS "]*[\\r\\n]+"
    "|[" WS "]+(?![^" WS "])"
    "|[" WS "]+";

/* Qwen3.5: combining marks (\p{M}) belong to words, not to punctuation. */
static const char pattern_qwen35[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)"
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+"
    "|\\p{N}"
    "| ?[^" WS "\\p{L}\\p{M}\\p{N}]+[\\r\\n]*"
    "|[" WS "]*[\\r\\n]+"
    "|[" WS "]+(?![^" WS "])"
    "|[" WS "]+";

clef_status tok_pre_kind_from_name(const char *name, size_t len, tok_pre_kind *out,
                                   clef_error *err) {
    if (len == 5 && memcmp(name, "qwen2", 5) == 0) {
        *out = TOK_PRE_QWEN2;
        return CLEF_OK;
    }
    if (len == 6 && memcmp(name, "qwen35", 6) == 0) {
        *out = TOK_PRE_QWEN35;
        return CLEF_OK;
    }
    return clef_err_set(err, CLEF_ERR_UNSUPPORTED,
                        "unsupported pre-tokenizer tokenizer.ggml.pre = '%.*s' "
                        "(supported: qwen2, qwen35)",
                        (int)(len > 64 ? 64 : len), name);
}

clef_status tok_pretok_new(tok_pre_kind kind, tok_pretok **out, clef_error *err) {
    *out = NULL;
    const char *pattern = kind == TOK_PRE_QWEN35 ? pattern_qwen35 : pattern_qwen2;
    int code_err = 0;
    PCRE2_SIZE err_off = 0;
    pcre2_code *code = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                                     PCRE2_UTF | PCRE2_UCP | PCRE2_NEVER_BACKSLASH_C,
                                     &code_err, &err_off, NULL);
    if (!code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code_err, msg, sizeof msg);
        return clef_err_set(err, CLEF_ERR_INTERNAL,
                            "pre-tokenizer pattern does not compile at offset %zu: %s",
                            (size_t)err_off, (const char *)msg);
    }
    /* JIT is an optimisation only: without it pcre2_match interprets. */
    (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    tok_pretok *p = malloc(sizeof *p);
    if (!p) {
        pcre2_code_free(code);
        return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory for the pre-tokenizer");
    }
    p->kind = kind;
    p->code = code;
    *out = p;
    return CLEF_OK;
}

void tok_pretok_free(tok_pretok *p) {
    if (!p) return;
    pcre2_code_free(p->code);
    free(p);
}

tok_pre_kind tok_pretok_kind(const tok_pretok *p) { return p->kind; }

/* Length of the UTF-8 sequence starting with lead byte b (text is valid). */
static size_t utf8_seq_len(unsigned char b) {
    if (b < 0x80) return 1;
    if (b < 0xE0) return 2;
    if (b < 0xF0) return 3;
    return 4;
}

clef_status tok_pretok_split(const tok_pretok *p, const char *text, size_t len,
                             tok_piece_fn fn, void *ctx, clef_error *err) {
    if (len == 0) return CLEF_OK;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(p->code, NULL);
    if (!md) return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory for regex match data");
    clef_status st = CLEF_OK;
    size_t pos = 0;
    while (pos < len && st == CLEF_OK) {
        int rc = pcre2_match(p->code, (PCRE2_SPTR)text, len, pos, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) {
            st = fn(ctx, text + pos, len - pos, err);
            break;
        }
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            st = clef_err_set(err, CLEF_ERR_INTERNAL,
                              "pre-tokenizer match failed at byte %zu: %s", pos,
                              (const char *)msg);
            break;
        }
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t start = ov[0], end = ov[1];
        if (start > pos) st = fn(ctx, text + pos, start - pos, err);
        if (st != CLEF_OK) break;
        if (end == start) {
            /* No alternative matches empty; guard anyway so the loop ends. */
            end = start + utf8_seq_len((unsigned char)text[start]);
            if (end > len) end = len;
        }
        st = fn(ctx, text + start, end - start, err);
        pos = end;
    }
    pcre2_match_data_free(md);
    return st;
}
