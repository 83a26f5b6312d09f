/* tests/testutil.c — file, temp-file and subprocess helpers for tests. */
#include "testutil.h"

#include <ftw.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

char *tu_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            char *nb = realloc(buf, 2 * cap + 1);
            if (!nb) { free(buf); buf = NULL; break; }
            buf = nb;
            cap *= 2;
        }
    }
    fclose(f);
    if (!buf) return NULL;
    buf[n] = '\0';
    if (len) *len = n;
    return buf;
}

static void temp_dir_name(char *dir, size_t n) {
    snprintf(dir, n, "/tmp/clef-test-%d", (int)getpid());
}

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw) {
    (void)st, (void)type, (void)ftw;
    remove(path);
    return 0;
}

/* At exit: the process's temp dir and whatever its tests left in it. */
static void temp_dir_remove(void) {
    char dir[128];
    temp_dir_name(dir, sizeof dir);
    nftw(dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
}

char *tu_write_temp(const char *name, const void *data, size_t len) {
    static bool cleanup_registered; /* once per process: the dir is per pid */
    char dir[128];
    temp_dir_name(dir, sizeof dir);
    mkdir(dir, 0700);
    if (!cleanup_registered) cleanup_registered = atexit(temp_dir_remove) == 0;
    size_t plen = strlen(dir) + strlen(name) + 2;
    char *path = malloc(plen);
    if (!path) return NULL;
    snprintf(path, plen, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) { free(path); return NULL; }
    if (len && fwrite(data, 1, len, f) != len) { fclose(f); free(path); return NULL; }
    fclose(f);
    return path;
}

char *tu_run(const char *cmd, int *status) {
    FILE *p = popen(cmd, "r");
    if (!p) return NULL;
    size_t cap = 1 << 16, n = 0, got;
    char *buf = malloc(cap + 1);
    while (buf && (got = fread(buf + n, 1, cap - n, p)) > 0) {
        n += got;
        if (n == cap) {
            char *nb = realloc(buf, 2 * cap + 1);
            if (!nb) { free(buf); buf = NULL; break; }
            buf = nb;
            cap *= 2;
        }
    }
    int st = pclose(p);
    if (status) *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    if (buf) buf[n] = '\0';
    return buf;
}

const char *tu_clef_bin(void) {
    const char *b = getenv("CLEF_BIN");
    return b && *b ? b : "build/clef";
}

int tu_cpu_paths(cpu_path *out) {
    cpu_features f;
    cpu_detect(&f);
    int n = 0;
    for (int p = 0; p < CPU_PATH_COUNT; p++)
        if (p != CPU_PATH_AMX && cpu_path_supported(&f, (cpu_path)p)) out[n++] = (cpu_path)p;
    return n;
}

cpu_target tu_cpu_target(cpu_path path) {
    cpu_features f;
    cpu_detect(&f);
    cpu_target t = {.path = path};
    clef_error err = {0};
    if (cpu_choose(cpu_path_name(path), &f, &t, &err) != CLEF_OK) t = (cpu_target){.path = path};
    return t;
}
