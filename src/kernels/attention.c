/*
 * kernels/attention.c — blocked online-softmax causal attention.
 *
 * For each (query token, head): scores of ATTN_BLOCK keys at a time, the
 * running maximum m, normaliser l and un-normalised output acc are rescaled
 * whenever m grows, and out = acc / l at the end.  Work items are dealt to
 * threads round-robin because later queries see more keys.
 */
#include "kernels/attention.h"

#include <assert.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/matmul.h"
#include "kernels/ops.h"

enum { ATTN_BLOCK = 64 };

typedef struct attn_job {
    const float *q, *k, *v;
    const int32_t *pos;
    int64_t q0, Tq;
    int H, Hkv, D;
    float scale;
    float *out;
} attn_job;

/* One query row against keys [j0, j1) of kv-head kh. */
static void attn_row(const attn_job *a, const float *q, int kh, int64_t j0, int64_t j1, float *out,
                     float *acc) {
    const int D = a->D;
    const int64_t kv_stride = (int64_t)a->Hkv * D;
    float m = -INFINITY, l = 0.0f, s[ATTN_BLOCK];
    memset(acc, 0, (size_t)D * sizeof *acc);
    for (int64_t b0 = j0; b0 < j1; b0 += ATTN_BLOCK) {
        int nb = (int)(j1 - b0 < ATTN_BLOCK ? j1 - b0 : ATTN_BLOCK);
        float bmax = -INFINITY;
        for (int j = 0; j < nb; j++) {
            s[j] = mm_dot(q, a->k + (b0 + j) * kv_stride + (int64_t)kh * D, D) * a->scale;
            bmax = s[j] > bmax ? s[j] : bmax;
        }
        if (bmax > m) {
            /* rescale what was accumulated under the old maximum */
            float corr = expf(m - bmax);
            l *= corr;
            for (int d = 0; d < D; d++) acc[d] *= corr;
            m = bmax;
        }
        for (int j = 0; j < nb; j++) {
            float p = expf(s[j] - m);
            const float *vj = a->v + (b0 + j) * kv_stride + (int64_t)kh * D;
            l += p;
            for (int d = 0; d < D; d++) acc[d] += p * vj[d];
        }
    }
    float inv = 1.0f / l;
    for (int d = 0; d < D; d++) out[d] = acc[d] * inv;
}

static void attn_task(void *ctx, int ith, int nth) {
    const attn_job *a = ctx;
    float acc[ATTN_MAX_HEAD_DIM];
    const int group = a->H / a->Hkv;
    const int64_t items = a->Tq * a->H;
    for (int64_t it = ith; it < items; it += nth) {
        int64_t t = it / a->H;
        int h = (int)(it % a->H);
        int64_t g = a->q0 + t;
        const float *q = a->q + (t * a->H + h) * a->D;
        float *o = a->out + (t * a->H + h) * a->D;
        attn_row(a, q, h / group, g - a->pos[t], g + 1, o, acc);
    }
}

void attn_causal(tp_pool *pool, const float *q, const float *k, const float *v,
                 const int32_t *pos, int64_t q0, int64_t Tq, int H, int Hkv, int D,
                 float scale, float *out) {
    assert(D > 0 && D <= ATTN_MAX_HEAD_DIM && Hkv > 0 && H % Hkv == 0);
    attn_job job = {q, k, v, pos, q0, Tq, H, Hkv, D, scale, out};
    tp_run(pool, attn_task, &job);
}

/* ==== blocked path on the small-GEMM kernels ============================== */

enum { KB = ATTN_FAST_KEYS, QB = ATTN_QBLOCK };

typedef struct attn_item {
    int kh;             /* K/V head                                            */
    int64_t t0, n;      /* query tokens [t0, t0+n) of one sequence             */
    int64_t cost;       /* keys x queries: the order items are handed out in   */
} attn_item;

typedef struct attn_fast_job {
    const cpu_target *cpu;
    attn_job a;
    attn_item *items;
    int64_t n_items;
    atomic_int_fast64_t next;
    float *scratch;     /* per thread: thread_floats                           */
    size_t thread_floats;
} attn_fast_job;

static int item_cmp(const void *x, const void *y) {
    const attn_item *a = x, *b = y;
    return a->cost < b->cost ? 1 : a->cost > b->cost ? -1 : (a->kh > b->kh) - (a->kh < b->kh);
}

