/* cli/cmd_serve.c — `clef serve` (not written yet). */
#include <stdio.h>

#include "cli/commands.h"

int cmd_serve(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "clef serve: not implemented yet\n");
    return 1;
}
