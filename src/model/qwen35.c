/*
 * model/qwen35.c — loading and running the Qwen3.5 hybrid backbone.
 *
 * The forward pass goes layer by layer over all tokens of the batch, and
 * inside a layer one chunk of tokens at a time: per chunk, the mixer
 * (DeltaNet or attention) then the FFN.  What a chunk needs from earlier
 * chunks of the same layer is small and kept in the run state: the last K−1
 * conv inputs, the delta-rule state S, and the layer's keys/values.  So the
 * scratch is [chunk]-sized except the residual stream x and K/V ([N] rows).
 *
 * A sequence may continue a saved state and save its own (qwen35_carry):
 * the projections and the FFN run over the whole chunk, the conv, the delta
 * rule and the attention per segment (one sequence's rows, cut at a save
 * point), which is where a past's conv rows, S and K/V are put in and a
 * save's are taken out.  K/V rows are laid out per sequence as past, then
 * new tokens, so attention reads a continued sequence as one.
 */
#include "model/qwen35.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/attention.h"
#include "kernels/gdn.h"
#include "kernels/ops.h"
#include "model/model.h"

/* ==== hyperparameters ===================================================== */

typedef struct hp_reader {
    const gguf_file *f;
    const char *arch;
    char key[160];
} hp_reader;

static const char *hp_key(hp_reader *r, const char *suffix) {
    snprintf(r->key, sizeof r->key, "%s.%s", r->arch, suffix);
    return r->key;
}

/* A positive integer key.  Per-layer arrays (some converters write
 * head_count_kv or feed_forward_length per layer) give their element `il`. */
static clef_status hp_int(hp_reader *r, const char *suffix, int il, bool required, int dflt,
                          int *out, clef_error *err) {
    const gguf_kv *kv = gguf_find_kv(r->f, hp_key(r, suffix));
    int64_t v;
    if (!kv) {
        if (required) return clef_err_set(err, CLEF_ERR_FORMAT, "metadata key '%s' missing", r->key);
        *out = dflt;
        return CLEF_OK;
    }
    bool ok = kv->type == GGUF_VT_ARRAY ? gguf_arr_i64(kv, (uint64_t)il, &v)
                                        : gguf_get_i64(r->f, r->key, &v);
    if (!ok || v < 0 || v > INT32_MAX)
        return clef_err_set(err, CLEF_ERR_FORMAT, "metadata key '%s': not a usable integer", r->key);
    *out = (int)v;
    return CLEF_OK;
}

static clef_status hp_float(hp_reader *r, const char *suffix, float *out, clef_error *err) {
    if (!gguf_get_f32(r->f, hp_key(r, suffix), out))
        return clef_err_set(err, CLEF_ERR_FORMAT, "metadata key '%s' missing or not a float", r->key);
    return CLEF_OK;
}

static clef_status hp_sections(hp_reader *r, int sections[4], clef_error *err) {
    const gguf_kv *kv = gguf_find_kv(r->f, hp_key(r, "rope.dimension_sections"));
    memset(sections, 0, 4 * sizeof *sections);
    if (!kv) return CLEF_OK;
    if (kv->type != GGUF_VT_ARRAY || kv->arr_n > 4)
        return clef_err_set(err, CLEF_ERR_FORMAT, "metadata key '%s': expected up to 4 integers", r->key);
    for (uint64_t i = 0; i < kv->arr_n; i++) {
        int64_t v;
        if (!gguf_arr_i64(kv, i, &v) || v < 0 || v > 4096)
            return clef_err_set(err, CLEF_ERR_FORMAT, "metadata key '%s': bad element %" PRIu64, r->key, i);
        sections[i] = (int)v;
    }
    return CLEF_OK;
}

/* Which layers are DeltaNet: `attention.recurrent_layers` (bool per layer)
 * when present, else every layer but each interval-th. */
static clef_status hp_recurrent(hp_reader *r, int n_layer, bool *rec, clef_error *err) {
    const gguf_kv *kv = gguf_find_kv(r->f, hp_key(r, "attention.recurrent_layers"));
    if (kv) {
        if (kv->type != GGUF_VT_ARRAY || kv->arr_n < (uint64_t)n_layer)
            return clef_err_set(err, CLEF_ERR_FORMAT, "metadata key '%s': expected %d flags", r->key, n_layer);
        for (int il = 0; il < n_layer; il++) {
            int64_t v;
            if (kv->arr_type == GGUF_VT_BOOL) v = kv->data[il];
            else if (!gguf_arr_i64(kv, (uint64_t)il, &v))
                return clef_err_set(err, CLEF_ERR_FORMAT, "metadata key '%s': bad element %d", r->key, il);
            rec[il] = v != 0;
        }
        return CLEF_OK;
    }
    int interval;
    clef_status st = hp_int(r, "full_attention_interval", 0, false, 4, &interval, err);
    if (st != CLEF_OK) return st;
    if (interval < 1) return clef_err_set(err, CLEF_ERR_FORMAT, "metadata key '%s' must be >= 1", r->key);
    for (int il = 0; il < n_layer; il++) rec[il] = (il + 1) % interval != 0;
    return CLEF_OK;
}

/* First attention layer (per-layer head counts are read there), or 0. */
static int first_attention_layer(const bool *rec, int n_layer) {
    for (int il = 0; il < n_layer; il++)
        if (!rec[il]) return il;
    return 0;
}

static clef_status check(bool ok, clef_error *err, const char *what) {
    return ok ? CLEF_OK : clef_err_set(err, CLEF_ERR_UNSUPPORTED, "unsupported hyperparameters: %s", what);
}

