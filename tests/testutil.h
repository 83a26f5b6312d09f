/*
 * tests/testutil.h — small helpers shared by the CTest programs.
 * Tests run from the project root, so oracle files are at ../shared/oracle.
 */
#ifndef CLEF_TESTUTIL_H
#define CLEF_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

#include "core/cpu.h"

#define ORACLE_DIR "../shared/oracle"

/* Whole file into a NUL-terminated malloc'd buffer (NULL on failure). */
char *tu_read_file(const char *path, size_t *len);

/* Write a buffer to a fresh file under a per-process temp dir
 * (/tmp/clef-test-PID, removed with its contents when the process exits);
 * returns the file's path, malloc'd, which the caller frees. */
char *tu_write_temp(const char *name, const void *data, size_t len);

/* Run a shell command, capture stdout (malloc'd, NUL-terminated) and the exit status. */
char *tu_run(const char *cmd, int *status);

/* Path of the clef binary under test (env CLEF_BIN, else build/clef). */
const char *tu_clef_bin(void);

/* The kernel paths this CPU runs, amx left out (the small-kernel tests need
 * no tiles); returns how many were written (at most CPU_PATH_COUNT). */
int tu_cpu_paths(cpu_path *out);

/* path's target as cpu_choose makes it on this CPU (its optional
 * instructions and broadcast form included); path must be supported. */
cpu_target tu_cpu_target(cpu_path path);

#endif
