/* cli/cmd_forward.c — `clef forward` (not written yet). */
#include <stdio.h>

#include "cli/commands.h"

int cmd_forward(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "clef forward: not implemented yet\n");
    return 1;
}
