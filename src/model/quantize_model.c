/*
 * model/quantize_model.c — the per-tensor type recipe, row encoding over the
 * thread pool, and `clef quantize`'s file conversion.
 *
 * The recipe is written from llama.cpp's src/llama-quant.cpp (tensor
 * categories, use_more_bits, the shape fallbacks); the header states it.
 * Counters such as "the i-th attn_v" follow llama-quantize, which visits the
 * tensors sorted by (layer, name); the output keeps the input's order.
 */
#include "model/quantize_model.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "core/dtype.h"
#include "core/error.h"
#include "format/gguf.h"
#include "kernels/dequant.h"
#include "kernels/quantize.h"

/* ---- file types ---------------------------------------------------------- */

static const struct {
    const char *name;
    qm_ftype ftype;
    uint32_t base;             /* the type most converted tensors get */
} ftype_table[] = {
    {"F32", QM_FTYPE_F32, CLEF_DTYPE_F32},       {"F16", QM_FTYPE_F16, CLEF_DTYPE_F16},
    {"BF16", QM_FTYPE_BF16, CLEF_DTYPE_BF16},    {"Q8_0", QM_FTYPE_Q8_0, CLEF_DTYPE_Q8_0},
    {"Q4_K_M", QM_FTYPE_Q4_K_M, CLEF_DTYPE_Q4_K}, {"Q5_K_M", QM_FTYPE_Q5_K_M, CLEF_DTYPE_Q5_K},
    {"Q6_K", QM_FTYPE_Q6_K, CLEF_DTYPE_Q6_K},
};
#define N_FTYPES (sizeof ftype_table / sizeof ftype_table[0])

bool qm_ftype_parse(const char *name, qm_ftype *out) {
    for (size_t i = 0; i < N_FTYPES; i++)
        if (!strcasecmp(name, ftype_table[i].name)) {
            *out = ftype_table[i].ftype;
            return true;
        }
    return false;
}

const char *qm_ftype_name(qm_ftype ftype) {
    for (size_t i = 0; i < N_FTYPES; i++)
        if (ftype_table[i].ftype == ftype) return ftype_table[i].name;
    return "?";
}

static bool ftype_base(qm_ftype ftype, uint32_t *base) {
    for (size_t i = 0; i < N_FTYPES; i++)
        if (ftype_table[i].ftype == ftype) {
            *base = ftype_table[i].base;
            return true;
        }
    return false;
}

/* ---- tensor categories ------------------------------------------------------ */

typedef enum cat {
    CAT_TOKEN_EMBD, CAT_OUTPUT, CAT_ATTN_V_LIKE, CAT_FFN_DOWN, CAT_OTHER,
} cat;

static bool has(const char *s, const char *sub) { return strstr(s, sub) != NULL; }
static bool starts(const char *s, const char *p) { return !strncmp(s, p, strlen(p)); }

static bool is_head(const char *name) {
    return starts(name, "decision.") || starts(name, "dec.") || starts(name, "token_types.") ||
           starts(name, "clef.");
}

/* llama.cpp's order of tests matters: "attn_qkv.weight" is attn_v-like. */
static cat category(const char *name) {
    if (!strcmp(name, "output.weight")) return CAT_OUTPUT;
    if (!strcmp(name, "token_embd.weight")) return CAT_TOKEN_EMBD;
    if (has(name, "attn_qkv.weight") || has(name, "attn_kv_b.weight") || has(name, "attn_v.weight"))
        return CAT_ATTN_V_LIKE;
    if (has(name, "attn_k.weight") || has(name, "attn_q.weight") || has(name, "attn_output.weight") ||
        has(name, "ffn_up") || has(name, "ffn_gate"))
        return CAT_OTHER;
    if (has(name, "ffn_down")) return CAT_FFN_DOWN;
    return CAT_OTHER;
}

/* ggml_n_dims: dimensions up to the last one above 1. */
static uint32_t eff_dims(const qm_tensor_desc *t) {
    uint32_t n = t->n_dims < 1 ? 1 : t->n_dims;
    while (n > 1 && t->ne[n - 1] == 1) n--;
    return n;
}

bool qm_tensor_convertible(const qm_tensor_desc *t) {
    const char *name = t->name;
    size_t len = strlen(name);
    if (eff_dims(t) < 2 || is_head(name)) return false;
    if (len < 6 || strcmp(name + len - 6, "weight")) return false;
    return !has(name, "_norm.weight") && !has(name, "ffn_gate_inp.weight") &&
           !has(name, "ssm_conv1d") && strcmp(name, "token_types.weight") &&
           strcmp(name, "position_embd.weight");
}

