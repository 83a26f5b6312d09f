/*
 * cli/cmd_bench.c — `clef bench`: prefill speed of a model on random-token
 * prompts.
 *
 * For each prompt size: one warm-up forward, then REPEATS timed forwards
 * (clef_forward_profiled); the median run is reported.  Throughput is
 * tokens / wall second; achieved GFLOP/s counts the FLOPs of the shapes
 * (clef.h: matmuls, attention, delta rule); the peak is measured here, on
 * the model's threads, with a register-resident loop of the instruction the
 * model's largest matrices use, once before the first size and again after
 * each (the highest reading is the ceiling).  "head" is the final norm plus,
 * for a model with a decision head, one scoring of four synthetic questions.
 * Peak RSS is getrusage's high-water mark of the whole process (mapped
 * weights that were touched count).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "clef.h"
#include "cli/commands.h"

enum { BENCH_MAX_SIZES = 16 };

typedef struct bench_opts {
    const char *model;
    int64_t sizes[BENCH_MAX_SIZES];
    int n_sizes;
    int threads;
    int repeats;
    int batch;                  /* prompts per pass */
    bool json;
    double peak_seconds;
    uint64_t seed;
} bench_opts;

static void bench_usage(FILE *out) {
    fprintf(out,
            "usage: clef bench -m MODEL [-p 128,512,2048] [-t N] [-r REPEATS] [-b N] [--json]\n"
            "                  [--peak-seconds S] [--seed N]\n\n"
            "Prefill random-token prompts of each size and report tokens/s, achieved\n"
            "GFLOP/s, the fraction of this machine's measured peak, time by stage and\n"
            "peak RSS.  CLEF_CPU=ref|avx2|avx2+vnni|avx512|amx|neon selects the kernels\n"
            "(default: best).\n\n"
            "  -m MODEL        GGUF model (qwen35 or clef)\n"
            "  -p LIST         prompt sizes in tokens, comma-separated (default 128,512)\n"
            "  -t N            compute threads (default: all cores)\n"
            "  -r N            timed repeats per size, the median is reported (default 3)\n"
            "  -b N            N prompts of each size in one pass, as a server batches\n"
            "                  requests; tokens/s counts all of them (default 1)\n"
            "  --json          one JSON object per line per prompt size\n"
            "  --peak-seconds  how long each peak measurement runs: one before the first\n"
            "                  size and one after each (default 0.5)\n"
            "  --seed N        token seed (default 1)\n");
}

static bool parse_int(const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

static bool parse_sizes(const char *s, bench_opts *o) {
    o->n_sizes = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        long v;
        if (o->n_sizes == BENCH_MAX_SIZES || !parse_int(tok, 1, 1 << 24, &v)) return false;
        o->sizes[o->n_sizes++] = v;
    }
    return o->n_sizes > 0;
}

/* 0: parsed; 1: help printed; 2: bad usage (message printed). */
static int parse_args(int argc, char **argv, bench_opts *o) {
    *o = (bench_opts){.sizes = {128, 512}, .n_sizes = 2, .repeats = 3, .batch = 1, .peak_seconds = 0.5, .seed = 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long n;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            bench_usage(stdout);
            return 1;
        } else if (!strcmp(a, "--json")) {
            o->json = true;
            continue;
        } else if (!v) {
            fprintf(stderr, "clef bench: %s needs a value\n", a);
            return 2;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            o->model = v;
        } else if (!strcmp(a, "-p")) {
            if (!parse_sizes(v, o)) {
                fprintf(stderr, "clef bench: -p '%s': expected sizes like 128,512 (1..16777216)\n", v);
                return 2;
            }
        } else if (!strcmp(a, "-t")) {
            if (!parse_int(v, 1, 4096, &n)) {
                fprintf(stderr, "clef bench: -t '%s': expected a thread count\n", v);
                return 2;
            }
            o->threads = (int)n;
        } else if (!strcmp(a, "-r")) {
            if (!parse_int(v, 1, 1000, &n)) {
                fprintf(stderr, "clef bench: -r '%s': expected 1..1000 repeats\n", v);
                return 2;
            }
            o->repeats = (int)n;
        } else if (!strcmp(a, "-b") || !strcmp(a, "--batch")) {
            if (!parse_int(v, 1, 4096, &n)) {
                fprintf(stderr, "clef bench: -b '%s': expected 1..4096 prompts per pass\n", v);
                return 2;
            }
            o->batch = (int)n;
        } else if (!strcmp(a, "--peak-seconds")) {
            char *end;
            o->peak_seconds = strtod(v, &end);
            if (*end || !(o->peak_seconds >= 0.01 && o->peak_seconds <= 60)) {
                fprintf(stderr, "clef bench: --peak-seconds '%s': expected 0.01..60\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--seed")) {
            if (!parse_int(v, 0, 0x7fffffff, &n)) {
                fprintf(stderr, "clef bench: --seed '%s': expected a non-negative integer\n", v);
                return 2;
            }
            o->seed = (uint64_t)n;
        } else {
            fprintf(stderr, "clef bench: unknown option '%s'\n", a);
            bench_usage(stderr);
            return 2;
        }
        i++;
    }
    if (!o->model) {
        fprintf(stderr, "clef bench: -m MODEL is required\n");
        bench_usage(stderr);
        return 2;
    }
    return 0;
}

