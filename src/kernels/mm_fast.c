/*
 * kernels/mm_fast.c — the fast matmul paths: choosing a kernel per weight
 * type and target (a "plan"), the workspace, the threaded loop over weight
 * panels, and the portable helpers the ISA kernels use (row dequantization,
 * BF16 rounding).
 *
 * Loop (threads take panels of NP output rows, or with few panels a panel's
 * block of tokens, from a shared counter):
 *   for each panel of NP rows:  for each k block of KC:
 *     make the panel's rows readable by the kernel — in place (F32, BF16 on
 *     dpbf16 targets, f32_act BF16 / F16 widened in registers), widened
 *     into f32 [k][48] panels (F16, BF16 elsewhere on avx512) or f32 rows
 *     (avx2, neon), dequantized to f32 rows, or packed into I8 groups — then
 *     run every token over it (kernels/simd.h).
 * The panel (≤ 48 rows x KC) stays in L2 while all tokens pass over it, so
 * the weights come from memory once per call; each token tile's x rows stay
 * in L1 across the panel.  A thread takes its next item before it runs the
 * current one, so that the int8 tiles can prefetch the stored rows it packs
 * next into L2 meanwhile (32-token products: 10% faster).  Activations are
 * converted once per call, shared by all threads, in a first parallel pass.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "kernels/dequant.h"
#include "kernels/matmul.h"
#include "kernels/simd.h"

typedef enum mm_kind {
    MM_KIND_DOT_F32,
    MM_KIND_DOT_BF16,
    MM_KIND_DOT_W16,    /* f32_act BF16 / F16 rows widened in registers      */
    MM_KIND_BC,         /* F16 / BF16 panels widened to f32, broadcast form   */
    MM_KIND_I8,
    MM_KIND_AMX_BF16,   /* BF16 weights packed per panel, TDPBF16PS          */
    MM_KIND_AMX_I8,     /* the I8 panels on TDPBSSD / TDPBSUD                */
    MM_KIND_AMX_KQ,     /* K-quants as byte planes, per-256 activations      */
} mm_kind;

/* Panel shapes (rows per panel NP, k per block KC) by kind, and their alignment and padding. */
enum {
    MM_NP = 48, MM_KC_F32 = 1024, MM_KC_BF16 = 2048, MM_KC_I8 = 1024, MM_ALIGN = 64,
    /* the avx2 and avx512 int8 panels (about 220 KB, in L2): fewer tile
     * calls and passes over y.  Best of interleaved runs against 1024:
     * vpmaddubsw on Zen 3, one thread, Q4_K 3584 -> 1024 and 4096 -> 12288
     * +4-7%, Q6_K +3%, Q8_0 +2%; vpdpbusd on Zen 4, two threads, Q4_K
     * 3584 -> 1024 and 12288 -> 4096 +8%, Q6_K 4096² +4%, Q8_0 +4%.  AMX
     * keeps MM_KC_I8 (not measured at 4096) */
    MM_KC_I8_L2 = 4096,
    MM_NP_AMX_BF16 = 32,    /* two row groups of 16: the 2 x 2 tile block */
    MM_NP_AMX_KQ = 64,      /* four subgroups of 16 rows                   */
    /* floats past kc in each widened 16-bit row: rows a multiple of 4 KiB
     * apart share one set of L1 (Zen 3, BF16 1024 -> 3584: ~8% faster) */
    MM_W16_PAD = 16,
};

/* The int8 path's three steps on one ISA (kernels/simd.h's contracts). */
typedef struct mm_i8_isa {
    void (*act)(const mm_i8_kind *kind, const float *x, int64_t in, int64_t t0, int64_t t1,
                int8_t *q, float *dx, void *mb);
    void (*pack)(const mm_i8_kind *kind, const mm_weight *w, int64_t r0, int64_t np, int64_t k0,
                 int64_t kc, uint8_t *dst);
    void (*panel)(const mm_i8_kind *kind, const mm_i8_act *a, int64_t T, int64_t k0, int64_t kc,
                  const uint8_t *panel, int64_t np, float *y, int64_t ldy, bool add,
                  const mm_prefetch *pf);
    bool prefetch; /* the panel brings the next stored rows into L2 */
    bool signed_q; /* its packer keeps Q8_0 signed */
    bool isc;      /* the K-quants as the integer-scale panel (kernels/simd.h) */
    int64_t kc;    /* k per panel block */
} mm_i8_isa;

static const mm_i8_isa I8_AVX512 = {avx512_act_i8, avx512_pack_i8, avx512_i8_panel, true, false,
                                    false, MM_KC_I8_L2};
