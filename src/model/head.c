/*
 * model/head.c — loading and running the Clef joint schema head.
 *
 * The math runs in f32, as the reference does.  Matrices the file stores as
 * F32, BF16 or F16 (published files keep the head in BF16 or F32) are used in
 * place, through the kernels' f32-activation products (mm_weight.f32_act):
 * widening a 16-bit float is exact, so the products are the f32 copy's, bit
 * for bit, without the copy (392 MB on the 0.8B-shaped bench model) and
 * with half the bytes read per request.  Any other
 * type is dequantized to an f32 copy at load, as are the vectors (norms,
 * biases, type embeddings).  The LM head rows stay in the file's type too:
 * a vocabulary-sized matrix, read one row per option token (head_rows).
 *
 * Math follows the reference JointSchemaHead (spec clef-model.md §3); the
 * GGUF names and ggml shapes follow llama.cpp's `clef` arch (§4).  Linear
 * weights with ggml ne [in, out] are [out][in] row-major here.
 */
#include "model/head.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/error.h"
#include "core/threadpool.h"
#include "kernels/dequant.h"
#include "kernels/matmul.h"

/* LayerNorm parameters, [n] each. */
typedef struct head_norm {
    float *w, *b;
} head_norm;

/* A linear weight [out][in]: a view of the file's bytes (F32, BF16, F16),
 * or of `own`, its f32 copy (any other type). */
typedef struct head_mat {
    mm_weight w;
    void *own;
} head_mat;

/* Multi-head attention: q/k/v/o weights [W][W], biases [W].  k_heads, for
 * cross-attention only (the folded form, mha_folds): Wk transposed per head,
 * [H][W][dh] as a [H·W][dh] matrix in wk's type: the folded form multiplies
 * by Wk_hdᵀ, and the kernels read a weight's rows contiguously. */
typedef struct head_attn {
    head_mat wq, wk, wv, wo, k_heads;
    float *bq, *bk, *bv, *bo;
} head_attn;

/* A routing block (i < R) or a decoder layer (i >= R). */
typedef struct head_layer {
    head_norm self_norm;      /* decoder: norm1 (attn_norm)                  */
    head_attn self_attn;      /* decoder: self-attention over the fields     */
    head_norm cross_norm;     /* routing: query_norm; decoder: norm2         */
    head_norm cross_norm_kv;  /* routing: memory_norm                        */
    head_attn cross_attn;     /* queries -> memory                           */
    head_norm ffn_norm;
    head_mat ffn_up;          /* [F][W] */
    float *ffn_up_b;          /* [F]    */
    head_mat ffn_down;        /* [W][F] */
    float *ffn_down_b;        /* [W]    */
} head_layer;

struct head_model {
    head_hparams hp;
    head_norm hidden_norm;                 /* [E] */
    head_mat proj_memory;                  /* [W][E] */
    head_mat proj_question;                /* [W][E] */
    head_mat proj_option_question;         /* [W][E] */
    head_mat proj_global;                  /* [W][E] */
    head_mat proj_option_context;          /* [W][E] */
    head_mat proj_option_lexical;          /* [W][E] */
    float *type_embd;                      /* [3][W] */
    head_layer *layers;                    /* R + L  */
    head_norm option_summary_norm;         /* [W] */
    head_norm field_norm;                  /* [W] */
    head_norm option_norm;                 /* [W] */
    head_mat scorer;                       /* [W][4W] */
    float *scorer_b;                       /* [W] */
    float *scorer_out;                     /* [W] (ggml [W] or [W,1]) */
    float *scorer_out_b;                   /* [1] */
    float scales[3];                       /* folded [s_p, s_j, s_g] */
};

/* ------------------------------------------------------------------------ */
/* loading                                                                   */

/* Find `name` and check its shape against ne[0..nd) (padded with 1s), its
 * type and its size: *out on success. */
static clef_status find_checked(const gguf_file *f, const char *name, int nd, const int64_t *ne,
                                const gguf_tensor **out, clef_error *err) {
    const gguf_tensor *t = gguf_find_tensor(f, name);
    if (!t) return clef_err_set(err, CLEF_ERR_FORMAT, "decision head: tensor '%s' missing", name);
    bool ok = true;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) ok = ok && t->ne[d] == (d < nd ? ne[d] : 1);
    if (!ok) {
        char want[96], have[96];
        int wn = 0, hn = 0;
        for (int d = 0; d < nd; d++)
            wn += snprintf(want + wn, sizeof want - (size_t)wn, "%s%lld", d ? ", " : "",
                           (long long)ne[d]);
        for (uint32_t d = 0; d < t->n_dims && d < GGUF_MAX_DIMS; d++)
            hn += snprintf(have + hn, sizeof have - (size_t)hn, "%s%lld", d ? ", " : "",
                           (long long)t->ne[d]);
        if (hn == 0) snprintf(have, sizeof have, "scalar");
        return clef_err_set(err, CLEF_ERR_FORMAT,
                            "decision head: tensor '%s' has shape [%s], expected [%s]", name, have,
                            want);
    }
    const clef_dtype_info *info = clef_dtype_get(t->type);
    uint64_t row_bytes = 0;
    if (!info->supported || !clef_dtype_row_bytes(t->type, (uint64_t)t->ne[0], &row_bytes))
        return clef_err_set(err, CLEF_ERR_UNSUPPORTED,
                            "decision head: tensor '%s' has type %s (%u), which clef cannot "
                            "dequantize with row length %lld",
                            name, info->name ? info->name : "unknown", t->type,
                            (long long)t->ne[0]);
    int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
    if (t->nbytes < row_bytes * (uint64_t)rows)
        return clef_err_set(err, CLEF_ERR_FORMAT,
                            "decision head: tensor '%s' holds %llu bytes, its shape needs %llu",
                            name, (unsigned long long)t->nbytes,
                            (unsigned long long)(row_bytes * (uint64_t)rows));
    *out = t;
    return CLEF_OK;
}

/* A checked tensor t dequantized into a fresh f32 array (*dst, caller frees). */
static clef_status copy_f32(const gguf_tensor *t, const char *name, float **dst,
                            clef_error *err) {
    const int64_t n = t->ne[0], rows = t->ne[1] * t->ne[2] * t->ne[3];
    uint64_t row_bytes = 0;
    clef_dtype_row_bytes(t->type, (uint64_t)n, &row_bytes); /* find_checked: it exists */
    float *out = malloc((size_t)(n * rows) * sizeof *out);
    if (!out)
        return clef_err_set(err, CLEF_ERR_NOMEM, "decision head: no memory for tensor '%s'", name);
    const uint8_t *src = t->data;
    for (int64_t r = 0; r < rows; r++) {
        if (!clef_dequantize_row(t->type, src + (uint64_t)r * row_bytes, out + r * n, n)) {
            free(out);
            return clef_err_set(err, CLEF_ERR_UNSUPPORTED,
                                "decision head: tensor '%s': cannot dequantize type %s", name,
                                clef_dtype_get(t->type)->name);
        }
    }
    *dst = out;
    return CLEF_OK;
}

/* `name` of shape ne[0..nd) as a fresh f32 array (*dst, caller frees). */
static clef_status load_tensor(const gguf_file *f, const char *name, int nd, const int64_t *ne,
                               float **dst, clef_error *err) {
    const gguf_tensor *t = NULL;
    clef_status st = find_checked(f, name, nd, ne, &t, err);
    return st ? st : copy_f32(t, name, dst, err);
}

