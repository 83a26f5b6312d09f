/* cli/cli_io.h — input helpers shared by the subcommands. */
#ifndef CLEF_CLI_IO_H
#define CLEF_CLI_IO_H

#include <stddef.h>

/* All of stdin (binary safe) into a malloc'd buffer the caller frees;
 * NULL on a read error or out of memory. */
char *cli_read_stdin(size_t *len);

#endif
