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

/* p[0, n) *= s; returns their maximum.  Sixteen running maxima make the
 * loop vectorise (a max is exact, so the order does not matter). */
static inline __attribute__((always_inline)) float scale_max(float *p, int64_t n, float s) {
    float mx[16], m = -INFINITY;
    for (int u = 0; u < 16; u++) mx[u] = -INFINITY;
    int64_t c = 0;
    for (; c + 16 <= n; c += 16)
        for (int u = 0; u < 16; u++) {
            float v = p[c + u] * s;
            p[c + u] = v;
            mx[u] = v > mx[u] ? v : mx[u];
        }
    for (; c < n; c++) {
        p[c] *= s;
        m = p[c] > m ? p[c] : m;
    }
    for (int u = 0; u < 16; u++) m = mx[u] > m ? mx[u] : m;
    return m;
}

/* Σ p[0, n) as sixteen running sums, then those in order: a fixed order
 * for a given n, which the vector unit can follow. */
static inline __attribute__((always_inline)) float sum16(const float *p, int64_t n) {
    float acc[16] = {0}, sum = 0.0f;
    int64_t c = 0;
    for (; c + 16 <= n; c += 16)
        for (int u = 0; u < 16; u++) acc[u] += p[c + u];
    for (int u = 0; u < 16; u++) sum += acc[u];
    for (; c < n; c++) sum += p[c];
    return sum;
}

/* One item: rows r = i·group + hg for query token t0+i and head kh·group+hg. */
static inline __attribute__((always_inline)) void attn_item_body(const attn_fast_job *j, const attn_item *it, float *buf) {
    const attn_job *a = &j->a;
    const int D = a->D, group = a->H / a->Hkv;
    const int64_t kvs = (int64_t)a->Hkv * D, rows = it->n * group;
    float *Q = buf, *O = Q + rows * D, *P = O + rows * D, *m = P + rows * KB, *l = m + rows;
    float *Kb = l + rows, *Vb = Kb + KB * D; /* the block's keys / values, contiguous */
    for (int64_t i = 0; i < it->n; i++)
        memcpy(Q + i * group * D, a->q + ((it->t0 + i) * a->H + (int64_t)it->kh * group) * D,
               (size_t)(group * D) * sizeof *Q);
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
        mm_gemm_nt(j->cpu, rows, nb, D, Q, D, Kb, D, P, KB, false);
        for (int64_t r = 0; r < rows; r++) {
            float *p = P + r * KB;
            int64_t valid = a->q0 + it->t0 + r / group - j0 + 1; /* keys up to the query itself */
            if (valid > nb) valid = nb;
            if (valid <= 0) {
                memset(p, 0, (size_t)nb * sizeof *p);
                continue;
            }
            const float bmax = scale_max(p, valid, a->scale);
            if (bmax > m[r]) {
                /* rescale what was accumulated under the old maximum */
                float corr = expf(m[r] - bmax);
                l[r] *= corr;
                for (int d = 0; d < D; d++) O[r * D + d] *= corr;
                m[r] = bmax;
            }
            for (int64_t c = 0; c < valid; c++) p[c] -= m[r];
            op_exp_ex(j->cpu->path, p, p, valid);
            l[r] += sum16(p, valid);
            for (int64_t c = valid; c < nb; c++) p[c] = 0.0f;
        }
        mm_gemm_nn(j->cpu, rows, D, nb, P, KB, 1, Vb, D, O, D, true);
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
    j.thread_floats = (size_t)QB * group * (2 * (size_t)D + KB + 2) + 2 * (size_t)KB * D;
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