/* Whether the kernels multiply f32 activations by t's bytes in place: an
 * unquantized float type, its elements aligned (a file may set
 * general.alignment below 4). */
static bool usable_in_place(const gguf_tensor *t) {
    const size_t es = t->type == CLEF_DTYPE_F32 ? 4 : 2;
    const bool fp = t->type == CLEF_DTYPE_F32 || t->type == CLEF_DTYPE_BF16 ||
                    t->type == CLEF_DTYPE_F16;
    return fp && (uintptr_t)t->data % es == 0;
}

/* m = the stored [out][in] matrix at data, f32 activations. */
static bool mat_view(head_mat *m, uint32_t type, const void *data, int64_t in, int64_t out) {
    if (!mm_weight_init(&m->w, type, data, in, out)) return false;
    m->w.f32_act = true;
    return true;
}

static clef_status load_vec(const gguf_file *f, const char *name, int64_t n, float **dst,
                            clef_error *err) {
    return load_tensor(f, name, 1, (int64_t[]){n}, dst, err);
}

/* A linear weight of ggml ne [in, out]: in place, or as an f32 copy. */
static clef_status load_mat(const gguf_file *f, const char *name, int64_t in, int64_t out,
                            head_mat *m, clef_error *err) {
    const gguf_tensor *t = NULL;
    clef_status st = find_checked(f, name, 2, (int64_t[]){in, out}, &t, err);
    if (st) return st;
    const void *data = t->data;
    uint32_t type = t->type;
    if (!usable_in_place(t)) {
        float *copy = NULL;
        if ((st = copy_f32(t, name, &copy, err))) return st;
        m->own = copy;
        data = copy;
        type = CLEF_DTYPE_F32;
    }
    if (!mat_view(m, type, data, in, out))
        return clef_err_set(err, CLEF_ERR_UNSUPPORTED, "decision head: tensor '%s' (%s, rows of "
                            "%lld) is not a matrix the kernels multiply", name,
                            clef_dtype_get(type)->name, (long long)in);
    return CLEF_OK;
}

/* a->k_heads from a->wk ([W][W]): k_heads[hd][c][d] = Wk[hd·dh + d][c]. */
static clef_status make_k_heads(head_attn *a, int64_t W, int64_t heads, clef_error *err) {
    const mm_weight *wk = &a->wk.w;
    const size_t es = wk->row_bytes / (size_t)W; /* 4 or 2: an unquantized type */
    const int64_t dh = W / heads;
    uint8_t *dst = malloc((size_t)(W * W) * es);
    if (!dst) return clef_err_set(err, CLEF_ERR_NOMEM, "decision head: no memory");
    const uint8_t *src = wk->data;
    for (int64_t hd = 0; hd < heads; hd++)
        for (int64_t c = 0; c < W; c++)
            for (int64_t d = 0; d < dh; d++)
                memcpy(dst + ((hd * W + c) * dh + d) * es, src + ((hd * dh + d) * W + c) * es, es);
    a->k_heads.own = dst;
    if (!mat_view(&a->k_heads, wk->type, dst, dh, heads * W))
        return clef_err_set(err, CLEF_ERR_UNSUPPORTED, "decision head: head width %lld is not "
                            "one the kernels multiply", (long long)dh);
    return CLEF_OK;
}

/* `<base>.weight` and `<base>.bias`, [n] each. */
static clef_status load_norm(const gguf_file *f, const char *base, int64_t n, head_norm *nm,
                             clef_error *err) {
    char name[128];
    snprintf(name, sizeof name, "%s.weight", base);
    clef_status st = load_vec(f, name, n, &nm->w, err);
    if (st) return st;
    snprintf(name, sizeof name, "%s.bias", base);
    return load_vec(f, name, n, &nm->b, err);
}

/* dec.blk.<il>.<q|k|v|o>.{weight,bias}: prefix is "attn" or "cross_attn". */
static clef_status load_attn(const gguf_file *f, int il, const char *prefix, int64_t W,
                             head_attn *a, clef_error *err) {
    static const char *const parts[4] = {"q", "k", "v", "o"};
    head_mat *ws[4] = {&a->wq, &a->wk, &a->wv, &a->wo};
    float **bs[4] = {&a->bq, &a->bk, &a->bv, &a->bo};
    char name[128];
    for (int i = 0; i < 4; i++) {
        snprintf(name, sizeof name, "dec.blk.%d.%s_%s.weight", il, prefix, parts[i]);
        clef_status st = load_mat(f, name, W, W, ws[i], err);
        if (st) return st;
        snprintf(name, sizeof name, "dec.blk.%d.%s_%s.bias", il, prefix, parts[i]);
        st = load_vec(f, name, W, bs[i], err);
        if (st) return st;
    }
    return CLEF_OK;
}

static clef_status load_layer(const gguf_file *f, const head_hparams *hp, int il,
                              head_layer *l, clef_error *err) {
    const int64_t W = hp->width, F = hp->n_ff;
    char base[96], name[128];
    clef_status st;
    if (il < hp->n_routing) {
        snprintf(base, sizeof base, "dec.blk.%d.cross_attn_norm_kv", il);
        if ((st = load_norm(f, base, W, &l->cross_norm_kv, err))) return st;
    } else {
        snprintf(base, sizeof base, "dec.blk.%d.attn_norm", il);
        if ((st = load_norm(f, base, W, &l->self_norm, err))) return st;
        if ((st = load_attn(f, il, "attn", W, &l->self_attn, err))) return st;
    }
    snprintf(base, sizeof base, "dec.blk.%d.cross_attn_norm", il);
    if ((st = load_norm(f, base, W, &l->cross_norm, err))) return st;
    if ((st = load_attn(f, il, "cross_attn", W, &l->cross_attn, err)) ||
        (st = make_k_heads(&l->cross_attn, W, hp->n_head, err)))
        return st;
    snprintf(base, sizeof base, "dec.blk.%d.ffn_norm", il);
    if ((st = load_norm(f, base, W, &l->ffn_norm, err))) return st;
    snprintf(name, sizeof name, "dec.blk.%d.ffn_up.weight", il);
    if ((st = load_mat(f, name, W, F, &l->ffn_up, err))) return st;
    snprintf(name, sizeof name, "dec.blk.%d.ffn_up.bias", il);
    if ((st = load_vec(f, name, F, &l->ffn_up_b, err))) return st;
    snprintf(name, sizeof name, "dec.blk.%d.ffn_down.weight", il);
    if ((st = load_mat(f, name, F, W, &l->ffn_down, err))) return st;
    snprintf(name, sizeof name, "dec.blk.%d.ffn_down.bias", il);
    return load_vec(f, name, W, &l->ffn_down_b, err);
}

/* Read a positive count key into *out. */
static clef_status get_count(const gguf_file *f, const char *key, bool allow_zero, int *out,
                             clef_error *err) {
    uint32_t v = 0;
    if (!gguf_get_u32(f, key, &v))
        return clef_err_set(err, CLEF_ERR_FORMAT, "decision head: metadata '%s' missing or not "
                            "an unsigned integer", key);
    if ((!allow_zero && v == 0) || v > 1024)
        return clef_err_set(err, CLEF_ERR_FORMAT, "decision head: metadata '%s' = %u is out of "
                            "range", key, v);
    *out = (int)v;
    return CLEF_OK;
}