static clef_status validate_config(const qwen35_config *c, clef_error *err) {
    clef_status st = CLEF_OK;
    if (st == CLEF_OK) st = check(c->n_embd > 0 && c->n_layer > 0 && c->n_ff > 0, err, "empty model");
    if (st == CLEF_OK) st = check(c->n_head > 0 && c->n_head_kv > 0 && c->n_head % c->n_head_kv == 0,
                                  err, "head_count must be a multiple of head_count_kv");
    if (st == CLEF_OK) st = check(c->head_dim > 0 && c->head_dim <= ATTN_MAX_HEAD_DIM, err, "key_length");
    if (st == CLEF_OK) st = check(c->n_rot >= 0 && c->n_rot % 2 == 0 && c->n_rot <= c->head_dim &&
                                  c->n_rot <= OP_ROPE_MAX_DIMS, err, "rope.dimension_count");
    if (st == CLEF_OK) st = check(c->conv_kernel >= 1 && c->conv_kernel <= 64, err, "ssm.conv_kernel");
    if (st == CLEF_OK) st = check(c->ssm_n_k_head > 0 && c->ssm_n_v_head > 0 &&
                                  c->ssm_n_v_head % c->ssm_n_k_head == 0,
                                  err, "ssm.time_step_rank must be a multiple of ssm.group_count");
    if (st == CLEF_OK) st = check(c->ssm_k_dim > 0 && c->ssm_k_dim <= GDN_MAX_HEAD_DIM &&
                                  c->ssm_v_dim > 0 && c->ssm_v_dim <= GDN_MAX_HEAD_DIM,
                                  err, "ssm.state_size / ssm.inner_size");
    return st;
}

static clef_status load_config(const gguf_file *f, const char *arch, qwen35_config *c, bool **rec,
                               clef_error *err) {
    hp_reader r = {.f = f, .arch = arch};
    int blocks, nextn, key_len, val_len, inner;
    clef_status st = CLEF_OK;
    memset(c, 0, sizeof *c);
    *rec = NULL;
    if (st == CLEF_OK) st = hp_int(&r, "embedding_length", 0, true, 0, &c->n_embd, err);
    if (st == CLEF_OK) st = hp_int(&r, "block_count", 0, true, 0, &blocks, err);
    if (st == CLEF_OK) st = hp_int(&r, "nextn_predict_layers", 0, false, 0, &nextn, err);
    if (st == CLEF_OK) st = hp_int(&r, "context_length", 0, true, 0, &c->n_ctx, err);
    if (st == CLEF_OK) st = hp_float(&r, "attention.layer_norm_rms_epsilon", &c->rms_eps, err);
    if (st == CLEF_OK) st = hp_float(&r, "rope.freq_base", &c->rope_base, err);
    if (st == CLEF_OK) st = hp_sections(&r, c->rope_sections, err);
    if (st != CLEF_OK) return st;
    if (nextn >= blocks)
        return clef_err_set(err, CLEF_ERR_FORMAT, "%s.nextn_predict_layers (%d) leaves no trunk of %d blocks",
                            arch, nextn, blocks);
    c->n_layer = blocks - nextn;
    *rec = calloc((size_t)c->n_layer, sizeof **rec);
    if (!*rec) return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory");
    st = hp_recurrent(&r, c->n_layer, *rec, err);
    int la = first_attention_layer(*rec, c->n_layer);
    if (st == CLEF_OK) st = hp_int(&r, "feed_forward_length", 0, true, 0, &c->n_ff, err);
    if (st == CLEF_OK) st = hp_int(&r, "attention.head_count", la, true, 0, &c->n_head, err);
    if (st == CLEF_OK) st = hp_int(&r, "attention.head_count_kv", la, true, 0, &c->n_head_kv, err);
    if (st == CLEF_OK) st = hp_int(&r, "attention.key_length", 0, true, 0, &key_len, err);
    if (st == CLEF_OK) st = hp_int(&r, "attention.value_length", 0, false, key_len, &val_len, err);
    if (st == CLEF_OK) st = hp_int(&r, "rope.dimension_count", 0, true, 0, &c->n_rot, err);
    if (st == CLEF_OK) st = hp_int(&r, "ssm.conv_kernel", 0, true, 0, &c->conv_kernel, err);
    if (st == CLEF_OK) st = hp_int(&r, "ssm.state_size", 0, true, 0, &c->ssm_k_dim, err);
    if (st == CLEF_OK) st = hp_int(&r, "ssm.group_count", 0, true, 0, &c->ssm_n_k_head, err);
    if (st == CLEF_OK) st = hp_int(&r, "ssm.time_step_rank", 0, true, 0, &c->ssm_n_v_head, err);
    if (st == CLEF_OK) st = hp_int(&r, "ssm.inner_size", 0, true, 0, &inner, err);
    if (st != CLEF_OK) return st;
    if (key_len != val_len)
        return clef_err_set(err, CLEF_ERR_UNSUPPORTED, "%s.attention.key_length %d != value_length %d",
                            arch, key_len, val_len);
    c->head_dim = key_len;
    if (c->ssm_n_v_head == 0 || inner % c->ssm_n_v_head)
        return clef_err_set(err, CLEF_ERR_FORMAT, "%s.ssm.inner_size %d is not a multiple of time_step_rank %d",
                            arch, inner, c->ssm_n_v_head);
    c->ssm_v_dim = inner / c->ssm_n_v_head;
    c->conv_dim = 2 * c->ssm_n_k_head * c->ssm_k_dim + c->ssm_n_v_head * c->ssm_v_dim;
    return validate_config(c, err);
}

/* ==== tensors ================================================================ */

typedef struct loader {
    clef_model *owner;
    int il;
    char name[96];
} loader;

static const char *blk(loader *L, const char *suffix) {
    snprintf(L->name, sizeof L->name, "blk.%d.%s", L->il, suffix);
    return L->name;
}

static clef_status load_recurrent(loader *L, const qwen35_config *c, qwen35_layer *l, clef_error *err) {
    const int64_t E = c->n_embd, Hv = c->ssm_n_v_head, vdim = (int64_t)Hv * c->ssm_v_dim;
    const int64_t conv_ne[2] = {c->conv_kernel, c->conv_dim};
    clef_model *m = L->owner;
    clef_status st = CLEF_OK;
    if (st == CLEF_OK) st = model_matrix(m, blk(L, "attn_qkv.weight"), E, c->conv_dim, &l->attn_qkv, err);
    if (st == CLEF_OK) st = model_matrix(m, blk(L, "attn_gate.weight"), E, vdim, &l->attn_gate, err);
    if (st == CLEF_OK) st = model_matrix(m, blk(L, "ssm_beta.weight"), E, Hv, &l->ssm_beta, err);
    if (st == CLEF_OK) st = model_matrix(m, blk(L, "ssm_alpha.weight"), E, Hv, &l->ssm_alpha, err);
    if (st == CLEF_OK) st = model_tensor_f32(m, blk(L, "ssm_conv1d.weight"), 2, conv_ne, &l->ssm_conv1d, err);
    if (st == CLEF_OK) st = model_vector(m, blk(L, "ssm_dt.bias"), Hv, &l->ssm_dt_bias, err);
    if (st == CLEF_OK) st = model_vector(m, blk(L, "ssm_a"), Hv, &l->ssm_a, err);
    if (st == CLEF_OK) st = model_vector(m, blk(L, "ssm_norm.weight"), c->ssm_v_dim, &l->ssm_norm, err);
    if (st == CLEF_OK) st = model_matrix(m, blk(L, "ssm_out.weight"), vdim, E, &l->ssm_out, err);
    return st;
}