/* AMX_I8: avx512's activations and packer (Q8_0 signed for TDPBSSD); the
 * kind calls amx_i8_panel itself */
static const mm_i8_isa I8_AMX = {avx512_act_i8, avx512_pack_i8, NULL, false, true, false, MM_KC_I8};
static const mm_i8_isa I8_AVX2 = {avx2_act_i8, avx2_pack_i8, avx2_i8_panel, true, true, true,
                                  MM_KC_I8_L2};
static const mm_i8_isa I8_AVX2_VNNI = {avx2_act_i8, mm_pack_i8_portable, avx2_vnni_i8_panel, false,
                                       false, false, MM_KC_I8};
static const mm_i8_isa I8_AVX2_VNNI_EVEX = {avx2_act_i8, mm_pack_i8_portable,
                                            avx2_vnni_evex_i8_panel, false, false, false,
                                            MM_KC_I8};
static const mm_i8_isa I8_NEON = {neon_act_i8, mm_pack_i8_portable, neon_i8_panel, false, true,
                                  false, MM_KC_I8};

typedef struct mm_plan {
    cpu_path path;
    mm_kind kind;
    bool direct;        /* DOT kinds: weight rows read in place                */
    bool round_bf16;    /* BF16 weights widened to f32: activations rounded to BF16 */
    bool bcast_fold;    /* BC kinds: the target's broadcast form (core/cpu.h)   */
    mm_i8_kind i8;
    const mm_i8_isa *i8isa; /* I8 and AMX_I8 kinds: act, pack (and panel)   */
    uint32_t type;      /* the weights' (AMX_KQ records depend on it)           */
    int64_t KC, NP;     /* k per block, rows per panel                          */
} mm_plan;

static bool is_i8_type(uint32_t t) {
    return t == CLEF_DTYPE_Q8_0 || t == CLEF_DTYPE_Q4_K || t == CLEF_DTYPE_Q5_K || t == CLEF_DTYPE_Q6_K;
}

/* false: the reference path computes w on this target. */
static bool plan_make(const cpu_target *tg, const mm_weight *w, mm_plan *p) {
    memset(p, 0, sizeof *p);
    p->path = tg->path;
    p->bcast_fold = tg->bcast_fold;
    p->type = w->type;
    p->NP = MM_NP;
    if (tg->path == CPU_PATH_REF) return false;
    const bool avx512 = cpu_path_avx512_family(tg->path); /* else avx2 or neon */
    const bool neon_dot = tg->path == CPU_PATH_NEON && tg->dot; /* and I8 on SDOT */
    /* int8 activations: every x86 path (vpdpbusd, else vpmaddubsw) and SDOT */
    const bool int8 = avx512 || tg->path == CPU_PATH_AVX2 || neon_dot;
    /* the packers that gather from 16 rows (the widened panels, and the
     * I8 groups' scales) need their offsets in int32 */
    const bool gather = w->row_bytes <= INT32_MAX / 16;
    const bool kquant = w->type == CLEF_DTYPE_Q4_K || w->type == CLEF_DTYPE_Q5_K ||
                        w->type == CLEF_DTYPE_Q6_K;
    const bool bf16_act = w->type == CLEF_DTYPE_BF16 && !w->f32_act; /* x rounded to BF16 */
    if (tg->amx && bf16_act && w->in % 32 == 0) {
        p->kind = MM_KIND_AMX_BF16;
        p->NP = MM_NP_AMX_BF16;
        p->KC = w->in; /* the kernel blocks k itself; C stays in its scratch */
    } else if ((avx512 || tg->path == CPU_PATH_AVX2) && w->f32_act &&
               (w->type == CLEF_DTYPE_BF16 || w->type == CLEF_DTYPE_F16)) {
        p->kind = MM_KIND_DOT_W16; /* no pack: the head's products have a few rows */
        p->direct = true;
        p->KC = MM_KC_F32;
    } else if ((avx512 || tg->path == CPU_PATH_NEON) && tg->bf16 && bf16_act) {
        p->kind = MM_KIND_DOT_BF16;
        p->direct = true;
        p->KC = MM_KC_BF16;
    } else if (avx512 && gather && (w->type == CLEF_DTYPE_BF16 || w->type == CLEF_DTYPE_F16)) {
        p->kind = MM_KIND_BC;
        p->round_bf16 = bf16_act; /* F16 meets f32 activations */
        p->KC = MM_KC_F32;
    } else if (tg->amx && kquant) {
        p->kind = MM_KIND_AMX_KQ;
        p->NP = MM_NP_AMX_KQ;
        p->KC = MM_KC_I8;
        p->i8.ab = 256; /* its own per-256 activations (amx_act_kq) */
    } else if (int8 && is_i8_type(w->type) && gather) {
        p->kind = tg->amx ? MM_KIND_AMX_I8 : MM_KIND_I8;
        p->i8isa = tg->amx                                   ? &I8_AMX
                 : avx512 && tg->vnni                        ? &I8_AVX512
                 : neon_dot                                  ? &I8_NEON
                 : tg->path == CPU_PATH_AVX2 && tg->vnni     ? tg->vnni_evex ? &I8_AVX2_VNNI_EVEX
                                                                             : &I8_AVX2_VNNI
                                                             : &I8_AVX2;
        p->KC = p->i8isa->kc;
        p->i8.bk = w->type == CLEF_DTYPE_Q6_K ? 16 : 32;
        p->i8.ab = kquant ? 256 : 32;
        p->i8.sym = w->type == CLEF_DTYPE_Q8_0 || w->type == CLEF_DTYPE_Q6_K;
        p->i8.off = w->type == CLEF_DTYPE_Q8_0 ? 128 : w->type == CLEF_DTYPE_Q6_K ? 32 : 0;
        p->i8.f16_scale = w->type == CLEF_DTYPE_Q8_0;
        p->i8.k8 = neon_dot && tg->i8mm; /* SMMLA's runs of 8 */
        if (p->i8isa->isc && kquant)
            p->i8.isc = w->type == CLEF_DTYPE_Q4_K ? 4 : w->type == CLEF_DTYPE_Q5_K ? 5 : 6;
        /* Q8_0 signed for TDPBSSD (the K-quants went to planes above on
         * amx), SDOT and the sign step of vpmaddubsw */
        p->i8.signed_q = w->type == CLEF_DTYPE_Q8_0 && p->i8isa->signed_q;
        if (p->i8.signed_q) p->i8.off = 0;
    } else {
        p->kind = MM_KIND_DOT_F32;
        p->direct = w->type == CLEF_DTYPE_F32;
        p->round_bf16 = bf16_act;
        p->KC = MM_KC_F32;
    }
    return true;
}