/* Hyperparameters from the metadata and the shapes of two anchor tensors. */
static clef_status load_hparams(const gguf_file *f, head_hparams *hp, clef_error *err) {
    clef_status st;
    if ((st = get_count(f, "clef.decision.routing_block_count", true, &hp->n_routing, err)) ||
        (st = get_count(f, "clef.decision.block_count", true, &hp->n_decoder, err)) ||
        (st = get_count(f, "clef.decision.head_count", false, &hp->n_head, err)))
        return st;
    /* The reference LayerNorms use torch's default eps 1e-5; llama.cpp's
     * converter always writes the key, older files may not. */
    hp->norm_eps = 1e-5f;
    if (gguf_find_kv(f, "clef.attention.layer_norm_epsilon") &&
        !gguf_get_f32(f, "clef.attention.layer_norm_epsilon", &hp->norm_eps))
        return clef_err_set(err, CLEF_ERR_FORMAT, "decision head: metadata "
                            "'clef.attention.layer_norm_epsilon' is not a float");
    const char *anchor = "decision.proj_memory.weight";
    const gguf_tensor *pm = gguf_find_tensor(f, anchor);
    if (!pm)
        return clef_err_set(err, CLEF_ERR_FORMAT, "decision head: tensor '%s' missing", anchor);
    if (pm->n_dims != 2 || pm->ne[0] <= 0 || pm->ne[1] <= 0 || pm->ne[0] > (1 << 20) ||
        pm->ne[1] > (1 << 20))
        return clef_err_set(err, CLEF_ERR_FORMAT, "decision head: tensor '%s' is not a 2-D "
                            "[n_embd, width] matrix", anchor);
    hp->n_embd = (int)pm->ne[0];
    hp->width = (int)pm->ne[1];
    uint32_t e = 0;
    if (gguf_get_u32(f, "clef.embedding_length", &e) && (int)e != hp->n_embd)
        return clef_err_set(err, CLEF_ERR_FORMAT, "decision head: tensor '%s' reads %d features "
                            "but clef.embedding_length is %u", anchor, hp->n_embd, e);
    if (hp->width % hp->n_head != 0)
        return clef_err_set(err, CLEF_ERR_FORMAT, "decision head: width %d is not a multiple of "
                            "clef.decision.head_count %d", hp->width, hp->n_head);
    hp->n_ff = 0;
    if (hp->n_routing + hp->n_decoder > 0) {
        char name[64];
        snprintf(name, sizeof name, "dec.blk.0.ffn_up.weight");
        const gguf_tensor *up = gguf_find_tensor(f, name);
        if (!up)
            return clef_err_set(err, CLEF_ERR_FORMAT, "decision head: tensor '%s' missing", name);
        if (up->ne[1] <= 0 || up->ne[1] > (1 << 20))
            return clef_err_set(err, CLEF_ERR_FORMAT, "decision head: tensor '%s' has a bad "
                                "feed-forward width", name);
        hp->n_ff = (int)up->ne[1];
    }
    return CLEF_OK;
}

static clef_status load_all(const gguf_file *f, head_model *h, clef_error *err) {
    const head_hparams *hp = &h->hp;
    const int64_t E = hp->n_embd, W = hp->width;
    clef_status st;
    if ((st = load_norm(f, "decision.hidden_norm", E, &h->hidden_norm, err))) return st;
    struct { const char *name; head_mat *dst; } projs[] = {
        {"decision.proj_memory.weight", &h->proj_memory},
        {"decision.proj_question.weight", &h->proj_question},
        {"decision.proj_option_question.weight", &h->proj_option_question},
        {"decision.proj_global.weight", &h->proj_global},
        {"decision.proj_option_context.weight", &h->proj_option_context},
        {"decision.proj_option_lexical.weight", &h->proj_option_lexical},
    };
    for (size_t i = 0; i < sizeof projs / sizeof projs[0]; i++)
        if ((st = load_mat(f, projs[i].name, E, W, projs[i].dst, err))) return st;
    if ((st = load_tensor(f, "token_types.weight", 2, (int64_t[]){W, 3}, &h->type_embd, err)))
        return st;
    for (int il = 0; il < hp->n_routing + hp->n_decoder; il++)
        if ((st = load_layer(f, hp, il, &h->layers[il], err))) return st;
    if ((st = load_norm(f, "decision.option_summary_norm", W, &h->option_summary_norm, err)) ||
        (st = load_norm(f, "decision.field_norm", W, &h->field_norm, err)) ||
        (st = load_norm(f, "decision.option_norm", W, &h->option_norm, err)) ||
        (st = load_mat(f, "decision.scorer.weight", 4 * W, W, &h->scorer, err)) ||
        (st = load_vec(f, "decision.scorer.bias", W, &h->scorer_b, err)) ||
        (st = load_vec(f, "decision.scorer_out.weight", W, &h->scorer_out, err)) ||
        (st = load_vec(f, "decision.scorer_out.bias", 1, &h->scorer_out_b, err)))
        return st;
    float *scales = NULL;
    if ((st = load_vec(f, "decision.scales", 3, &scales, err))) return st;
    memcpy(h->scales, scales, sizeof h->scales);
    free(scales);
    return CLEF_OK;
}

clef_status head_load(const gguf_file *f, head_model **out, clef_error *err) {
    *out = NULL;
    head_model *h = calloc(1, sizeof *h);
    if (!h) return clef_err_set(err, CLEF_ERR_NOMEM, "decision head: no memory");
    clef_status st = load_hparams(f, &h->hp, err);
    if (st == CLEF_OK) {
        h->layers = calloc((size_t)(h->hp.n_routing + h->hp.n_decoder) + 1, sizeof *h->layers);
        st = h->layers ? load_all(f, h, err)
                       : clef_err_set(err, CLEF_ERR_NOMEM, "decision head: no memory");
    }
    if (st != CLEF_OK) {
        head_free(h);
        return st;
    }
    *out = h;
    return CLEF_OK;
}

static void free_norm(head_norm *n) {
    free(n->w);
    free(n->b);
}

static void free_attn(head_attn *a) {
    head_mat *ms[] = {&a->wq, &a->wk, &a->wv, &a->wo, &a->k_heads};
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) free(ms[i]->own);
    float *ps[] = {a->bq, a->bk, a->bv, a->bo};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) free(ps[i]);
}

void head_free(head_model *h) {
    if (!h) return;
    free_norm(&h->hidden_norm);
    head_mat *projs[] = {&h->proj_memory, &h->proj_question, &h->proj_option_question,
                         &h->proj_global, &h->proj_option_context, &h->proj_option_lexical};
    for (size_t i = 0; i < sizeof projs / sizeof projs[0]; i++) free(projs[i]->own);
    free(h->type_embd);
    if (h->layers) {
        for (int il = 0; il < h->hp.n_routing + h->hp.n_decoder; il++) {
            head_layer *l = &h->layers[il];
            free_norm(&l->self_norm);
            free_attn(&l->self_attn);
            free_norm(&l->cross_norm);
            free_norm(&l->cross_norm_kv);
            free_attn(&l->cross_attn);
            free_norm(&l->ffn_norm);
            free(l->ffn_up.own);
            free(l->ffn_up_b);
            free(l->ffn_down.own);
            free(l->ffn_down_b);
        }
        free(h->layers);
    }
    free_norm(&h->option_summary_norm);
    free_norm(&h->field_norm);
    free_norm(&h->option_norm);
    free(h->scorer.own);
    free(h->scorer_b);
    free(h->scorer_out);
    free(h->scorer_out_b);
    free(h);
}

