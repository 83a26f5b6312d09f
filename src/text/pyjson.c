/*
 * text/pyjson.c — Python json.dumps spelling for jansson values, and the
 * body loader.  See pyjson.h for the contract and the exact spelling rules.
 */
#include "text/pyjson.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "core/error.h"

/* ---- buffer --------------------------------------------------------------- */

static bool buf_reserve(pyjson_buf *b, size_t extra) {
    if (b->failed) return false;
    if (b->len + extra + 1 <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1) {
        if (cap > SIZE_MAX / 2) { b->failed = true; return false; }
        cap *= 2;
    }
    char *p = realloc(b->data, cap);
    if (!p) { b->failed = true; return false; }
    b->data = p;
    b->cap = cap;
    return true;
}

void pyjson_buf_append(pyjson_buf *b, const char *s, size_t n) {
    if (!buf_reserve(b, n)) return;
    if (n) memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void pyjson_buf_free(pyjson_buf *b) {
    free(b->data);
    *b = (pyjson_buf){0};
}

static void buf_puts(pyjson_buf *b, const char *s) { pyjson_buf_append(b, s, strlen(s)); }

/* ---- floats: Python repr ------------------------------------------------- */

/* Shortest decimal digits d (no leading/trailing zeros) and exponent decpt
 * with |x| = 0.d × 10^decpt that strtod maps back to |x| (x finite, != 0).
 * For each length p the correctly rounded p-digit decimal is the candidate;
 * at a power of two the rounding interval is narrower below x than above,
 * so when that candidate lies below x and fails, its upper neighbour (which
 * may still be inside the wider upper half) is tried too.  Among the
 * shortest strings this picks the one nearest x, as Python's dtoa does. */
static int shortest_digits(double ax, char *digits, int *decpt) {
    char tmp[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(tmp, sizeof tmp, "%.*e", p - 1, ax);
        /* tmp: "d.ddde[+-]XX" */
        char d[24];
        int nd = 0;
        const char *s = tmp;
        for (; *s && *s != 'e'; s++)
            if (*s != '.') d[nd++] = *s;
        int e = atoi(s + 1);
        double back = strtod(tmp, NULL);
        if (back != ax && back < ax) {
            /* try the next p-digit decimal above */
            int i = nd - 1;
            while (i >= 0 && d[i] == '9') d[i--] = '0';
            if (i >= 0) d[i]++;
            else { memmove(d + 1, d, (size_t)nd); d[0] = '1'; e++; } /* 99..9 -> 100..0 */
            char cand[48];
            int n = snprintf(cand, sizeof cand, "0.%.*se%d", nd, d, e + 1);
            (void)n;
            back = strtod(cand, NULL);
        }
        if (back == ax) {
            while (nd > 1 && d[nd - 1] == '0') nd--;
            memcpy(digits, d, (size_t)nd);
            digits[nd] = '\0';
            *decpt = e + 1;
            return nd;
        }
    }
    /* unreachable: 17 significant digits always round-trip a double */
    snprintf(tmp, sizeof tmp, "%.16e", ax);
    int nd = 0;
    const char *s = tmp;
    for (; *s && *s != 'e'; s++)
        if (*s != '.') digits[nd++] = *s;
    digits[nd] = '\0';
    *decpt = atoi(s + 1) + 1;
    return nd;
}

size_t pyjson_format_double(double x, char *buf) {
    if (isnan(x)) return (size_t)snprintf(buf, PYJSON_DOUBLE_MAX, "NaN");
    if (isinf(x)) return (size_t)snprintf(buf, PYJSON_DOUBLE_MAX, x > 0 ? "Infinity" : "-Infinity");
    if (x == 0) return (size_t)snprintf(buf, PYJSON_DOUBLE_MAX, signbit(x) ? "-0.0" : "0.0");
    char d[24];
    int decpt;
    int nd = shortest_digits(fabs(x), d, &decpt);
    char *o = buf;
    if (x < 0) *o++ = '-';
    if (decpt <= -4 || decpt > 16) {            /* Python's repr switch points */
        *o++ = d[0];
        if (nd > 1) {
            *o++ = '.';
            memcpy(o, d + 1, (size_t)nd - 1);
            o += nd - 1;
        }
        int e = decpt - 1;
        o += snprintf(o, 8, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    } else if (decpt <= 0) {
        *o++ = '0';
        *o++ = '.';
        for (int i = 0; i < -decpt; i++) *o++ = '0';
        memcpy(o, d, (size_t)nd);
        o += nd;
    } else if (decpt >= nd) {
        memcpy(o, d, (size_t)nd);
        o += nd;
        for (int i = nd; i < decpt; i++) *o++ = '0';
        *o++ = '.';
        *o++ = '0';
    } else {
        memcpy(o, d, (size_t)decpt);
        o += decpt;
        *o++ = '.';
        memcpy(o, d + decpt, (size_t)(nd - decpt));
        o += nd - decpt;
    }
    *o = '\0';
    return (size_t)(o - buf);
}

/* ---- dumping -------------------------------------------------------------- */

static void dump_string(pyjson_buf *b, const char *s, size_t n) {
    static const char hex[] = "0123456789abcdef";
    pyjson_buf_append(b, "\"", 1);
    size_t run = 0;   /* start of the pending raw run */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char u[7];
        if (c == '"') esc = "\\\"";
        else if (c == '\\') esc = "\\\\";
        else if (c == '\n') esc = "\\n";
        else if (c == '\r') esc = "\\r";
        else if (c == '\t') esc = "\\t";
        else if (c == '\b') esc = "\\b";
        else if (c == '\f') esc = "\\f";
        else if (c < 0x20) {
            memcpy(u, "\\u00", 4);
            u[4] = hex[c >> 4];
            u[5] = hex[c & 15];
            u[6] = '\0';
            esc = u;
        }
        if (esc) {
            pyjson_buf_append(b, s + run, i - run);
            buf_puts(b, esc);
            run = i + 1;
        }
    }
    pyjson_buf_append(b, s + run, n - run);
    pyjson_buf_append(b, "\"", 1);
}

typedef struct key_entry {
    const char *key;
    size_t len;
    json_t *value;
} key_entry;

/* Code point order of valid UTF-8 = unsigned byte order; a prefix sorts first. */
static int key_cmp(const void *a, const void *b) {
    const key_entry *x = a, *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->key, y->key, n);
    if (c) return c;
    return (x->len > y->len) - (x->len < y->len);
}

