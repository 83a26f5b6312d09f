/* cli/cmd_tokenize.c — `clef tokenize` (not written yet). */
#include <stdio.h>

#include "cli/commands.h"

int cmd_tokenize(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "clef tokenize: not implemented yet\n");
    return 1;
}