const head_hparams *head_get_hparams(const head_model *h) { return &h->hp; }

/* ------------------------------------------------------------------------ */
/* LM-head rows                                                              */

clef_status head_rows_from_tensor(const gguf_tensor *t, int64_t n_embd, head_rows *out,
                                  clef_error *err) {
    char name[96];
    snprintf(name, sizeof name, "%.*s", (int)(t->name.len < 80 ? t->name.len : 80), t->name.ptr);
    if (t->n_dims != 2 || t->ne[0] != n_embd || t->ne[1] <= 0)
        return clef_err_set(err, CLEF_ERR_FORMAT, "decision head: tensor '%s' has shape [%lld, "
                            "%lld], expected [%lld, n_vocab]", name, (long long)t->ne[0],
                            (long long)t->ne[1], (long long)n_embd);
    const clef_dtype_info *info = clef_dtype_get(t->type);
    uint64_t row_bytes = 0;
    if (!info->supported || !clef_dtype_row_bytes(t->type, (uint64_t)n_embd, &row_bytes))
        return clef_err_set(err, CLEF_ERR_UNSUPPORTED, "decision head: tensor '%s' has type %s "
                            "(%u), which clef cannot dequantize", name,
                            info->name ? info->name : "unknown", t->type);
    if (t->nbytes < row_bytes * (uint64_t)t->ne[1])
        return clef_err_set(err, CLEF_ERR_FORMAT, "decision head: tensor '%s' is shorter than "
                            "its shape", name);
    *out = (head_rows){.type = t->type, .data = t->data, .row_len = n_embd, .n_rows = t->ne[1],
                       .row_bytes = row_bytes};
    return CLEF_OK;
}

clef_status head_rows_from_file(const gguf_file *f, int64_t n_embd, head_rows *out,
                                clef_error *err) {
    const gguf_tensor *t = gguf_find_tensor(f, "output.weight");
    if (!t) t = gguf_find_tensor(f, "token_embd.weight");
    if (!t)
        return clef_err_set(err, CLEF_ERR_FORMAT, "decision head: neither 'output.weight' nor "
                            "'token_embd.weight' is present for the option lexical rows");
    return head_rows_from_tensor(t, n_embd, out, err);
}

clef_status head_rows_get(const head_rows *r, int64_t row, float *dst, clef_error *err) {
    if (row < 0 || row >= r->n_rows)
        return clef_err_set(err, CLEF_ERR_INVALID_ARG, "decision head: token id %lld outside the "
                            "%lld rows of the LM head", (long long)row, (long long)r->n_rows);
    const uint8_t *src = (const uint8_t *)r->data + (uint64_t)row * r->row_bytes;
    if (!clef_dequantize_row(r->type, src, dst, r->row_len))
        return clef_err_set(err, CLEF_ERR_UNSUPPORTED, "decision head: cannot dequantize an LM "
                            "head row of type %u", r->type);
    return CLEF_OK;
}

/* ------------------------------------------------------------------------ */
/* f32 building blocks                                                       */

/* Where the head's products run: the model's kernels (the reference path's
 * too when cpu is the ref target). */
typedef struct head_exec {
    tp_pool *pool;            /* may be NULL                               */
    const cpu_target *cpu;
    mm_workspace ws;          /* the kernels' scratch, freed by score      */
    mm_workspace *ws_thread;  /* one per pool thread, for per_head         */
} head_exec;

/* y[n][w->out] = x[n][w->in] · wᵀ (+ b[out] when b), f32 activations.  Every
 * output is summed in an order fixed by the shapes, so the result does not
 * depend on the thread count. */
static void linear(head_exec *ex, const float *x, int n, const mm_weight *w, const float *b,
                   float *y) {
    mm_matmul_ex(ex->cpu, ex->pool, w, x, y, n, &ex->ws);
    for (size_t t = 0; b && t < (size_t)n; t++)
        for (int64_t o = 0; o < w->out; o++) y[t * (size_t)w->out + o] += b[o];
}

/* A product with a scratch matrix m[out][in] (f32) as its weights. */
static void linear_f32(head_exec *ex, const float *x, int n, const float *m, int in, int out,
                       float *y) {
    mm_weight w;
    mm_weight_init(&w, CLEF_DTYPE_F32, m, in, out); /* an f32 [out][in] always describes */
    linear(ex, x, n, &w, NULL, y);
}

/* Per head hd < heads, one product on one thread: y_hd[n][rows] = x_hd[n][in]
 * · (rows [hd·rows, +rows) of w)ᵀ, x_hd = x + hd·n·in, y_hd = y + hd·n·rows.
 * Heads, not rows, are shared out over the pool: each head's product is
 * too small to split. */
typedef struct per_head_job {
    head_exec *ex;
    const mm_weight *w;
    const float *x;
    float *y;
    int n, rows, heads;
} per_head_job;

static void per_head_task(void *ctx, int ith, int nth) {
    const per_head_job *j = ctx;
    int64_t h0, h1;
    tp_split(j->heads, 1, ith, nth, &h0, &h1);
    const int64_t in = j->w->in;
    for (int64_t hd = h0; hd < h1; hd++) {
        mm_weight v = *j->w; /* rows [hd·rows, +rows): a view of the same bytes */
        v.data = (const uint8_t *)v.data + (size_t)(hd * j->rows) * v.row_bytes;
        v.out = j->rows;
        mm_matmul_ex(j->ex->cpu, NULL, &v, j->x + hd * j->n * in, j->y + hd * j->n * j->rows,
                     j->n, &j->ex->ws_thread[ith]);
    }
}

static void per_head(head_exec *ex, const mm_weight *w, int rows, int heads, const float *x, int n,
                     float *y) {
    per_head_job j = {ex, w, x, y, n, rows, heads};
    tp_run(ex->pool, per_head_task, &j);
}

/* LayerNorm with bias over rows of n; statistics in double. y may equal x. */
static void layer_norm(const float *x, int rows, int n, const head_norm *nm, float eps, float *y) {
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * n;
        float *yr = y + (size_t)r * n;
        double mean = 0.0, var = 0.0;
        for (int i = 0; i < n; i++) mean += xr[i];
        mean /= n;
        for (int i = 0; i < n; i++) var += ((double)xr[i] - mean) * ((double)xr[i] - mean);
        double inv = 1.0 / sqrt(var / n + eps);
        for (int i = 0; i < n; i++)
            yr[i] = (float)(((double)xr[i] - mean) * inv) * nm->w[i] + nm->b[i];
    }
}

/* Exact GELU (erf form), as torch.nn.GELU() and ggml_gelu_erf. */
static float gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }

static void add_to(float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}

