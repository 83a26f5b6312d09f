/*
 * text/pyjson.h — JSON text exactly as Python's json module writes it, and a
 * request-body loader that says precisely why a body was refused.
 *
 * Why: the Clef prompt contains `render(value)`, i.e. Python's
 *   json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
 * and the model saw those exact bytes in training; FastAPI error bodies are
 *   json.dumps(value, ensure_ascii=False, separators=(",", ":"))
 * (insertion order).  Both are produced here from a jansson json_t, which
 * keeps object insertion order and keeps integers (json_int_t) apart from
 * reals (double), as Python's int/float are.
 *
 * Spelling (what Python does, and so what we do):
 * - strings: only '"' '\\' '\n' '\r' '\t' '\b' '\f' get short escapes, every
 *   other byte < 0x20 (NUL included) is \u00xx with lowercase hex; DEL, U+2028
 *   and all non-ASCII are written raw (ensure_ascii=False).  Strings may hold
 *   NUL (json_string_length is used, never strlen).
 * - keys (with PYJSON_SORT_KEYS): ascending code point, which for valid UTF-8
 *   is plain unsigned byte order (NOT UTF-16 order).
 * - integers: decimal.  Reals: Python repr(float), the shortest digits that
 *   round-trip: 1.0, 0.1, 1e-05, 0.0001, 1e+16, 2.5e+16, 1000000000000000.0,
 *   -0.0, 0.30000000000000004; inf/nan as Infinity, -Infinity, NaN.
 */
#ifndef CLEF_TEXT_PYJSON_H
#define CLEF_TEXT_PYJSON_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "clef.h"

/* dumps flags */
#define PYJSON_SORT_KEYS 1u   /* sort_keys=True */

/* Longest text pyjson_format_double writes, NUL included. */
#define PYJSON_DOUBLE_MAX 32

/* Write repr(x) (json.dumps spelling for non-finite values) into buf, which
 * holds at least PYJSON_DOUBLE_MAX bytes; returns the length (NUL excluded). */
size_t pyjson_format_double(double x, char *buf);

/* A growable byte buffer.  Zero-initialise; on allocation failure `failed`
 * is set and further appends are ignored.  data is NUL-terminated whenever
 * len > 0 and !failed; the owner frees data with free(). */
typedef struct pyjson_buf {
    char *data;
    size_t len, cap;
    bool failed;
} pyjson_buf;

void pyjson_buf_append(pyjson_buf *b, const char *s, size_t n);
void pyjson_buf_free(pyjson_buf *b);

/* Append the Python json.dumps text of v to b (flags: PYJSON_SORT_KEYS). */
void pyjson_dump_to(pyjson_buf *b, const json_t *v, unsigned flags);

/* json.dumps(v, ensure_ascii=False, separators=(",",":"), sort_keys=flags&1)
 * into a fresh NUL-terminated buffer (*out, caller frees with free()). */
clef_status pyjson_dumps(const json_t *v, unsigned flags, char **out, size_t *out_len,
                         clef_error *err);

/* The reference `render`: a JSON string is its own bytes (no quotes, no
 * escapes); anything else is the sorted compact dumps above. */
clef_status pyjson_render(const json_t *v, char **out, size_t *out_len, clef_error *err);

/* ---- loading request bodies --------------------------------------------- */

typedef enum pyjson_load_status {
    PYJSON_LOAD_OK = 0,
    PYJSON_LOAD_EMPTY,      /* no bytes, or only whitespace                    */
    PYJSON_LOAD_SYNTAX,     /* not JSON (includes lone surrogate escapes)      */
    PYJSON_LOAD_UTF8,       /* invalid UTF-8 in the body                       */
    PYJSON_LOAD_DEPTH,      /* arrays/objects nested deeper than max_depth     */
    PYJSON_LOAD_RANGE,      /* integer outside int64, or a real that overflows */
    PYJSON_LOAD_NUL_KEY,    /* an object key containing \u0000                 */
    PYJSON_LOAD_NOMEM,
} pyjson_load_status;

/* Default nesting limit for request bodies (the body object itself is 1). */
#define PYJSON_DEFAULT_MAX_DEPTH 64

/* Parse text[0..len) as one JSON value of any type.  Strings may contain
 * \u0000.  Duplicate keys behave as in Python's json: the LAST value wins and
 * the key keeps its FIRST position.  max_depth <= 0 selects the default.
 * On PYJSON_LOAD_OK *out is a new reference (json_decref it); otherwise *out
 * is NULL and msg (if non-NULL) holds a sentence naming what was wrong and
 * where ("invalid UTF-8 at byte 17"), always valid UTF-8 (a quoted input byte
 * that is not becomes '?').  Integers beyond int64 are refused
 * (PYJSON_LOAD_RANGE) rather than silently changed: jansson cannot hold them
 * and Python would render them exactly, so no faithful answer is possible. */
pyjson_load_status pyjson_loadb(const char *text, size_t len, int max_depth, json_t **out,
                                char *msg, size_t msg_cap);

/* Nesting depth of v: scalars 0, [] or {} 1, [[1]] 2 ... */
int pyjson_depth(const json_t *v);

#endif
