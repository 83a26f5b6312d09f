/*
 * kernels/ops.c — norms, activations, softmax, rotary, embedding lookup.
 *
 * The rounding steps follow ggml's CPU ops where that is free (sum of squares
 * in double, scale applied before the weight, rotary angles by repeated f32
 * multiplication), so an F32 model lands within float noise of llama.cpp.
 */
#include "kernels/ops.h"

#include <assert.h>
#include <math.h>

#include "kernels/simd.h"

void op_rmsnorm(float *y, const float *x, const float *w, int64_t n, int64_t n_rows, float eps) {
    for (int64_t r = 0; r < n_rows; r++) {
        const float *xr = x + r * n;
        float *yr = y + r * n;
        double ss = 0.0;
        for (int64_t i = 0; i < n; i++) ss += (double)(xr[i] * xr[i]);
        float scale = 1.0f / sqrtf((float)(ss / (double)n) + eps);
        for (int64_t i = 0; i < n; i++) yr[i] = (xr[i] * scale) * w[i];
    }
}

void op_l2norm(float *x, int64_t n, int64_t n_rows, float eps) {
    for (int64_t r = 0; r < n_rows; r++) {
        float *xr = x + r * n;
        double ss = 0.0;
        for (int64_t i = 0; i < n; i++) ss += (double)(xr[i] * xr[i]);
        float scale = 1.0f / fmaxf(sqrtf((float)ss), eps);
        for (int64_t i = 0; i < n; i++) xr[i] *= scale;
    }
}

void op_silu(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = op_silu1(x[i]);
}

void op_sigmoid(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = op_sigmoid1(x[i]);
}

void op_softplus(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = op_softplus1(x[i]);
}

void op_silu_mul(float *x, const float *g, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = op_silu1(x[i]) * g[i];
}