/* Scratch shared by the attention and FFN helpers. */
typedef struct head_work {
    head_exec *ex;  /* the products      */
    float *q;       /* [n_query_max][W] */
    float *k;       /* [n_kv_max][W]    */
    float *v;       /* [n_kv_max][W]    */
    float *ctx;     /* [n_query_max][W] */
    float *p;       /* [n_kv_max]       */
    float *norm;    /* [n_query_max][W] */
    float *ff;      /* [n_query_max][F] */
    float *tmp;     /* [n_query_max][W] */
    /* the folded cross-attention (mha_folds), a = head·queries + query:   */
    float *heads;   /* [H][n_query_max][dh] q, then the context, by head */
    float *qk;      /* [a][W]  per head, Wkᵀ q                           */
    float *pk;      /* [n_kv_max][a] scores, then softmax numerators     */
    float *mv;      /* [a][W]  Σ_j p_j m_j                               */
    float *col;     /* [2][a]  column maxima, then inverse sums          */
} head_work;

/* Attention of a few queries over many keys need not project the keys and
 * values: q·(Wk m + bk) = (Wkᵀq)·m + q·bk, where q·bk is the same for every
 * key and cancels in the softmax, and Σ_j p_j (Wv m_j + bv) = Wv Σ_j p_j m_j
 * + bv.  Per call that is 2·nq·W² + 2·nq·H·nk·W multiply-adds instead of
 * 2·nk·W² + 2·nq·nk·W; with the bench's 14 options, 16 heads and W 1024 a
 * quarter of the work. */
static bool mha_folds(int nq, int nk, int W, int heads) {
    const double direct = 2.0 * nk * W * (double)W + 2.0 * nq * nk * (double)W;
    const double folded = 2.0 * nq * W * (double)W + 2.0 * nq * heads * (double)nk * W;
    return folded < direct;
}

/* mv[a][W] = pkᵀ·kv over rows [a0, a1): the softmax-weighted key sums. */
typedef struct mv_job {
    const cpu_target *cpu;  /* NULL: reference loops */
    const float *pk, *kv;
    float *mv;
    int na, nk, W;
} mv_job;

/* Keys in blocks of MV_KC, so that the block of kv rows (1 MB at W 1024)
 * stays in L2 while every row of the share passes over it: over all keys
 * at once, each 8-row tile streamed the whole of kv again (2048 keys: 94
 * GFLOP/s on 2 threads). */
enum { MV_KC = 256 };

static void mv_task(void *ctx, int ith, int nth) {
    const mv_job *j = ctx;
    int64_t a0, a1;
    tp_split(j->na, 1, ith, nth, &a0, &a1);
    for (int64_t k0 = 0; a1 > a0 && k0 < j->nk; k0 += MV_KC) {
        const int64_t kc = j->nk - k0 < MV_KC ? j->nk - k0 : MV_KC;
        mm_gemm_nn(j->cpu, a1 - a0, j->W, kc, j->pk + k0 * j->na + a0, 1, j->na,
                   j->kv + k0 * j->W, j->W, j->mv + a0 * j->W, j->W, k0 > 0);
    }
}

/* Softmax down each column a of pk[nk][na] (scores times scale), in place;
 * col[na + a] gets 1 / the column's sum. */
static void softmax_columns(float *pk, int nk, int na, float scale, float *col) {
    float *mx = col, *inv = col + na;
    for (int a = 0; a < na; a++) mx[a] = -INFINITY;
    for (int j = 0; j < nk; j++)
        for (int a = 0; a < na; a++) {
            float v = pk[(size_t)j * na + a] * scale;
            pk[(size_t)j * na + a] = v;
            if (v > mx[a]) mx[a] = v;
        }
    for (int a = 0; a < na; a++) inv[a] = 0.0f;
    for (int j = 0; j < nk; j++)
        for (int a = 0; a < na; a++) {
            float e = expf(pk[(size_t)j * na + a] - mx[a]);
            pk[(size_t)j * na + a] = e;
            inv[a] += e;
        }
    for (int a = 0; a < na; a++) inv[a] = 1.0f / inv[a];
}

/* x[n][W] <-> hx[H][n][dh]: the heads' columns as contiguous rows. */
static void split_heads(const float *x, int n, int W, int heads, float *hx) {
    const int dh = W / heads;
    for (int hd = 0; hd < heads; hd++)
        for (int i = 0; i < n; i++)
            memcpy(hx + ((size_t)hd * n + i) * dh, x + (size_t)i * W + hd * dh, dh * sizeof *x);
}

static void merge_heads(const float *hx, int n, int W, int heads, float *x) {
    const int dh = W / heads;
    for (int hd = 0; hd < heads; hd++)
        for (int i = 0; i < n; i++)
            memcpy(x + (size_t)i * W + hd * dh, hx + ((size_t)hd * n + i) * dh, dh * sizeof *x);
}

/* MHA as mha below, folded (mha_folds): out[nq][W]. */
static void mha_folded(const head_attn *a, const float *q_in, int nq, const float *kv, int nk,
                       int W, int heads, head_work *w, float *out) {
    const int dh = W / heads, na = nq * heads;
    linear(w->ex, q_in, nq, &a->wq.w, a->bq, w->q);
    split_heads(w->q, nq, W, heads, w->heads);
    /* qk[hd·nq + i] = Wk_hdᵀ q_i,hd */
    per_head(w->ex, &a->k_heads.w, W, heads, w->heads, nq, w->qk);
    linear_f32(w->ex, kv, nk, w->qk, W, na, w->pk);
    softmax_columns(w->pk, nk, na, 1.0f / sqrtf((float)dh), w->col);
    mv_job mj = {w->ex->cpu, w->pk, kv, w->mv, na, nk, W};
    tp_run(w->ex->pool, mv_task, &mj); /* a NULL pool runs it here */
    for (int i = 0; i < na; i++) {
        float *r = w->mv + (size_t)i * W;
        for (int c = 0; c < W; c++) r[c] *= w->col[na + i];
    }
    per_head(w->ex, &a->wv.w, dh, heads, w->mv, nq, w->heads); /* Wv_hd mv[hd·nq + i] */
    merge_heads(w->heads, nq, W, heads, w->ctx);
    for (int i = 0; i < nq; i++) add_to(w->ctx + (size_t)i * W, a->bv, (size_t)W);
    linear(w->ex, w->ctx, nq, &a->wo.w, a->bo, out);
}

/* out[nq][W] = MHA(q_in[nq][W], kv_in[nk][W]): no mask, scale 1/sqrt(W/heads). */
static void mha(const head_attn *a, const float *q_in, int nq, const float *kv_in, int nk, int W,
                int heads, head_work *w, float *out) {
    if (a->k_heads.own && mha_folds(nq, nk, W, heads)) {
        mha_folded(a, q_in, nq, kv_in, nk, W, heads, w, out);
        return;
    }
    const int dh = W / heads;
    const float scale = 1.0f / sqrtf((float)dh);
    linear(w->ex, q_in, nq, &a->wq.w, a->bq, w->q);
    linear(w->ex, kv_in, nk, &a->wk.w, a->bk, w->k);
    linear(w->ex, kv_in, nk, &a->wv.w, a->bv, w->v);
    for (int i = 0; i < nq; i++) {
        for (int hd = 0; hd < heads; hd++) {
            const float *qi = w->q + (size_t)i * W + hd * dh;
            float mx = -INFINITY;
            for (int j = 0; j < nk; j++) {
                w->p[j] = mm_dot(qi, w->k + (size_t)j * W + hd * dh, dh) * scale;
                if (w->p[j] > mx) mx = w->p[j];
            }
            double sum = 0.0;
            for (int j = 0; j < nk; j++) {
                w->p[j] = expf(w->p[j] - mx);
                sum += w->p[j];
            }
            float *ci = w->ctx + (size_t)i * W + hd * dh;
            for (int d = 0; d < dh; d++) ci[d] = 0.0f;
            for (int j = 0; j < nk; j++) {
                const float pj = (float)(w->p[j] / sum);
                const float *vj = w->v + (size_t)j * W + hd * dh;
                for (int d = 0; d < dh; d++) ci[d] += pj * vj[d];
            }
        }
    }
    linear(w->ex, w->ctx, nq, &a->wo.w, a->bo, out);
}

