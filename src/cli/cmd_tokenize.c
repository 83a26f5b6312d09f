/*
 * cli/cmd_tokenize.c — `clef tokenize -m MODEL [--no-special] TEXT`: print
 * the token ids of TEXT as a JSON array ("[9707,1879]\n").  TEXT "-" reads
 * stdin (binary safe: NUL bytes are text too).  Exit 0 on success, 1 when
 * tokenizing fails, 2 on a usage error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clef.h"
#include "cli/cli_io.h"
#include "cli/commands.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: clef tokenize -m MODEL [--no-special] TEXT\n"
            "  -m, --model PATH  GGUF file whose tokenizer.ggml.* metadata to use\n"
            "  --no-special      treat added tokens written in TEXT (<|im_start|>) as text\n"
            "  TEXT              the text, or - to read it from stdin\n"
            "Prints the token ids as a JSON array.\n");
}

static int print_ids(const int32_t *ids, size_t n) {
    putchar('[');
    for (size_t i = 0; i < n; i++) printf(i ? ",%d" : "%d", ids[i]);
    putchar(']');
    putchar('\n');
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "clef tokenize: cannot write the ids to stdout\n");
        return 1;
    }
    return 0;
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *text_arg = NULL;
    bool parse_special = true, options_done = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!options_done && (!strcmp(a, "-h") || !strcmp(a, "--help"))) {
            usage(stdout);
            return 0;
        } else if (!options_done && (!strcmp(a, "-m") || !strcmp(a, "--model"))) {
            if (i + 1 >= argc) {
                fprintf(stderr, "clef tokenize: %s needs a path\n", a);
                return 2;
            }
            model = argv[++i];
        } else if (!options_done && !strcmp(a, "--no-special")) {
            parse_special = false;
        } else if (!options_done && !strcmp(a, "--")) {
            options_done = true;
        } else if (!options_done && a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "clef tokenize: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        } else if (text_arg) {
            fprintf(stderr, "clef tokenize: more than one TEXT argument\n");
            usage(stderr);
            return 2;
        } else {
            text_arg = a;
        }
    }
    if (!model || !text_arg) {
        fprintf(stderr, "clef tokenize: %s\n", !model ? "-m MODEL is required" : "TEXT is required");
        usage(stderr);
        return 2;
    }

    size_t len = 0;
    char *owned = NULL;
    const char *text = text_arg;
    if (!strcmp(text_arg, "-")) {
        owned = cli_read_stdin(&len);
        if (!owned) {
            fprintf(stderr, "clef tokenize: cannot read the text from stdin\n");
            return 1;
        }
        text = owned;
    } else {
        len = strlen(text_arg); /* an argv string cannot hold NUL */
    }

    clef_error err = {0};
    clef_tokenizer *tok = NULL;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    int rc = 1;
    if (clef_tokenizer_load(model, &tok, &err) == CLEF_OK &&
        clef_tokenize(tok, text, len, parse_special, &ids, &n_ids, &err) == CLEF_OK)
        rc = print_ids(ids, n_ids);
    else
        fprintf(stderr, "clef tokenize: %s\n", err.message);
    clef_free(ids);
    clef_tokenizer_free(tok);
    free(owned);
    return rc;
}