static clef_status load_attention(loader *L, const qwen35_config *c, qwen35_layer *l, clef_error *err) {
    const int64_t E = c->n_embd, D = c->head_dim;
    const int64_t qdim = (int64_t)c->n_head * D, kvdim = (int64_t)c->n_head_kv * D;
    clef_model *m = L->owner;
    clef_status st = CLEF_OK;
    if (st == CLEF_OK) st = model_matrix(m, blk(L, "attn_q.weight"), E, 2 * qdim, &l->attn_q, err);
    if (st == CLEF_OK) st = model_matrix(m, blk(L, "attn_k.weight"), E, kvdim, &l->attn_k, err);
    if (st == CLEF_OK) st = model_matrix(m, blk(L, "attn_v.weight"), E, kvdim, &l->attn_v, err);
    if (st == CLEF_OK) st = model_matrix(m, blk(L, "attn_output.weight"), qdim, E, &l->attn_output, err);
    if (st == CLEF_OK) st = model_vector(m, blk(L, "attn_q_norm.weight"), D, &l->attn_q_norm, err);
    if (st == CLEF_OK) st = model_vector(m, blk(L, "attn_k_norm.weight"), D, &l->attn_k_norm, err);
    return st;
}

static clef_status load_layer(loader *L, const qwen35_config *c, qwen35_layer *l, clef_error *err) {
    const int64_t E = c->n_embd, F = c->n_ff;
    clef_model *m = L->owner;
    clef_status st = CLEF_OK;
    if (st == CLEF_OK) st = model_vector(m, blk(L, "attn_norm.weight"), E, &l->attn_norm, err);
    if (st == CLEF_OK) st = model_vector(m, blk(L, "post_attention_norm.weight"), E, &l->post_attention_norm, err);
    if (st == CLEF_OK) st = l->recurrent ? load_recurrent(L, c, l, err) : load_attention(L, c, l, err);
    if (st == CLEF_OK) st = model_matrix(m, blk(L, "ffn_gate.weight"), E, F, &l->ffn_gate, err);
    if (st == CLEF_OK) st = model_matrix(m, blk(L, "ffn_up.weight"), E, F, &l->ffn_up, err);
    if (st == CLEF_OK) st = model_matrix(m, blk(L, "ffn_down.weight"), F, E, &l->ffn_down, err);
    return st;
}

static clef_status load_globals(clef_model *owner, qwen35_model *m, clef_error *err) {
    qwen35_config *c = &m->cfg;
    const gguf_tensor *te = model_find(owner, "token_embd.weight");
    if (!te) return clef_err_set(err, CLEF_ERR_FORMAT, "tensor 'token_embd.weight' not found");
    if (te->n_dims != 2 || te->ne[1] < 1 || te->ne[1] > INT32_MAX)
        return clef_err_set(err, CLEF_ERR_FORMAT, "tensor 'token_embd.weight': expected [%d, n_vocab]", c->n_embd);
    c->n_vocab = (int)te->ne[1];
    clef_status st = model_matrix(owner, "token_embd.weight", c->n_embd, c->n_vocab, &m->token_embd, err);
    if (st == CLEF_OK) st = model_vector(owner, "output_norm.weight", c->n_embd, &m->output_norm, err);
    if (st != CLEF_OK) return st;
    m->output_tied = model_find(owner, "output.weight") == NULL;
    if (m->output_tied) {
        m->output = m->token_embd;
        return CLEF_OK;
    }
    return model_matrix(owner, "output.weight", c->n_embd, c->n_vocab, &m->output, err);
}

/* The layer matrices, for the model's summary. */
static int layer_matrices(const qwen35_layer *l, const mm_weight **out) {
    const mm_weight *rec[] = {&l->attn_qkv, &l->attn_gate, &l->ssm_beta, &l->ssm_alpha, &l->ssm_out},
                    *att[] = {&l->attn_q, &l->attn_k, &l->attn_v, &l->attn_output},
                    *ffn[] = {&l->ffn_gate, &l->ffn_up, &l->ffn_down};
    int n = 0;
    if (l->recurrent)
        for (size_t i = 0; i < 5; i++) out[n++] = rec[i];
    else
        for (size_t i = 0; i < 4; i++) out[n++] = att[i];
    for (size_t i = 0; i < 3; i++) out[n++] = ffn[i];
    return n;
}

/* weight_type: the layer matrices' types, most bytes first ("Q4_K+Q6_K"). */
static void summarize_matrices(qwen35_model *m) {
    uint64_t bytes[CLEF_DTYPE_COUNT] = {0};
    for (int il = 0; il < m->cfg.n_layer; il++) {
        const mm_weight *ws[8];
        int n = layer_matrices(&m->layers[il], ws);
        for (int i = 0; i < n; i++) {
            bytes[ws[i]->type] += (uint64_t)ws[i]->row_bytes * (uint64_t)ws[i]->out;
            m->matrix_bytes += (uint64_t)ws[i]->row_bytes * (uint64_t)ws[i]->out;
            m->matrix_params += (uint64_t)ws[i]->in * (uint64_t)ws[i]->out;
        }
    }
    m->weight_type[0] = '\0';
    for (;;) {
        int best = -1;
        for (int t = 0; t < CLEF_DTYPE_COUNT; t++)
            if (bytes[t] && (best < 0 || bytes[t] > bytes[best])) best = t;
        if (best < 0) break;
        size_t used = strlen(m->weight_type);
        snprintf(m->weight_type + used, sizeof m->weight_type - used, "%s%s", used ? "+" : "",
                 clef_dtype_get((uint32_t)best)->name);
        bytes[best] = 0;
    }
}