const char *mm_precision(const cpu_target *tg, const mm_weight *w) {
    mm_plan p;
    if (!plan_make(tg, w, &p)) return "f32";
    if (p.kind == MM_KIND_I8 || p.kind == MM_KIND_AMX_I8 || p.kind == MM_KIND_AMX_KQ)
        return "int8";
    bool bf16 = p.kind == MM_KIND_DOT_BF16 || p.kind == MM_KIND_AMX_BF16 || p.round_bf16;
    return bf16 ? "bf16" : "f32";
}

int mm_act_block(const cpu_target *tg, const mm_weight *w) {
    mm_plan p;
    if (!plan_make(tg, w, &p)) return 32;
    const bool i8 = p.kind == MM_KIND_I8 || p.kind == MM_KIND_AMX_I8 || p.kind == MM_KIND_AMX_KQ;
    return i8 ? p.i8.ab : 32;
}

/* ---- workspace ---- */

static size_t align_up(size_t n) { return (n + MM_ALIGN - 1) / MM_ALIGN * MM_ALIGN; }

/* Token rows the activations are allocated for: tile kernels read whole
 * tiles of 32 (BF16, the K-quant planes) or 16 (Q8_0) rows. */
static int64_t act_rows(const mm_plan *p, int64_t T) {
    int64_t r = p->kind == MM_KIND_AMX_BF16 || p->kind == MM_KIND_AMX_KQ ? 32
                : p->kind == MM_KIND_AMX_I8                                ? 16
                                                                           : 1;
    return (T + r - 1) / r * r;
}

static size_t act_bytes(const mm_plan *p, const mm_weight *w, int64_t T) {
    size_t tin = (size_t)act_rows(p, T) * (size_t)w->in;
    switch (p->kind) {
    case MM_KIND_DOT_BF16:
    case MM_KIND_AMX_BF16: return align_up(tin * 2);
    case MM_KIND_I8:
    case MM_KIND_AMX_I8: {
        /* q, dx, mb; on amx also dxT (the size of mb) */
        const size_t mb = align_up(tin / (size_t)p->i8.bk * 4);
        size_t b = align_up(tin) + align_up(tin / 32 * sizeof(float)) + mb;
        return p->kind == MM_KIND_AMX_I8 ? b + mb : b;
    }
    case MM_KIND_AMX_KQ: /* q, dT (one per 256), bsT (one per 32) */
        return align_up(tin) + align_up(tin / 256 * sizeof(float)) +
               align_up(tin / 32 * sizeof(float));
    default: return p->round_bf16 ? align_up(tin * sizeof(float)) : 0;
    }
}

