/*
 * text/bpe.c — vocabulary hash, merge table and the BPE merge loop.
 *
 * Layout: every token string is copied into one blob (NUL after each, for
 * easy debugging; lengths are explicit).  Two open-addressing hash tables
 * with power-of-two capacity and linear probing: string → id (slots hold
 * ids, the key is compared through the blob) and (left, right) → merge.
 * Both are built once at load; a 151k-token vocabulary takes a few ms.
 */
#include "text/bpe.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

#define SLOT_EMPTY UINT32_MAX
#define PAIR_EMPTY UINT64_MAX

typedef struct merge_val {
    uint32_t rank;
    int32_t result;   /* id of the merged token */
} merge_val;

struct tok_bpe {
    size_t n_tokens;
    char *blob;              /* all token strings, each followed by NUL     */
    size_t *tok_off;         /* [n_tokens] offset of each string in blob    */
    uint32_t *tok_len;       /* [n_tokens] length of each string            */
    uint32_t *vocab_slots;   /* [vocab_cap] token id or SLOT_EMPTY          */
    size_t vocab_cap;        /* power of two                                */
    uint64_t *pair_keys;     /* [pair_cap] left << 32 | right, or PAIR_EMPTY */
    merge_val *pair_vals;    /* [pair_cap]                                  */
    size_t pair_cap;         /* power of two                                */
    int32_t byte_id[256];    /* id of each single-byte symbol, -1 if none   */
};

/* ---- the GPT-2 byte alphabet ----
 * Printable Latin-1 bytes stand for themselves; the other 68 bytes (0..32,
 * 127..160, 173) map, in byte order, to U+0100 onwards. */

static bool byte_is_printable(unsigned b) {
    return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
}

static uint32_t byte_codepoint(uint8_t b) {
    if (byte_is_printable(b)) return b;
    unsigned n = 0;
    for (unsigned c = 0; c < b; c++)
        if (!byte_is_printable(c)) n++;
    return 256 + n;
}

size_t tok_byte_to_utf8(uint8_t b, char out[2]) {
    uint32_t cp = byte_codepoint(b);
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

int tok_codepoint_to_byte(uint32_t cp) {
    if (cp < 256) return byte_is_printable(cp) ? (int)cp : -1;
    if (cp >= 256 + 68) return -1;
    unsigned n = cp - 256;
    for (unsigned b = 0; b < 256; b++)
        if (!byte_is_printable(b) && n-- == 0) return (int)b;
    return -1;
}

/* ---- hashing ---- */

static uint64_t hash_bytes(const char *s, size_t len) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ull;
    }
    return h ^ (h >> 29);
}

static uint64_t hash_pair(uint64_t key) {
    key *= 0x9E3779B97F4A7C15ull;
    return key ^ (key >> 31);
}

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

size_t tok_bpe_n_tokens(const tok_bpe *bpe) { return bpe->n_tokens; }

tok_strview tok_bpe_token(const tok_bpe *bpe, int32_t id) {
    tok_strview v = {bpe->blob + bpe->tok_off[id], bpe->tok_len[id]};
    return v;
}

int32_t tok_bpe_find(const tok_bpe *bpe, const char *s, size_t len) {
    size_t mask = bpe->vocab_cap - 1;
    for (size_t i = hash_bytes(s, len) & mask;; i = (i + 1) & mask) {
        uint32_t id = bpe->vocab_slots[i];
        if (id == SLOT_EMPTY) return -1;
        if (bpe->tok_len[id] == len && memcmp(bpe->blob + bpe->tok_off[id], s, len) == 0)
            return (int32_t)id;
    }
}

static const merge_val *find_merge(const tok_bpe *bpe, int32_t left, int32_t right) {
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    size_t mask = bpe->pair_cap - 1;
    for (size_t i = hash_pair(key) & mask;; i = (i + 1) & mask) {
        if (bpe->pair_keys[i] == key) return &bpe->pair_vals[i];
        if (bpe->pair_keys[i] == PAIR_EMPTY) return NULL;
    }
}

