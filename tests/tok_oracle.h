/*
 * tests/tok_oracle.h — reading the tokenizer oracle's JSONL files (test-only,
 * included by tests/test_tok*.c; static functions, one copy per test).
 *
 * The stored files are damaged: every U+0085, U+2028 and U+2029 that the
 * generator wrote raw inside a JSON string was later turned into a line
 * break (what Python's str.splitlines() does), and some of the resulting
 * fragments were lost.  So a line that is not a JSON object is re-joined
 * with the following ones, each lost break written as TOK_MARK, until the
 * record parses; the tests then try U+0085/U+2028/U+2029 in place of each
 * mark.  Fragments that never form a record are counted and printed, never
 * silently dropped.
 */
#ifndef CLEF_TESTS_TOK_ORACLE_H
#define CLEF_TESTS_TOK_ORACLE_H

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* U+10FFFE (a noncharacter that no oracle record uses) marks a lost break. */
#define TOK_MARK "\xf4\x8f\xbf\xbe"
#define TOK_MARK_LEN 4
#define TOK_MAX_JOIN 8

/* The three characters a mark may stand for. */
static const char *const tok_mark_subst[3] = {"\xc2\x85", "\xe2\x80\xa8", "\xe2\x80\xa9"};

typedef struct tok_rec {
    json_t *obj;     /* the record (owned)                               */
    int line;        /* 1-based line of its first fragment                */
    int n_marks;     /* lost line breaks inside it (0 for intact lines)   */
} tok_rec;

typedef struct tok_recs {
    tok_rec *recs;
    size_t n;
    size_t n_lost_lines;   /* fragments that formed no record (printed)   */
    size_t n_rejoined;     /* records rebuilt from fragments              */
} tok_recs;

static inline json_t *tok_parse(const char *s, size_t len) {
    json_error_t e;
    json_t *j = json_loadb(s, len, JSON_ALLOW_NUL, &e);
    if (j && !json_is_object(j)) {
        json_decref(j);
        j = NULL;
    }
    return j;
}

static inline void tok_recs_push(tok_recs *r, json_t *obj, int line, int marks) {
    r->recs = realloc(r->recs, (r->n + 1) * sizeof *r->recs);
    r->recs[r->n++] = (tok_rec){obj, line, marks};
}

/* Read path's records; returns 0 on success, -1 when the file is unreadable.
 * verbose: print every fragment that formed no record. */
static inline int tok_recs_read(const char *path, tok_recs *r, int verbose) {
    memset(r, 0, sizeof *r);
    size_t len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    char *data = malloc(len + 1);
    if (fread(data, 1, len, f) != len) {
        fclose(f);
        free(data);
        return -1;
    }
    fclose(f);
    data[len] = '\0';
    /* Split into lines (by LF only; records may hold NUL escapes, never raw NUL). */
    size_t n_lines = 0, cap = 1024;
    const char **lp = malloc(cap * sizeof *lp);
    size_t *ll = malloc(cap * sizeof *ll);
    for (size_t i = 0; i < len;) {
        const char *nl = memchr(data + i, '\n', len - i);
        size_t e = nl ? (size_t)(nl - data) : len;
        if (n_lines == cap) {
            cap *= 2;
            lp = realloc(lp, cap * sizeof *lp);
            ll = realloc(ll, cap * sizeof *ll);
        }
        lp[n_lines] = data + i;
        ll[n_lines++] = e - i;
        i = e + 1;
    }
    char *buf = malloc(len + TOK_MAX_JOIN * TOK_MARK_LEN + 1);
    for (size_t i = 0; i < n_lines;) {
        if (ll[i] == 0) {
            i++;
            continue;
        }
        json_t *j = tok_parse(lp[i], ll[i]);
        if (j) {
            tok_recs_push(r, j, (int)i + 1, 0);
            i++;
            continue;
        }
        size_t bl = ll[i], k = i + 1;
        memcpy(buf, lp[i], bl);
        for (; k < n_lines && k - i < TOK_MAX_JOIN; k++) {
            if (ll[k] >= 8 && memcmp(lp[k], "{\"text\":", 8) == 0) break; /* next record */
            memcpy(buf + bl, TOK_MARK, TOK_MARK_LEN);
            memcpy(buf + bl + TOK_MARK_LEN, lp[k], ll[k]);
            bl += TOK_MARK_LEN + ll[k];
            j = tok_parse(buf, bl);
            if (j) break;
        }
        if (j) {
            tok_recs_push(r, j, (int)i + 1, (int)(k - i));
            r->n_rejoined++;
            i = k + 1;
        } else {
            if (verbose)
                printf("  %s:%zu: damaged oracle line (not part of any record): %.*s\n", path,
                       i + 1, (int)(ll[i] < 60 ? ll[i] : 60), lp[i]);
            r->n_lost_lines++;
            i++;
        }
    }
    free(buf);
    free(lp);
    free(ll);
    free(data);
    return 0;
}

static inline void tok_recs_free(tok_recs *r) {
    for (size_t i = 0; i < r->n; i++) json_decref(r->recs[i].obj);
    free(r->recs);
    memset(r, 0, sizeof *r);
}

/* Count the marks in s[0..len). */
static inline int tok_count_marks(const char *s, size_t len) {
    int n = 0;
    for (size_t i = 0; i + TOK_MARK_LEN <= len; i++)
        if (memcmp(s + i, TOK_MARK, TOK_MARK_LEN) == 0) n++, i += TOK_MARK_LEN - 1;
    return n;
}

/* s with its marks replaced by the characters that choice (base 3, one digit
 * per mark) selects; malloc'd, *out_len set. */
static inline char *tok_subst_marks(const char *s, size_t len, unsigned choice, size_t *out_len) {
    char *o = malloc(len + 1);
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        if (i + TOK_MARK_LEN <= len && memcmp(s + i, TOK_MARK, TOK_MARK_LEN) == 0) {
            const char *c = tok_mark_subst[choice % 3];
            choice /= 3;
            size_t cl = strlen(c);
            memcpy(o + n, c, cl);
            n += cl;
            i += TOK_MARK_LEN;
        } else {
            o[n++] = s[i++];
        }
    }
    o[n] = '\0';
    *out_len = n;
    return o;
}

/* Does got[0..gl) equal want[0..wl), where each mark in want may stand for
 * any of the three characters? */
static inline int tok_eq_marked(const char *got, size_t gl, const char *want, size_t wl) {
    size_t g = 0, w = 0;
    while (w < wl) {
        if (w + TOK_MARK_LEN <= wl && memcmp(want + w, TOK_MARK, TOK_MARK_LEN) == 0) {
            int ok = 0;
            for (int c = 0; c < 3 && !ok; c++) {
                size_t cl = strlen(tok_mark_subst[c]);
                if (g + cl <= gl && memcmp(got + g, tok_mark_subst[c], cl) == 0) {
                    g += cl;
                    ok = 1;
                }
            }
            if (!ok) return 0;
            w += TOK_MARK_LEN;
        } else {
            if (g >= gl || got[g] != want[w]) return 0;
            g++, w++;
        }
    }
    return g == gl;
}

static inline unsigned tok_pow3(int k) {
    unsigned p = 1;
    while (k-- > 0) p *= 3;
    return p;
}

#endif
