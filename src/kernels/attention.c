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
#include <string.h>

#include "kernels/matmul.h"

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