/* ---- building ---- */

static clef_status build_vocab(tok_bpe *bpe, const tok_strview *tokens, size_t n,
                               clef_error *err) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (tokens[i].len > UINT32_MAX)
            return clef_err_set(err, CLEF_ERR_FORMAT, "token %zu is %zu bytes long", i,
                                tokens[i].len);
        total += tokens[i].len + 1;
    }
    bpe->n_tokens = n;
    bpe->blob = malloc(total ? total : 1);
    bpe->tok_off = malloc((n ? n : 1) * sizeof *bpe->tok_off);
    bpe->tok_len = malloc((n ? n : 1) * sizeof *bpe->tok_len);
    bpe->vocab_cap = pow2_at_least(2 * n);
    bpe->vocab_slots = malloc(bpe->vocab_cap * sizeof *bpe->vocab_slots);
    if (!bpe->blob || !bpe->tok_off || !bpe->tok_len || !bpe->vocab_slots)
        return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory for a %zu-token vocabulary", n);
    memset(bpe->vocab_slots, 0xFF, bpe->vocab_cap * sizeof *bpe->vocab_slots);
    size_t off = 0, mask = bpe->vocab_cap - 1;
    for (size_t id = 0; id < n; id++) {
        if (tokens[id].len) memcpy(bpe->blob + off, tokens[id].ptr, tokens[id].len);
        bpe->blob[off + tokens[id].len] = '\0';
        bpe->tok_off[id] = off;
        bpe->tok_len[id] = (uint32_t)tokens[id].len;
        off += tokens[id].len + 1;
        size_t i = hash_bytes(tokens[id].ptr, tokens[id].len) & mask;
        for (;; i = (i + 1) & mask) {
            uint32_t other = bpe->vocab_slots[i];
            if (other == SLOT_EMPTY) {
                bpe->vocab_slots[i] = (uint32_t)id;
                break;
            }
            if (bpe->tok_len[other] == tokens[id].len &&
                memcmp(bpe->blob + bpe->tok_off[other], tokens[id].ptr, tokens[id].len) == 0)
                break; /* duplicate string: keep the first id */
        }
    }
    return CLEF_OK;
}

static clef_status add_merge(tok_bpe *bpe, size_t rank, tok_strview m, char **buf,
                             size_t *buf_cap, clef_error *err) {
    const char *sp = m.len > 1 ? memchr(m.ptr + 1, ' ', m.len - 1) : NULL;
    if (!sp)
        return clef_err_set(err, CLEF_ERR_FORMAT, "merge %zu ('%.*s') is not 'left right'",
                            rank, (int)(m.len > 80 ? 80 : m.len), m.ptr);
    size_t llen = (size_t)(sp - m.ptr), rlen = m.len - llen - 1;
    int32_t left = tok_bpe_find(bpe, m.ptr, llen);
    int32_t right = tok_bpe_find(bpe, sp + 1, rlen);
    if (llen + rlen > *buf_cap) {
        char *nb = realloc(*buf, llen + rlen);
        if (!nb) return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory for merges");
        *buf = nb;
        *buf_cap = llen + rlen;
    }
    memcpy(*buf, m.ptr, llen);
    memcpy(*buf + llen, sp + 1, rlen);
    int32_t result = tok_bpe_find(bpe, *buf, llen + rlen);
    if (left < 0 || right < 0 || result < 0)
        return clef_err_set(err, CLEF_ERR_FORMAT,
                            "merge %zu ('%.*s'): %s is not a token", rank,
                            (int)(m.len > 80 ? 80 : m.len), m.ptr,
                            left < 0 ? "the left part" : right < 0 ? "the right part"
                                                                   : "the merged string");
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    size_t mask = bpe->pair_cap - 1;
    for (size_t i = hash_pair(key) & mask;; i = (i + 1) & mask) {
        if (bpe->pair_keys[i] == key) return CLEF_OK; /* duplicate: keep the lower rank */
        if (bpe->pair_keys[i] == PAIR_EMPTY) {
            bpe->pair_keys[i] = key;
            bpe->pair_vals[i] = (merge_val){(uint32_t)rank, result};
            return CLEF_OK;
        }
    }
}

