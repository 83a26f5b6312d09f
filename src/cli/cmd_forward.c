/*
 * cli/cmd_forward.c — `clef forward -m MODEL (--text T | --ids JSON) --dump PATH [-t N]`:
 * run the backbone over one sequence and write the final-normed hidden
 * states, n_tokens x n_embd little-endian f32 row-major, to PATH; print
 * {"n_tokens":T,"n_embd":H} on stdout.  --text is tokenized with the
 * model's tokenizer, special tokens written in it matching as added tokens.
 * Exit 0 on success, 1 when the run fails, 2 on a usage error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "clef.h"
#include "cli/commands.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: clef forward -m MODEL (--text TEXT | --ids JSON) --dump PATH [-t N]\n"
            "  -m, --model PATH   GGUF model (arch qwen35 or clef)\n"
            "  --text TEXT        text to tokenize (added tokens like <|im_start|> match)\n"
            "  --ids JSON         token ids as a JSON array, e.g. [9707,1879]\n"
            "  --dump PATH        where to write n_tokens x n_embd little-endian f32\n"
            "  -t, --threads N    compute threads (default: all cores)\n"
            "Prints {\"n_tokens\":T,\"n_embd\":H} on stdout.\n");
}

typedef struct fwd_args {
    const char *model, *text, *ids, *dump;
    int n_threads;
} fwd_args;

/* 0 ok, 2 usage error (already reported), -1 --help printed. */
static int parse_args(int argc, char **argv, fwd_args *a) {
    memset(a, 0, sizeof *a);
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            usage(stdout);
            return -1;
        }
        const char **slot = !strcmp(o, "-m") || !strcmp(o, "--model") ? &a->model
                            : !strcmp(o, "--text")                     ? &a->text
                            : !strcmp(o, "--ids")                      ? &a->ids
                            : !strcmp(o, "--dump")                     ? &a->dump
                                                                       : NULL;
        bool threads = !strcmp(o, "-t") || !strcmp(o, "--threads");
        if (!slot && !threads) {
            fprintf(stderr, "clef forward: unknown option '%s'\n", o);
            usage(stderr);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "clef forward: %s needs a value\n", o);
            return 2;
        }
        const char *v = argv[++i];
        if (slot) {
            *slot = v;
            continue;
        }
        char *end;
        long n = strtol(v, &end, 10);
        if (*v == '\0' || *end != '\0' || n < 0 || n > 4096) {
            fprintf(stderr, "clef forward: -t wants a thread count 0..4096, got '%s'\n", v);
            return 2;
        }
        a->n_threads = (int)n;
    }
    if (!a->model || !a->dump || !a->text == !a->ids) {
        fprintf(stderr, "clef forward: needs -m MODEL, --dump PATH and exactly one of --text / --ids\n");
        usage(stderr);
        return 2;
    }
    return 0;
}

/* --ids: a JSON array of integers in int32 range.  *ids malloc'd. */
static bool parse_ids(const char *json, int32_t **ids, size_t *n) {
    json_error_t jerr;
    json_t *arr = json_loads(json, 0, &jerr);
    if (!arr || !json_is_array(arr) || json_array_size(arr) == 0) {
        fprintf(stderr, "clef forward: --ids wants a non-empty JSON array of integers%s%s\n",
                arr ? "" : ": ", arr ? "" : jerr.text);
        json_decref(arr);
        return false;
    }
    *n = json_array_size(arr);
    *ids = malloc(*n * sizeof **ids);
    for (size_t i = 0; *ids && i < *n; i++) {
        json_t *v = json_array_get(arr, i);
        json_int_t x = json_is_integer(v) ? json_integer_value(v) : -1;
        if (!json_is_integer(v) || x < INT32_MIN || x > INT32_MAX) {
            fprintf(stderr, "clef forward: --ids element %zu is not an int32 integer\n", i);
            free(*ids);
            *ids = NULL;
            break;
        }
        (*ids)[i] = (int32_t)x;
    }
    json_decref(arr);
    return *ids != NULL;
}

static bool write_dump(const char *path, const float *h, size_t count) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "clef forward: cannot create '%s'\n", path);
        return false;
    }
    bool ok = true;
    for (size_t i = 0; i < count && ok; i++) {
        uint32_t u;
        memcpy(&u, &h[i], 4);
        unsigned char b[4] = {(unsigned char)u, (unsigned char)(u >> 8), (unsigned char)(u >> 16),
                              (unsigned char)(u >> 24)};
        ok = fwrite(b, 1, 4, f) == 4;
    }
    if (fclose(f) != 0) ok = false;
    if (!ok) fprintf(stderr, "clef forward: writing '%s' failed\n", path);
    return ok;
}

/* The ids to run: --ids, or --text through the model's tokenizer. */
static bool input_ids(const clef_model *m, const fwd_args *a, int32_t **ids, size_t *n) {
    if (a->ids) return parse_ids(a->ids, ids, n);
    const clef_tokenizer *tok = clef_model_tokenizer(m);
    if (!tok) {
        fprintf(stderr, "clef forward: '%s' has no tokenizer; use --ids\n", a->model);
        return false;
    }
    clef_error err = {0};
    if (clef_tokenize(tok, a->text, strlen(a->text), true, ids, n, &err) != CLEF_OK) {
        fprintf(stderr, "clef forward: tokenize: %s\n", err.message);
        return false;
    }
    if (*n == 0) {
        fprintf(stderr, "clef forward: --text gives no tokens\n");
        clef_free(*ids);
        *ids = NULL;
        return false;
    }
    return true;
}

int cmd_forward(int argc, char **argv) {
    fwd_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc) return rc < 0 ? 0 : rc;

    clef_model_params p = clef_model_default_params();
    p.n_threads = a.n_threads;
    clef_model *m = NULL;
    clef_error err = {0};
    if (clef_model_load(a.model, &p, &m, &err) != CLEF_OK) {
        fprintf(stderr, "clef forward: %s\n", err.message);
        return 1;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    float *h = NULL;
    rc = 1;
    if (input_ids(m, &a, &ids, &n)) {
        size_t E = (size_t)clef_model_n_embd(m);
        h = malloc(n * E * sizeof *h);
        if (!h) fprintf(stderr, "clef forward: out of memory for %zu x %zu floats\n", n, E);
        else if (clef_forward(m, ids, n, h, &err) != CLEF_OK)
            fprintf(stderr, "clef forward: %s\n", err.message);
        else if (write_dump(a.dump, h, n * E)) {
            printf("{\"n_tokens\":%zu,\"n_embd\":%zu}\n", n, E);
            rc = fflush(stdout) == 0 ? 0 : 1;
        }
    }
    free(h);
    clef_free(ids);
    clef_model_free(m);
    return rc;
}