void op_softmax(float *x, int64_t n) {
    if (n <= 0) return;
    float max = x[0];
    for (int64_t i = 1; i < n; i++) max = x[i] > max ? x[i] : max;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

int op_rope_pair_stream(const int sections[4], int i) {
    int total = sections[0] + sections[1] + sections[2] + sections[3];
    if (total <= 0) return 0;
    /* IMROPE: pairs cycle time, height, width while each stream has pairs
     * left (stream s covers sector indices below 3·sections[s]); the rest
     * go to the extra stream. */
    int sector = i % total;
    if (sector % 3 == 1 && sector < 3 * sections[1]) return 1;
    if (sector % 3 == 2 && sector < 3 * sections[2]) return 2;
    if (sector % 3 == 0 && sector < 3 * sections[0]) return 0;
    return 3;
}

/* Rotate one head's first n_rot dims with precomputed cos/sin per pair. */
static void rope_head(float *x, int n_rot, const float *cs, const float *sn) {
    int half = n_rot / 2;
    for (int i = 0; i < half; i++) {
        float x0 = x[i], x1 = x[i + half];
        x[i] = x0 * cs[i] - x1 * sn[i];
        x[i + half] = x0 * sn[i] + x1 * cs[i];
    }
}

void op_rope_neox(float *x, int64_t T, int n_head, int head_dim, int n_rot,
                  const int32_t *pos, float base, const int sections[4]) {
    assert(n_rot % 2 == 0 && n_rot <= head_dim && n_rot <= OP_ROPE_MAX_DIMS);
    int half = n_rot / 2;
    float cs[OP_ROPE_MAX_DIMS / 2], sn[OP_ROPE_MAX_DIMS / 2];
    const float theta_scale = powf(base, -2.0f / (float)n_rot);
    for (int64_t t = 0; t < T; t++) {
        /* Streams time/height/width carry the text position, extra carries 0. */
        float theta[4] = {(float)pos[t], (float)pos[t], (float)pos[t], 0.0f};
        for (int i = 0; i < half; i++) {
            float th = theta[op_rope_pair_stream(sections, i)];
            cs[i] = cosf(th);
            sn[i] = sinf(th);
            for (int s = 0; s < 4; s++) theta[s] *= theta_scale;
        }
        for (int h = 0; h < n_head; h++) rope_head(x + (t * n_head + h) * head_dim, n_rot, cs, sn);
    }
}

void op_embed(const mm_weight *w, const int32_t *ids, int64_t n, float *out) {
    for (int64_t t = 0; t < n; t++) mm_get_row(w, ids[t], out + t * w->in);
}

/* ---- dispatch to the vector kernels ---- */

typedef enum op_kind {
    OPK_RMSNORM, OPK_L2NORM, OPK_SIGMOID, OPK_SILU_MUL, OPK_MUL_SILU, OPK_MUL_SIGMOID,
    OPK_L2NORM_GROUPS, OPK_MUL_SIGMOID_ROWS,
} op_kind;

typedef struct op_job {
    op_kind kind;
    cpu_path path;
    float *y;
    const float *x, *w;   /* rmsnorm: x, w; elementwise: w = g */
    int64_t n, rows;      /* elementwise: rows = 1               */
    float eps;
    int64_t ldx, ldg;     /* strided kinds: row / group strides   */
    int64_t per;          /* L2NORM_GROUPS: rows per group        */
} op_job;

static bool by_rows(op_kind k) { return k == OPK_RMSNORM || k == OPK_L2NORM || k == OPK_L2NORM_GROUPS || k == OPK_MUL_SIGMOID_ROWS; }

/* The elementwise kernels of one path (kernels/simd.h), the portable C
 * ones for ref. */
typedef struct op_vec {
    void (*rmsnorm)(float *y, const float *x, const float *w, int64_t n, int64_t rows, float eps);
    void (*l2norm)(float *x, int64_t n, int64_t rows, float eps);
    void (*sigmoid)(float *x, int64_t n);
    void (*silu_mul)(float *x, const float *g, int64_t n);    /* silu(x)·g */
    void (*mul_silu)(float *x, const float *g, int64_t n);    /* x·silu(g) */
    void (*mul_sigmoid)(float *x, const float *g, int64_t n); /* x·σ(g)    */
    void (*exp)(const float *x, float *y, int64_t n);
} op_vec;

static void ref_mul_silu(float *x, const float *g, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] *= op_silu1(g[i]);
}
static void ref_mul_sigmoid(float *x, const float *g, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] *= op_sigmoid1(g[i]);
}
static void ref_exp(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = expf(x[i]);
}

static const op_vec *op_vec_for(cpu_path p) {
    static const op_vec ref = {op_rmsnorm, op_l2norm, op_sigmoid, op_silu_mul,
                               ref_mul_silu, ref_mul_sigmoid, ref_exp};
    static const op_vec avx2 = {avx2_rmsnorm, avx2_l2norm, avx2_sigmoid, avx2_silu_mul,
                                avx2_mul_silu, avx2_mul_sigmoid, avx2_exp};
    static const op_vec avx512 = {avx512_rmsnorm, avx512_l2norm, avx512_sigmoid, avx512_silu_mul,
                                  avx512_mul_silu, avx512_mul_sigmoid, avx512_exp};
    static const op_vec neon = {neon_rmsnorm, neon_l2norm, neon_sigmoid, neon_silu_mul,
                                neon_mul_silu, neon_mul_sigmoid, neon_exp};
    switch (p) {
    case CPU_PATH_AVX2: return &avx2;
    case CPU_PATH_AVX512:
    case CPU_PATH_AMX: return &avx512;
    case CPU_PATH_NEON: return &neon;
    default: return &ref;
    }
}

