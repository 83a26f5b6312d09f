/*
 * text/tokenizer.c — loading the tokenizer from GGUF metadata, the
 * added-token split, NFC, and the public clef_tokenize/clef_detokenize.
 *
 * Added tokens are few (26 in Qwen3) and all start with '<', so matching
 * them is a table of candidates per first byte, longest first, tried only
 * at positions whose byte starts some added token.
 */
#include "text/tokenizer.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "core/error.h"
#include "text/bpe.h"

/* Code points of the byte alphabet are below this (U+0100 + 68 bytes). */
#define TOK_ALPHABET_END 324

struct clef_tokenizer {
    tok_bpe *bpe;
    tok_pretok *pre;
    uint8_t *types;                   /* [n_tokens] TOK_TYPE_*                      */
    int32_t *added;                   /* [n_added] by first byte, longest first     */
    size_t n_added;
    uint32_t added_start[257];        /* added[added_start[b]..added_start[b+1]) start with b */
    int16_t cp_byte[TOK_ALPHABET_END]; /* alphabet code point -> byte, -1 if none   */
    int32_t bos, eos;
};

/* ---- accessors ---- */

size_t tok_n_tokens(const clef_tokenizer *tok) { return tok_bpe_n_tokens(tok->bpe); }
size_t clef_tokenizer_vocab_size(const clef_tokenizer *tok) { return tok ? tok_n_tokens(tok) : 0; }

int32_t tok_find(const clef_tokenizer *tok, const char *s, size_t len) {
    return tok_bpe_find(tok->bpe, s, len);
}

const char *tok_token_str(const clef_tokenizer *tok, int32_t id, size_t *len) {
    if (id < 0 || (size_t)id >= tok_n_tokens(tok)) return NULL;
    tok_strview v = tok_bpe_token(tok->bpe, id);
    if (len) *len = v.len;
    return v.ptr;
}

int tok_token_type(const clef_tokenizer *tok, int32_t id) {
    if (id < 0 || (size_t)id >= tok_n_tokens(tok)) return 0;
    return tok->types[id];
}

int32_t tok_bos(const clef_tokenizer *tok) { return tok->bos; }
int32_t tok_eos(const clef_tokenizer *tok) { return tok->eos; }
tok_pre_kind tok_pre(const clef_tokenizer *tok) { return tok_pretok_kind(tok->pre); }

static bool type_is_added(int type) {
    return type == TOK_TYPE_CONTROL || type == TOK_TYPE_USER_DEFINED;
}

/* ---- loading ---- */

void clef_tokenizer_free(clef_tokenizer *tok) {
    if (!tok) return;
    tok_bpe_free(tok->bpe);
    tok_pretok_free(tok->pre);
    free(tok->types);
    free(tok->added);
    free(tok);
}

/* The string array under key, or a format error naming the key. */
static clef_status get_str_array(const gguf_file *f, const char *key, const gguf_kv **out,
                                 clef_error *err) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return clef_err_set(err, CLEF_ERR_FORMAT, "missing metadata key %s", key);
    if (kv->type != GGUF_VT_ARRAY || kv->arr_type != GGUF_VT_STRING)
        return clef_err_set(err, CLEF_ERR_FORMAT, "%s is %s, expected an array of strings",
                            key,
                            kv->type == GGUF_VT_ARRAY ? "an array of other values"
                                                      : gguf_vtype_name(kv->type));
    *out = kv;
    return CLEF_OK;
}

/* Views of every string of a string array (caller frees the array). */
static clef_status str_views(const gguf_file *f, const gguf_kv *kv, const char *key,
                             tok_strview **out, clef_error *err) {
    tok_strview *v = malloc((kv->arr_n ? kv->arr_n : 1) * sizeof *v);
    if (!v) return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory reading %s", key);
    for (uint64_t i = 0; i < kv->arr_n; i++) {
        gguf_str s;
        if (!gguf_arr_str(f, kv, i, &s)) {
            free(v);
            return clef_err_set(err, CLEF_ERR_FORMAT, "%s[%llu] cannot be read", key,
                                (unsigned long long)i);
        }
        v[i] = (tok_strview){s.ptr, (size_t)s.len};
    }
    *out = v;
    return CLEF_OK;
}

