/* cli/cmd_info.c — `clef info MODEL`: describe a GGUF file (clef_describe_file). */
#include <stdio.h>
#include <string.h>

#include "clef.h"
#include "cli/commands.h"

static void info_usage(FILE *out) {
    fprintf(out,
            "usage: clef info MODEL.gguf\n\n"
            "Print the GGUF version, architecture, hyperparameters (every <arch>.* key),\n"
            "a tokenizer summary and a table of tensors (name, type, shape in ggml order,\n"
            "bytes) with totals.  Any GGUF file works, including vocab-only files.\n");
}

int cmd_info(int argc, char **argv) {
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            info_usage(stdout);
            return 0;
        }
        if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "clef info: unknown option '%s'\n", argv[i]);
            info_usage(stderr);
            return 2;
        }
        if (path) {
            fprintf(stderr, "clef info: expected one MODEL, got '%s' and '%s'\n", path, argv[i]);
            return 2;
        }
        path = argv[i];
    }
    if (!path) {
        fprintf(stderr, "clef info: missing MODEL\n");
        info_usage(stderr);
        return 2;
    }
    clef_error err = {0};
    if (clef_describe_file(path, stdout, &err) != CLEF_OK) {
        fflush(stdout);
        fprintf(stderr, "clef info: %s\n", err.message);
        return 1;
    }
    return fflush(stdout) == 0 ? 0 : 1;
}
