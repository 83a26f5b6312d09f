/* cli/cmd_quantize.c — `clef quantize` (not written yet). */
#include <stdio.h>

#include "cli/commands.h"

int cmd_quantize(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "clef quantize: not implemented yet\n");
    return 1;
}