static size_t thread_bytes(const mm_plan *p) {
    switch (p->kind) {
    case MM_KIND_I8:
    case MM_KIND_AMX_I8:
        return align_up((size_t)((p->NP + MM_I8_G - 1) / MM_I8_G) *
                        mm_i8_group_bytes(&p->i8, p->KC));
    case MM_KIND_AMX_KQ:
        return (size_t)(p->NP / 16) * (size_t)(p->KC / 256) * mm_kq_rec_bytes(p->type);
    case MM_KIND_AMX_BF16:
        /* the packed panel over all of k, then the f32 accumulators */
        return align_up((size_t)(p->KC / 32) * 2048) + (size_t)MM_AMX_TT * 32 * sizeof(float);
    case MM_KIND_BC: return align_up((size_t)(p->NP * p->KC) * sizeof(float));
    case MM_KIND_DOT_F32: /* widened 16-bit rows padded; dequantized ones fit inside */
        return p->direct ? 0 : align_up((size_t)(p->NP * (p->KC + MM_W16_PAD)) * sizeof(float));
    default: return 0;
    }
}

size_t mm_workspace_bytes(const cpu_target *tg, const mm_weight *w, int64_t T, int n_threads) {
    mm_plan p;
    if (!plan_make(tg, w, &p) || T <= 0) return 0;
    return act_bytes(&p, w, T) + (size_t)(n_threads < 1 ? 1 : n_threads) * thread_bytes(&p);
}

bool mm_workspace_reserve(mm_workspace *ws, size_t bytes) {
    if (ws->cap >= bytes) return true;
    void *b = aligned_alloc(MM_ALIGN, align_up(bytes));
    if (!b) return false;
    free(ws->buf);
    ws->buf = b;
    ws->cap = align_up(bytes);
    return true;
}

void mm_workspace_free(mm_workspace *ws) {
    free(ws->buf);
    ws->buf = NULL;
    ws->cap = 0;
}

/* ---- the threaded product ---- */

typedef struct mm_fast_job {
    mm_plan p;
    const mm_weight *w;
    const float *x;
    float *y;
    int64_t T;
    uint8_t *act;         /* converted activations (act_bytes)           */
    uint8_t *threads;     /* n_threads x thread_bytes                     */
    size_t per_thread;
    mm_i8_act i8;         /* views into act for MM_KIND_I8               */
    int64_t token_blocks; /* per panel (token_blocks)                     */
    atomic_int_fast64_t next; /* the next work item to take              */
} mm_fast_job;

/* The amx copy of the activation scales (Q8_0), rows [t0, t1) (whole
 * groups of 16; rows past T zero): dxT[t/16][b][t%16] per block b.  Q8_0 is
 * packed signed there, so no activation-sum term is needed. */
static void transpose_scales(mm_fast_job *j, int64_t t0, int64_t t1) {
    const int64_t nb = j->w->in / 32;
    float *dxT = (float *)j->i8.dxT;
    for (int64_t t = t0; t < t1; t++)
        for (int64_t b = 0; b < nb; b++)
            dxT[((t / 16) * nb + b) * 16 + t % 16] = t < j->T ? j->i8.dx[t * nb + b] : 0.0f;
}

