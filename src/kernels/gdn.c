/*
 * kernels/gdn.c — causal conv1d and the gated delta rule: the sequential
 * form (the reference, one token at a time) and the chunked (WY / UT
 * transform) form that turns most of the work into small matmuls.
 *
 * Both are parallel across value heads only: each head's state is a chain
 * through time.
 */
#include "kernels/gdn.h"

#include <assert.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/simd.h"

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

/* ==== vectorised conv ===================================================== */

typedef struct conv_fast_job {
    cpu_path path;
    const float *hist, *wt;  /* wt [K][C]: the taps transposed               */
    const int32_t *pos;
    int64_t T, C;
    int K;
    float *out;
} conv_fast_job;

/* out[0..n) = Σ_{k ≥ first} hist_k[i]·w_k[i], the taps in the reference's order. */
static inline __attribute__((always_inline)) void conv_row(const float *hist, const float *wt,
                                                           int64_t C, int first, int K, float *o,
                                                           int64_t n) {
    for (int64_t i = 0; i < n; i++) o[i] = 0.0f;
    for (int k = first; k < K; k++) {
        const float *h = hist + k * C, *w = wt + k * C;
        for (int64_t i = 0; i < n; i++) o[i] += h[i] * w[i];
    }
}

static void conv_fast_task(void *ctx, int ith, int nth) {
    const conv_fast_job *j = ctx;
    int64_t c0, c1;
    tp_split(j->C, 16, ith, nth, &c0, &c1);
    if (c0 >= c1) return;
    for (int64_t t = 0; t < j->T; t++) {
        int first = j->K - 1 - j->pos[t];
        if (first < 0) first = 0;
        const float *h = j->hist + t * j->C + c0, *w = j->wt + c0;
        float *o = j->out + t * j->C + c0;
        /* conv and SiLU in one pass, the sums kept in registers (Zen 3, one
         * thread, 512 x 6144: 5.0 ms as two passes, 2.8-3.0 ms as one) */
#if defined(__x86_64__)
        if (j->path == CPU_PATH_AVX2) avx2_conv_silu_row(h, w, j->C, first, j->K, o, c1 - c0);
        else avx512_conv_silu_row(h, w, j->C, first, j->K, o, c1 - c0);
#else
        if (j->path == CPU_PATH_NEON) {
            neon_conv_silu_row(h, w, j->C, first, j->K, o, c1 - c0);
        } else {
            conv_row(h, w, j->C, first, j->K, o, c1 - c0);
            op_mul_sigmoid_ex(j->path, NULL, o, o, c1 - c0); /* silu(x) = x·σ(x) */
        }
#endif
    }
}

void gdn_conv1d_silu_ex(cpu_path path, tp_pool *pool, const float *hist, const float *w,
                        const int32_t *pos, int64_t T, int64_t C, int K, float *out) {
    float *wt = path == CPU_PATH_REF ? NULL : malloc((size_t)K * (size_t)C * sizeof *wt);
    if (!wt) {
        gdn_conv1d_silu(pool, hist, w, pos, T, C, K, out);
        return;
    }
    for (int64_t ch = 0; ch < C; ch++)
        for (int k = 0; k < K; k++) wt[k * C + ch] = w[ch * K + k];
    conv_fast_job job = {path, hist, wt, pos, T, C, K, out};
    if (T * C * K < 65536) pool = NULL;
    tp_run(pool, conv_fast_task, &job);
    free(wt);
}

/* ==== chunked delta rule ================================================== */

/* NC: chunk; TRI: row strips of the triangular products (two 6-row tiles) */
enum { NC = GDN_CHUNK, TRI = 12 };

/* One thread's scratch for one chunk. */
typedef struct chunk_buf {
    float *kq;      /* [2n][Dk]: k rows then q·scale rows                       */
    float *p;       /* [2n][Dv]: S0ᵀk_t rows then S0ᵀq_t rows                   */
    float *m;       /* [2n][n]:  k_t·k_s then q_t·k_s                           */
    float *r;       /* [n][Dv]:  R, then e^{G_n−G_s}·δ_s                        */
    float *d;       /* [n][Dv]:  Δ                                              */
    float *a;       /* [n][n]:   (I + A)⁻¹ built row by row                     */
    float *wq;      /* [n][n]:   e^{G_t−G_s}(q_t·k_s), s ≤ t                    */
    float *e;       /* [n]       scratch row of exponents                       */
} chunk_buf;