static clef_status load_bpe(const gguf_file *f, clef_tokenizer *tok, clef_error *err) {
    const gguf_kv *tokens_kv = NULL, *merges_kv = NULL;
    clef_status st = get_str_array(f, "tokenizer.ggml.tokens", &tokens_kv, err);
    if (st == CLEF_OK) st = get_str_array(f, "tokenizer.ggml.merges", &merges_kv, err);
    if (st != CLEF_OK) return st;
    if (tokens_kv->arr_n == 0 || tokens_kv->arr_n > INT32_MAX)
        return clef_err_set(err, CLEF_ERR_FORMAT, "tokenizer.ggml.tokens has %llu entries",
                            (unsigned long long)tokens_kv->arr_n);
    tok_strview *tokens = NULL, *merges = NULL;
    st = str_views(f, tokens_kv, "tokenizer.ggml.tokens", &tokens, err);
    if (st == CLEF_OK) st = str_views(f, merges_kv, "tokenizer.ggml.merges", &merges, err);
    if (st == CLEF_OK)
        st = tok_bpe_new(tokens, (size_t)tokens_kv->arr_n, merges, (size_t)merges_kv->arr_n,
                         &tok->bpe, err);
    free(tokens);
    free(merges);
    return st;
}

/* token_type is optional (all NORMAL when absent, as llama.cpp reads it). */
static clef_status load_types(const gguf_file *f, clef_tokenizer *tok, clef_error *err) {
    size_t n = tok_n_tokens(tok);
    tok->types = malloc(n);
    if (!tok->types) return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory for token types");
    memset(tok->types, TOK_TYPE_NORMAL, n);
    const gguf_kv *kv = gguf_find_kv(f, "tokenizer.ggml.token_type");
    if (!kv) return CLEF_OK;
    if (kv->type != GGUF_VT_ARRAY || kv->arr_n != n)
        return clef_err_set(err, CLEF_ERR_FORMAT,
                            "tokenizer.ggml.token_type must be an array of %zu integers "
                            "(one per token)", n);
    for (size_t i = 0; i < n; i++) {
        int64_t t;
        if (!gguf_arr_i64(kv, i, &t))
            return clef_err_set(err, CLEF_ERR_FORMAT,
                                "tokenizer.ggml.token_type is not an integer array");
        if (t < TOK_TYPE_NORMAL || t > TOK_TYPE_BYTE)
            return clef_err_set(err, CLEF_ERR_FORMAT,
                                "tokenizer.ggml.token_type[%zu] = %lld is not a token type (1..6)",
                                i, (long long)t);
        tok->types[i] = (uint8_t)t;
    }
    return CLEF_OK;
}

static int added_cmp(const void *a, const void *b, void *ctx) {
    const clef_tokenizer *tok = ctx;
    tok_strview x = tok_bpe_token(tok->bpe, *(const int32_t *)a);
    tok_strview y = tok_bpe_token(tok->bpe, *(const int32_t *)b);
    unsigned char fx = (unsigned char)x.ptr[0], fy = (unsigned char)y.ptr[0];
    if (fx != fy) return fx < fy ? -1 : 1;
    if (x.len != y.len) return x.len > y.len ? -1 : 1;
    return *(const int32_t *)a < *(const int32_t *)b ? -1 : 1;
}

static clef_status index_added(clef_tokenizer *tok, clef_error *err) {
    size_t n = tok_n_tokens(tok), n_added = 0;
    for (size_t i = 0; i < n; i++)
        if (type_is_added(tok->types[i]) && tok_bpe_token(tok->bpe, (int32_t)i).len) n_added++;
    tok->added = malloc((n_added ? n_added : 1) * sizeof *tok->added);
    if (!tok->added) return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory for added tokens");
    tok->n_added = 0;
    for (size_t i = 0; i < n; i++)
        if (type_is_added(tok->types[i]) && tok_bpe_token(tok->bpe, (int32_t)i).len)
            tok->added[tok->n_added++] = (int32_t)i;
    qsort_r(tok->added, tok->n_added, sizeof *tok->added, added_cmp, tok);
    size_t j = 0;
    for (unsigned b = 0; b < 256; b++) {
        tok->added_start[b] = (uint32_t)j;
        while (j < tok->n_added &&
               (unsigned char)tok_bpe_token(tok->bpe, tok->added[j]).ptr[0] == b)
            j++;
    }
    tok->added_start[256] = (uint32_t)j;
    return CLEF_OK;
}