/* x[n][W] += FFN(ffn_norm(x)): W -> F, GELU, F -> W. */
static void ffn_residual(const head_layer *l, float *x, int n, int W, int F, float eps,
                         head_work *w) {
    layer_norm(x, n, W, &l->ffn_norm, eps, w->norm);
    linear(w->ex, w->norm, n, &l->ffn_up.w, l->ffn_up_b, w->ff);
    for (size_t i = 0; i < (size_t)n * F; i++) w->ff[i] = gelu(w->ff[i]);
    linear(w->ex, w->ff, n, &l->ffn_down.w, l->ffn_down_b, w->tmp);
    add_to(x, w->tmp, (size_t)n * W);
}

/* ------------------------------------------------------------------------ */
/* scoring                                                                   */

int head_count_options(const head_question *qs, int n_questions) {
    int n = 0;
    for (int q = 0; q < n_questions; q++) n += qs[q].n_options > 0 ? qs[q].n_options : 0;
    return n;
}

static clef_status check_span(head_span s, int T, int q, int o, clef_error *err) {
    if (s.start >= 0 && s.start < s.end && s.end <= T) return CLEF_OK;
    if (o < 0)
        return clef_err_set(err, CLEF_ERR_INVALID_ARG, "decision head: question %d: span [%d, %d) "
                            "is empty or outside the %d tokens", q, s.start, s.end, T);
    return clef_err_set(err, CLEF_ERR_INVALID_ARG, "decision head: question %d option %d: span "
                        "[%d, %d) is empty or outside the %d tokens", q, o, s.start, s.end, T);
}

static clef_status check_request(const head_rows *rows, const int32_t *ids, int T,
                                 const head_question *qs, int n_questions, clef_error *err) {
    if (T <= 0 || n_questions <= 0)
        return clef_err_set(err, CLEF_ERR_INVALID_ARG, "decision head: %d tokens and %d "
                            "questions; both must be positive", T, n_questions);
    for (int q = 0; q < n_questions; q++) {
        clef_status st;
        if (qs[q].type_id < 0 || qs[q].type_id > 2)
            return clef_err_set(err, CLEF_ERR_INVALID_ARG, "decision head: question %d: type id "
                                "%d is not 0 (noul), 1 (choice) or 2 (score)", q, qs[q].type_id);
        if (qs[q].n_options <= 0 || !qs[q].options)
            return clef_err_set(err, CLEF_ERR_INVALID_ARG, "decision head: question %d has no "
                                "options", q);
        if ((st = check_span(qs[q].span, T, q, -1, err))) return st;
        for (int o = 0; o < qs[q].n_options; o++) {
            head_span s = qs[q].options[o];
            if ((st = check_span(s, T, q, o, err))) return st;
            for (int t = s.start; t < s.end; t++)
                if (ids[t] < 0 || ids[t] >= rows->n_rows)
                    return clef_err_set(err, CLEF_ERR_INVALID_ARG, "decision head: question %d "
                                        "option %d: token id %d at %d outside the %lld LM-head "
                                        "rows", q, o, ids[t], t, (long long)rows->n_rows);
        }
    }
    return CLEF_OK;
}

/* All per-request buffers, carved from one allocation. */
typedef struct head_scratch {
    float *memory;   /* [T][W]  proj_memory(hidden_norm(h))            */
    float *memn;     /* [T][W]  memory_norm(memory) of a routing block */
    float *xblk;     /* [B][E]  hidden_norm of a block of tokens       */
    float *g;        /* [E]     hidden_norm(h[T-1])                     */
    float *qv;       /* [nq][E] question span means                    */
    float *ctxo;     /* [no][E] option span means                      */
    float *lex;      /* [no][E] LM-head row means                      */
    float *row;      /* [E]                                            */
    float *opt;      /* [no][W] option queries O                       */
    float *fld;      /* [nq][W] fields f                               */
    float *base;     /* [nq][W] proj_question(qv)                      */
    float *attn;     /* [nmax][W]                                      */
    float *feat;     /* [no][4W] scorer inputs                         */
    float *sc;       /* [max(no,1)][W] proj_global(g), scorer hiddens  */
    head_work w;
    double *acc;     /* [E] span sums                                  */
    double *part;    /* [no] the logits' prior and cosine terms        */
} head_scratch;

enum { HEAD_TOKEN_BLOCK = 64 };

static size_t max_z(size_t a, size_t b) { return a > b ? a : b; }

/* What the three kinds of attention need, folded or not (mha_folds):
 * options over the prompt, fields over the prompt, fields over fields (a
 * self-attention, which has no k_heads and never folds). */
typedef struct mha_sizes {
    size_t kv;   /* rows of w.k / w.v for the direct ones */
    size_t na;   /* query-heads of the folded ones        */
    size_t pk;   /* their score matrix                    */
} mha_sizes;

static mha_sizes mha_plan(int T, int W, int H, int nq, int no) {
    const int calls[3][3] = {{no, T, 1}, {nq, T, 1}, {nq, nq, 0}}; /* {queries, keys, cross} */
    mha_sizes z = {1, 1, 1};
    for (int c = 0; c < 3; c++) {
        const size_t q = (size_t)calls[c][0], k = (size_t)calls[c][1];
        if (calls[c][2] && mha_folds(calls[c][0], calls[c][1], W, H)) {
            z.na = max_z(z.na, q * H);
            z.pk = max_z(z.pk, q * H * k);
        } else {
            z.kv = max_z(z.kv, k);
        }
    }
    return z;
}