/* The first query row that sees key c of a block: query i sees the keys up
 * to its own, qkey + i (block-relative), so rows from (c − qkey)·group on. */
static inline int64_t key_lo(int64_t c, int64_t qkey, int group, int64_t rows) {
    const int64_t lo = (c - qkey) * group;
    return lo < 0 ? 0 : lo > rows ? rows : lo;
}

/* Scores to probabilities for one key block, in place in P [nb][rows]
 * (scores transposed: a key per row, a query row per column).  Query rows
 * r >= lo(c) see key c: the causal mask of a key row is a prefix of its
 * columns, so every loop runs along the query rows with no mask inside it.
 * m, l: each query row's running maximum and normaliser; O [rows][D] is
 * rescaled where the maximum grows.  bm [rows] is scratch. */
static inline __attribute__((always_inline)) void
block_softmax(const attn_fast_job *j, float *P, int64_t nb, int64_t rows, int64_t qkey,
              int group, float *m, float *l, float *bm, float *O) {
    const int D = j->a.D;
    const float scale = j->a.scale;
    for (int64_t r = 0; r < rows; r++) bm[r] = m[r];
    for (int64_t c = 0; c < nb; c++) {
        float *pc = P + c * rows;
        for (int64_t r = key_lo(c, qkey, group, rows); r < rows; r++) {
            const float sc = pc[r] * scale;
            pc[r] = sc;
            bm[r] = sc > bm[r] ? sc : bm[r];
        }
    }
    for (int64_t r = 0; r < rows; r++) {
        if (!(bm[r] > m[r])) continue;
        /* rescale what was accumulated under the old maximum */
        const float corr = expf(m[r] - bm[r]);
        l[r] *= corr;
        for (int d = 0; d < D; d++) O[r * D + d] *= corr;
        m[r] = bm[r];
    }
    for (int64_t c = 0; c < nb; c++) {
        float *pc = P + c * rows;
        const int64_t lo = key_lo(c, qkey, group, rows);
        for (int64_t r = 0; r < lo; r++) pc[r] = 0.0f;
        for (int64_t r = lo; r < rows; r++) pc[r] -= m[r];
        op_exp_ex(j->cpu->path, pc + lo, pc + lo, rows - lo);
        for (int64_t r = lo; r < rows; r++) l[r] += pc[r];
    }
}

