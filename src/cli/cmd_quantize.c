/* cli/cmd_quantize.c — `clef quantize IN OUT TYPE`: re-encode a model's
 * weights with one of llama-quantize's recipes (clef_quantize_file). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clef.h"
#include "cli/commands.h"

static void quantize_usage(FILE *out) {
    fprintf(out,
            "usage: clef quantize [-t N] [-q] IN.gguf OUT.gguf TYPE\n\n"
            "TYPE: F32 | F16 | BF16 | Q8_0 | Q4_K_M | Q5_K_M | Q6_K\n\n"
            "Copies every metadata key (general.file_type set to TYPE) and re-encodes the\n"
            "backbone's weight matrices as llama-quantize does: Q4_K_M = Q4_K, with Q6_K for\n"
            "output.weight and for attn_v/attn_qkv and ffn_down in the layers llama.cpp's\n"
            "use_more_bits picks; rows whose length is not a multiple of 256 fall back to\n"
            "Q8_0.  Norms, 1-D tensors, ssm_conv1d and the decision head keep their stored\n"
            "type and bytes.  Streams: memory stays small whatever the model's size.\n\n"
            "  -t N   encoding threads (default: all cores)\n"
            "  -q     no per-tensor progress lines\n");
}

int cmd_quantize(int argc, char **argv) {
    const char *pos[3];
    int n_pos = 0;
    clef_write_params params = clef_write_default_params();
    params.log = stderr;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            quantize_usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "-t") || !strcmp(argv[i], "--threads")) {
            char *end = NULL;
            if (i + 1 >= argc || (params.n_threads = (int)strtol(argv[++i], &end, 10)) < 0 || *end) {
                fprintf(stderr, "clef quantize: -t needs a thread count\n");
                return 2;
            }
        } else if (!strcmp(argv[i], "-q") || !strcmp(argv[i], "--quiet")) {
            params.log = NULL;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "clef quantize: unknown option '%s'\n", argv[i]);
            quantize_usage(stderr);
            return 2;
        } else if (n_pos == 3) {
            fprintf(stderr, "clef quantize: unexpected argument '%s'\n", argv[i]);
            return 2;
        } else {
            pos[n_pos++] = argv[i];
        }
    }
    if (n_pos != 3) {
        fprintf(stderr, "clef quantize: expected IN OUT TYPE\n");
        quantize_usage(stderr);
        return 2;
    }
    clef_error err = {0};
    if (clef_quantize_file(pos[0], pos[1], pos[2], &params, &err) != CLEF_OK) {
        fprintf(stderr, "clef quantize: %s\n", err.message);
        return err.status == CLEF_ERR_INVALID_ARG ? 2 : 1;
    }
    return 0;
}