static float *scratch_alloc(head_scratch *s, int T, int E, int W, int F, int H, int nq, int no) {
    const size_t nmax = max_z((size_t)nq, (size_t)no);
    /* w.p: one key row of the direct attentions, or one question's options */
    const size_t np = max_z(max_z((size_t)T, (size_t)nq), nmax);
    const mha_sizes z = mha_plan(T, W, H, nq, no);
    struct { float **p; size_t n; } plan[] = {
        {&s->memory, (size_t)T * W}, {&s->memn, (size_t)T * W},
        {&s->xblk, (size_t)HEAD_TOKEN_BLOCK * E}, {&s->g, (size_t)E},
        {&s->qv, (size_t)nq * E}, {&s->ctxo, (size_t)no * E}, {&s->lex, (size_t)no * E},
        {&s->row, (size_t)E}, {&s->opt, (size_t)no * W}, {&s->fld, (size_t)nq * W},
        {&s->base, (size_t)nq * W}, {&s->attn, nmax * W}, {&s->feat, (size_t)no * 4 * W},
        {&s->sc, max_z((size_t)no, 1) * W}, {&s->w.q, nmax * W}, {&s->w.k, z.kv * W},
        {&s->w.v, z.kv * W}, {&s->w.ctx, nmax * W}, {&s->w.p, np}, {&s->w.norm, nmax * W},
        {&s->w.ff, nmax * (F > 0 ? F : 1)}, {&s->w.tmp, nmax * W}, {&s->w.heads, nmax * W},
        {&s->w.qk, z.na * W}, {&s->w.pk, z.pk}, {&s->w.mv, z.na * W}, {&s->w.col, 2 * z.na},
    };
    size_t total = 0;
    for (size_t i = 0; i < sizeof plan / sizeof plan[0]; i++) total += plan[i].n;
    float *base = malloc(total * sizeof *base);
    s->acc = malloc(((size_t)E + (size_t)no) * sizeof *s->acc);
    s->part = s->acc ? s->acc + E : NULL;
    if (!base || !s->acc) {
        free(base);
        free(s->acc);
        return NULL;
    }
    float *p = base;
    for (size_t i = 0; i < sizeof plan / sizeof plan[0]; i++) {
        *plan[i].p = p;
        p += plan[i].n;
    }
    return base;
}

/* memory[T][W] = proj_memory(hidden_norm(hidden)), a block of tokens at a
 * time so that the normalized [T][E] copy is never held whole. */
static void build_memory(const head_model *h, const float *hidden, int T, head_scratch *s) {
    const int E = h->hp.n_embd, W = h->hp.width;
    for (int t0 = 0; t0 < T; t0 += HEAD_TOKEN_BLOCK) {
        int n = T - t0 < HEAD_TOKEN_BLOCK ? T - t0 : HEAD_TOKEN_BLOCK;
        layer_norm(hidden + (size_t)t0 * E, n, E, &h->hidden_norm, h->hp.norm_eps, s->xblk);
        linear(s->w.ex, s->xblk, n, &h->proj_memory.w, NULL, s->memory + (size_t)t0 * W);
    }
}

/* dst[E] = mean over the span of hidden_norm(hidden[t]). */
static void span_mean(const head_model *h, const float *hidden, head_span sp, head_scratch *s,
                      float *dst) {
    const int E = h->hp.n_embd;
    for (int i = 0; i < E; i++) s->acc[i] = 0.0;
    for (int t = sp.start; t < sp.end; t++) {
        layer_norm(hidden + (size_t)t * E, 1, E, &h->hidden_norm, h->hp.norm_eps, s->row);
        for (int i = 0; i < E; i++) s->acc[i] += s->row[i];
    }
    const double inv = 1.0 / (sp.end - sp.start);
    for (int i = 0; i < E; i++) dst[i] = (float)(s->acc[i] * inv);
}

/* dst[E] = mean of the LM-head rows of the span's token ids. */
static clef_status lexical_mean(const head_model *h, const head_rows *rows, const int32_t *ids,
                                head_span sp, head_scratch *s, float *dst, clef_error *err) {
    const int E = h->hp.n_embd;
    for (int i = 0; i < E; i++) s->acc[i] = 0.0;
    for (int t = sp.start; t < sp.end; t++) {
        clef_status st = head_rows_get(rows, ids[t], s->row, err);
        if (st) return st;
        for (int i = 0; i < E; i++) s->acc[i] += s->row[i];
    }
    const double inv = 1.0 / (sp.end - sp.start);
    for (int i = 0; i < E; i++) dst[i] = (float)(s->acc[i] * inv);
    return CLEF_OK;
}

/* Spans -> qv, ctxo, lex, g; then O = proj_oc(ctx) + proj_ol(lex) + proj_oq(qv). */
static clef_status pool_inputs(const head_model *h, const head_rows *rows, const float *hidden,
                               const int32_t *ids, int T, const head_question *qs, int nq,
                               head_scratch *s, clef_error *err) {
    const int E = h->hp.n_embd, W = h->hp.width;
    layer_norm(hidden + (size_t)(T - 1) * E, 1, E, &h->hidden_norm, h->hp.norm_eps, s->g);
    int o = 0;
    for (int q = 0; q < nq; q++) {
        span_mean(h, hidden, qs[q].span, s, s->qv + (size_t)q * E);
        for (int k = 0; k < qs[q].n_options; k++, o++) {
            span_mean(h, hidden, qs[q].options[k], s, s->ctxo + (size_t)o * E);
            clef_status st =
                lexical_mean(h, rows, ids, qs[q].options[k], s, s->lex + (size_t)o * E, err);
            if (st) return st;
        }
    }
    const int no = o;
    linear(s->w.ex, s->ctxo, no, &h->proj_option_context.w, NULL, s->opt);
    linear(s->w.ex, s->lex, no, &h->proj_option_lexical.w, NULL, s->attn);
    add_to(s->opt, s->attn, (size_t)no * W);
    linear(s->w.ex, s->qv, nq, &h->proj_option_question.w, NULL, s->attn);
    o = 0;
    for (int q = 0; q < nq; q++)
        for (int k = 0; k < qs[q].n_options; k++, o++)
            add_to(s->opt + (size_t)o * W, s->attn + (size_t)q * W, (size_t)W);
    return CLEF_OK;
}

/* R routing blocks: all options of all questions read the prompt together. */
static void route_options(const head_model *h, int T, int no, head_scratch *s) {
    const head_hparams *hp = &h->hp;
    const int W = hp->width;
    for (int il = 0; il < hp->n_routing; il++) {
        const head_layer *l = &h->layers[il];
        layer_norm(s->memory, T, W, &l->cross_norm_kv, hp->norm_eps, s->memn);
        /* w.norm is free here: mha does not touch it, ffn_residual refills it. */
        layer_norm(s->opt, no, W, &l->cross_norm, hp->norm_eps, s->w.norm);
        mha(&l->cross_attn, s->w.norm, no, s->memn, T, W, hp->n_head, &s->w, s->attn);
        add_to(s->opt, s->attn, (size_t)no * W);
        ffn_residual(l, s->opt, no, W, hp->n_ff, hp->norm_eps, &s->w);
    }
}

/* f_q = base_q + option_summary_norm(Σ_o softmax(O_o·base_q/√W) O_o)
 *       + proj_global(g) + type_embedding[t_q]. */
static void build_fields(const head_model *h, const head_question *qs, int nq, head_scratch *s) {
    const int W = h->hp.width;
    linear(s->w.ex, s->qv, nq, &h->proj_question.w, NULL, s->base);
    const float scale = 1.0f / sqrtf((float)W);
    int o0 = 0;
    for (int q = 0; q < nq; q++) {
        const int n = qs[q].n_options;
        const float *bq = s->base + (size_t)q * W;
        float mx = -INFINITY;
        for (int k = 0; k < n; k++) {
            s->w.p[k] = mm_dot(s->opt + (size_t)(o0 + k) * W, bq, W) * scale;
            if (s->w.p[k] > mx) mx = s->w.p[k];
        }
        double sum = 0.0;
        for (int k = 0; k < n; k++) sum += (s->w.p[k] = expf(s->w.p[k] - mx));
        float *summ = s->fld + (size_t)q * W;
        for (int i = 0; i < W; i++) summ[i] = 0.0f;
        for (int k = 0; k < n; k++) {
            const float wk = (float)(s->w.p[k] / sum);
            const float *ok = s->opt + (size_t)(o0 + k) * W;
            for (int i = 0; i < W; i++) summ[i] += wk * ok[i];
        }
        o0 += n;
    }
    layer_norm(s->fld, nq, W, &h->option_summary_norm, h->hp.norm_eps, s->fld);
    linear(s->w.ex, s->g, 1, &h->proj_global.w, NULL, s->sc);
    for (int q = 0; q < nq; q++) {
        float *f = s->fld + (size_t)q * W;
        add_to(f, s->base + (size_t)q * W, (size_t)W);
        add_to(f, s->sc, (size_t)W);
        add_to(f, h->type_embd + (size_t)qs[q].type_id * W, (size_t)W);
    }
}