static void dump_object(pyjson_buf *b, const json_t *v, unsigned flags) {
    size_t n = json_object_size(v);
    key_entry *keys = n ? malloc(n * sizeof *keys) : NULL;
    if (n && !keys) { b->failed = true; return; }
    size_t k = 0;
    for (void *it = json_object_iter((json_t *)v); it && k < n;
         it = json_object_iter_next((json_t *)v, it), k++) {
        keys[k].key = json_object_iter_key(it);
        keys[k].len = json_object_iter_key_len(it);
        keys[k].value = json_object_iter_value(it);
    }
    if ((flags & PYJSON_SORT_KEYS) && k > 1) qsort(keys, k, sizeof *keys, key_cmp);
    pyjson_buf_append(b, "{", 1);
    for (size_t i = 0; i < k && !b->failed; i++) {
        if (i) pyjson_buf_append(b, ",", 1);
        dump_string(b, keys[i].key, keys[i].len);
        pyjson_buf_append(b, ":", 1);
        pyjson_dump_to(b, keys[i].value, flags);
    }
    pyjson_buf_append(b, "}", 1);
    free(keys);
}

void pyjson_dump_to(pyjson_buf *b, const json_t *v, unsigned flags) {
    char num[PYJSON_DOUBLE_MAX];
    if (b->failed) return;
    switch (json_typeof(v)) {
    case JSON_OBJECT: dump_object(b, v, flags); break;
    case JSON_ARRAY:
        pyjson_buf_append(b, "[", 1);
        for (size_t i = 0; i < json_array_size(v) && !b->failed; i++) {
            if (i) pyjson_buf_append(b, ",", 1);
            pyjson_dump_to(b, json_array_get(v, i), flags);
        }
        pyjson_buf_append(b, "]", 1);
        break;
    case JSON_STRING: dump_string(b, json_string_value(v), json_string_length(v)); break;
    case JSON_INTEGER:
        pyjson_buf_append(b, num,
                          (size_t)snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT,
                                           json_integer_value(v)));
        break;
    case JSON_REAL: pyjson_buf_append(b, num, pyjson_format_double(json_real_value(v), num)); break;
    case JSON_TRUE: buf_puts(b, "true"); break;
    case JSON_FALSE: buf_puts(b, "false"); break;
    case JSON_NULL: buf_puts(b, "null"); break;
    }
}

