/*
 * cli/cmd_decide.c — `clef decide -m MODEL [options] < request.json`.
 *
 * Reads one System One request body from stdin and prints what a server
 * would send: the 200 response, or the contract's error body (then the exit
 * status is 1, and the HTTP status goes to stderr).  Exit 2: bad usage;
 * exit 3: clef itself failed (the message goes to stderr).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clef.h"
#include "cli/cli_io.h"
#include "cli/commands.h"

static void decide_usage(FILE *out) {
    fprintf(out,
            "usage: clef decide -m MODEL [options] < request.json\n"
            "  -m, --model PATH          a clef GGUF file\n"
            "  --max-length N            token budget (default 16384, at most the model's context)\n"
            "  --explain                 add a \"clef\" object: input ids, spans, logits\n"
            "  --reference-confidence    report p(choice) / max p instead of TypeSafe's confidence\n"
            "  --model-name NAME         the name reported in \"model\" (default: the file's)\n"
            "  -t, --threads N           compute threads (default: all cores)\n");
}

typedef struct decide_args {
    const char *model;
    clef_decide_options opts;
    int threads;
} decide_args;

static int parse_args(int argc, char **argv, decide_args *a) {
    a->opts = clef_decide_default_options();
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        const char *next = i + 1 < argc ? argv[i + 1] : NULL;
        if ((!strcmp(s, "-m") || !strcmp(s, "--model")) && next) a->model = argv[++i];
        else if (!strcmp(s, "--max-length") && next) a->opts.max_length = atoi(argv[++i]);
        else if (!strcmp(s, "--explain")) a->opts.explain = true;
        else if (!strcmp(s, "--reference-confidence")) a->opts.confidence = CLEF_CONFIDENCE_REFERENCE;
        else if (!strcmp(s, "--model-name") && next) a->opts.model_name = argv[++i];
        else if ((!strcmp(s, "-t") || !strcmp(s, "--threads")) && next) a->threads = atoi(argv[++i]);
        else if (!strcmp(s, "-h") || !strcmp(s, "--help")) {
            decide_usage(stdout);
            exit(0);
        } else {
            fprintf(stderr, "clef decide: unknown or incomplete option '%s'\n", s);
            return 2;
        }
    }
    if (!a->model) {
        decide_usage(stderr);
        return 2;
    }
    if (a->opts.max_length < 0 || a->threads < 0) {
        fprintf(stderr, "clef decide: --max-length and --threads must be positive\n");
        return 2;
    }
    return 0;
}

int cmd_decide(int argc, char **argv) {
    decide_args a = {0};
    int rc = parse_args(argc, argv, &a);
    if (rc) return rc;
    size_t len = 0;
    char *body = cli_read_stdin(&len);
    if (!body) {
        fprintf(stderr, "clef decide: cannot read the request from stdin\n");
        return 3;
    }
    clef_error err = {0};
    clef_model_params mp = clef_model_default_params();
    mp.n_threads = a.threads;
    clef_model *model = NULL;
    clef_decide_result res = {0};
    rc = 3;
    if (clef_model_load(a.model, &mp, &model, &err) != CLEF_OK ||
        clef_decide(model, body, len, &a.opts, &res, &err) != CLEF_OK) {
        fprintf(stderr, "clef decide: %s\n", err.message);
    } else {
        fwrite(res.body, 1, res.body_len, stdout);
        fputc('\n', stdout);
        if (res.state_tokens_used < res.state_tokens)
            fprintf(stderr, "clef decide: state cut to fit: %lld of %lld state tokens used\n",
                    (long long)res.state_tokens_used, (long long)res.state_tokens);
        if (res.http_status != 200) fprintf(stderr, "clef decide: HTTP %d\n", res.http_status);
        rc = res.http_status == 200 ? 0 : 1;
    }
    clef_decide_result_free(&res);
    clef_model_free(model);
    free(body);
    return rc;
}