static bool use_more_bits(int64_t i, int64_t n) {
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

static bool is_k_quant(uint32_t t) {
    return t == CLEF_DTYPE_Q4_K || t == CLEF_DTYPE_Q5_K || t == CLEF_DTYPE_Q6_K;
}

/* The shape fallbacks: llama.cpp's tensor_type_fallback with Q8_0 standing
 * in for Q5_0/Q5_1, and F16 when even 32 does not divide ne[0]. */
static uint32_t fallback(uint32_t type, int64_t ne0) {
    if (ne0 % clef_dtype_get(type)->block_size == 0) return type;
    if (is_k_quant(type)) type = CLEF_DTYPE_Q8_0;
    if (ne0 % clef_dtype_get(type)->block_size) type = CLEF_DTYPE_F16;
    return type;
}

typedef struct order_item {
    int layer;                 /* N of "blk.N.", -1 for global tensors */
    const char *name;
    size_t idx;
} order_item;

static int order_cmp(const void *a, const void *b) {
    const order_item *x = a, *y = b;
    if (x->layer != y->layer) return x->layer < y->layer ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int layer_of(const char *name) {
    if (!starts(name, "blk.") || !isdigit((unsigned char)name[4])) return -1;
    long v = strtol(name + 4, NULL, 10);
    return v > 1000000 ? 1000000 : (int)v;
}

clef_status qm_choose_types(qm_ftype ftype, const qm_tensor_desc *tensors, size_t n,
                            int64_t n_layer, uint32_t *out, clef_error *err) {
    uint32_t base;
    if (!ftype_base(ftype, &base))
        return clef_err_set(err, CLEF_ERR_INVALID_ARG, "unknown file type %d", (int)ftype);
    bool quantized = base != CLEF_DTYPE_F32 && base != CLEF_DTYPE_F16 && base != CLEF_DTYPE_BF16;
    bool mixed = ftype == QM_FTYPE_Q4_K_M || ftype == QM_FTYPE_Q5_K_M;
    bool tied = true;
    int64_t n_wv = 0, n_down = 0;
    for (size_t i = 0; i < n; i++) {
        out[i] = tensors[i].type;
        if (is_head(tensors[i].name)) continue;
        cat c = category(tensors[i].name);
        if (c == CAT_OUTPUT) tied = false;
        n_wv += c == CAT_ATTN_V_LIKE;
        n_down += c == CAT_FFN_DOWN;
    }
    if (n_layer <= 0) n_layer = n_down;
    order_item *ord = malloc((n ? n : 1) * sizeof *ord);
    if (!ord) return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory choosing tensor types");
    for (size_t i = 0; i < n; i++)
        ord[i] = (order_item){layer_of(tensors[i].name), tensors[i].name, i};
    qsort(ord, n, sizeof *ord, order_cmp);
    int64_t i_wv = 0, i_down = 0;
    for (size_t k = 0; k < n; k++) {
        const qm_tensor_desc *t = &tensors[ord[k].idx];
        if (!qm_tensor_convertible(t)) continue;
        uint32_t type = base;
        if (quantized) {
            cat c = category(t->name);
            if (c == CAT_OUTPUT || (tied && c == CAT_TOKEN_EMBD)) {
                if (t->ne[0] % clef_dtype_get(type)->block_size) type = CLEF_DTYPE_Q8_0;
                else if (type != CLEF_DTYPE_Q8_0) type = CLEF_DTYPE_Q6_K;
            } else if (c == CAT_ATTN_V_LIKE) {
                if (mixed && use_more_bits(i_wv, n_wv)) type = CLEF_DTYPE_Q6_K;
                i_wv++;
            } else if (c == CAT_FFN_DOWN) {
                if (mixed && use_more_bits(i_down, n_layer)) type = CLEF_DTYPE_Q6_K;
                i_down++;
            }
            type = fallback(type, t->ne[0]);
        }
        out[ord[k].idx] = type;
    }
    free(ord);
    return CLEF_OK;
}

/* ---- row encoding ---------------------------------------------------------------- */

#define QM_CHUNK_BYTES ((uint64_t)32 << 20)

typedef struct rows_job {
    qm_row_fn fn;
    void *ctx;
    uint32_t type;
    int64_t ne0, r0, nr;
    uint64_t row_bytes;
    uint8_t *out;              /* nr rows of row_bytes */
    float *scratch;            /* one row of ne0 per thread */
} rows_job;

static void rows_run(void *p, int ith, int nth) {
    rows_job *j = p;
    int64_t b, e;
    tp_split(j->nr, 1, ith, nth, &b, &e);
    float *row = j->scratch + (size_t)ith * (size_t)j->ne0;
    for (int64_t r = b; r < e; r++) {
        j->fn(j->ctx, j->r0 + r, row);
        clef_quantize_row(j->type, row, j->out + (uint64_t)r * j->row_bytes, j->ne0);
    }
}

clef_status qm_write_rows(gguf_stream *s, tp_pool *pool, uint32_t type, int64_t ne0,
                          int64_t n_rows, qm_row_fn fn, void *ctx, clef_error *err) {
    uint64_t row_bytes;
    if (!clef_quantize_supported(type) || ne0 < 1 || n_rows < 0 ||
        !clef_dtype_row_bytes(type, (uint64_t)ne0, &row_bytes))
        return clef_err_set(err, CLEF_ERR_INVALID_ARG, "cannot encode rows of %" PRId64 " as %s",
                            ne0, clef_dtype_get(type)->name ? clef_dtype_get(type)->name : "?");
    int nth = tp_size(pool);
    int64_t chunk = (int64_t)(QM_CHUNK_BYTES / row_bytes);
    if (chunk < 1) chunk = 1;
    if (chunk > n_rows) chunk = n_rows;
    rows_job j = {.fn = fn, .ctx = ctx, .type = type, .ne0 = ne0, .row_bytes = row_bytes};
    j.out = malloc(chunk ? (size_t)((uint64_t)chunk * row_bytes) : 1);
    j.scratch = malloc((size_t)nth * (size_t)ne0 * sizeof(float));
    clef_status st = CLEF_OK;
    if (!j.out || !j.scratch)
        st = clef_err_set(err, CLEF_ERR_NOMEM, "out of memory encoding rows");
    for (int64_t r0 = 0; st == CLEF_OK && r0 < n_rows; r0 += chunk) {
        j.r0 = r0;
        j.nr = n_rows - r0 < chunk ? n_rows - r0 : chunk;
        tp_run(pool, rows_run, &j);
        st = gguf_stream_write(s, j.out, (size_t)((uint64_t)j.nr * row_bytes), err);
    }
    free(j.out);
    free(j.scratch);
    return st;
}

/* ---- metadata copy ------------------------------------------------------------------- */

static uint64_t load_le(const uint8_t *p, uint64_t n) {
    uint64_t v = 0;
    for (uint64_t i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static clef_status copy_scalar(gguf_writer *w, const char *key, const gguf_kv *kv) {
    uint64_t v = load_le(kv->data, gguf_vtype_size(kv->type));
    switch (kv->type) {
    case GGUF_VT_UINT8: return gguf_writer_add_u8(w, key, (uint8_t)v);
    case GGUF_VT_INT8: return gguf_writer_add_i8(w, key, (int8_t)(uint8_t)v);
    case GGUF_VT_UINT16: return gguf_writer_add_u16(w, key, (uint16_t)v);
    case GGUF_VT_INT16: return gguf_writer_add_i16(w, key, (int16_t)(uint16_t)v);
    case GGUF_VT_UINT32: return gguf_writer_add_u32(w, key, (uint32_t)v);
    case GGUF_VT_INT32: return gguf_writer_add_i32(w, key, (int32_t)(uint32_t)v);
    case GGUF_VT_UINT64: return gguf_writer_add_u64(w, key, v);
    case GGUF_VT_INT64: return gguf_writer_add_i64(w, key, (int64_t)v);
    case GGUF_VT_BOOL: return gguf_writer_add_bool(w, key, v != 0);
    case GGUF_VT_FLOAT32: {
        uint32_t u = (uint32_t)v;
        float f;
        memcpy(&f, &u, 4);
        return gguf_writer_add_f32(w, key, f);
    }
    case GGUF_VT_FLOAT64: {
        double d;
        memcpy(&d, &v, 8);
        return gguf_writer_add_f64(w, key, d);
    }
    default: return CLEF_ERR_INTERNAL;
    }
}

static clef_status copy_str_array(gguf_writer *w, const char *key, const gguf_file *f,
                                  const gguf_kv *kv) {
    size_t n = (size_t)kv->arr_n;
    const char **strs = malloc((n ? n : 1) * sizeof *strs);
    size_t *lens = malloc((n ? n : 1) * sizeof *lens);
    clef_status st = strs && lens ? CLEF_OK : CLEF_ERR_NOMEM;
    for (size_t i = 0; st == CLEF_OK && i < n; i++) {
        gguf_str s;
        if (!gguf_arr_str(f, kv, i, &s)) st = CLEF_ERR_INTERNAL;
        strs[i] = s.ptr;
        lens[i] = (size_t)s.len;
    }
    if (st == CLEF_OK) st = gguf_writer_add_arr_str(w, key, strs, lens, n);
    free(strs);
    free(lens);
    return st;
}

/* One metadata record as it is, except the keys this conversion owns. */
static clef_status copy_kv(gguf_writer *w, const gguf_file *f, const gguf_kv *kv, qm_ftype ftype,
                           bool *saw_ftype, bool *saw_qver) {
    char *key = strndup(kv->key.ptr, (size_t)kv->key.len);
    if (!key) return CLEF_ERR_NOMEM;
    clef_status st;
    uint32_t u;
    if (!strcmp(key, "general.file_type")) {
        *saw_ftype = true;
        st = gguf_writer_add_u32(w, key, (uint32_t)ftype);
    } else if (!strcmp(key, "general.quantization_version")) {
        *saw_qver = true;
        st = gguf_writer_add_u32(w, key, 2);
    } else if (!strcmp(key, "general.alignment") && gguf_get_u32(f, key, &u)) {
        st = gguf_writer_set_alignment(w, u);
    } else if (kv->type == GGUF_VT_STRING) {
        gguf_str s;
        st = gguf_get_str(f, key, &s) ? gguf_writer_add_strn(w, key, s.ptr, (size_t)s.len)
                                      : CLEF_ERR_INTERNAL;
    } else if (kv->type == GGUF_VT_ARRAY && kv->arr_type == GGUF_VT_STRING) {
        st = copy_str_array(w, key, f, kv);
    } else if (kv->type == GGUF_VT_ARRAY) {
        st = gguf_writer_add_arr(w, key, kv->arr_type, kv->data, kv->arr_n);
    } else {
        st = copy_scalar(w, key, kv);
    }
    free(key);
    return st;
}

/* ---- whole files ---------------------------------------------------------------------- */

typedef struct dq_ctx {
    const uint8_t *data;
    uint32_t type;
    uint64_t row_bytes;
    int64_t ne0;
} dq_ctx;

static void dq_row(void *p, int64_t r, float *dst) {
    const dq_ctx *c = p;
    clef_dequantize_row(c->type, c->data + (uint64_t)r * c->row_bytes, dst, c->ne0);
}

static const char *type_name(uint32_t t) {
    const char *n = clef_dtype_get(t)->name;
    return n ? n : "?";
}

static bool same_file(const char *a, const char *b) {
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

static int64_t block_count(const gguf_file *f) {
    gguf_str arch;
    char key[96];
    int64_t v;
    if (!gguf_get_str(f, "general.architecture", &arch) || arch.len > 64) return 0;
    snprintf(key, sizeof key, "%.*s.block_count", (int)arch.len, arch.ptr);
    return gguf_get_i64(f, key, &v) ? v : 0;
}

/* Describe every tensor of f and choose its type (descs[i].name points into
 * names, a buffer the caller frees). */
static clef_status plan_file(const gguf_file *f, qm_ftype ftype, qm_tensor_desc **descs_out,
                             uint32_t **types_out, char **names_out, clef_error *err) {
    size_t n = (size_t)gguf_tensor_count(f), total = 0;
    for (size_t i = 0; i < n; i++) total += (size_t)gguf_tensor_at(f, i)->name.len + 1;
    qm_tensor_desc *d = calloc(n ? n : 1, sizeof *d);
    uint32_t *types = calloc(n ? n : 1, sizeof *types);
    char *names = malloc(total ? total : 1);
    *descs_out = d;
    *types_out = types;
    *names_out = names;
    if (!d || !types || !names) return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory planning tensors");
    char *p = names;
    for (size_t i = 0; i < n; i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        memcpy(p, t->name.ptr, (size_t)t->name.len);
        p[t->name.len] = 0;
        d[i] = (qm_tensor_desc){p, t->type, t->n_dims, {t->ne[0], t->ne[1], t->ne[2], t->ne[3]}};
        p += t->name.len + 1;
    }
    return qm_choose_types(ftype, d, n, block_count(f), types, err);
}

static clef_status build_writer(const gguf_file *f, qm_ftype ftype, const qm_tensor_desc *d,
                                const uint32_t *types, gguf_writer *w, clef_error *err) {
    bool saw_ftype = false, saw_qver = false;
    for (uint64_t i = 0; i < gguf_kv_count(f); i++) {
        const gguf_kv *kv = gguf_kv_at(f, i);
        clef_status st = copy_kv(w, f, kv, ftype, &saw_ftype, &saw_qver);
        if (st && !gguf_writer_status(w, err))
            return clef_err_set(err, st, "metadata key '%.*s': cannot copy", (int)kv->key.len,
                                kv->key.ptr);
    }
    if (!saw_qver) gguf_writer_add_u32(w, "general.quantization_version", 2);
    if (!saw_ftype) gguf_writer_add_u32(w, "general.file_type", (uint32_t)ftype);
    for (uint64_t i = 0; i < gguf_tensor_count(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        if (types[i] == t->type) {
            gguf_writer_add_tensor_ref(w, d[i].name, t->type, t->n_dims, t->ne, t->data,
                                       (size_t)t->nbytes);
            continue;
        }
        if (!clef_dtype_get(t->type)->supported)
            return clef_err_set(err, CLEF_ERR_UNSUPPORTED, "tensor '%s': cannot convert from %s",
                                d[i].name, type_name(t->type));
        gguf_writer_add_tensor_info(w, d[i].name, types[i], t->n_dims, t->ne);
    }
    return gguf_writer_status(w, err);
}

static clef_status write_tensors(const gguf_file *f, const qm_tensor_desc *d, const uint32_t *types,
                                 gguf_stream *s, tp_pool *pool, FILE *log, clef_error *err) {
    uint64_t n = gguf_tensor_count(f);
    for (uint64_t i = 0; i < n; i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        if (log)
            fprintf(log, "[%4" PRIu64 "/%4" PRIu64 "] %-40s %-6s -> %s\n", i + 1, n, d[i].name,
                    type_name(t->type), type_name(types[i]));
        if (types[i] == t->type) continue; /* the stream copies it */
        if (gguf_stream_tensor(s) != i)
            return clef_err_set(err, CLEF_ERR_INTERNAL, "stream out of step at tensor '%s'", d[i].name);
        dq_ctx c = {t->data, t->type, 0, t->ne[0]};
        clef_dtype_row_bytes(t->type, (uint64_t)t->ne[0], &c.row_bytes);
        int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
        clef_status st = qm_write_rows(s, pool, types[i], t->ne[0], rows, dq_row, &c, err);
        if (st) return clef_err_wrap(err, "tensor '%s'", d[i].name);
    }
    return CLEF_OK;
}

clef_status qm_quantize_file(const char *in_path, const char *out_path, qm_ftype ftype,
                             int n_threads, FILE *log, clef_error *err) {
    if (same_file(in_path, out_path))
        return clef_err_set(err, CLEF_ERR_INVALID_ARG, "%s: output would overwrite the input", out_path);
    gguf_file *f = NULL;
    clef_status st = gguf_open(in_path, &f, err);
    if (st) return st;
    qm_tensor_desc *d = NULL;
    uint32_t *types = NULL;
    char *names = NULL;
    gguf_writer *w = NULL;
    tp_pool *pool = NULL;
    gguf_stream *s = NULL;
    st = plan_file(f, ftype, &d, &types, &names, err);
    if (st == CLEF_OK && !(w = gguf_writer_new()))
        st = clef_err_set(err, CLEF_ERR_NOMEM, "out of memory");
    if (st == CLEF_OK) st = build_writer(f, ftype, d, types, w, err);
    if (st == CLEF_OK) st = tp_create(n_threads, &pool, err);
    if (st == CLEF_OK) st = gguf_stream_open(w, out_path, &s, err);
    if (st == CLEF_OK) st = write_tensors(f, d, types, s, pool, log, err);
    if (s && st == CLEF_OK) st = gguf_stream_close(s, err);
    else gguf_stream_abort(s);
    tp_free(pool);
    gguf_writer_free(w);
    free(d);
    free(types);
    free(names);
    gguf_close(f);
    return st;
}

/* ---- public API (clef.h) ---------------------------------------------------------------- */

clef_write_params clef_write_default_params(void) {
    clef_write_params p = {0};
    return p;
}

clef_status clef_quantize_file(const char *in_path, const char *out_path, const char *type,
                               const clef_write_params *params, clef_error *err) {
    clef_write_params dflt = clef_write_default_params();
    if (!params) params = &dflt;
    qm_ftype ftype;
    if (!in_path || !out_path || !type)
        return clef_err_set(err, CLEF_ERR_INVALID_ARG, "clef_quantize_file: NULL argument");
    if (!qm_ftype_parse(type, &ftype))
        return clef_err_set(err, CLEF_ERR_INVALID_ARG,
                            "unknown type '%s' (expected F32, F16, BF16, Q8_0, Q4_K_M, Q5_K_M or Q6_K)",
                            type);
    return qm_quantize_file(in_path, out_path, ftype, params->n_threads, params->log, err);
}