static clef_status build_merges(tok_bpe *bpe, const tok_strview *merges, size_t n,
                                clef_error *err) {
    if (n > UINT32_MAX) return clef_err_set(err, CLEF_ERR_FORMAT, "%zu merges is too many", n);
    bpe->pair_cap = pow2_at_least(2 * n);
    bpe->pair_keys = malloc(bpe->pair_cap * sizeof *bpe->pair_keys);
    bpe->pair_vals = malloc(bpe->pair_cap * sizeof *bpe->pair_vals);
    if (!bpe->pair_keys || !bpe->pair_vals)
        return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory for %zu merges", n);
    memset(bpe->pair_keys, 0xFF, bpe->pair_cap * sizeof *bpe->pair_keys);
    char *buf = NULL;
    size_t buf_cap = 0;
    clef_status st = CLEF_OK;
    for (size_t r = 0; r < n && st == CLEF_OK; r++)
        st = add_merge(bpe, r, merges[r], &buf, &buf_cap, err);
    free(buf);
    return st;
}

clef_status tok_bpe_new(const tok_strview *tokens, size_t n_tokens,
                        const tok_strview *merges, size_t n_merges, tok_bpe **out,
                        clef_error *err) {
    *out = NULL;
    if (n_tokens > INT32_MAX)
        return clef_err_set(err, CLEF_ERR_FORMAT, "%zu tokens is too many", n_tokens);
    tok_bpe *bpe = calloc(1, sizeof *bpe);
    if (!bpe) return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory for the BPE tables");
    clef_status st = build_vocab(bpe, tokens, n_tokens, err);
    if (st == CLEF_OK) st = build_merges(bpe, merges, n_merges, err);
    if (st != CLEF_OK) {
        tok_bpe_free(bpe);
        return st;
    }
    for (unsigned b = 0; b < 256; b++) {
        char u[2];
        size_t n = tok_byte_to_utf8((uint8_t)b, u);
        bpe->byte_id[b] = tok_bpe_find(bpe, u, n);
    }
    *out = bpe;
    return CLEF_OK;
}

void tok_bpe_free(tok_bpe *bpe) {
    if (!bpe) return;
    free(bpe->blob);
    free(bpe->tok_off);
    free(bpe->tok_len);
    free(bpe->vocab_slots);
    free(bpe->pair_keys);
    free(bpe->pair_vals);
    free(bpe);
}

/* ---- ids ---- */

clef_status tok_ids_push(tok_ids *ids, int32_t id, clef_error *err) {
    if (ids->n == ids->cap) {
        size_t cap = ids->cap ? ids->cap * 2 : 64;
        int32_t *p = realloc(ids->ids, cap * sizeof *p);
        if (!p) return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory for %zu token ids", cap);
        ids->ids = p;
        ids->cap = cap;
    }
    ids->ids[ids->n++] = id;
    return CLEF_OK;
}

/* ---- the merge loop ---- */

/* A candidate merge of the symbol at pos with its right neighbour, valid
 * while both still hold the ids left and right. */
typedef struct pair_cand {
    uint32_t rank;
    int32_t pos, left, right, result;
} pair_cand;

static bool cand_before(const pair_cand *a, const pair_cand *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(pair_cand *h, size_t *n, pair_cand c) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!cand_before(&c, &h[parent])) break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = c;
}