clef_status qwen35_load(clef_model *owner, const char *arch, qwen35_model *out, clef_error *err) {
    memset(out, 0, sizeof *out);
    bool *rec = NULL;
    clef_status st = load_config(model_gguf(owner), arch, &out->cfg, &rec, err);
    if (st == CLEF_OK) st = load_globals(owner, out, err);
    if (st == CLEF_OK) {
        out->layers = calloc((size_t)out->cfg.n_layer, sizeof *out->layers);
        if (!out->layers) st = clef_err_set(err, CLEF_ERR_NOMEM, "out of memory");
    }
    loader L = {.owner = owner};
    for (int il = 0; st == CLEF_OK && il < out->cfg.n_layer; il++) {
        L.il = il;
        out->layers[il].recurrent = rec[il];
        st = load_layer(&L, &out->cfg, &out->layers[il], err);
    }
    free(rec);
    if (st == CLEF_OK) {
        cpu_features f;
        cpu_detect(&f);
        st = cpu_choose(getenv("CLEF_CPU"), &f, &out->cpu, err);
    }
    if (st == CLEF_OK) summarize_matrices(out);
    if (st != CLEF_OK) qwen35_free(out);
    return st;
}

void qwen35_free(qwen35_model *m) {
    free(m->layers);
    m->layers = NULL;
}

/* ==== states ================================================================= */

/* Floats of one layer's state for n tokens. */
static size_t layer_state_floats(const qwen35_config *c, bool recurrent, int64_t n) {
    if (recurrent)
        return (size_t)(c->conv_kernel - 1) * (size_t)c->conv_dim +
               (size_t)c->ssm_n_v_head * (size_t)c->ssm_k_dim * (size_t)c->ssm_v_dim;
    return 2 * (size_t)n * (size_t)c->n_head_kv * (size_t)c->head_dim;
}

static size_t state_floats(const qwen35_model *m, int64_t n) {
    size_t total = 0;
    for (int il = 0; il < m->cfg.n_layer; il++)
        total += layer_state_floats(&m->cfg, m->layers[il].recurrent, n);
    return total;
}

size_t qwen35_state_bytes(const qwen35_model *m, int64_t n) {
    return sizeof(qwen35_state) + (size_t)m->cfg.n_layer * sizeof(qwen35_layer_state) +
           state_floats(m, n) * sizeof(float);
}

clef_status qwen35_state_new(const qwen35_model *m, int64_t n, qwen35_state **out,
                             clef_error *err) {
    const qwen35_config *c = &m->cfg;
    *out = NULL;
    if (n < 1 || n > c->n_ctx)
        return clef_err_set(err, CLEF_ERR_INVALID_ARG, "backbone state: %" PRId64
                            " tokens is outside 1..%d", n, c->n_ctx);
    size_t nf = state_floats(m, n);
    qwen35_state *s = calloc(1, sizeof *s);
    if (s) s->layers = calloc((size_t)c->n_layer, sizeof *s->layers);
    if (s && s->layers) s->data = calloc(nf, sizeof *s->data);
    if (!s || !s->layers || !s->data) {
        qwen35_state_free(s);
        return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory for the backbone state of %"
                            PRId64 " tokens", n);
    }
    s->n = n;
    s->n_layer = c->n_layer;
    s->bytes = qwen35_state_bytes(m, n);
    const size_t conv = (size_t)(c->conv_kernel - 1) * (size_t)c->conv_dim;
    const size_t kv = (size_t)n * (size_t)c->n_head_kv * (size_t)c->head_dim;
    float *p = s->data;
    for (int il = 0; il < c->n_layer; il++) {
        qwen35_layer_state *ls = &s->layers[il];
        if (m->layers[il].recurrent) {
            ls->conv = p;
            ls->S = p + conv;
        } else {
            ls->k = p;
            ls->v = p + kv;
        }
        p += layer_state_floats(c, m->layers[il].recurrent, n);
    }
    *out = s;
    return CLEF_OK;
}

void qwen35_state_free(qwen35_state *s) {
    if (!s) return;
    free(s->data);
    free(s->layers);
    free(s);
}

/* ==== forward ================================================================ */

/* A run of one sequence's tokens inside a chunk: the recurrences and the
 * attention are called per segment, so each sequence starts from its own
 * past and a save point ends a segment. */
typedef struct run_seg {
    int s;              /* sequence                                            */
    int64_t t0, T;      /* chunk rows [t0, t0+T)                               */
    bool starts;        /* the sequence's first token of this call             */
    bool saves;         /* ends right after the sequence's save point          */
} run_seg;

/* Scratch for one call, sized by N (all tokens) and C (tokens per chunk). */
typedef struct qwen35_run {
    int64_t N, C;           /* C: rows per chunk (scratch), min(grid, N)          */
    int64_t grid;           /* sequences are cut where position % grid == 0       */
    const cpu_target *cpu;  /* the model's kernels                              */
    mm_workspace ws;        /* the fast matmuls' scratch, grown on first use    */
    qwen35_stats *st;       /* NULL, or where timings are added                 */
    int n_seq;
    const qwen35_seq *seqs;
    const qwen35_carry *carry; /* [n_seq] or NULL                              */
    int64_t *x0;        /* [n_seq] first row of sequence s in x                */
    int64_t *k0;        /* [n_seq] first row of sequence s in k/v (past first) */
    run_seg *seg;       /* [2·n_seq] the current chunk's segments              */
    int n_segs;
    int32_t *pos;       /* [N] position of each token in its own sequence      */
    float *x;           /* [N][E] residual stream                              */
    float *h;           /* [C][E] normed input of the current sublayer         */
    float *mix;         /* [C][E] sublayer output before the residual add      */
    float *o;           /* [C][max(Hv·Dv, H·D)] mixer output before Wout       */
    /* Gated DeltaNet */
    float *hist;        /* [K−1+C][conv_dim] conv inputs with K−1 rows of history */
    float *conv;        /* [C][conv_dim] silu(conv): q | k | v                 */
    float *z;           /* [C][Hv·Dv] output gate                              */
    float *beta;        /* [C][Hv]                                             */
    float *gdecay;      /* [C][Hv] log decay g                                 */
    float *S;           /* [Hv][Dk][Dv] state of the sequence being read       */
    /* gated attention */
    float *qg;          /* [C][H][2D] query | gate per head                    */
    float *q;           /* [C][H][D]                                           */
    float *kc, *vc;     /* [C][Hkv][D] the chunk's keys and values             */
    float *k, *v;       /* [Σ past+n][Hkv][D] the current layer's keys and values */
    /* FFN */
    float *ff_gate;     /* [C][F]                                              */
    float *ff_up;       /* [C][F]                                              */
} qwen35_run;

