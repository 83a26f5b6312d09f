/* cli/cmd_info.c — `clef info` (not written yet). */
#include <stdio.h>

#include "cli/commands.h"

int cmd_info(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "clef info: not implemented yet\n");
    return 1;
}