static size_t chunk_floats(int Dk, int Dv) {
    return (size_t)(2 * NC) * (size_t)(Dk + Dv + NC) + 2 * (size_t)NC * (size_t)Dv + 2 * NC * NC + NC;
}

static void chunk_buf_at(float *base, int Dk, int Dv, chunk_buf *b) {
    b->kq = base;
    b->p = b->kq + 2 * NC * Dk;
    b->m = b->p + 2 * NC * Dv;
    b->r = b->m + 2 * NC * NC;
    b->d = b->r + NC * Dv;
    b->a = b->d + NC * Dv;
    b->wq = b->a + NC * NC;
    b->e = b->wq + NC * NC;
}

typedef struct chunk_job {
    const cpu_target *cpu;
    const delta_job *dj;
    float *scratch;     /* per thread chunk_floats                           */
    atomic_int next_head;
} chunk_job;

/* Token t's q, k and v rows of head h (kv-head hk) towards the cache, and
 * its o row for writing.  The rows of one head are ld floats apart, pages
 * apart for a model's widths, so the hardware's stream prefetch does not
 * follow them; fetched one token per row of the next chunk's inverse, they
 * arrive while this chunk computes. */
static inline __attribute__((always_inline)) void delta_prefetch_token(const delta_job *j, int h,
                                                                       int hk, int64_t t) {
    const float *rows[3] = {j->q + t * j->ld + (int64_t)hk * j->Dk,
                            j->k + t * j->ld + (int64_t)hk * j->Dk,
                            j->v + t * j->ld + (int64_t)h * j->Dv};
    const int len[3] = {j->Dk, j->Dk, j->Dv};
    /* i += 16: a 64-byte line per step */
    for (int a = 0; a < 3; a++)
        for (int i = 0; i < len[a]; i += 16) __builtin_prefetch(rows[a] + i, 0, 3);
    float *o = j->o + (t * j->Hv + h) * j->Dv;
    for (int i = 0; i < j->Dv; i += 16) __builtin_prefetch(o + i, 1, 3);
}

/* Tokens [t0, t0+n) of value head h, one chunk (no sequence start inside but
 * possibly at t0).  S [Dk][Dv] in/out. */