static pair_cand heap_pop(pair_cand *h, size_t *n) {
    pair_cand top = h[0], last = h[--*n];
    size_t i = 0, count = *n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= count) break;
        if (c + 1 < count && cand_before(&h[c + 1], &h[c])) c++;
        if (!cand_before(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (count) h[i] = last;
    return top;
}

static clef_status scratch_reserve(tok_bpe_scratch *s, size_t n, clef_error *err) {
    if (n <= s->cap) return CLEF_OK;
    size_t cap = n < 64 ? 64 : n;
    int32_t *id = realloc(s->sym_id, cap * sizeof *id);
    if (id) s->sym_id = id;
    int32_t *next = realloc(s->sym_next, cap * sizeof *next);
    if (next) s->sym_next = next;
    int32_t *prev = realloc(s->sym_prev, cap * sizeof *prev);
    if (prev) s->sym_prev = prev;
    /* Each merge adds at most two candidates to the n - 1 initial ones. */
    pair_cand *heap = realloc(s->heap, 3 * cap * sizeof *heap);
    if (heap) s->heap = heap;
    if (!id || !next || !prev || !heap)
        return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory for a %zu-byte piece", n);
    s->cap = cap;
    s->heap_cap = 3 * cap;
    return CLEF_OK;
}

void tok_bpe_scratch_free(tok_bpe_scratch *s) {
    free(s->sym_id);
    free(s->sym_next);
    free(s->sym_prev);
    free(s->heap);
    *s = (tok_bpe_scratch){0};
}

static void push_cand(const tok_bpe *bpe, const tok_bpe_scratch *s, pair_cand *heap,
                      size_t *n, int32_t pos) {
    if (pos < 0 || s->sym_next[pos] < 0) return;
    int32_t r = s->sym_next[pos];
    const merge_val *m = find_merge(bpe, s->sym_id[pos], s->sym_id[r]);
    if (m) heap_push(heap, n, (pair_cand){m->rank, pos, s->sym_id[pos], s->sym_id[r], m->result});
}

clef_status tok_bpe_encode(const tok_bpe *bpe, const char *piece, size_t len,
                           tok_bpe_scratch *s, tok_ids *out, clef_error *err) {
    if (len == 0) return CLEF_OK;
    if (len > INT32_MAX)
        return clef_err_set(err, CLEF_ERR_TOO_LONG, "a %zu-byte piece is too long", len);
    clef_status st = scratch_reserve(s, len, err);
    if (st != CLEF_OK) return st;
    for (size_t i = 0; i < len; i++) {
        uint8_t b = (uint8_t)piece[i];
        if (bpe->byte_id[b] < 0)
            return clef_err_set(err, CLEF_ERR_UNSUPPORTED,
                                "byte 0x%02x has no token in the vocabulary", b);
        s->sym_id[i] = bpe->byte_id[b];
        s->sym_prev[i] = (int32_t)i - 1;
        s->sym_next[i] = i + 1 < len ? (int32_t)i + 1 : -1;
    }
    pair_cand *heap = s->heap;
    size_t n_heap = 0;
    for (size_t i = 0; i + 1 < len; i++) push_cand(bpe, s, heap, &n_heap, (int32_t)i);
    while (n_heap) {
        pair_cand c = heap_pop(heap, &n_heap);
        int32_t r = s->sym_next[c.pos];
        /* Stale: a symbol only changes by growing, so equal ids mean the
         * same two symbols are still adjacent. */
        if (s->sym_id[c.pos] != c.left || r < 0 || s->sym_id[r] != c.right) continue;
        s->sym_id[c.pos] = c.result;
        s->sym_id[r] = -1;
        int32_t after = s->sym_next[r];
        s->sym_next[c.pos] = after;
        if (after >= 0) s->sym_prev[after] = c.pos;
        push_cand(bpe, s, heap, &n_heap, s->sym_prev[c.pos]);
        push_cand(bpe, s, heap, &n_heap, c.pos);
    }
    for (int32_t i = 0; i >= 0 && st == CLEF_OK; i = s->sym_next[i])
        st = tok_ids_push(out, s->sym_id[i], err);
    return st;
}
