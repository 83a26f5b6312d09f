/*
 * kernels/peak.c — the machine's measured compute peak for a kernel path,
 * the denominator of `clef bench`'s "fraction of peak".
 *
 * Every thread of the pool runs the same register-resident loop of the one
 * instruction the path's matmuls are built on (f32 FMA on ymm, zmm or NEON
 * vectors, vdpbf16ps, vpdpbusd on zmm or ymm, vpmaddubsw, BFDOT, SDOT or SMMLA, or on amx
 * the tile products TDPBF16PS / TDPBSUD on four accumulator tiles;
 * kernels/simd.h); no memory is touched, so this is the arithmetic ceiling,
 * not an achievable matmul rate.  The ref path's loop is
 * portable C with eight independent multiply-add chains (whatever the
 * compiler makes of it for the baseline target).  The fastest of five
 * runs is kept.
 */
#include "kernels/peak.h"

#include <string.h>
#include <time.h>

#include "kernels/simd.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double ref_peak(int64_t iters) {
    float a[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    volatile float bv = 1.0000001f, cv = 1e-7f;
    float b = bv, c = cv;
    for (int64_t k = 0; k < iters; k++)
        for (int j = 0; j < 8; j++) a[j] = a[j] * b + c;
    volatile float sink = a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
    (void)sink;
    return (double)iters * 16;
}

typedef struct peak_job {
    cpu_path path;
    int kind;
    int64_t iters;
} peak_job;

static double peak_run(const peak_job *j) {
    switch (j->path) {
    case CPU_PATH_AMX: /* kinds 3, 4: the tile products */
        if (j->kind >= 3) return amx_peak(j->kind - 2, j->iters);
        return avx512_peak(j->kind, j->iters);
    case CPU_PATH_AVX512: return avx512_peak(j->kind, j->iters);
    case CPU_PATH_AVX2: return avx2_peak(j->kind, j->iters);
    case CPU_PATH_NEON: return neon_peak(j->kind, j->iters);
    default: return ref_peak(j->iters);
    }
}

static void peak_task(void *ctx, int ith, int nth) {
    (void)ith;
    (void)nth;
    peak_run(ctx);
}

double mm_peak_gflops(const cpu_target *tg, const char *precision, tp_pool *pool, double seconds) {
    peak_job j = {.path = tg->path, .kind = 0, .iters = 1 << 16};
    const bool int8 = !strcmp(precision, "int8");
    if (cpu_path_avx512_family(tg->path)) {
        if (!strcmp(precision, "bf16") && tg->bf16) j.kind = 1;
        if (int8) j.kind = 2;
        if (int8 && !tg->vnni) j.path = CPU_PATH_AVX2; /* the avx2 int8 kernels */
    }
    if (tg->path == CPU_PATH_AVX2 && int8) j.kind = !tg->vnni ? 2 : tg->vnni_evex ? 4 : 3;
    if (tg->path == CPU_PATH_NEON && tg->dot && int8) j.kind = tg->i8mm ? 3 : 2;
    if (tg->path == CPU_PATH_NEON && tg->bf16 && !strcmp(precision, "bf16")) j.kind = 1;
    if (tg->amx) {
        /* tile products are what the matmuls use (the int8 peak is
         * measured with TDPBSUD) */
        if (!strcmp(precision, "bf16")) j.kind = 3;
        if (!strcmp(precision, "int8")) j.kind = 4;
    }
    /* calibrate on one thread until a run takes a measurable time */
    double t, per_iter;
    for (;;) {
        double t0 = now_s();
        per_iter = peak_run(&j) / (double)j.iters;
        t = now_s() - t0;
        if (t > 0.02 || j.iters > ((int64_t)1 << 40)) break;
        j.iters *= 4;
    }
    /* the best of five runs: a machine shared with other work gives slower
     * runs, never faster ones */
    const double part = seconds / 5;
    if (part > t) j.iters = (int64_t)((double)j.iters * part / t);
    double best = 1e300;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = now_s();
        tp_run(pool, peak_task, &j); /* every thread runs the same loop */
        t = now_s() - t0;
        best = t < best ? t : best;
    }
    t = best;
    double per_thread = per_iter * (double)j.iters;
    return per_thread * tp_size(pool) / t / 1e9;
}