static inline __attribute__((always_inline)) void delta_chunk_body(const chunk_job *cj, chunk_buf *b,
                                                                    int h, int64_t t0, int n) {
    const delta_job *j = cj->dj;
    const cpu_target *tg = cj->cpu;
    const cpu_path path = tg->path;
    const int Dk = j->Dk, Dv = j->Dv, hk = h % j->Hk;
    const float scale = 1.0f / sqrtf((float)Dk);
    float *S = j->S + (int64_t)h * Dk * Dv;
    const bool fresh = j->pos[t0] == 0; /* a sequence starts: S0 = 0 */
    if (fresh) memset(S, 0, (size_t)Dk * (size_t)Dv * sizeof *S);
    /* Cumulative log decays in double: e^{G_t−G_s} needs the difference of
     * two long sums accurate to float precision even when both are large. */
    double G[NC];
    float Gf[NC] = {0}, gam[NC], beta[NC]; /* {0}: GCC cannot see n >= 1 */
    double acc = 0.0;
    for (int t = 0; t < n; t++) {
        acc += j->g[(t0 + t) * j->Hv + h];
        G[t] = acc;
        Gf[t] = (float)acc;
        beta[t] = j->beta[(t0 + t) * j->Hv + h];
    }
    op_exp_ex(path, Gf, gam, n);
    for (int t = 0; t < n; t++) {
        const float *kt = j->k + (t0 + t) * j->ld + (int64_t)hk * Dk;
        const float *qt = j->q + (t0 + t) * j->ld + (int64_t)hk * Dk;
        memcpy(b->kq + (int64_t)t * Dk, kt, (size_t)Dk * sizeof *kt);
        for (int i = 0; i < Dk; i++) b->kq[(int64_t)(n + t) * Dk + i] = qt[i] * scale;
    }
    /* P = [K; Q]·S0, zero where a sequence starts (a prompt's first chunk,
     * all of one up to 64 tokens): then not computed, half the chunk's work.
     * M = [K; Q]·Kᵀ */
    if (fresh) memset(b->p, 0, (size_t)(2 * n) * (size_t)Dv * sizeof *b->p);
    else mm_gemm_nn(tg, 2 * n, Dv, Dk, b->kq, Dk, 1, S, Dv, b->p, Dv, false);
    /* only s ≤ t of k_t·k_s and q_t·k_s is read: strips of rows stop there */
    for (int i0 = 0; i0 < n; i0 += TRI) {
        int rows = n - i0 < TRI ? n - i0 : TRI, cols = i0 + rows;
        mm_gemm_nt(tg, rows, cols, Dk, b->kq + (int64_t)i0 * Dk, Dk, b->kq, Dk, b->m + i0 * n, n,
                   false);
        mm_gemm_nt(tg, rows, cols, Dk, b->kq + (int64_t)(n + i0) * Dk, Dk, b->kq, Dk,
                   b->m + (n + i0) * n, n, false);
    }
    /* R_t = β_t (v_t − γ_t·S0ᵀk_t) */
    for (int t = 0; t < n; t++) {
        const float *vt = j->v + (t0 + t) * j->ld + (int64_t)h * Dv;
        const float *pk = b->p + (int64_t)t * Dv;
        float *rt = b->r + (int64_t)t * Dv;
        for (int c = 0; c < Dv; c++) rt[c] = beta[t] * (vt[c] - gam[t] * pk[c]);
    }
    /* (I + A)⁻¹ by rows: row t = e_t − Σ_{s<t} A[t][s]·row s.  Rows are kept
     * NC wide (zero past the diagonal), so each is a few vector registers
     * through the whole sum.  e = G_t − G_s, exponentiated. */
    for (int t = 0; t < n; t++) {
        if (t0 + n + t < j->T) delta_prefetch_token(j, h, hk, t0 + n + t);
        for (int s = 0; s < t; s++) b->e[s] = (float)(G[t] - G[s]);
        op_exp_ex(path, b->e, b->e, t);
        float row[NC];
        for (int u = 0; u < NC; u++) row[u] = u == t ? 1.0f : 0.0f;
        for (int s = 0; s < t; s++) {
            const float coef = beta[t] * b->e[s] * b->m[t * n + s];
            const float *as = b->a + s * NC;
            for (int u = 0; u < NC; u++) row[u] -= coef * as[u];
        }
        memcpy(b->a + t * NC, row, sizeof row);
        /* the output weights of row t: e^{G_t−G_s}(q_t·k_s), s ≤ t */
        float *wt = b->wq + t * NC;
        for (int s = 0; s < t; s++) wt[s] = b->e[s] * b->m[(n + t) * n + s];
        wt[t] = b->m[(n + t) * n + t];
        for (int s = t + 1; s < n; s++) wt[s] = 0.0f;
    }
    /* Δ = (I + A)⁻¹ R */
    for (int i0 = 0; i0 < n; i0 += TRI) { /* (I + A)⁻¹ is lower triangular */
        int rows = n - i0 < TRI ? n - i0 : TRI;
        mm_gemm_nn(tg, rows, Dv, i0 + rows, b->a + i0 * NC, NC, 1, b->r, Dv,
                   b->d + (int64_t)i0 * Dv, Dv, false);
    }
    /* o_t = γ_t·S0ᵀq_t + Σ_s wq[t][s] δ_s */
    for (int t = 0; t < n; t++) {
        float *ot = j->o + ((t0 + t) * j->Hv + h) * Dv;
        const float *pq = b->p + (int64_t)(n + t) * Dv;
        for (int c = 0; c < Dv; c++) ot[c] = gam[t] * pq[c];
    }
    for (int i0 = 0; i0 < n; i0 += TRI) { /* wq is lower triangular */
        int rows = n - i0 < TRI ? n - i0 : TRI;
        mm_gemm_nn(tg, rows, Dv, i0 + rows, b->wq + i0 * NC, NC, 1, b->d, Dv,
                   j->o + ((t0 + i0) * j->Hv + h) * Dv, (int64_t)j->Hv * Dv, true);
    }
    /* S = γ_n·S0 + Kᵀ·(e^{G_n−G_s} δ_s) */
    for (int s = 0; s < n; s++) b->e[s] = (float)(G[n - 1] - G[s]);
    op_exp_ex(path, b->e, b->e, n);
    for (int s = 0; s < n; s++)
        for (int c = 0; c < Dv; c++) b->r[(int64_t)s * Dv + c] = b->e[s] * b->d[(int64_t)s * Dv + c];
    const float gl = gam[n - 1];
    for (int64_t i = 0; i < (int64_t)Dk * Dv; i++) S[i] *= gl;
    mm_gemm_nn(tg, Dk, Dv, n, b->kq, 1, Dk, b->r, Dv, S, Dv, true);
}