static clef_status load_special_id(const gguf_file *f, const char *key, size_t n,
                                   int32_t *out, clef_error *err) {
    *out = -1;
    if (!gguf_find_kv(f, key)) return CLEF_OK;
    int64_t v;
    if (!gguf_get_i64(f, key, &v))
        return clef_err_set(err, CLEF_ERR_FORMAT, "%s is not an integer", key);
    if (v < 0 || (uint64_t)v >= n)
        return clef_err_set(err, CLEF_ERR_FORMAT, "%s = %lld is outside the %zu-token vocabulary",
                            key, (long long)v, n);
    *out = (int32_t)v;
    return CLEF_OK;
}

static clef_status load_pre(const gguf_file *f, const tok_pre_kind *pre_override,
                            clef_tokenizer *tok, clef_error *err) {
    gguf_str model, pre;
    if (!gguf_get_str(f, "tokenizer.ggml.model", &model))
        return clef_err_set(err, CLEF_ERR_FORMAT, "missing metadata key tokenizer.ggml.model");
    if (!gguf_str_eq(model, "gpt2"))
        return clef_err_set(err, CLEF_ERR_UNSUPPORTED,
                            "unsupported tokenizer.ggml.model = '%.*s' (clef runs byte-level "
                            "BPE, 'gpt2')",
                            (int)(model.len > 64 ? 64 : model.len), model.ptr);
    if (!gguf_get_str(f, "tokenizer.ggml.pre", &pre))
        return clef_err_set(err, CLEF_ERR_FORMAT, "missing metadata key tokenizer.ggml.pre");
    tok_pre_kind kind;
    clef_status st = tok_pre_kind_from_name(pre.ptr, (size_t)pre.len, &kind, err);
    if (st == CLEF_OK) st = tok_pretok_new(pre_override ? *pre_override : kind, &tok->pre, err);
    return st;
}

clef_status tok_load_gguf(const gguf_file *f, clef_tokenizer **out, clef_error *err) {
    return tok_load_gguf_ex(f, NULL, out, err);
}

clef_status tok_load_gguf_ex(const gguf_file *f, const tok_pre_kind *pre_override,
                             clef_tokenizer **out, clef_error *err) {
    *out = NULL;
    clef_tokenizer *tok = calloc(1, sizeof *tok);
    if (!tok) return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory for the tokenizer");
    clef_status st = load_pre(f, pre_override, tok, err);
    if (st == CLEF_OK) st = load_bpe(f, tok, err);
    if (st == CLEF_OK) st = load_types(f, tok, err);
    if (st == CLEF_OK) st = index_added(tok, err);
    size_t n = tok->bpe ? tok_n_tokens(tok) : 0;
    if (st == CLEF_OK) st = load_special_id(f, "tokenizer.ggml.bos_token_id", n, &tok->bos, err);
    if (st == CLEF_OK) st = load_special_id(f, "tokenizer.ggml.eos_token_id", n, &tok->eos, err);
    if (st != CLEF_OK) {
        clef_tokenizer_free(tok);
        return st;
    }
    for (uint32_t cp = 0; cp < TOK_ALPHABET_END; cp++)
        tok->cp_byte[cp] = (int16_t)tok_codepoint_to_byte(cp);
    *out = tok;
    return CLEF_OK;
}

clef_status clef_tokenizer_load(const char *gguf_path, clef_tokenizer **out, clef_error *err) {
    if (!out) return clef_err_set(err, CLEF_ERR_INVALID_ARG, "clef_tokenizer_load: out is NULL");
    *out = NULL;
    if (!gguf_path)
        return clef_err_set(err, CLEF_ERR_INVALID_ARG, "clef_tokenizer_load: path is NULL");
    gguf_file *f = NULL;
    clef_status st = gguf_open(gguf_path, &f, err);
    if (st != CLEF_OK) return st;
    st = tok_load_gguf(f, out, err);
    if (st != CLEF_OK) clef_err_wrap(err, "tokenizer of '%s'", gguf_path);
    gguf_close(f);
    return st;
}