static clef_status finish(pyjson_buf *b, char **out, size_t *out_len, clef_error *err) {
    if (!b->failed) pyjson_buf_append(b, "", 0);  /* make data non-NULL and terminated */
    if (b->failed) {
        pyjson_buf_free(b);
        *out = NULL;
        if (out_len) *out_len = 0;
        return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory while writing JSON text");
    }
    *out = b->data;
    if (out_len) *out_len = b->len;
    return CLEF_OK;
}

clef_status pyjson_dumps(const json_t *v, unsigned flags, char **out, size_t *out_len,
                         clef_error *err) {
    if (!v || !out) return clef_err_set(err, CLEF_ERR_INVALID_ARG, "pyjson_dumps: NULL value");
    pyjson_buf b = {0};
    pyjson_dump_to(&b, v, flags);
    return finish(&b, out, out_len, err);
}

clef_status pyjson_render(const json_t *v, char **out, size_t *out_len, clef_error *err) {
    if (!v || !out) return clef_err_set(err, CLEF_ERR_INVALID_ARG, "pyjson_render: NULL value");
    pyjson_buf b = {0};
    if (json_is_string(v)) pyjson_buf_append(&b, json_string_value(v), json_string_length(v));
    else pyjson_dump_to(&b, v, PYJSON_SORT_KEYS);
    return finish(&b, out, out_len, err);
}

/* ---- loading -------------------------------------------------------------- */

int pyjson_depth(const json_t *v) {
    int best = 0;
    if (json_is_object(v)) {
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)v, k, x) {
            int d = pyjson_depth(x);
            if (d > best) best = d;
        }
        return best + 1;
    }
    if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++) {
            int d = pyjson_depth(json_array_get(v, i));
            if (d > best) best = d;
        }
        return best + 1;
    }
    return 0;
}

/* Replace every byte of s that does not begin a valid UTF-8 sequence with '?'.
 * Why: jansson quotes the input near a syntax error and cuts that quote
 * byte-wise, so it may end inside a character; the message goes into JSON
 * error bodies, which must be valid UTF-8. */
static void utf8_repair(char *s) {
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i,
                                              (utf8proc_ssize_t)(n - i), &cp);
        if (k <= 0) s[i++] = '?';
        else i += (size_t)k;
    }
}

static bool all_space(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\n' && s[i] != '\r') return false;
    return true;
}

pyjson_load_status pyjson_loadb(const char *text, size_t len, int max_depth, json_t **out,
                                char *msg, size_t msg_cap) {
    char dummy[1];
    if (!msg || !msg_cap) { msg = dummy; msg_cap = sizeof dummy; }
    msg[0] = '\0';
    *out = NULL;
    if (max_depth <= 0) max_depth = PYJSON_DEFAULT_MAX_DEPTH;
    if (!text) len = 0;
    /* Python's json.loads(bytes) accepts a UTF-8 byte order mark. */
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) { text += 3; len -= 3; }
    if (len == 0 || all_space(text, len)) {
        snprintf(msg, msg_cap, "the body is empty");
        return PYJSON_LOAD_EMPTY;
    }
    json_error_t e;
    json_t *v = json_loadb(text, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &e);
    if (!v) {
        pyjson_load_status st;
        switch (json_error_code(&e)) {
        case json_error_invalid_utf8: st = PYJSON_LOAD_UTF8; break;
        case json_error_numeric_overflow: st = PYJSON_LOAD_RANGE; break;
        case json_error_null_byte_in_key: st = PYJSON_LOAD_NUL_KEY; break;
        case json_error_stack_overflow: st = PYJSON_LOAD_DEPTH; break;
        case json_error_out_of_memory: st = PYJSON_LOAD_NOMEM; break;
        default: st = PYJSON_LOAD_SYNTAX; break;
        }
        if (st == PYJSON_LOAD_DEPTH)
            snprintf(msg, msg_cap, "arrays/objects nested deeper than %d levels", max_depth);
        else if (st == PYJSON_LOAD_UTF8)
            snprintf(msg, msg_cap, "invalid UTF-8 at byte %d", e.position > 0 ? e.position - 1 : 0);
        else
            snprintf(msg, msg_cap, "%s at line %d, column %d", e.text, e.line, e.column);
        utf8_repair(msg);
        return st;
    }
    if (pyjson_depth(v) > max_depth) {
        json_decref(v);
        snprintf(msg, msg_cap, "arrays/objects nested deeper than %d levels", max_depth);
        return PYJSON_LOAD_DEPTH;
    }
    *out = v;
    return PYJSON_LOAD_OK;
}