static void act_task(void *ctx, int ith, int nth) {
    mm_fast_job *j = ctx;
    const int64_t in = j->w->in;
    int64_t t0, t1;
    tp_split(act_rows(&j->p, j->T), 16, ith, nth, &t0, &t1);
    if (t0 >= t1) return;
    if (j->p.kind == MM_KIND_AMX_BF16) {
        amx_act_bf16(j->x, in, j->T, t0, t1, (uint16_t *)j->act);
        return;
    }
    if (j->p.kind == MM_KIND_AMX_KQ) {
        float *sums = mm_kq_has_mins(j->p.type) ? (float *)j->i8.mbT : NULL;
        amx_act_kq(j->x, in, j->T, t0, t1, (int8_t *)j->i8.q, (float *)j->i8.dxT, sums);
        return;
    }
    const int64_t tp = t1; /* past T: padding rows (pad_act_rows, transpose_scales) */
    t1 = t1 < j->T ? t1 : j->T;
    if (t0 >= t1) return;
    switch (j->p.kind) {
    case MM_KIND_DOT_BF16:
        (j->p.path == CPU_PATH_NEON ? neon_act_bf16 : avx512_act_bf16)(j->x, in, t0, t1,
                                                                        (uint16_t *)j->act);
        break;
    case MM_KIND_I8:
    case MM_KIND_AMX_I8:
        j->p.i8isa->act(&j->p.i8, j->x, in, t0, t1, (int8_t *)j->i8.q, (float *)j->i8.dx,
                        (void *)j->i8.mb);
        if (j->p.kind == MM_KIND_AMX_I8) transpose_scales(j, t0, tp);
        break;
    default: /* BF16 weights widened to f32 meet BF16-rounded activations */
        if (cpu_path_avx512_family(j->p.path))
            avx512_round_bf16(j->x + t0 * in, (t1 - t0) * in, (float *)j->act + t0 * in);
        else mm_round_bf16(j->x + t0 * in, (t1 - t0) * in, (float *)j->act + t0 * in);
        break;
    }
}

static void dot_f32(const mm_plan *p, int64_t kc, const float *x, int64_t ldx, int64_t T,
                    const float *w, int64_t ldw, int64_t np, float *y, int64_t ldy, bool add,
                    const mm_prefetch *next) {
    switch (p->path) {
    case CPU_PATH_AVX2: avx2_dot_f32(kc, x, ldx, T, w, ldw, np, y, ldy, add, next); break;
    case CPU_PATH_NEON: neon_dot_f32(kc, x, ldx, T, w, ldw, np, y, ldy, add); break;
    default: avx512_dot_f32(kc, x, ldx, T, w, ldw, np, y, ldy, add); break;
    }
}

/* The int8 tile kernel reads quant rows from T up to act_rows: zero them
 * (their results are never stored; zero keeps them defined).  The BF16
 * conversion writes its own padding. */
static void pad_act_rows(mm_fast_job *j) {
    const int64_t pad = act_rows(&j->p, j->T) - j->T, in = j->w->in;
    if (pad == 0) return;
    if (j->p.kind == MM_KIND_AMX_I8)
        memset((int8_t *)j->i8.q + j->T * in, 0, (size_t)(pad * in));
}

/* A token range of a product: rows [t0, t0+nt) of x, the activations and y. */
typedef struct mm_tokens {
    int64_t t0, nt;
} mm_tokens;

/* The int8 activation views from token t0 on. */
static mm_i8_act i8_from(const mm_i8_act *a, const mm_i8_kind *kind, int64_t t0) {
    mm_i8_act v = *a;
    v.q += t0 * a->ld;
    v.dx += t0 * (a->ld / kind->ab);
    v.mb = (const uint8_t *)a->mb + (size_t)(t0 * (a->ld / kind->bk)) * 4; /* int32 or f32 */
    return v;
}

/* Rows [p0, p0+np), k block [k0, k0+kc) times tokens tk (all of them for
 * the amx kinds: their activations are packed in whole tile groups). */
