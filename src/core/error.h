/*
 * core/error.h — filling a clef_error.
 *
 * Every module reports failure the same way: return a clef_status and write
 * a message into the caller's clef_error (which may be NULL).  Messages name
 * the thing that was wrong ("tensor 'blk.0.attn_q.weight': data ends past the
 * file end") so that a user can act on them without a debugger.
 */
#ifndef CLEF_CORE_ERROR_H
#define CLEF_CORE_ERROR_H

#include "clef.h"

#if defined(__GNUC__)
#define CLEF_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define CLEF_PRINTF(a, b)
#endif

/* Set err (if non-NULL) and return status, so call sites can write
 * `return clef_err_set(err, CLEF_ERR_FORMAT, "...", ...);`. */
clef_status clef_err_set(clef_error *err, clef_status status, const char *fmt, ...)
    CLEF_PRINTF(3, 4);

/* Prefix an existing message with context: "context: old message". */
clef_status clef_err_wrap(clef_error *err, const char *fmt, ...) CLEF_PRINTF(2, 3);

/* Reset to CLEF_OK with an empty message. */
void clef_err_clear(clef_error *err);

#endif
