/* cli/cmd_synth.c — `clef synth` (not written yet). */
#include <stdio.h>

#include "cli/commands.h"

int cmd_synth(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "clef synth: not implemented yet\n");
    return 1;
}