static void panel_block(const mm_fast_job *j, uint8_t *tb, int64_t p0, int64_t np, int64_t k0,
                        int64_t kc, mm_tokens tk, const mm_prefetch *next) {
    const mm_weight *w = j->w;
    const int64_t in = w->in, out = w->out, T = tk.nt;
    const uint8_t *rows = (const uint8_t *)w->data + (size_t)p0 * w->row_bytes;
    float *y = j->y + tk.t0 * out + p0;
    const uint8_t *act = j->act;
    const bool add = k0 > 0;
    switch (j->p.kind) {
    case MM_KIND_DOT_BF16:
        (j->p.path == CPU_PATH_NEON ? neon_dot_bf16 : avx512_dot_bf16)(
            kc, (const uint16_t *)act + tk.t0 * in + k0, in, T, (const uint16_t *)rows + k0,
            (int64_t)(w->row_bytes / 2), np, y, out, add);
        break;
    case MM_KIND_DOT_W16:
        (j->p.path == CPU_PATH_AVX2 ? avx2_dot_w16 : avx512_dot_w16)(
            w->type == CLEF_DTYPE_F16, kc, j->x + tk.t0 * in + k0, in, T,
            (const uint16_t *)rows + k0, (int64_t)(w->row_bytes / 2), np, y, out, add);
        break;
    case MM_KIND_I8: {
        const mm_i8_act a = i8_from(&j->i8, &j->p.i8, tk.t0);
        j->p.i8isa->pack(&j->p.i8, w, p0, np, k0, kc, tb);
        j->p.i8isa->panel(&j->p.i8, &a, T, k0, kc, tb, np, y, out, add, next);
        break;
    }
    case MM_KIND_AMX_I8:
        j->p.i8isa->pack(&j->p.i8, w, p0, np, k0, kc, tb);
        amx_i8_panel(&j->p.i8, &j->i8, T, k0, kc, tb, np, y, out, add);
        break;
    case MM_KIND_AMX_KQ:
        amx_pack_kq(w, p0, np, k0, kc, tb);
        amx_kq_panel(w->type, &j->i8, T, k0, kc, tb, np, y, out, add);
        break;
    case MM_KIND_BC: {
        const float *x = (j->p.round_bf16 ? (const float *)act : j->x) + tk.t0 * in + k0;
        avx512_pack_f32_panel(w->type == CLEF_DTYPE_F16, (const uint16_t *)rows + k0,
                              (int64_t)(w->row_bytes / 2), np, kc, (float *)tb);
        avx512_gemm_nn(j->p.bcast_fold, T, np, kc, x, in, 1, (const float *)tb, MM_BC_NP, y, out,
                       add);
        break;
    }
    case MM_KIND_AMX_BF16: {
        /* kc is all of k (plan_make): one call per panel */
        float *acc = (float *)(tb + align_up((size_t)(kc / 32) * 2048));
        amx_pack_bf16(w, p0, np, k0, kc, (uint16_t *)tb);
        amx_bf16_panel(kc, (const uint16_t *)act, T, (const uint16_t *)tb, np, y, out, acc);
        break;
    }
    default: {
        const float *x = (j->p.round_bf16 ? (const float *)act : j->x) + tk.t0 * in + k0;
        if (j->p.direct) {
            dot_f32(&j->p, kc, x, in, T, (const float *)rows + k0,
                    (int64_t)(w->row_bytes / sizeof(float)), np, y, out, add, NULL);
        } else {
            float *tmp = (float *)tb;
            const bool w16 = w->type == CLEF_DTYPE_BF16 || w->type == CLEF_DTYPE_F16;
            if (w16) /* widened with the path's vectors (a scalar call per value cost
                      * a third of a 64-token BF16 product on avx2) */
                (j->p.path == CPU_PATH_NEON ? neon_widen_w16 : avx2_widen_w16)(
                    w->type == CLEF_DTYPE_F16, (const uint16_t *)rows + k0,
                    (int64_t)(w->row_bytes / 2), np, kc, tmp, kc + MM_W16_PAD);
            else mm_dequant_rows(w, p0, np, k0, kc, tmp);
            dot_f32(&j->p, kc, x, in, T, tmp, w16 ? kc + MM_W16_PAD : kc, np, y, out, add, next);
        }
    }
    }
}

/* Token blocks per panel: one, unless there are too few panels to keep the
 * threads evenly busy (a 1024 -> 16 product has a single panel); then each
 * panel is split over tokens, in blocks of at least 64, and packed once per
 * block.  Rows are independent, so any split gives the same bits. */
static int64_t token_blocks(const mm_plan *p, int64_t panels, int64_t T, int nth) {
    const bool amx = p->kind == MM_KIND_AMX_BF16 || p->kind == MM_KIND_AMX_I8 ||
                     p->kind == MM_KIND_AMX_KQ;
    const int64_t want = 8 * (int64_t)nth;
    if (amx || nth < 2 || panels >= want) return 1;
    int64_t tb = (want + panels - 1) / panels, most = (T + 63) / 64;
    return tb < most ? tb : most;
}

/* The length of the piece of [0, total) that starts at `at`: step, or
 * what is left (panel rows, k blocks, token blocks). */
static int64_t part(int64_t total, int64_t at, int64_t step) {
    return total - at < step ? total - at : step;
}

/* What the thread packs after the panel at p0 and its k block ending at
 * k1: the same panel's next k block, or the k block at 0 of the panel at
 * p_next (< 0: none), as stored bytes to prefetch (rows 0: nothing, or a
 * kind whose kernel does not prefetch). */
