/* cli/cmd_decide.c — `clef decide` (not written yet). */
#include <stdio.h>

#include "cli/commands.h"

int cmd_decide(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "clef decide: not implemented yet\n");
    return 1;
}