/* The chunk's own loops (gathers, the n x n inverse, scalings) compiled for
 * the target too, so they vectorise. */
#if defined(__x86_64__)
__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma"))) static void
delta_chunk_avx512(const chunk_job *cj, chunk_buf *b, int h, int64_t t0, int n) {
    delta_chunk_body(cj, b, h, t0, n);
}
__attribute__((target("avx2,fma"))) static void
delta_chunk_avx2(const chunk_job *cj, chunk_buf *b, int h, int64_t t0, int n) {
    delta_chunk_body(cj, b, h, t0, n);
}
#endif

static void delta_chunk(const chunk_job *cj, chunk_buf *b, int h, int64_t t0, int n) {
#if defined(__x86_64__)
    if (cj->cpu->path == CPU_PATH_AVX2) delta_chunk_avx2(cj, b, h, t0, n);
    else if (cj->cpu->path != CPU_PATH_REF) delta_chunk_avx512(cj, b, h, t0, n);
    else delta_chunk_body(cj, b, h, t0, n);
#else
    delta_chunk_body(cj, b, h, t0, n);
#endif
}

/* Heads are taken from a shared counter (a descheduled thread does fewer). */
static void chunk_task(void *ctx, int ith, int nth) {
    chunk_job *cj = ctx;
    const delta_job *j = cj->dj;
    (void)nth;
    chunk_buf b;
    chunk_buf_at(cj->scratch + (size_t)ith * chunk_floats(j->Dk, j->Dv), j->Dk, j->Dv, &b);
    for (int h; (h = atomic_fetch_add(&cj->next_head, 1)) < j->Hv;)
        for (int64_t t = 0; t < j->T;) {
            int n = 1;
            while (t + n < j->T && n < NC && j->pos[t + n] != 0 && j->pos[t + n] % NC != 0) n++;
            delta_chunk(cj, &b, h, t, n);
            t += n;
        }
}

void gdn_delta_rule_ex(const cpu_target *cpu, tp_pool *pool, const float *q, const float *k,
                       const float *v, int64_t ld, const float *g, const float *beta,
                       const int32_t *pos, int64_t T, int Hk, int Hv, int Dk, int Dv, float *S,
                       float *o) {
    assert(Dk <= GDN_MAX_HEAD_DIM && Dv <= GDN_MAX_HEAD_DIM && Hk > 0 && Hv > 0);
    int nth = tp_size(pool);
    float *scratch = cpu->path == CPU_PATH_REF
                         ? NULL
                         : malloc((size_t)nth * chunk_floats(Dk, Dv) * sizeof(float));
    if (!scratch) {
        gdn_delta_rule(pool, q, k, v, ld, g, beta, pos, T, Hk, Hv, Dk, Dv, S, o);
        return;
    }
    delta_job dj = {q, k, v, ld, g, beta, pos, T, Hk, Hv, Dk, Dv, S, o};
    chunk_job cj = {.cpu = cpu, .dj = &dj, .scratch = scratch};
    atomic_init(&cj.next_head, 0);
    tp_run(pool, chunk_task, &cj);
    free(scratch);
}
