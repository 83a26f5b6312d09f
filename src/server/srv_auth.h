/*
 * server/srv_auth.h — API keys and the `Authorization: Bearer` check.
 *
 * Contract: a srv_keys holds zero or more keys (zero = the server serves
 * everyone).  srv_auth_check classifies one Authorization header value the
 * way the System One provider does: no header, an empty value, a scheme other
 * than Bearer (case-insensitive) or an empty credential → SRV_AUTH_MISSING
 * (HTTP 403); a credential that matches no key → SRV_AUTH_WRONG (401).  Key
 * comparison takes time that depends only on the lengths the client sent and
 * the number of keys, never on where a guess first differs.
 */
#ifndef CLEF_SERVER_SRV_AUTH_H
#define CLEF_SERVER_SRV_AUTH_H

#include <stdbool.h>
#include <stddef.h>

#include "clef.h"

typedef struct srv_keys {
    char **keys;    /* owned NUL-terminated strings */
    size_t n, cap;
} srv_keys;

typedef enum srv_auth_result {
    SRV_AUTH_OK = 0,
    SRV_AUTH_MISSING,   /* 403: no usable Bearer credential   */
    SRV_AUTH_WRONG,     /* 401: a credential no key matches   */
} srv_auth_result;

/* Add one key (copied).  Empty keys are rejected: they would match nothing
 * a client can send and almost always mean a configuration mistake. */
clef_status srv_keys_add(srv_keys *keys, const char *key, size_t len, clef_error *err);

/* Add every comma-separated key of list (llama.cpp's --api-key form). */
clef_status srv_keys_add_list(srv_keys *keys, const char *list, clef_error *err);

/* Add every key of a file, one per line; blank lines are skipped, a trailing
 * CR and surrounding spaces/tabs are stripped.  A file without any key is an
 * error (starting an open server by accident is worse than not starting). */
clef_status srv_keys_load_file(srv_keys *keys, const char *path, clef_error *err);

void srv_keys_free(srv_keys *keys);

/* Classify an Authorization header value (NULL = header absent). */
srv_auth_result srv_auth_check(const srv_keys *keys, const char *authorization);

/* Constant-time equality of a[0..la) and b[0..lb): the running time depends
 * on lb only (b is what the client sent). */
bool srv_ct_equal(const char *a, size_t la, const char *b, size_t lb);

#endif
