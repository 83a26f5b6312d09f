/*
 * fuzz/fuzz_pyjson.c — libFuzzer harness for the Python-compatible JSON
 * loader and writer: bytes → pyjson_loadb → pyjson_dumps (insertion order
 * and sort_keys) → pyjson_render.
 *
 * Invariants checked on every body the loader accepts:
 *  - a refusal always carries a message, an acceptance never exceeds the
 *    depth limit;
 *  - each dumps text loads again to an equal value (json_equal: same keys,
 *    same integers, same reals bit for bit since repr round-trips) and
 *    dumping that value again gives the same bytes (the writer is a fixed
 *    point of load∘dump);
 *  - the sorted dump has its keys in ascending byte order at the top level;
 *  - render of a string is its raw bytes, of anything else the sorted dump.
 * Non-finite reals cannot arise: the loader refuses 1e999 (PYJSON_LOAD_RANGE)
 * and jansson does not read NaN/Infinity.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "clef.h"
#include "fuzzutil.h"
#include "text/pyjson.h"

#define FUZZ_DEPTH 32   /* below the default, so the depth refusal is reached */

static char *dump(const json_t *v, unsigned flags, size_t *len) {
    char *out = NULL;
    clef_error err;
    FUZZ_CHECK(pyjson_dumps(v, flags, &out, len, &err) == CLEF_OK, "dumps failed: %s",
               err.message);
    FUZZ_CHECK(out[*len] == '\0', "dumps text not NUL-terminated");
    return out;
}

static void check_sorted(const json_t *v, const char *text, size_t len) {
    if (!json_is_object(v)) return;
    /* Reload and walk in insertion order: the sorted dump inserted keys sorted. */
    json_t *w = NULL;
    FUZZ_CHECK(pyjson_loadb(text, len, 0, &w, NULL, 0) == PYJSON_LOAD_OK, "sorted dump reloads");
    const char *prev = NULL;
    size_t prev_len = 0;
    const char *key;
    size_t key_len;
    json_t *val;
    json_object_keylen_foreach(w, key, key_len, val) {
        if (prev) {
            size_t m = prev_len < key_len ? prev_len : key_len;
            int c = memcmp(prev, key, m);
            FUZZ_CHECK(c < 0 || (c == 0 && prev_len < key_len), "keys not in byte order");
        }
        prev = key;
        prev_len = key_len;
    }
    json_decref(w);
}

static void round_trip(const json_t *v, unsigned flags) {
    size_t len = 0, len2 = 0;
    char *text = dump(v, flags, &len);
    json_t *back = NULL;
    char msg[160];
    pyjson_load_status st = pyjson_loadb(text, len, 0, &back, msg, sizeof msg);
    FUZZ_CHECK(st == PYJSON_LOAD_OK, "dumps output does not load (%d: %s): %.200s", st, msg,
               text);
    FUZZ_CHECK(json_equal(v, back), "reloaded value differs: %.200s", text);
    char *text2 = dump(back, flags, &len2);
    FUZZ_CHECK(len == len2 && memcmp(text, text2, len) == 0, "dump(load(dump(v))) != dump(v)");
    if (flags & PYJSON_SORT_KEYS) check_sorted(v, text, len);
    free(text2);
    json_decref(back);
    free(text);
}

static void check_render(const json_t *v) {
    char *out = NULL;
    size_t len = 0;
    clef_error err;
    FUZZ_CHECK(pyjson_render(v, &out, &len, &err) == CLEF_OK, "render failed: %s", err.message);
    if (json_is_string(v)) {
        FUZZ_CHECK(len == json_string_length(v) && memcmp(out, json_string_value(v), len) == 0,
                   "render of a string is not its bytes");
    } else {
        size_t dlen = 0;
        char *d = dump(v, PYJSON_SORT_KEYS, &dlen);
        FUZZ_CHECK(dlen == len && memcmp(d, out, len) == 0, "render differs from sorted dumps");
        free(d);
    }
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    json_t *v = NULL;
    char msg[160];
    pyjson_load_status st = pyjson_loadb((const char *)data, size, FUZZ_DEPTH, &v, msg, sizeof msg);
    if (st != PYJSON_LOAD_OK) {
        FUZZ_CHECK(!v && msg[0], "refusal %d without a message", st);
        return 0;
    }
    FUZZ_CHECK(pyjson_depth(v) <= FUZZ_DEPTH, "accepted depth %d", pyjson_depth(v));
    round_trip(v, 0);
    round_trip(v, PYJSON_SORT_KEYS);
    check_render(v);
    json_decref(v);
    return 0;
}