/* ---- encoding ---- */

clef_status tok_check_utf8(const char *text, size_t len, clef_error *err) {
    size_t i = 0;
    while (i < len) {
        if ((unsigned char)text[i] < 0x80) {
            i++;
            continue;
        }
        utf8proc_int32_t cp;
        utf8proc_ssize_t n = utf8proc_iterate((const utf8proc_uint8_t *)text + i,
                                              (utf8proc_ssize_t)(len - i), &cp);
        if (n <= 0)
            return clef_err_set(err, CLEF_ERR_INVALID_ARG,
                                "invalid UTF-8 at byte offset %zu (byte 0x%02x)", i,
                                (unsigned char)text[i]);
        i += (size_t)n;
    }
    return CLEF_OK;
}

static bool is_ascii(const char *s, size_t len) {
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] >= 0x80) return false;
    return true;
}

/* What the pre-tokenizer callback needs to BPE-encode each piece. */
typedef struct encode_ctx {
    const clef_tokenizer *tok;
    tok_bpe_scratch scratch;
    tok_ids out;
} encode_ctx;

static clef_status encode_piece(void *ctx, const char *piece, size_t len, clef_error *err) {
    encode_ctx *c = ctx;
    return tok_bpe_encode(c->tok->bpe, piece, len, &c->scratch, &c->out, err);
}

