/* cli/main.c — `clef SUBCOMMAND ...`: dispatch to one file per subcommand. */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"

typedef struct subcommand {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} subcommand;

static const subcommand subcommands[] = {
    {"info", cmd_info, "print a GGUF file's architecture, metadata and tensors"},
    {"tokenize", cmd_tokenize, "print the token ids of a text as JSON"},
    {"forward", cmd_forward, "run the backbone and dump final hidden states"},
    {"decide", cmd_decide, "answer a System One request read from stdin"},
    {"serve", cmd_serve, "serve POST /v1/systemone over HTTP"},
    {"bench", cmd_bench, "measure prefill speed"},
    {"quantize", cmd_quantize, "write a model with quantized weights"},
    {"synth", cmd_synth, "write a random-weight model of a named shape"},
};

static void usage(FILE *out) {
    fprintf(out, "usage: clef SUBCOMMAND [options]\n\nsubcommands:\n");
    for (size_t i = 0; i < sizeof subcommands / sizeof subcommands[0]; i++)
        fprintf(out, "  %-10s %s\n", subcommands[i].name, subcommands[i].summary);
    fprintf(out, "\n`clef SUBCOMMAND --help` describes each one.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof subcommands / sizeof subcommands[0]; i++)
        if (!strcmp(argv[1], subcommands[i].name)) return subcommands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "clef: unknown subcommand '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