/* One item: rows r = i·group + hg for query token t0+i and head kh·group+hg. */
static inline __attribute__((always_inline)) void attn_item_body(const attn_fast_job *j, const attn_item *it, float *buf) {
    const attn_job *a = &j->a;
    const int D = a->D, group = a->H / a->Hkv;
    const int64_t kvs = (int64_t)a->Hkv * D, rows = it->n * group;
    float *Qt = buf, *O = Qt + rows * D, *P = O + rows * D, *m = P + rows * KB, *l = m + rows;
    float *bm = l + rows, *Kb = bm + rows, *Vb = Kb + KB * D; /* the block's keys / values */
    /* Qᵀ [D][rows]: the scores come out transposed, Pᵀ = K·Qᵀ, on the same
     * broadcast kernel as P·V (the dot-product form is slower at these sizes) */
    for (int64_t i = 0; i < it->n; i++) /* O holds the rows meanwhile */
        memcpy(O + i * group * D, a->q + ((it->t0 + i) * a->H + (int64_t)it->kh * group) * D,
               (size_t)(group * D) * sizeof *O);
    mm_transpose(j->cpu, rows, D, O, D, Qt, rows);
    memset(O, 0, (size_t)(rows * D) * sizeof *O);
    for (int64_t r = 0; r < rows; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
    const int64_t first = a->q0 + it->t0 - a->pos[it->t0]; /* the sequence's first key */
    const int64_t last = a->q0 + it->t0 + it->n - 1;      /* the last query's own key */
    for (int64_t j0 = first; j0 <= last; j0 += KB) {
        int64_t nb = last + 1 - j0 < KB ? last + 1 - j0 : KB;
        /* rows of one head sit Hkv·D apart: copied together they stop
         * competing for the same cache sets */
        for (int64_t c = 0; c < nb; c++) {
            memcpy(Kb + c * D, a->k + (j0 + c) * kvs + (int64_t)it->kh * D, (size_t)D * sizeof *Kb);
            memcpy(Vb + c * D, a->v + (j0 + c) * kvs + (int64_t)it->kh * D, (size_t)D * sizeof *Vb);
        }
        mm_gemm_nn(j->cpu, nb, rows, D, Kb, D, 1, Qt, rows, P, rows, false);
        block_softmax(j, P, nb, rows, a->q0 + it->t0 - j0, group, m, l, bm, O);
        mm_gemm_nn(j->cpu, rows, D, nb, P, 1, rows, Vb, D, O, D, true); /* O += (Pᵀ)ᵀ·V */
    }
    for (int64_t i = 0; i < it->n; i++)
        for (int hg = 0; hg < group; hg++) {
            int64_t r = i * group + hg;
            float inv = 1.0f / l[r], *o = a->out + ((it->t0 + i) * a->H + (int64_t)it->kh * group + hg) * D;
            for (int d = 0; d < D; d++) o[d] = O[r * D + d] * inv;
        }
}

#if defined(__x86_64__)
__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma"))) static void
attn_item_avx512(const attn_fast_job *j, const attn_item *it, float *buf) {
    attn_item_body(j, it, buf);
}
__attribute__((target("avx2,fma"))) static void
attn_item_avx2(const attn_fast_job *j, const attn_item *it, float *buf) {
    attn_item_body(j, it, buf);
}
#endif

static void attn_item_run(const attn_fast_job *j, const attn_item *it, float *buf) {
#if defined(__x86_64__)
    if (j->cpu->path == CPU_PATH_AVX2) attn_item_avx2(j, it, buf);
    else attn_item_avx512(j, it, buf);
#else
    attn_item_body(j, it, buf);
#endif
}

static void attn_fast_task(void *ctx, int ith, int nth) {
    attn_fast_job *j = ctx;
    (void)nth;
    float *buf = j->scratch + (size_t)ith * j->thread_floats;
    for (;;) {
        int64_t i = atomic_fetch_add(&j->next, 1);
        if (i >= j->n_items) return;
        attn_item_run(j, &j->items[i], buf);
    }
}

void attn_causal_ex(const cpu_target *cpu, tp_pool *pool, const float *q, const float *k,
                    const float *v, const int32_t *pos, int64_t q0, int64_t Tq, int H, int Hkv,
                    int D, float scale, float *out) {
    assert(D > 0 && D <= ATTN_MAX_HEAD_DIM && Hkv > 0 && H % Hkv == 0);
    if (cpu->path == CPU_PATH_REF || Tq <= 0) {
        attn_causal(pool, q, k, v, pos, q0, Tq, H, Hkv, D, scale, out);
        return;
    }
    const int group = H / Hkv;
    /* items: runs of one sequence cut into ATTN_QBLOCK tokens, for every K/V head */
    int64_t n_runs = 0;
    for (int64_t t = 0; t < Tq; t++)
        if (t == 0 || pos[t] != pos[t - 1] + 1 || pos[t] % QB == 0) n_runs++;
    attn_fast_job j = {.cpu = cpu, .a = {q, k, v, pos, q0, Tq, H, Hkv, D, scale, out}};
    j.thread_floats = (size_t)QB * group * (2 * (size_t)D + KB + 3) + 2 * (size_t)KB * D;
    j.items = malloc((size_t)(n_runs * Hkv) * sizeof *j.items);
    j.scratch = malloc((size_t)tp_size(pool) * j.thread_floats * sizeof *j.scratch);
    if (!j.items || !j.scratch) {
        free(j.items);
        free(j.scratch);
        attn_causal(pool, q, k, v, pos, q0, Tq, H, Hkv, D, scale, out);
        return;
    }
    for (int64_t t = 0; t < Tq;) {
        int64_t n = 1;
        while (t + n < Tq && pos[t + n] == pos[t + n - 1] + 1 && pos[t + n] % QB != 0) n++;
        for (int kh = 0; kh < Hkv; kh++)
            j.items[j.n_items++] = (attn_item){kh, t, n, (pos[t] + n) * n};
        t += n;
    }
    qsort(j.items, (size_t)j.n_items, sizeof *j.items, item_cmp);
    atomic_init(&j.next, 0);
    tp_run(pool, attn_fast_task, &j);
    free(j.items);
    free(j.scratch);
}