static const qwen35_state *run_past(const qwen35_run *r, int s) {
    return r->carry ? r->carry[s].past : NULL;
}

static qwen35_state *run_save(const qwen35_run *r, int s) {
    return r->carry ? r->carry[s].save : NULL;
}

static int64_t past_n(const qwen35_run *r, int s) {
    const qwen35_state *p = run_past(r, s);
    return p ? p->n : 0;
}

static void run_free(qwen35_run *r) {
    float **bufs[] = {&r->x, &r->h, &r->mix, &r->o, &r->hist, &r->conv, &r->z, &r->beta,
                      &r->gdecay, &r->S, &r->qg, &r->q, &r->kc, &r->vc, &r->k, &r->v,
                      &r->ff_gate, &r->ff_up};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        free(*bufs[i]);
        *bufs[i] = NULL;
    }
    mm_workspace_free(&r->ws);
    free(r->pos);
    free(r->x0);
    free(r->k0);
    free(r->seg);
    r->pos = NULL;
    r->x0 = r->k0 = NULL;
    r->seg = NULL;
}

static float *alloc_f(int64_t a, int64_t b, bool *ok) {
    float *p = calloc((size_t)a * (size_t)b, sizeof *p);
    if (!p) *ok = false;
    return p;
}

/* NK: rows of k/v, every sequence's past and new tokens. */
static clef_status run_alloc(qwen35_run *r, const qwen35_config *c, int n_seq, int64_t N,
                             int64_t NK, int64_t C, clef_error *err) {
    const int64_t Hv = c->ssm_n_v_head, vdim = Hv * c->ssm_v_dim;
    const int64_t qdim = (int64_t)c->n_head * c->head_dim, kvdim = (int64_t)c->n_head_kv * c->head_dim;
    bool ok = true;
    memset(r, 0, sizeof *r);
    r->N = N;
    r->C = C;
    r->pos = calloc((size_t)N, sizeof *r->pos);
    r->x0 = calloc((size_t)n_seq, sizeof *r->x0);
    r->k0 = calloc((size_t)n_seq, sizeof *r->k0);
    r->seg = calloc(2 * (size_t)n_seq, sizeof *r->seg);
    ok = r->pos && r->x0 && r->k0 && r->seg;
    r->x = alloc_f(N, c->n_embd, &ok);
    r->h = alloc_f(C, c->n_embd, &ok);
    r->mix = alloc_f(C, c->n_embd, &ok);
    r->o = alloc_f(C, vdim > qdim ? vdim : qdim, &ok);
    r->hist = alloc_f(c->conv_kernel - 1 + C, c->conv_dim, &ok);
    r->conv = alloc_f(C, c->conv_dim, &ok);
    r->z = alloc_f(C, vdim, &ok);
    r->beta = alloc_f(C, Hv, &ok);
    r->gdecay = alloc_f(C, Hv, &ok);
    r->S = alloc_f(Hv * c->ssm_k_dim, c->ssm_v_dim, &ok);
    r->qg = alloc_f(C, 2 * qdim, &ok);
    r->q = alloc_f(C, qdim, &ok);
    r->kc = alloc_f(C, kvdim, &ok);
    r->vc = alloc_f(C, kvdim, &ok);
    r->k = alloc_f(NK, kvdim, &ok);
    r->v = alloc_f(NK, kvdim, &ok);
    r->ff_gate = alloc_f(C, c->n_ff, &ok);
    r->ff_up = alloc_f(C, c->n_ff, &ok);
    if (!ok) {
        run_free(r);
        return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory for the scratch of %" PRId64 " tokens", N);
    }
    return CLEF_OK;
}

/* Cut chunk rows [c0, c0+T) into r->seg: one segment per sequence, two when
 * a sequence's save point falls inside. */
static void run_segments(qwen35_run *r, int64_t c0, int64_t T) {
    int s = 0;
    while (r->x0[s] + r->seqs[s].n <= c0) s++;
    r->n_segs = 0;
    for (int64_t g = c0; g < c0 + T;) {
        int64_t end = r->x0[s] + r->seqs[s].n, cut = end < c0 + T ? end : c0 + T;
        const qwen35_state *save = run_save(r, s);
        int64_t at = save ? r->x0[s] + save->n - past_n(r, s) : -1; /* first row after it */
        if (at > g && at < cut) cut = at;
        r->seg[r->n_segs++] = (run_seg){.s = s, .t0 = g - c0, .T = cut - g,
                                        .starts = g == r->x0[s], .saves = cut == at};
        g = cut;
        if (g == end) s++;
    }
}

static void add_rows(float *x, const float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] += y[i];
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Timings only when asked for (two clock reads per kernel call). */
static double stage_begin(const qwen35_run *r) { return r->st ? now_s() : 0.0; }

static void stage_end(const qwen35_run *r, double t0, double *stage) {
    if (r->st) *stage += now_s() - t0;
}

/* y = x·Wᵀ on the model's kernels. */
static void run_mm(qwen35_run *r, tp_pool *pool, const mm_weight *w, const float *x, float *y,
                   int64_t T) {
    double t0 = stage_begin(r);
    mm_matmul_ex(r->cpu, pool, w, x, y, T, &r->ws);
    stage_end(r, t0, r->st ? &r->st->matmul_s : NULL);
    if (r->st) r->st->matmul_flop += 2.0 * (double)w->in * (double)w->out * (double)T;
}

/* Conv inputs of the K−1 positions before the row after hist row `row`
 * (hist rows row+1 .. row+K−1) into dst [K−1][cd], zero for positions < 0;
 * `next` is the position after them. */
static void conv_tail_save(const float *hist, int64_t row, int64_t cd, int K, int64_t next,
                           float *dst) {
    for (int j = 0; j < K - 1; j++) {
        float *d = dst + (int64_t)j * cd;
        if (next - (K - 1) + j < 0) memset(d, 0, (size_t)cd * sizeof *d);
        else memcpy(d, hist + (row + 1 + j) * cd, (size_t)cd * sizeof *d);
    }
}

