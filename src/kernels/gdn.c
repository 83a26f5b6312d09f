/*
 * kernels/gdn.c — causal conv1d and the sequential gated delta rule.
 *
 * The delta rule is parallel across value heads only (each head's state is a
 * chain through time).  A chunked (WY / UT-transform) form that turns most of
 * the work into small matmuls is the known faster prefill; it can replace
 * gdn_delta_rule behind the same contract.
 */
#include "kernels/gdn.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#include "kernels/ops.h"

typedef struct conv_job {
    const float *hist, *w;
    const int32_t *pos;
    int64_t T, C;
    int K;
    float *out;
} conv_job;

static void conv_task(void *ctx, int ith, int nth) {
    const conv_job *j = ctx;
    int64_t c0, c1;
    tp_split(j->C, 16, ith, nth, &c0, &c1);
    for (int64_t t = 0; t < j->T; t++) {
        /* taps k < first read rows before this token's sequence start */
        int first = j->K - 1 - j->pos[t];
        if (first < 0) first = 0;
        for (int64_t ch = c0; ch < c1; ch++) {
            const float *wc = j->w + ch * j->K;
            float acc = 0.0f;
            for (int k = first; k < j->K; k++) acc += j->hist[(t + k) * j->C + ch] * wc[k];
            j->out[t * j->C + ch] = op_silu1(acc);
        }
    }
}

void gdn_conv1d_silu(tp_pool *pool, const float *hist, const float *w, const int32_t *pos,
                     int64_t T, int64_t C, int K, float *out) {
    conv_job job = {hist, w, pos, T, C, K, out};
    if (T * C * K < 65536) pool = NULL;
    tp_run(pool, conv_task, &job);
}

void gdn_conv_shift(float *hist, int64_t T, int64_t C, int K) {
    if (K <= 1) return;
    memmove(hist, hist + T * C, (size_t)(K - 1) * (size_t)C * sizeof *hist);
}

typedef struct delta_job {
    const float *q, *k, *v;
    int64_t ld;
    const float *g, *beta;
    const int32_t *pos;
    int64_t T;
    int Hk, Hv, Dk, Dv;
    float *S, *o;
} delta_job;

/* One value head through all T tokens.  qs [Dk] and kv [Dv] are scratch. */
static void delta_head(const delta_job *j, int h, float *qs, float *kv) {
    const int Dk = j->Dk, Dv = j->Dv, hk = h % j->Hk;
    const float scale = 1.0f / sqrtf((float)Dk);
    float *S = j->S + (int64_t)h * Dk * Dv; /* [Dk][Dv] */
    for (int64_t t = 0; t < j->T; t++) {
        const float *q = j->q + t * j->ld + (int64_t)hk * Dk;
        const float *k = j->k + t * j->ld + (int64_t)hk * Dk;
        const float *v = j->v + t * j->ld + (int64_t)h * Dv;
        float *o = j->o + (t * j->Hv + h) * Dv;
        if (j->pos[t] == 0) memset(S, 0, (size_t)Dk * (size_t)Dv * sizeof *S);
        const float decay = expf(j->g[t * j->Hv + h]);
        const float beta = j->beta[t * j->Hv + h];

        /* S ← e^g·S, and kv = Sᵀk with the decayed state */
        memset(kv, 0, (size_t)Dv * sizeof *kv);
        for (int i = 0; i < Dk; i++) {
            float *Si = S + (int64_t)i * Dv;
            for (int c = 0; c < Dv; c++) {
                Si[c] *= decay;
                kv[c] += Si[c] * k[i];
            }
        }
        /* δ = β·(v − Sᵀk), kept in kv */
        for (int c = 0; c < Dv; c++) kv[c] = beta * (v[c] - kv[c]);
        /* S ← S + k δᵀ;  o = Sᵀ(q·scale) */
        for (int i = 0; i < Dk; i++) qs[i] = q[i] * scale;
        memset(o, 0, (size_t)Dv * sizeof *o);
        for (int i = 0; i < Dk; i++) {
            float *Si = S + (int64_t)i * Dv;
            for (int c = 0; c < Dv; c++) {
                Si[c] += k[i] * kv[c];
                o[c] += Si[c] * qs[i];
            }
        }
    }
}

static void delta_task(void *ctx, int ith, int nth) {
    const delta_job *j = ctx;
    float qs[GDN_MAX_HEAD_DIM], kv[GDN_MAX_HEAD_DIM];
    int64_t h0, h1;
    tp_split(j->Hv, 1, ith, nth, &h0, &h1);
    for (int64_t h = h0; h < h1; h++) delta_head(j, (int)h, qs, kv);
}

void gdn_delta_rule(tp_pool *pool, const float *q, const float *k, const float *v, int64_t ld,
                    const float *g, const float *beta, const int32_t *pos, int64_t T,
                    int Hk, int Hv, int Dk, int Dv, float *S, float *o) {
    assert(Dk <= GDN_MAX_HEAD_DIM && Dv <= GDN_MAX_HEAD_DIM && Hk > 0 && Hv > 0);
    delta_job job = {q, k, v, ld, g, beta, pos, T, Hk, Hv, Dk, Dv, S, o};
    tp_run(pool, delta_task, &job);
}