static uint64_t peak_rss_bytes(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru)) return 0;
    return (uint64_t)ru.ru_maxrss * 1024; /* Linux: kilobytes */
}

static int cmp_total(const void *a, const void *b) {
    double x = ((const clef_forward_stats *)a)->total_s, y = ((const clef_forward_stats *)b)->total_s;
    return (x > y) - (x < y);
}

static void random_ids(int32_t *ids, int64_t n, int n_vocab, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
    for (int64_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        ids[i] = (int32_t)(s % (uint64_t)n_vocab);
    }
}

typedef struct bench_row {
    int64_t n;
    clef_forward_stats st;   /* the median run */
    double best_s;
} bench_row;

static clef_status bench_size(clef_model *m, const clef_model_info *info, const bench_opts *o,
                              int64_t n, bench_row *row, clef_error *err) {
    const size_t tokens = (size_t)o->batch * (size_t)n;
    int32_t *ids = malloc(tokens * sizeof *ids);
    float *hidden = malloc(tokens * (size_t)clef_model_n_embd(m) * sizeof *hidden);
    clef_forward_stats *runs = calloc((size_t)o->repeats, sizeof *runs);
    clef_status st = CLEF_OK;
    if (!ids || !hidden || !runs) st = CLEF_ERR_NOMEM;
    if (st == CLEF_OK) {
        for (int b = 0; b < o->batch; b++) random_ids(ids + (size_t)b * (size_t)n, n, info->n_vocab, o->seed + (uint64_t)b);
        clef_forward_stats warm;
        st = clef_forward_batch_profiled(m, (size_t)o->batch, ids, (size_t)n, hidden, &warm, err);
    }
    for (int r = 0; st == CLEF_OK && r < o->repeats; r++)
        st = clef_forward_batch_profiled(m, (size_t)o->batch, ids, (size_t)n, hidden, &runs[r], err);
    if (st == CLEF_OK) {
        qsort(runs, (size_t)o->repeats, sizeof *runs, cmp_total);
        *row = (bench_row){.n = n, .st = runs[o->repeats / 2], .best_s = runs[0].total_s};
    } else if (st == CLEF_ERR_NOMEM && err) {
        snprintf(err->message, sizeof err->message, "out of memory for %d prompts of %lld tokens",
                 o->batch, (long long)n);
    }
    free(ids);
    free(hidden);
    free(runs);
    return st;
}

/* s as a JSON string (quotes, backslashes and control characters escaped). */
static void put_json_string(const char *s) {
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') printf("\\%c", *p);
        else if (*p < 0x20) printf("\\u%04x", *p);
        else putchar(*p);
    }
    putchar('"');
}

static double flops_of(const clef_forward_stats *s) { return s->matmul_flop + s->attention_flop + s->delta_flop; }

static void print_json(const bench_opts *o, const clef_model_info *info, double peak, const bench_row *r) {
    const clef_forward_stats *s = &r->st;
    double other = s->total_s - s->matmul_s - s->attention_s - s->delta_s - s->head_s;
    double gf = flops_of(s) / s->total_s / 1e9, mgf = s->matmul_s > 0 ? s->matmul_flop / s->matmul_s / 1e9 : 0;
    /* rates to six significant digits: an emulated or tiny run's 0.07
     * GFLOP/s keeps its precision as well as a fast one's 700 */
    printf("{\"model\":");
    put_json_string(o->model);
    printf(",\"n_tokens\":%lld,\"threads\":%d,\"weight_type\":\"%s\",\"kernels\":\"%s\","
           "\"precision\":\"%s\",\"batch\":%d,\"repeats\":%d,\"seconds\":%.9g,\"best_seconds\":%.9g,"
           "\"tokens_per_second\":%.6g,\"gflops\":%.6g,\"peak_gflops\":%.6g,\"peak_fraction\":%.6g,"
           "\"matmul_gflops\":%.6g,\"matmul_peak_fraction\":%.6g,"
           "\"stage_seconds\":{\"matmul\":%.9g,\"attention\":%.9g,\"delta_rule\":%.9g,\"other\":%.9g,"
           "\"head\":%.9g},\"flop\":{\"matmul\":%.0f,\"attention\":%.0f,\"delta_rule\":%.0f},"
           "\"peak_rss_bytes\":%llu}\n",
           (long long)r->n, info->n_threads, info->weight_type, info->kernels, info->precision,
           o->batch, o->repeats, s->total_s, r->best_s, (double)r->n * o->batch / s->total_s, gf, peak, gf / peak, mgf,
           mgf / peak, s->matmul_s, s->attention_s, s->delta_s, other, s->head_s, s->matmul_flop,
           s->attention_flop, s->delta_flop, (unsigned long long)peak_rss_bytes());
    fflush(stdout);
}

