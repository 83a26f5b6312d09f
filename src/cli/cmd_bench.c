/* cli/cmd_bench.c — `clef bench` (not written yet). */
#include <stdio.h>

#include "cli/commands.h"

int cmd_bench(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "clef bench: not implemented yet\n");
    return 1;
}
