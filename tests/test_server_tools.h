/*
 * tests/test_server_tools.h — helpers of the fault and load tests against
 * `clef serve` (test_server_faults.c, test_server_load.c), on top of
 * test_server_client.h: a growing byte buffer, request bodies built to a
 * size, the oracle's answer to a clef-tiny case, and a process's resident
 * memory from /proc.  Static functions; each test program includes it once.
 */
#ifndef CLEF_TEST_SERVER_TOOLS_H
#define CLEF_TEST_SERVER_TOOLS_H

#include <jansson.h>
#include <math.h>

#include "test_server_client.h"
#include "testutil.h"

#define ST_TINY ORACLE_DIR "/clef-tiny/clef-tiny-a-F32.gguf"
#define ST_CASES ORACLE_DIR "/clef-tiny/cases.jsonl"
#define ST_EXPECTED ORACLE_DIR "/clef-tiny/expected.jsonl"

/* Built with AddressSanitizer: slower, and its allocator keeps freed memory
 * in quarantine, so the tests scale their counts and memory bounds. */
#if defined(__SANITIZE_ADDRESS__)
#define ST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ST_SANITIZED 1
#endif
#endif
#ifndef ST_SANITIZED
#define ST_SANITIZED 0
#endif

/* ---- a growing byte buffer (NUL-terminated; may hold NULs) ---------------- */

typedef struct st_buf {
    char *p;
    size_t len, cap;
} st_buf;

static inline bool st_add(st_buf *b, const void *s, size_t n) {
    size_t need = b->len + n + 1;
    if (need > b->cap) {
        size_t cap = 2 * b->cap > need ? 2 * b->cap : need + 256;
        char *np = realloc(b->p, cap);
        if (!np) return false;
        b->p = np;
        b->cap = cap;
    }
    char *end = b->p + b->len;
    memcpy(end, s, n);
    end[n] = '\0';
    b->len += n;
    return true;
}

static inline bool st_puts(st_buf *b, const char *s) { return st_add(b, s, strlen(s)); }

static inline void st_free(st_buf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* ---- bodies ------------------------------------------------------------------ */

/* A one-noul request of exactly `size` bytes (its state padded with 'a'),
 * or NULL when size is too small to hold one. */
static inline char *st_body_of_size(size_t size) {
    static const char pre[] = "{\"model\":\"clef-tiny-a\",\"state\":\"";
    static const char post[] = "\",\"questions\":{\"q\":{\"type\":\"noul\",\"instructions\":\"Is it urgent?\"}}}";
    size_t fixed = sizeof pre - 1 + sizeof post - 1;
    if (size < fixed) return NULL;
    char *b = malloc(size + 1);
    if (!b) return NULL;
    memcpy(b, pre, sizeof pre - 1);
    memset(b + sizeof pre - 1, 'a', size - fixed);
    memcpy(b + size - (sizeof post - 1), post, sizeof post - 1);
    b[size] = '\0';
    return b;
}

/* n noul questions "q0".."q<n-1>". */
static inline char *st_questions_body(size_t n) {
    st_buf b = {0};
    st_puts(&b, "{\"model\":\"clef-tiny-a\",\"state\":\"Help, payouts fail.\",\"questions\":{");
    for (size_t i = 0; i < n; i++) {
        char q[96];
        snprintf(q, sizeof q, "%s\"q%zu\":{\"type\":\"noul\",\"instructions\":\"Urgent?\"}", i ? "," : "", i);
        st_puts(&b, q);
    }
    st_puts(&b, "}}");
    return b.p;
}

/* ---- the oracle ---------------------------------------------------------------- */

/* The oracle's "response" object for case id (new reference; NULL if absent). */
static inline json_t *st_oracle_response(const char *id) {
    char *text = hc_slurp(ST_EXPECTED);
    if (!text) return NULL;
    char key[128];
    snprintf(key, sizeof key, "{\"id\": \"%s\",", id);
    char *line = strstr(text, key);
    json_t *resp = NULL;
    if (line) {
        char *end = strchr(line, '\n');
        json_t *j = json_loadb(line, end ? (size_t)(end - line) : strlen(line), 0, NULL);
        resp = json_incref(json_object_get(j, "response"));
        json_decref(j);
    }
    free(text);
    return resp;
}

/* A 200 body answering noul question qid with P(true) within 1e-4 of the
 * oracle's (the F32 runtime is within ~1e-6 of it). */
static inline bool st_noul_matches(const char *body, const json_t *oracle, const char *qid) {
    json_t *got = json_loads(body, 0, NULL);
    json_t *ga = json_object_get(json_object_get(got, "answers"), qid);
    json_t *wa = json_object_get(json_object_get(oracle, "answers"), qid);
    bool ok = ga && wa && json_is_number(json_object_get(ga, "noul")) &&
              fabs(json_number_value(json_object_get(ga, "noul")) -
                   json_number_value(json_object_get(wa, "noul"))) <= 1e-4;
    json_decref(got);
    return ok;
}

/* ---- process memory ----------------------------------------------------------- */

/* A field of /proc/PID/status in KiB ("VmRSS", "VmHWM"); -1 if unreadable. */
static inline long st_proc_kib(pid_t pid, const char *field) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    char *text = hc_slurp(path);
    if (!text) return -1;
    char key[32];
    snprintf(key, sizeof key, "\n%s:", field);
    char *p = strstr(text, key);
    long kib = p ? strtol(p + strlen(key), NULL, 10) : -1;
    free(text);
    return kib;
}

#endif