/* Rows [r0, r1) (norms) or elements [r0, r1) (elementwise) of one job. */
static void op_range(const op_job *j, int64_t r0, int64_t r1) {
    const op_vec *v = op_vec_for(j->path);
    const int64_t nr = r1 - r0;
    float *y = j->y;
    const float *g = j->w;
    switch (j->kind) {
    case OPK_RMSNORM: v->rmsnorm(y + r0 * j->n, j->x + r0 * j->n, j->w, j->n, nr, j->eps); return;
    case OPK_L2NORM: v->l2norm(y + r0 * j->n, j->n, nr, j->eps); return;
    case OPK_SIGMOID: v->sigmoid(y + r0, nr); return;
    case OPK_SILU_MUL: v->silu_mul(y + r0, g + r0, nr); return;
    case OPK_MUL_SILU: v->mul_silu(y + r0, g + r0, nr); return;
    case OPK_MUL_SIGMOID: v->mul_sigmoid(y + r0, g + r0, nr); return;
    case OPK_L2NORM_GROUPS:
        for (int64_t gi = r0; gi < r1; gi++) v->l2norm(y + gi * j->ldx, j->n, j->per, j->eps);
        return;
    case OPK_MUL_SIGMOID_ROWS:
        for (int64_t ri = r0; ri < r1; ri++) v->mul_sigmoid(y + ri * j->ldx, g + ri * j->ldg, j->n);
        return;
    }
}

static void op_task(void *ctx, int ith, int nth) {
    const op_job *j = ctx;
    bool rows = by_rows(j->kind);
    int64_t b, e;
    tp_split(rows ? j->rows : j->n, rows ? 1 : 64, ith, nth, &b, &e);
    if (b < e) op_range(j, b, e);
}

static void op_run(tp_pool *pool, const op_job *j) {
    bool rows = by_rows(j->kind);
    int64_t work = rows ? j->n * j->rows * (j->per > 0 ? j->per : 1) : j->n;
    if (work < 65536 || j->path == CPU_PATH_REF) pool = NULL;
    tp_run(pool, op_task, (void *)j);
}

void op_rmsnorm_ex(cpu_path path, tp_pool *pool, float *y, const float *x, const float *w,
                   int64_t n, int64_t n_rows, float eps) {
    op_run(pool, &(op_job){.kind = OPK_RMSNORM, .path = path, .y = y, .x = x, .w = w, .n = n, .rows = n_rows, .eps = eps});
}

void op_l2norm_ex(cpu_path path, tp_pool *pool, float *x, int64_t n, int64_t n_rows, float eps) {
    op_run(pool, &(op_job){.kind = OPK_L2NORM, .path = path, .y = x, .n = n, .rows = n_rows, .eps = eps});
}

void op_sigmoid_ex(cpu_path path, tp_pool *pool, float *x, int64_t n) {
    op_run(pool, &(op_job){.kind = OPK_SIGMOID, .path = path, .y = x, .n = n, .rows = 1});
}

void op_silu_mul_ex(cpu_path path, tp_pool *pool, float *x, const float *g, int64_t n) {
    op_run(pool, &(op_job){.kind = OPK_SILU_MUL, .path = path, .y = x, .w = g, .n = n, .rows = 1});
}

void op_mul_silu_ex(cpu_path path, tp_pool *pool, float *x, const float *g, int64_t n) {
    op_run(pool, &(op_job){.kind = OPK_MUL_SILU, .path = path, .y = x, .w = g, .n = n, .rows = 1});
}

void op_mul_sigmoid_ex(cpu_path path, tp_pool *pool, float *x, const float *g, int64_t n) {
    op_run(pool, &(op_job){.kind = OPK_MUL_SIGMOID, .path = path, .y = x, .w = g, .n = n, .rows = 1});
}

void op_l2norm_groups_ex(cpu_path path, tp_pool *pool, float *x, int64_t n, int64_t per,
                         int64_t groups, int64_t ld, float eps) {
    op_run(pool, &(op_job){.kind = OPK_L2NORM_GROUPS, .path = path, .y = x, .n = n, .rows = groups,
                           .eps = eps, .ldx = ld, .per = per});
}

void op_mul_sigmoid_rows_ex(cpu_path path, tp_pool *pool, float *x, int64_t ldx, const float *g,
                            int64_t ldg, int64_t n, int64_t rows) {
    op_run(pool, &(op_job){.kind = OPK_MUL_SIGMOID_ROWS, .path = path, .y = x, .w = g, .n = n,
                           .rows = rows, .ldx = ldx, .ldg = ldg});
}

void op_exp_ex(cpu_path path, const float *x, float *y, int64_t n) { op_vec_for(path)->exp(x, y, n); }