static mm_prefetch next_stored(const mm_fast_job *j, int64_t p0, int64_t k1, int64_t p_next) {
    const mm_weight *w = j->w;
    /* the int8 tiles where their ISA says so; the avx2 dot form on rows it
     * widens or dequantizes */
    const bool fetches = j->p.kind == MM_KIND_I8 ? j->p.i8isa->prefetch
                       : j->p.kind == MM_KIND_DOT_F32 && !j->p.direct && j->p.path == CPU_PATH_AVX2;
    if (!fetches || (k1 >= w->in && p_next < 0)) return (mm_prefetch){0};
    if (k1 >= w->in) {
        p0 = p_next;
        k1 = 0;
    }
    const clef_dtype_info *info = clef_dtype_get(w->type);
    const int64_t kc = part(w->in, k1, j->p.KC), np = part(w->out, p0, j->p.NP);
    const size_t bytes = (size_t)(kc / info->block_size) * info->type_size;
    const uint8_t *at = (const uint8_t *)w->data + (size_t)p0 * w->row_bytes +
                        (size_t)(k1 / info->block_size) * info->type_size;
    return (mm_prefetch){at, (int64_t)bytes, (int64_t)w->row_bytes, np};
}

/* Work items (a panel and a token block) are taken from a shared counter,
 * so a thread that runs slower (or is descheduled) simply does fewer; every
 * output is computed the same way whichever thread does it. */
static void mm_fast_task(void *ctx, int ith, int nth) {
    mm_fast_job *j = ctx;
    (void)nth;
    uint8_t *tb = j->threads + (size_t)ith * j->per_thread;
    const int64_t panels = (j->w->out + j->p.NP - 1) / j->p.NP, nb = j->token_blocks;
    const int64_t per = (j->T + nb - 1) / nb, items = panels * nb, in = j->w->in;
    /* the item after this one is taken before this one runs, so its rows
     * can be prefetched while this one's tiles run */
    for (int64_t it = atomic_fetch_add(&j->next, 1), nx; it < items; it = nx) {
        nx = atomic_fetch_add(&j->next, 1);
        const int64_t p0 = it / nb * j->p.NP;
        const int64_t np = part(j->w->out, p0, j->p.NP);
        mm_tokens tk = {.t0 = it % nb * per};
        tk.nt = part(j->T, tk.t0, per);
        if (tk.nt <= 0) continue;
        for (int64_t k0 = 0; k0 < in; k0 += j->p.KC) {
            const int64_t kc = part(in, k0, j->p.KC);
            const mm_prefetch pf = next_stored(j, p0, k0 + kc, nx < items ? nx / nb * j->p.NP : -1);
            panel_block(j, tb, p0, np, k0, kc, tk, pf.rows ? &pf : NULL);
        }
    }
}

void mm_matmul_ex(const cpu_target *tg, tp_pool *pool, const mm_weight *w, const float *x,
                  float *y, int64_t T, mm_workspace *ws) {
    mm_fast_job j = {.w = w, .x = x, .y = y, .T = T};
    if (T <= 0) return;
    if (!plan_make(tg, w, &j.p)) {
        mm_matmul(pool, w, x, y, T);
        return;
    }
    /* Small products are not worth waking the workers for. */
    if (w->out * w->in * T < 32768) pool = NULL;
    const int nth = tp_size(pool);
    const size_t ab = act_bytes(&j.p, w, T);
    j.per_thread = thread_bytes(&j.p);
    mm_workspace local = {0};
    mm_workspace *use = ws ? ws : &local;
    if (!mm_workspace_reserve(use, ab + (size_t)nth * j.per_thread)) {
        mm_workspace_free(&local);
        mm_matmul(pool, w, x, y, T); /* out of memory: the path that needs none */
        return;
    }
    j.act = use->buf;
    j.threads = j.act + ab;
    const bool i8 = j.p.kind == MM_KIND_I8 || j.p.kind == MM_KIND_AMX_I8;
    if (i8 || j.p.kind == MM_KIND_AMX_KQ) { /* the views act_bytes laid out */
        const size_t tin = (size_t)act_rows(&j.p, T) * (size_t)w->in;
        const uint8_t *after_q = j.act + align_up(tin);
        j.i8.q = (const int8_t *)j.act;
        j.i8.ld = w->in;
        if (i8) {
            j.i8.dx = (const float *)after_q;
            j.i8.mb = after_q + align_up(tin / 32 * sizeof(float));
            if (j.p.kind == MM_KIND_AMX_I8)
                j.i8.dxT = (const float *)((const uint8_t *)j.i8.mb +
                                           align_up(tin / (size_t)j.p.i8.bk * 4));
        } else {
            j.i8.dxT = (const float *)after_q;
            j.i8.mbT = after_q + align_up(tin / 256 * sizeof(float));
        }
    }
    if (ab) tp_run(pool, act_task, &j);
    pad_act_rows(&j);
    j.token_blocks = token_blocks(&j.p, (w->out + j.p.NP - 1) / j.p.NP, T, nth);
    atomic_init(&j.next, 0);
    tp_run(pool, mm_fast_task, &j);
    mm_workspace_free(&local);
}

