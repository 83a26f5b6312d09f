/* core/error.c — clef_error formatting and status names. */
#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *clef_status_name(clef_status status) {
    switch (status) {
    case CLEF_OK: return "ok";
    case CLEF_ERR_INVALID_ARG: return "invalid_argument";
    case CLEF_ERR_IO: return "io";
    case CLEF_ERR_FORMAT: return "format";
    case CLEF_ERR_UNSUPPORTED: return "unsupported";
    case CLEF_ERR_NOMEM: return "out_of_memory";
    case CLEF_ERR_REQUEST: return "invalid_request";
    case CLEF_ERR_TOO_LONG: return "too_long";
    case CLEF_ERR_INTERNAL: return "internal";
    }
    return "unknown";
}

void clef_free(void *ptr) { free(ptr); }

clef_status clef_err_set(clef_error *err, clef_status status, const char *fmt, ...) {
    if (err) {
        err->status = status;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return status;
}

clef_status clef_err_wrap(clef_error *err, const char *fmt, ...) {
    if (!err) return CLEF_ERR_INTERNAL;
    char prefix[CLEF_ERROR_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    char old[CLEF_ERROR_MESSAGE_MAX];
    memcpy(old, err->message, sizeof old);
    /* Truncation is acceptable: the message is for people. */
    size_t n = strlen(prefix);
    if (n > sizeof err->message - 3) n = sizeof err->message - 3;
    memcpy(err->message, prefix, n);
    err->message[n] = ':';
    err->message[n + 1] = ' ';
    size_t room = sizeof err->message - n - 2;
    size_t m = strnlen(old, room - 1);
    memcpy(err->message + n + 2, old, m);
    err->message[n + 2 + m] = '\0';
    return err->status;
}

void clef_err_clear(clef_error *err) {
    if (err) {
        err->status = CLEF_OK;
        err->message[0] = '\0';
    }
}