/* NFC, pre-tokenize and BPE one segment that holds no added token. */
static clef_status encode_segment(encode_ctx *c, const char *seg, size_t len, clef_error *err) {
    if (len == 0) return CLEF_OK;
    if (is_ascii(seg, len)) /* ASCII is always in NFC */
        return tok_pretok_split(c->tok->pre, seg, len, encode_piece, c, err);
    utf8proc_uint8_t *nfc = NULL;
    utf8proc_ssize_t n = utf8proc_map((const utf8proc_uint8_t *)seg, (utf8proc_ssize_t)len,
                                      &nfc, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    if (n < 0)
        return clef_err_set(err, n == UTF8PROC_ERROR_NOMEM ? CLEF_ERR_NOMEM : CLEF_ERR_INVALID_ARG,
                            "NFC normalisation of a %zu-byte segment failed: %s", len,
                            utf8proc_errmsg(n));
    clef_status st = tok_pretok_split(c->tok->pre, (const char *)nfc, (size_t)n, encode_piece, c, err);
    free(nfc);
    return st;
}

/* Longest added token that starts at text[i], or -1. */
static int32_t match_added(const clef_tokenizer *tok, const char *text, size_t len, size_t i,
                           size_t *match_len) {
    unsigned char b = (unsigned char)text[i];
    for (uint32_t k = tok->added_start[b]; k < tok->added_start[b + 1]; k++) {
        tok_strview t = tok_bpe_token(tok->bpe, tok->added[k]);
        if (t.len <= len - i && memcmp(text + i, t.ptr, t.len) == 0) {
            *match_len = t.len;
            return tok->added[k];
        }
    }
    return -1;
}

static clef_status encode_text(encode_ctx *c, const char *text, size_t len, bool parse_special,
                               clef_error *err) {
    const clef_tokenizer *tok = c->tok;
    size_t seg = 0;
    clef_status st = CLEF_OK;
    if (parse_special && tok->n_added) {
        size_t i = 0;
        while (i < len && st == CLEF_OK) {
            size_t mlen = 0;
            int32_t id = match_added(tok, text, len, i, &mlen);
            if (id < 0) {
                i++;
                continue;
            }
            st = encode_segment(c, text + seg, i - seg, err);
            if (st == CLEF_OK) st = tok_ids_push(&c->out, id, err);
            i += mlen;
            seg = i;
        }
    }
    if (st == CLEF_OK) st = encode_segment(c, text + seg, len - seg, err);
    return st;
}

clef_status tok_encode_append(const clef_tokenizer *tok, const char *text, size_t len,
                              bool parse_special, int32_t **ids, size_t *n_ids,
                              size_t *cap, clef_error *err) {
    if (!tok || !ids || !n_ids || !cap || (!text && len))
        return clef_err_set(err, CLEF_ERR_INVALID_ARG, "tokenize: NULL argument");
    if (len == 0) return CLEF_OK;
    clef_status st = tok_check_utf8(text, len, err);
    if (st != CLEF_OK) return st;
    size_t n0 = *n_ids;
    encode_ctx c = {.tok = tok, .out = {*ids, *n_ids, *cap}};
    st = encode_text(&c, text, len, parse_special, err);
    tok_bpe_scratch_free(&c.scratch);
    *ids = c.out.ids;
    *cap = c.out.cap;
    *n_ids = st == CLEF_OK ? c.out.n : n0;
    return st;
}

clef_status clef_tokenize(const clef_tokenizer *tok, const char *text, size_t len,
                          bool parse_special, int32_t **ids, size_t *n_ids, clef_error *err) {
    if (!ids || !n_ids) return clef_err_set(err, CLEF_ERR_INVALID_ARG, "clef_tokenize: ids or n_ids is NULL");
    *ids = NULL;
    *n_ids = 0;
    int32_t *buf = NULL;
    size_t n = 0, cap = 0;
    clef_status st = tok_encode_append(tok, text, len, parse_special, &buf, &n, &cap, err);
    if (st == CLEF_OK && !buf) {
        buf = malloc(sizeof *buf); /* never hand back NULL on success */
        if (!buf) st = clef_err_set(err, CLEF_ERR_NOMEM, "out of memory for token ids");
    }
    if (st != CLEF_OK) {
        free(buf);
        return st;
    }
    *ids = buf;
    *n_ids = n;
    return CLEF_OK;
}

/* ---- decoding ---- */

typedef struct byte_buf {
    char *p;
    size_t n, cap;
} byte_buf;

static bool buf_append(byte_buf *b, const void *data, size_t len) {
    if (b->n + len + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + len + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return false;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, data, len);
    b->n += len;
    return true;
}

/* Append the bytes an ordinary token stands for: each character of the byte
 * alphabet is its byte; any other character is kept as it is. */
static bool decode_bytelevel(const clef_tokenizer *tok, tok_strview t, byte_buf *b) {
    size_t i = 0;
    while (i < t.len) {
        utf8proc_int32_t cp = -1;
        utf8proc_ssize_t n = utf8proc_iterate((const utf8proc_uint8_t *)t.ptr + i,
                                              (utf8proc_ssize_t)(t.len - i), &cp);
        if (n <= 0) n = 1, cp = -1; /* a malformed stored string: copy the byte */
        if (cp >= 0 && cp < TOK_ALPHABET_END && tok->cp_byte[cp] >= 0) {
            char byte = (char)tok->cp_byte[cp];
            if (!buf_append(b, &byte, 1)) return false;
        } else if (!buf_append(b, t.ptr + i, (size_t)n)) {
            return false;
        }
        i += (size_t)n;
    }
    return true;
}

clef_status clef_detokenize(const clef_tokenizer *tok, const int32_t *ids, size_t n_ids,
                            char **text, size_t *len, clef_error *err) {
    if (!tok || !text || !len || (!ids && n_ids))
        return clef_err_set(err, CLEF_ERR_INVALID_ARG, "clef_detokenize: NULL argument");
    *text = NULL;
    *len = 0;
    byte_buf b = {0};
    size_t n_tok = tok_n_tokens(tok);
    for (size_t i = 0; i < n_ids; i++) {
        int32_t id = ids[i];
        if (id < 0 || (size_t)id >= n_tok) {
            free(b.p);
            return clef_err_set(err, CLEF_ERR_INVALID_ARG,
                                "token id %d at position %zu is outside the %zu-token vocabulary",
                                id, i, n_tok);
        }
        tok_strview t = tok_bpe_token(tok->bpe, id);
        bool ok = type_is_added(tok->types[id]) ? buf_append(&b, t.ptr, t.len)
                                                : decode_bytelevel(tok, t, &b);
        if (!ok) {
            free(b.p);
            return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory decoding %zu ids", n_ids);
        }
    }
    if (!buf_append(&b, "", 0)) {
        free(b.p);
        return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory decoding %zu ids", n_ids);
    }
    b.p[b.n] = '\0';
    *text = b.p;
    *len = b.n;
    return CLEF_OK;
}