/* ---- small dense products ---- */

void mm_gemm_nn(const cpu_target *tg, int64_t m, int64_t n, int64_t kdim, const float *A,
                int64_t rsa, int64_t csa, const float *B, int64_t ldb, float *C, int64_t ldc,
                bool add) {
    switch (tg ? tg->path : CPU_PATH_REF) {
    case CPU_PATH_AVX512:
    case CPU_PATH_AMX:
        avx512_gemm_nn(tg->bcast_fold, m, n, kdim, A, rsa, csa, B, ldb, C, ldc, add);
        return;
    case CPU_PATH_AVX2: avx2_gemm_nn(m, n, kdim, A, rsa, csa, B, ldb, C, ldc, add); return;
    case CPU_PATH_NEON: neon_gemm_nn(m, n, kdim, A, rsa, csa, B, ldb, C, ldc, add); return;
    default: break;
    }
    for (int64_t i = 0; i < m; i++) {
        float *c = C + i * ldc;
        if (!add) memset(c, 0, (size_t)(n > 0 ? n : 0) * sizeof *c);
        for (int64_t k = 0; k < kdim; k++) {
            float a = A[i * rsa + k * csa];
            const float *b = B + k * ldb;
            for (int64_t jj = 0; jj < n; jj++) c[jj] += a * b[jj];
        }
    }
}

void mm_gemm_nt(const cpu_target *tg, int64_t m, int64_t n, int64_t kdim, const float *A,
                int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc, bool add) {
    if (m <= 0 || n <= 0) return;
    switch (tg ? tg->path : CPU_PATH_REF) {
    case CPU_PATH_AVX512:
    case CPU_PATH_AMX: avx512_dot_f32(kdim, A, lda, m, B, ldb, n, C, ldc, add); return;
    case CPU_PATH_AVX2: avx2_dot_f32(kdim, A, lda, m, B, ldb, n, C, ldc, add, NULL); return;
    case CPU_PATH_NEON: neon_dot_f32(kdim, A, lda, m, B, ldb, n, C, ldc, add); return;
    default: break;
    }
    for (int64_t i = 0; i < m; i++)
        for (int64_t jj = 0; jj < n; jj++) {
            float d = mm_dot(A + i * lda, B + jj * ldb, kdim);
            C[i * ldc + jj] = add ? C[i * ldc + jj] + d : d;
        }
}

void mm_transpose(const cpu_target *tg, int64_t rows, int64_t cols, const float *src,
                  int64_t lds, float *dst, int64_t ldd) {
    const cpu_path path = tg ? tg->path : CPU_PATH_REF;
    if (cpu_path_avx512_family(path)) {
        avx512_transpose(rows, cols, src, lds, dst, ldd);
        return;
    }
    for (int64_t c = 0; c < cols; c++)
        for (int64_t r = 0; r < rows; r++) dst[c * ldd + r] = src[r * lds + c];
}

/* ---- portable helpers ---- */

size_t mm_i8_group_bytes(const mm_i8_kind *kind, int64_t kc) {
    if (kind->isc) { /* per 256: quants, nb scales, nb/2 min pairs, d, dmin */
        const int nb = 256 / kind->bk;
        return (size_t)(kc / 256) * (size_t)(256 * MM_I8_G + (nb + nb / 2 + 2) * MM_I8_G * 4);
    }
    return (size_t)(kc / kind->bk) * (size_t)(kind->bk * MM_I8_G + 2 * MM_I8_G * (int)sizeof(float));
}

void mm_dequant_rows(const mm_weight *w, int64_t r0, int64_t nr, int64_t k0, int64_t kc,
                     float *dst) {
    const clef_dtype_info *info = clef_dtype_get(w->type);
    for (int64_t r = 0; r < nr; r++) {
        const uint8_t *row = (const uint8_t *)w->data + (size_t)(r0 + r) * w->row_bytes;
        const uint8_t *src = row + (size_t)(k0 / info->block_size) * info->type_size;
        clef_dequantize_row(w->type, src, dst + r * kc, kc);
    }
}

void mm_round_bf16(const float *x, int64_t n, float *dst) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        /* round to nearest even at bit 16 (NaN payloads are not produced here) */
        u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
        memcpy(&dst[i], &u, 4);
    }
}