/* L pre-norm decoder layers over the fields, then field_norm. */
static void decode_fields(const head_model *h, int T, int nq, head_scratch *s) {
    const head_hparams *hp = &h->hp;
    const int W = hp->width;
    float *normed = s->base; /* base is no longer needed after build_fields */
    for (int il = hp->n_routing; il < hp->n_routing + hp->n_decoder; il++) {
        const head_layer *l = &h->layers[il];
        layer_norm(s->fld, nq, W, &l->self_norm, hp->norm_eps, normed);
        mha(&l->self_attn, normed, nq, normed, nq, W, hp->n_head, &s->w, s->attn);
        add_to(s->fld, s->attn, (size_t)nq * W);
        layer_norm(s->fld, nq, W, &l->cross_norm, hp->norm_eps, normed);
        mha(&l->cross_attn, normed, nq, s->memory, T, W, hp->n_head, &s->w, s->attn);
        add_to(s->fld, s->attn, (size_t)nq * W);
        ffn_residual(l, s->fld, nq, W, hp->n_ff, hp->norm_eps, &s->w);
    }
    layer_norm(s->fld, nq, W, &h->field_norm, hp->norm_eps, s->fld);
}

/* ||v|| in double. */
static double norm2(const float *v, int n) {
    double s = 0.0;
    for (int i = 0; i < n; i++) s += (double)v[i] * v[i];
    return sqrt(s);
}

/* feat = [f, op, f⊙op, |f − op|], the scorer's input for one option. */
static void scorer_features(const float *f, const float *op, int W, float *feat) {
    for (int i = 0; i < W; i++) {
        feat[i] = f[i];
        feat[W + i] = op[i];
        feat[2 * W + i] = f[i] * op[i];
        feat[3 * W + i] = fabsf(f[i] - op[i]);
    }
}

/* logit = s_p·⟨l2(lex_o), l2(qv_q + g)⟩ + s_g·(s_j·cos(f_q, O'_o) + scorer(f_q, O'_o)).
 * The scorer's first product runs once over all options' features. */
static void option_logits(const head_model *h, const head_question *qs, int nq, head_scratch *s,
                          float *logits) {
    const int E = h->hp.n_embd, W = h->hp.width;
    const float s_p = h->scales[0], s_j = h->scales[1], s_g = h->scales[2];
    int o = 0;
    for (int q = 0; q < nq; q++) {
        /* anchor = l2(qv_q + g), l2 eps 1e-12 as the reference's normalize() */
        for (int i = 0; i < E; i++) s->row[i] = s->qv[(size_t)q * E + i] + s->g[i];
        const double an = fmax(norm2(s->row, E), 1e-12);
        const float *f = s->fld + (size_t)q * W;
        const double fn = norm2(f, W);
        for (int k = 0; k < qs[q].n_options; k++, o++) {
            const float *lex = s->lex + (size_t)o * E;
            double pd = 0.0;
            for (int i = 0; i < E; i++) pd += (double)lex[i] * s->row[i];
            const double prior = s_p * pd / (fmax(norm2(lex, E), 1e-12) * an);

            const float *op = s->opt + (size_t)o * W; /* already option_norm'ed */
            double cd = 0.0;
            for (int i = 0; i < W; i++) cd += (double)f[i] * op[i];
            const double cosine = cd / fmax(fn * norm2(op, W), 1e-8);
            s->part[o] = prior + (double)s_g * s_j * cosine;
            scorer_features(f, op, W, s->feat + (size_t)o * 4 * W);
        }
    }
    const int no = o;
    linear(s->w.ex, s->feat, no, &h->scorer.w, h->scorer_b, s->sc);
    for (o = 0; o < no; o++) {
        float *sc = s->sc + (size_t)o * W;
        for (int i = 0; i < W; i++) sc[i] = gelu(sc[i]);
        const double residual = mm_dot(sc, h->scorer_out, W) + h->scorer_out_b[0];
        logits[o] = (float)(s->part[o] + s_g * residual);
    }
}

clef_status head_score(const head_model *h, const head_rows *rows, const float *hidden,
                       const int32_t *ids, int T, const head_question *qs, int n_questions,
                       float *logits, clef_error *err) {
    return head_score_on(h, NULL, NULL, rows, hidden, ids, T, qs, n_questions, logits, err);
}

clef_status head_score_on(const head_model *h, tp_pool *pool, const cpu_target *cpu,
                          const head_rows *rows, const float *hidden, const int32_t *ids, int T,
                          const head_question *qs, int n_questions, float *logits,
                          clef_error *err) {
    if (rows->row_len != h->hp.n_embd)
        return clef_err_set(err, CLEF_ERR_INVALID_ARG, "decision head: LM-head rows have %lld "
                            "elements, the head reads %d", (long long)rows->row_len, h->hp.n_embd);
    clef_status st = check_request(rows, ids, T, qs, n_questions, err);
    if (st) return st;
    const head_hparams *hp = &h->hp;
    const int no = head_count_options(qs, n_questions);
    head_scratch s;
    float *arena =
        scratch_alloc(&s, T, hp->n_embd, hp->width, hp->n_ff, hp->n_head, n_questions, no);
    if (!arena)
        return clef_err_set(err, CLEF_ERR_NOMEM, "decision head: no memory for %d tokens", T);
    const cpu_target ref = {.path = CPU_PATH_REF};
    head_exec ex = {.pool = pool, .cpu = cpu ? cpu : &ref};
    ex.ws_thread = calloc((size_t)tp_size(pool), sizeof *ex.ws_thread);
    if (!ex.ws_thread) {
        free(arena);
        free(s.acc);
        return clef_err_set(err, CLEF_ERR_NOMEM, "decision head: no memory for %d tokens", T);
    }
    s.w.ex = &ex;

    build_memory(h, hidden, T, &s);
    st = pool_inputs(h, rows, hidden, ids, T, qs, n_questions, &s, err);
    if (st == CLEF_OK) {
        route_options(h, T, no, &s);
        build_fields(h, qs, n_questions, &s);
        decode_fields(h, T, n_questions, &s);
        layer_norm(s.opt, no, hp->width, &h->option_norm, hp->norm_eps, s.opt);
        option_logits(h, qs, n_questions, &s, logits);
    }
    mm_workspace_free(&ex.ws);
    for (int i = 0; i < tp_size(pool); i++) mm_workspace_free(&ex.ws_thread[i]);
    free(ex.ws_thread);
    free(arena);
    free(s.acc);
    return st;
}