/* Conv + SiLU of one segment.  A continued sequence's first segment reads its
 * past's K−1 inputs, written over the rows before it: earlier segments have
 * been convolved already. */
static void deltanet_conv_segment(const qwen35_config *c, const qwen35_layer *l, qwen35_run *r,
                                  tp_pool *pool, int il, int64_t c0, const run_seg *sg) {
    const int K = c->conv_kernel;
    const int64_t cd = c->conv_dim;
    const qwen35_state *past = run_past(r, sg->s);
    if (sg->starts && past && K > 1)
        memcpy(r->hist + sg->t0 * cd, past->layers[il].conv, (size_t)(K - 1) * (size_t)cd * sizeof *r->hist);
    double t0 = stage_begin(r);
    gdn_conv1d_silu_ex(r->cpu->path, pool, r->hist + sg->t0 * cd, l->ssm_conv1d, r->pos + c0 + sg->t0,
                       sg->T, cd, K, r->conv + sg->t0 * cd);
    stage_end(r, t0, r->st ? &r->st->delta_s : NULL);
    if (sg->saves && K > 1) {
        const qwen35_state *save = run_save(r, sg->s);
        conv_tail_save(r->hist, sg->t0 + sg->T - 1, cd, K, save->n, save->layers[il].conv);
    }
}

/* Gated delta rule of one segment; the state S carries across chunks. */
static void deltanet_rule_segment(const qwen35_config *c, qwen35_run *r, tp_pool *pool, int il,
                                  int64_t c0, const run_seg *sg) {
    const int Hk = c->ssm_n_k_head, Hv = c->ssm_n_v_head, Dk = c->ssm_k_dim, Dv = c->ssm_v_dim;
    const int64_t cd = c->conv_dim;
    const size_t s_bytes = (size_t)Hv * (size_t)Dk * (size_t)Dv * sizeof *r->S;
    const qwen35_state *past = run_past(r, sg->s);
    if (sg->starts && past) memcpy(r->S, past->layers[il].S, s_bytes);
    const float *q = r->conv + sg->t0 * cd;
    const float *k = q + (int64_t)Hk * Dk, *v = q + 2 * (int64_t)Hk * Dk;
    double t0 = stage_begin(r);
    gdn_delta_rule_ex(r->cpu, pool, q, k, v, cd, r->gdecay + sg->t0 * Hv, r->beta + sg->t0 * Hv,
                      r->pos + c0 + sg->t0, sg->T, Hk, Hv, Dk, Dv, r->S, r->o + sg->t0 * Hv * Dv);
    stage_end(r, t0, r->st ? &r->st->delta_s : NULL);
    if (r->st) r->st->delta_flop += 7.0 * Dk * Dv * Hv * (double)sg->T;
    if (sg->saves) memcpy(run_save(r, sg->s)->layers[il].S, r->S, s_bytes);
}

/* Gated DeltaNet mixer on tokens [c0, c0+T): reads r->h, writes r->mix. */
static void deltanet_chunk(const qwen35_config *c, const qwen35_layer *l, qwen35_run *r,
                           tp_pool *pool, int il, int64_t c0, int64_t T) {
    const int K = c->conv_kernel, Hk = c->ssm_n_k_head, Hv = c->ssm_n_v_head;
    const int Dk = c->ssm_k_dim, Dv = c->ssm_v_dim;
    const int64_t cd = c->conv_dim;
    const cpu_path path = r->cpu->path;
    float *qkv = r->hist + (int64_t)(K - 1) * cd; /* this chunk's conv inputs */

    /* 1. projections: qkv, z, β = sigmoid(h·Wβ), g = softplus(h·Wα + dt_bias)·a */
    run_mm(r, pool, &l->attn_qkv, r->h, qkv, T);
    run_mm(r, pool, &l->attn_gate, r->h, r->z, T);
    run_mm(r, pool, &l->ssm_beta, r->h, r->beta, T);
    op_sigmoid_ex(path, pool, r->beta, T * Hv);
    run_mm(r, pool, &l->ssm_alpha, r->h, r->gdecay, T);
    for (int64_t t = 0; t < T; t++)
        for (int h = 0; h < Hv; h++) {
            float *g = &r->gdecay[t * Hv + h];
            *g = op_softplus1(*g + l->ssm_dt_bias[h]) * l->ssm_a[h];
        }

    /* 2. causal depthwise conv + SiLU; keep the last K−1 inputs for the next chunk */
    for (int i = 0; i < r->n_segs; i++) deltanet_conv_segment(c, l, r, pool, il, c0, &r->seg[i]);
    gdn_conv_shift(r->hist, T, cd, K);

    /* 3. q, k L2-normalised per head */
    op_l2norm_groups_ex(path, pool, r->conv, Dk, 2 * Hk, T, cd, c->rms_eps);

    /* 4. gated delta rule */
    for (int i = 0; i < r->n_segs; i++) deltanet_rule_segment(c, r, pool, il, c0, &r->seg[i]);

    /* 5. y_h = rms(o_h, ssm_norm)·silu(z_h);  mix = y·Wout */
    op_rmsnorm_ex(path, pool, r->o, r->o, l->ssm_norm, Dv, T * Hv, c->rms_eps);
    op_mul_silu_ex(path, pool, r->o, r->z, T * Hv * Dv);
    run_mm(r, pool, &l->ssm_out, r->o, r->mix, T);
}

/* Row of k/v holding chunk row t0 of segment sg. */
static int64_t kv_row(const qwen35_run *r, int64_t c0, const run_seg *sg) {
    return r->k0[sg->s] + past_n(r, sg->s) + (c0 + sg->t0 - r->x0[sg->s]);
}

