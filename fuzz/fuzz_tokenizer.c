/*
 * fuzz/fuzz_tokenizer.c — libFuzzer harness for clef_tokenize and
 * clef_detokenize: bytes are the text.
 *
 * The tokenizer is loaded once from the clef-tiny model (fuzzutil.h), with
 * the file's own split and again with the Qwen3.5 split, so both
 * pre-tokenizer patterns are fuzzed.  For each, the text is tokenized with
 * parse_special false and true, every id must lie in the vocabulary and
 * decode, and without special parsing decode(tokenize(text)) must give back
 * NFC(text) exactly: byte-level BPE loses nothing but normalisation.  (With
 * special parsing it need not: NFC runs per segment, so ">" + U+0338 stays
 * two code points after an added token but composes to U+226F without.)
 * Invalid UTF-8 must be refused, never tokenized.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "clef.h"
#include "fuzzutil.h"
#include "text/tokenizer.h"

static clef_tokenizer *g_tok[2];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    const char *path = fuzz_model_path();
    gguf_file *f = NULL;
    clef_error err;
    if (gguf_open(path, &f, &err) != CLEF_OK) FUZZ_SETUP_FAIL("%s", err.message);
    const tok_pre_kind q35 = TOK_PRE_QWEN35;
    if (tok_load_gguf(f, &g_tok[0], &err) != CLEF_OK ||
        tok_load_gguf_ex(f, &q35, &g_tok[1], &err) != CLEF_OK)
        FUZZ_SETUP_FAIL("tokenizer of %s: %s", path, err.message);
    gguf_close(f); /* the tokenizer copied what it needs */
    return 0;
}

static bool valid_utf8(const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate(s + i, (utf8proc_ssize_t)(n - i), &cp);
        if (k <= 0) return false;
        i += (size_t)k;
    }
    return true;
}

/* Decode ids (each checked against the vocabulary); caller frees. */
static char *decode(const clef_tokenizer *tok, const int32_t *ids, size_t n, size_t *len) {
    size_t vocab = clef_tokenizer_vocab_size(tok);
    for (size_t i = 0; i < n; i++)
        FUZZ_CHECK(ids[i] >= 0 && (size_t)ids[i] < vocab, "id %d at %zu outside %zu tokens",
                   ids[i], i, vocab);
    char *text = NULL;
    clef_error err;
    FUZZ_CHECK(clef_detokenize(tok, ids, n, &text, len, &err) == CLEF_OK,
               "ids from clef_tokenize do not decode: %s", err.message);
    FUZZ_CHECK(text && text[*len] == '\0', "decoded text not NUL-terminated");
    return text;
}

static void check_plain_round_trip(const uint8_t *data, size_t size, const char *back,
                                   size_t len) {
    utf8proc_uint8_t *nfc = NULL;
    utf8proc_ssize_t n = size ? utf8proc_map(data, (utf8proc_ssize_t)size, &nfc,
                                             UTF8PROC_STABLE | UTF8PROC_COMPOSE)
                              : 0;
    if (n < 0) return; /* out of memory in utf8proc */
    FUZZ_CHECK((size_t)n == len && memcmp(nfc ? (const char *)nfc : "", back, len) == 0,
               "decode(tokenize(text)) is %zu bytes, NFC(text) %zd bytes", len, n);
    free(nfc);
}

static void one(const clef_tokenizer *tok, const uint8_t *data, size_t size, bool utf8_ok) {
    for (int special = 0; special < 2; special++) {
        int32_t *ids = NULL;
        size_t n = 0;
        clef_error err;
        clef_status st = clef_tokenize(tok, (const char *)data, size, special, &ids, &n, &err);
        if (!utf8_ok) {
            FUZZ_CHECK(st == CLEF_ERR_INVALID_ARG && !ids, "invalid UTF-8 gave status %d", st);
            continue;
        }
        FUZZ_CHECK(st == CLEF_OK, "valid UTF-8 refused: %s", err.message);
        FUZZ_CHECK(ids && (n > 0) == (size > 0), "%zu ids for %zu bytes", n, size);
        size_t len = 0;
        char *back = decode(tok, ids, n, &len);
        if (!special) check_plain_round_trip(data, size, back, len);
        clef_free(back);
        clef_free(ids);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    bool utf8_ok = valid_utf8(data, size);
    one(g_tok[0], data, size, utf8_ok);
    one(g_tok[1], data, size, utf8_ok);
    return 0;
}
