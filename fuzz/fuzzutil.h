/*
 * fuzz/fuzzutil.h — what every libFuzzer harness in fuzz/ shares: the
 * invariant check that turns a silent wrong answer into a crash libFuzzer
 * records, and where the fixed inputs (the tiny model) live.
 *
 * Harnesses run from the project root (tools/fuzz.sh cds there), so the
 * oracle files are at ../shared/oracle like in the tests; CLEF_FUZZ_MODEL
 * overrides the model path.
 */
#ifndef CLEF_FUZZ_FUZZUTIL_H
#define CLEF_FUZZ_FUZZUTIL_H

#include <stdio.h>
#include <stdlib.h>

#define FUZZ_DEFAULT_MODEL "../shared/oracle/clef-tiny/clef-tiny-a-F32.gguf"

/* An invariant of the code under test did not hold: say which, then abort so
 * libFuzzer saves the input as a crash. */
#define FUZZ_CHECK(cond, ...)                                                    \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "fuzz invariant failed at %s:%d: %s\n  ", __FILE__,  \
                    __LINE__, #cond);                                            \
            fprintf(stderr, __VA_ARGS__);                                        \
            fputc('\n', stderr);                                                 \
            abort();                                                             \
        }                                                                        \
    } while (0)

/* Path of the model/tokenizer GGUF the harnesses load once. */
static inline const char *fuzz_model_path(void) {
    const char *p = getenv("CLEF_FUZZ_MODEL");
    return p && *p ? p : FUZZ_DEFAULT_MODEL;
}

/* A fixed setup step failed (missing model file): no input can be tried. */
#define FUZZ_SETUP_FAIL(...)                                                     \
    do {                                                                         \
        fprintf(stderr, "fuzz setup: ");                                         \
        fprintf(stderr, __VA_ARGS__);                                            \
        fputc('\n', stderr);                                                     \
        exit(2);                                                                 \
    } while (0)

#endif