static void print_text_header(const bench_opts *o, const clef_model_info *info, double peak) {
    printf("model    %s: %d layers, %.3f G matrix weights, %s, %.2f GB\n", o->model, info->n_layer,
           (double)info->matrix_params / 1e9, info->weight_type, (double)info->matrix_bytes / 1e9);
    printf("kernels  %s, %s activations, %d threads; peak %.1f G%s/s (measured)\n", info->kernels,
           info->precision, info->n_threads, peak, strcmp(info->precision, "int8") ? "FLOP" : "OP");
    if (o->batch > 1) printf("batch    %d prompts of each size per pass; tok/s counts all\n", o->batch);
    printf("%8s %9s %8s %6s %8s %6s | %8s %8s %8s %8s %8s (ms) | %8s\n", "tokens", "tok/s", "GFLOP/s",
           "%peak", "mm GF/s", "%peak", "matmul", "attn", "delta", "other", "head", "RSS MB");
}

static void print_text(const bench_opts *o, double peak, const bench_row *r) {
    const clef_forward_stats *s = &r->st;
    double other = s->total_s - s->matmul_s - s->attention_s - s->delta_s - s->head_s;
    double gf = flops_of(s) / s->total_s / 1e9, mgf = s->matmul_s > 0 ? s->matmul_flop / s->matmul_s / 1e9 : 0;
    printf("%8lld %9.1f %8.1f %5.1f%% %8.1f %5.1f%% | %8.1f %8.1f %8.1f %8.1f %8.2f      | %8.0f\n",
           (long long)r->n, (double)r->n * o->batch / s->total_s, gf, 100 * gf / peak, mgf, 100 * mgf / peak,
           1e3 * s->matmul_s, 1e3 * s->attention_s, 1e3 * s->delta_s, 1e3 * other, 1e3 * s->head_s,
           (double)peak_rss_bytes() / 1e6);
    fflush(stdout);
}

/* The peak once more, right after a size's runs, and the higher of the two
 * from then on.  A KVM host's neighbours or the kernel's writeback can slow
 * one measurement for a second or more (seen: 179 GFLOP/s measured, 237
 * achieved by the matmuls just after, 300-308 in the next runs); a peak is
 * a ceiling, so a low reading is the error, never a high one. */
static double remeasure_peak(clef_model *m, const bench_opts *o, double peak, int64_t n) {
    double again = clef_model_peak_gflops(m, o->peak_seconds);
    if (again <= peak) return peak;
    if (!o->json && again > 1.02 * peak)
        printf("peak     re-measured after %lld tokens: %.1f G/s, used from this row on\n",
               (long long)n, again);
    return again;
}

int cmd_bench(int argc, char **argv) {
    bench_opts o;
    int pr = parse_args(argc, argv, &o);
    if (pr) return pr == 1 ? 0 : 2;
    clef_model_params mp = clef_model_default_params();
    mp.n_threads = o.threads;
    clef_model *m = NULL;
    clef_error err = {0};
    if (clef_model_load(o.model, &mp, &m, &err) != CLEF_OK) {
        fprintf(stderr, "clef bench: %s\n", err.message);
        return 1;
    }
    clef_model_info info;
    clef_model_get_info(m, &info);
    for (int i = 0; i < o.n_sizes; i++)
        if (o.sizes[i] > clef_model_n_ctx(m)) {
            fprintf(stderr, "clef bench: -p %lld is longer than the model's context (%d tokens)\n",
                    (long long)o.sizes[i], clef_model_n_ctx(m));
            clef_model_free(m);
            return 2;
        }
    double peak = clef_model_peak_gflops(m, o.peak_seconds);
    if (!o.json) print_text_header(&o, &info, peak);
    int rc = 0;
    for (int i = 0; i < o.n_sizes; i++) {
        bench_row row;
        if (bench_size(m, &info, &o, o.sizes[i], &row, &err) != CLEF_OK) {
            fprintf(stderr, "clef bench: %lld tokens: %s\n", (long long)o.sizes[i], err.message);
            rc = 1;
            break;
        }
        peak = remeasure_peak(m, &o, peak, o.sizes[i]);
        if (o.json) print_json(&o, &info, peak, &row);
        else print_text(&o, peak, &row);
    }
    clef_model_free(m);
    return rc;
}