/* Gated attention mixer on tokens [c0, c0+T): reads r->h, writes r->mix. */
static void attention_chunk(const qwen35_config *c, const qwen35_layer *l, qwen35_run *r,
                            tp_pool *pool, int64_t c0, int64_t T) {
    const int H = c->n_head, Hkv = c->n_head_kv, D = c->head_dim;
    const int64_t kvdim = (int64_t)Hkv * D;
    const int32_t *pos = r->pos + c0;
    const cpu_path path = r->cpu->path;

    /* 1. qg = h·Wq viewed [T][H][2D]: query = first D of each head, gate = next D */
    run_mm(r, pool, &l->attn_q, r->h, r->qg, T);
    for (int64_t t = 0; t < T; t++)
        for (int hh = 0; hh < H; hh++)
            memcpy(r->q + (t * H + hh) * D, r->qg + (t * H + hh) * 2 * D, (size_t)D * sizeof *r->q);

    /* 2. q, k RMS-normed per head */
    op_rmsnorm_ex(path, pool, r->q, r->q, l->attn_q_norm, D, T * H, c->rms_eps);
    run_mm(r, pool, &l->attn_k, r->h, r->kc, T);
    op_rmsnorm_ex(path, pool, r->kc, r->kc, l->attn_k_norm, D, T * Hkv, c->rms_eps);
    run_mm(r, pool, &l->attn_v, r->h, r->vc, T);

    /* 3. rotary on the first n_rot dims; k, v join their sequences' rows */
    op_rope_neox(r->q, T, H, D, c->n_rot, pos, c->rope_base, c->rope_sections);
    op_rope_neox(r->kc, T, Hkv, D, c->n_rot, pos, c->rope_base, c->rope_sections);
    for (int i = 0; i < r->n_segs; i++) {
        const run_seg *sg = &r->seg[i];
        size_t bytes = (size_t)(sg->T * kvdim) * sizeof *r->k;
        memcpy(r->k + kv_row(r, c0, sg) * kvdim, r->kc + sg->t0 * kvdim, bytes);
        memcpy(r->v + kv_row(r, c0, sg) * kvdim, r->vc + sg->t0 * kvdim, bytes);
    }

    /* 4. causal softmax attention, scale 1/sqrt(D), each segment over its sequence */
    for (int i = 0; i < r->n_segs; i++) {
        const run_seg *sg = &r->seg[i];
        double t0 = stage_begin(r);
        attn_causal_ex(r->cpu, pool, r->q + sg->t0 * H * D, r->k, r->v, pos + sg->t0,
                       kv_row(r, c0, sg), sg->T, H, Hkv, D, 1.0f / sqrtf((float)D),
                       r->o + sg->t0 * H * D);
        stage_end(r, t0, r->st ? &r->st->attention_s : NULL);
        if (r->st)
            for (int64_t t = 0; t < sg->T; t++)
                r->st->attention_flop += 4.0 * D * H * (double)(pos[sg->t0 + t] + 1);
    }

    /* 5. mix = (attn ⊙ sigmoid(gate))·Wo */
    op_mul_sigmoid_rows_ex(path, pool, r->o, D, r->qg + D, 2 * D, D, T * H);
    run_mm(r, pool, &l->attn_output, r->o, r->mix, T);
}

/* An attention layer's past keys/values in (before) or saved ones out (after). */
static void attention_carry(const qwen35_config *c, qwen35_run *r, int il, bool before) {
    const int64_t kvdim = (int64_t)c->n_head_kv * c->head_dim;
    for (int s = 0; s < r->n_seq; s++) {
        const qwen35_state *st = before ? run_past(r, s) : run_save(r, s);
        if (!st) continue;
        size_t bytes = (size_t)(st->n * kvdim) * sizeof *r->k;
        float *k = r->k + r->k0[s] * kvdim, *v = r->v + r->k0[s] * kvdim;
        const qwen35_layer_state *ls = &st->layers[il];
        if (before) {
            memcpy(k, ls->k, bytes);
            memcpy(v, ls->v, bytes);
        } else {
            memcpy(ls->k, k, bytes);
            memcpy(ls->v, v, bytes);
        }
    }
}

/* x += down(silu(gate(u)) * up(u)), u = rms(x, post_attention_norm), on [c0, c0+T). */
static void ffn_chunk(const qwen35_config *c, const qwen35_layer *l, qwen35_run *r, tp_pool *pool,
                      int64_t c0, int64_t T) {
    float *x = r->x + c0 * c->n_embd;
    op_rmsnorm_ex(r->cpu->path, pool, r->h, x, l->post_attention_norm, c->n_embd, T, c->rms_eps);
    run_mm(r, pool, &l->ffn_gate, r->h, r->ff_gate, T);
    run_mm(r, pool, &l->ffn_up, r->h, r->ff_up, T);
    op_silu_mul_ex(r->cpu->path, pool, r->ff_gate, r->ff_up, T * c->n_ff);
    run_mm(r, pool, &l->ffn_down, r->ff_gate, r->mix, T);
    add_rows(x, r->mix, T * c->n_embd);
}

/* Rows in the chunk that starts at row c0.  A sequence is only ever cut
 * where its position is a multiple of the grid (or at its save point, by
 * the segments), never where another sequence happens to end, so each
 * sequence's floats are the same alone or in any batch: the chunked delta
 * rule's blocks depend on where a segment starts.  The grid is the chunk
 * asked for, not min(chunk, N), for the same reason.  Whole pieces are
 * taken while they fit in C rows; a piece never has more than C. */
static int64_t chunk_rows(const qwen35_run *r, int64_t c0) {
    int s = 0;
    while (r->x0[s] + r->seqs[s].n <= c0) s++;
    int64_t g = c0;
    while (g < r->N) {
        int64_t end = r->x0[s] + r->seqs[s].n;
        int64_t to_mult = r->grid - (int64_t)r->pos[g] % r->grid;  /* to the next multiple */
        int64_t cut = g + to_mult < end ? g + to_mult : end;
        if (cut - c0 > r->C) break;
        g = cut;
        if (g == end) s++;
    }
    return g - c0;
}

static void layer_forward(const qwen35_config *c, const qwen35_layer *l, int il, qwen35_run *r,
                          tp_pool *pool) {
    if (!l->recurrent) attention_carry(c, r, il, true);
    for (int64_t c0 = 0, T; c0 < r->N; c0 += T) {
        T = chunk_rows(r, c0);
        float *x = r->x + c0 * c->n_embd;
        run_segments(r, c0, T);
        op_rmsnorm_ex(r->cpu->path, pool, r->h, x, l->attn_norm, c->n_embd, T, c->rms_eps);
        if (l->recurrent) deltanet_chunk(c, l, r, pool, il, c0, T);
        else attention_chunk(c, l, r, pool, c0, T);
        add_rows(x, r->mix, T * c->n_embd);
        ffn_chunk(c, l, r, pool, c0, T);
    }
    if (!l->recurrent) attention_carry(c, r, il, false);
}

