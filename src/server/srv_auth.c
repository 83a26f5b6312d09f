/* server/srv_auth.c — API key list, key files, Bearer classification. */
#include "server/srv_auth.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/error.h"

clef_status srv_keys_add(srv_keys *keys, const char *key, size_t len, clef_error *err) {
    if (len == 0) return clef_err_set(err, CLEF_ERR_INVALID_ARG, "empty API key");
    if (memchr(key, '\0', len))
        return clef_err_set(err, CLEF_ERR_INVALID_ARG, "API key contains a NUL byte");
    if (keys->n == keys->cap) {
        size_t cap = keys->cap ? 2 * keys->cap : 4;
        char **nk = realloc(keys->keys, cap * sizeof *nk);
        if (!nk) return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory storing API keys");
        keys->keys = nk;
        keys->cap = cap;
    }
    char *copy = malloc(len + 1);
    if (!copy) return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory storing API keys");
    memcpy(copy, key, len);
    copy[len] = '\0';
    keys->keys[keys->n++] = copy;
    return CLEF_OK;
}

clef_status srv_keys_add_list(srv_keys *keys, const char *list, clef_error *err) {
    const char *p = list;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        clef_status st = srv_keys_add(keys, p, len, err);
        if (st != CLEF_OK) return clef_err_wrap(err, "--api-key '%s'", list);
        if (!comma) return CLEF_OK;
        p = comma + 1;
    }
}

/* Strip spaces, tabs and CR/LF from both ends of s[0..*len). */
static const char *trim(const char *s, size_t *len) {
    size_t n = *len;
    while (n && (*s == ' ' || *s == '\t')) s++, n--;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n')) n--;
    *len = n;
    return s;
}

clef_status srv_keys_load_file(srv_keys *keys, const char *path, clef_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return clef_err_set(err, CLEF_ERR_IO, "API key file '%s': %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0, before = keys->n;
    ssize_t got;
    clef_status st = CLEF_OK;
    unsigned lineno = 0;
    while (st == CLEF_OK && (got = getline(&line, &cap, f)) >= 0) {
        lineno++;
        size_t len = (size_t)got;
        const char *k = trim(line, &len);
        if (len == 0) continue;
        st = srv_keys_add(keys, k, len, err);
        if (st != CLEF_OK) clef_err_wrap(err, "API key file '%s' line %u", path, lineno);
    }
    if (st == CLEF_OK && ferror(f))
        st = clef_err_set(err, CLEF_ERR_IO, "API key file '%s': read error", path);
    free(line);
    fclose(f);
    if (st == CLEF_OK && keys->n == before)
        st = clef_err_set(err, CLEF_ERR_INVALID_ARG, "API key file '%s' holds no key", path);
    return st;
}

void srv_keys_free(srv_keys *keys) {
    for (size_t i = 0; i < keys->n; i++) free(keys->keys[i]);
    free(keys->keys);
    memset(keys, 0, sizeof *keys);
}

bool srv_ct_equal(const char *a, size_t la, const char *b, size_t lb) {
    /* Walk b's length whatever a's is; a is read cyclically so that a short
     * key costs as much as a long one.  volatile keeps the loop from being
     * turned into an early-exit memcmp. */
    volatile unsigned char acc = 0;
    for (size_t i = 0; i < lb; i++) {
        unsigned char ca = la ? (unsigned char)a[i % la] : 0;
        acc |= (unsigned char)(ca ^ (unsigned char)b[i]);
    }
    return acc == 0 && la == lb;
}

srv_auth_result srv_auth_check(const srv_keys *keys, const char *authorization) {
    if (keys->n == 0) return SRV_AUTH_OK;
    if (!authorization) return SRV_AUTH_MISSING;
    /* "<scheme> <credentials>", as FastAPI's HTTPBearer splits it. */
    const char *sp = strchr(authorization, ' ');
    if (!sp || (size_t)(sp - authorization) != 6 || strncasecmp(authorization, "Bearer", 6) != 0)
        return SRV_AUTH_MISSING;
    const char *cred = sp + 1;
    while (*cred == ' ') cred++;
    size_t lc = strlen(cred);
    if (lc == 0) return SRV_AUTH_MISSING;
    bool ok = false;
    for (size_t i = 0; i < keys->n; i++)   /* no early exit: every key costs the same */
        ok |= srv_ct_equal(keys->keys[i], strlen(keys->keys[i]), cred, lc);
    return ok ? SRV_AUTH_OK : SRV_AUTH_WRONG;
}