/* A carried state must be shaped for this model: its byte count says so. */
static clef_status validate_state(const qwen35_model *m, const qwen35_state *st, int s,
                                  const char *what, clef_error *err) {
    if (st->n_layer != m->cfg.n_layer || st->n < 1 || st->n > m->cfg.n_ctx || !st->data ||
        st->bytes != qwen35_state_bytes(m, st->n))
        return clef_err_set(err, CLEF_ERR_INVALID_ARG, "forward: sequence %d: the %s state"
                            " is not one of this model's", s, what);
    return CLEF_OK;
}

static clef_status validate_carry(const qwen35_model *m, const qwen35_seq *q,
                                  const qwen35_carry *cr, int s, clef_error *err) {
    int64_t p = cr->past ? cr->past->n : 0;
    clef_status st = CLEF_OK;
    if (cr->past) st = validate_state(m, cr->past, s, "past", err);
    if (st == CLEF_OK && cr->save) st = validate_state(m, cr->save, s, "save", err);
    if (st != CLEF_OK) return st;
    if (p + q->n > m->cfg.n_ctx)
        return clef_err_set(err, CLEF_ERR_TOO_LONG, "forward: sequence %d reaches position %" PRId64
                            ", the model's context is %d", s, p + q->n, m->cfg.n_ctx);
    if (cr->save && (cr->save->n <= p || cr->save->n > p + q->n))
        return clef_err_set(err, CLEF_ERR_INVALID_ARG, "forward: sequence %d: a save at %" PRId64
                            " tokens is outside %" PRId64 "..%" PRId64, s, cr->save->n, p + 1, p + q->n);
    return CLEF_OK;
}

static clef_status validate_seqs(const qwen35_model *m, const qwen35_seq *seqs,
                                 const qwen35_carry *carry, int n_seq, int64_t *total,
                                 int64_t *total_kv, clef_error *err) {
    const qwen35_config *c = &m->cfg;
    if (n_seq < 1 || !seqs) return clef_err_set(err, CLEF_ERR_INVALID_ARG, "forward: no sequences");
    *total = *total_kv = 0;
    for (int s = 0; s < n_seq; s++) {
        const qwen35_seq *q = &seqs[s];
        if (q->n < 1 || !q->ids || !q->hidden)
            return clef_err_set(err, CLEF_ERR_INVALID_ARG, "forward: sequence %d is empty", s);
        if (q->n > c->n_ctx)
            return clef_err_set(err, CLEF_ERR_TOO_LONG, "forward: sequence %d has %" PRId64
                                " tokens, the model's context is %d", s, q->n, c->n_ctx);
        for (int64_t t = 0; t < q->n; t++)
            if (q->ids[t] < 0 || q->ids[t] >= c->n_vocab)
                return clef_err_set(err, CLEF_ERR_INVALID_ARG, "forward: sequence %d token %" PRId64
                                    ": id %" PRId32 " is outside the vocabulary [0, %d)",
                                    s, t, q->ids[t], c->n_vocab);
        if (carry) {
            clef_status st = validate_carry(m, q, &carry[s], s, err);
            if (st != CLEF_OK) return st;
        }
        *total += q->n;
        *total_kv += q->n + (carry && carry[s].past ? carry[s].past->n : 0);
    }
    return CLEF_OK;
}

clef_status qwen35_forward(const qwen35_model *m, tp_pool *pool, const qwen35_seq *seqs,
                           int n_seq, int64_t chunk, clef_error *err) {
    return qwen35_forward_carry(m, pool, seqs, NULL, n_seq, chunk, err);
}

clef_status qwen35_forward_carry(const qwen35_model *m, tp_pool *pool, const qwen35_seq *seqs,
                                 const qwen35_carry *carry, int n_seq, int64_t chunk,
                                 clef_error *err) {
    return qwen35_forward_stats(m, pool, seqs, carry, n_seq, chunk, NULL, err);
}

clef_status qwen35_forward_stats(const qwen35_model *m, tp_pool *pool, const qwen35_seq *seqs,
                                 const qwen35_carry *carry, int n_seq, int64_t chunk,
                                 qwen35_stats *stats, clef_error *err) {
    const double start = now_s();
    const qwen35_config *c = &m->cfg;
    const int64_t E = c->n_embd;
    int64_t N = 0, NK = 0;
    clef_status st = validate_seqs(m, seqs, carry, n_seq, &N, &NK, err);
    if (st != CLEF_OK) return st;
    if (chunk <= 0) chunk = QWEN35_DEFAULT_CHUNK;
    qwen35_run r;
    if ((st = run_alloc(&r, c, n_seq, N, NK, chunk < N ? chunk : N, err)) != CLEF_OK) return st;
    r.n_seq = n_seq;
    r.seqs = seqs;
    r.carry = carry;
    r.cpu = &m->cpu;
    r.st = stats;
    r.grid = chunk;

    /* x = token_embd[ids]; sequences laid end to end, positions after each past */
    int64_t g = 0, gk = 0;
    for (int s = 0; s < n_seq; s++) {
        int64_t p = past_n(&r, s);
        r.x0[s] = g;
        r.k0[s] = gk;
        gk += p + seqs[s].n;
        op_embed(&m->token_embd, seqs[s].ids, seqs[s].n, r.x + g * E);
        for (int64_t t = 0; t < seqs[s].n; t++) r.pos[g++] = (int32_t)(p + t);
    }

    for (int il = 0; il < c->n_layer; il++) layer_forward(c, &m->layers[il], il, &r, pool);

    /* out = rms(x, output_norm), per sequence into the caller's buffers */
    double t0 = stage_begin(&r);
    for (int s = 0; s < n_seq; s++)
        op_rmsnorm_ex(m->cpu.path, pool, seqs[s].hidden, r.x + r.x0[s] * E, m->output_norm, E, seqs[s].n,
                      c->rms_eps);
    stage_end(&r, t0, stats ? &stats->head_s : NULL);
    run_free(&r);
    if (stats) stats->total_s += now_s() - start;
    return CLEF_OK;
}
