/*
 * model/model.c — loading a model file into a clef_model, tensor lookup with
 * shape checks, and the public model functions of clef.h.
 *
 * Loading order: map and validate the GGUF, check the architecture, start
 * the thread pool, then the backbone (model/qwen35.c), the tokenizer (when
 * the file has tokenizer.ggml.* metadata) and, for arch `clef`, the
 * decision head.  Any failure frees what was built.
 */
#include "model/model.h"
#include "model/head.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/dequant.h"
#include "text/tokenizer.h"

/* ---- tensor lookup ------------------------------------------------------ */

const gguf_tensor *model_find(const clef_model *m, const char *name) {
    return gguf_find_tensor(m->gguf, name);
}

/* "[64,32]" without trailing 1s (at least one dimension). */
static void format_shape(char *buf, size_t cap, int n_dims, const int64_t *ne) {
    while (n_dims > 1 && ne[n_dims - 1] == 1) n_dims--;
    size_t used = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < n_dims && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%" PRId64, i ? "," : "", ne[i]);
    if (used < cap) snprintf(buf + used, cap - used, "]");
}

static bool shape_matches(const gguf_tensor *t, int n_dims, const int64_t *ne) {
    for (int i = 0; i < GGUF_MAX_DIMS; i++) {
        int64_t want = i < n_dims ? ne[i] : 1;
        int64_t have = i < (int)t->n_dims ? t->ne[i] : 1;
        if (want != have) return false;
    }
    return true;
}

clef_status model_tensor(const clef_model *m, const char *name, int n_dims, const int64_t *ne,
                         const gguf_tensor **out, clef_error *err) {
    *out = NULL;
    const gguf_tensor *t = model_find(m, name);
    if (!t) return clef_err_set(err, CLEF_ERR_FORMAT, "tensor '%s' not found", name);
    if (!shape_matches(t, n_dims, ne)) {
        char want[96], got[96];
        format_shape(want, sizeof want, n_dims, ne);
        format_shape(got, sizeof got, (int)t->n_dims, t->ne);
        return clef_err_set(err, CLEF_ERR_FORMAT, "tensor '%s': expected %s got %s", name, want, got);
    }
    *out = t;
    return CLEF_OK;
}

static const char *type_name(uint32_t type) {
    const char *n = clef_dtype_get(type)->name;
    return n ? n : "unknown";
}

clef_status model_matrix(const clef_model *m, const char *name, int64_t in, int64_t out,
                         mm_weight *w, clef_error *err) {
    const gguf_tensor *t;
    int64_t ne[2] = {in, out};
    clef_status st = model_tensor(m, name, 2, ne, &t, err);
    if (st != CLEF_OK) return st;
    if (t->type == CLEF_DTYPE_F32 && (uintptr_t)t->data % sizeof(float))
        return clef_err_set(err, CLEF_ERR_FORMAT, "tensor '%s': F32 data is not 4-byte aligned", name);
    if (!mm_weight_init(w, t->type, t->data, in, out))
        return clef_err_set(err, CLEF_ERR_UNSUPPORTED, "tensor '%s': type %s (%u) is not supported",
                            name, type_name(t->type), t->type);
    return CLEF_OK;
}

static clef_status own(clef_model *m, float *p, clef_error *err) {
    float **grown = realloc(m->owned, (m->n_owned + 1) * sizeof *grown);
    if (!grown) {
        free(p);
        return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory keeping a tensor copy");
    }
    m->owned = grown;
    m->owned[m->n_owned++] = p;
    return CLEF_OK;
}

clef_status model_tensor_f32(clef_model *m, const char *name, int n_dims, const int64_t *ne,
                             const float **out, clef_error *err) {
    const gguf_tensor *t;
    clef_status st = model_tensor(m, name, n_dims, ne, &t, err);
    if (st != CLEF_OK) return st;
    if (t->type == CLEF_DTYPE_F32 && (uintptr_t)t->data % sizeof(float) == 0) {
        *out = t->data;
        return CLEF_OK;
    }
    int64_t row = t->ne[0], rows = 1;
    for (uint32_t i = 1; i < t->n_dims; i++) rows *= t->ne[i];
    uint64_t row_bytes;
    const clef_dtype_info *info = clef_dtype_get(t->type);
    if (!info->supported || !clef_dtype_row_bytes(t->type, (uint64_t)row, &row_bytes))
        return clef_err_set(err, CLEF_ERR_UNSUPPORTED, "tensor '%s': type %s (%u) is not supported",
                            name, type_name(t->type), t->type);
    float *copy = malloc((size_t)(row * rows) * sizeof *copy);
    if (!copy) return clef_err_set(err, CLEF_ERR_NOMEM, "tensor '%s': out of memory", name);
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *src = (const uint8_t *)t->data + (size_t)r * row_bytes;
        if (t->type == CLEF_DTYPE_F32) memcpy(copy + r * row, src, (size_t)row * sizeof *copy);
        else if (!clef_dequantize_row(t->type, src, copy + r * row, row)) {
            free(copy);
            return clef_err_set(err, CLEF_ERR_UNSUPPORTED, "tensor '%s': cannot convert %s to f32",
                                name, type_name(t->type));
        }
    }
    if ((st = own(m, copy, err)) != CLEF_OK) return st;
    *out = copy;
    return CLEF_OK;
}

clef_status model_vector(clef_model *m, const char *name, int64_t n, const float **out,
                         clef_error *err) {
    return model_tensor_f32(m, name, 1, &n, out, err);
}

/* ---- internal accessors -------------------------------------------------- */

const gguf_file *model_gguf(const clef_model *m) { return m->gguf; }
tp_pool *model_pool(const clef_model *m) { return m->pool; }
const qwen35_model *model_backbone(const clef_model *m) { return &m->backbone; }
int model_n_embd(const clef_model *m) { return m->backbone.cfg.n_embd; }
const mm_weight *model_output(const clef_model *m) { return &m->backbone.output; }

clef_status model_forward_batch(clef_model *m, const qwen35_seq *seqs, int n_seq,
                                clef_error *err) {
    return qwen35_forward(&m->backbone, m->pool, seqs, n_seq, 0, err);
}

/* ---- public API ------------------------------------------------------------ */

clef_model_params clef_model_default_params(void) {
    clef_model_params p = {.n_threads = 0};
    return p;
}

static clef_status read_arch(clef_model *m, clef_error *err) {
    gguf_str arch;
    if (!gguf_get_str(m->gguf, "general.architecture", &arch))
        return clef_err_set(err, CLEF_ERR_FORMAT, "general.architecture missing or not a string");
    if (!gguf_str_eq(arch, "qwen35") && !gguf_str_eq(arch, "clef")) {
        int shown = arch.len > 64 ? 64 : (int)arch.len;
        return clef_err_set(err, CLEF_ERR_UNSUPPORTED,
                            "general.architecture '%.*s' is not supported (clef runs qwen35 and clef)",
                            shown, arch.ptr);
    }
    memcpy(m->arch, arch.ptr, (size_t)arch.len);
    m->arch[arch.len] = '\0';
    return CLEF_OK;
}

static clef_status read_name(clef_model *m, const char *path, clef_error *err) {
    gguf_str name;
    const char *src;
    size_t len;
    if (gguf_get_str(m->gguf, "general.name", &name) && name.len > 0) {
        src = name.ptr;
        len = (size_t)name.len;
    } else {
        const char *slash = strrchr(path, '/');
        src = slash ? slash + 1 : path;
        len = strlen(src);
    }
    m->name = malloc(len + 1);
    if (!m->name) return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory");
    memcpy(m->name, src, len);
    m->name[len] = '\0';
    return CLEF_OK;
}

/* Does the file carry a decision head, in any of the known layouts
 * (upstream `decision.*` tensors under arch clef; bobcat's and Ollama's
 * `clef.*` head tensors under arch qwen35)? */
static bool has_decision_head(const clef_model *m) {
    if (!strcmp(m->arch, "clef")) return true;
    for (uint64_t i = 0; i < gguf_tensor_count(m->gguf); i++) {
        gguf_str n = gguf_tensor_at(m->gguf, i)->name;
        if ((n.len > 9 && !memcmp(n.ptr, "decision.", 9)) || (n.len > 5 && !memcmp(n.ptr, "clef.", 5)))
            return true;
    }
    return false;
}

/* A file without tokenizer metadata still runs from token ids.  Clef
 * checkpoints split with the Qwen2 regex whatever tokenizer.ggml.pre says
 * (llama.cpp's converter may write "qwen35"): spec clef-model.md §2. */
static clef_status load_tokenizer(clef_model *m, clef_error *err) {
    if (!gguf_find_kv(m->gguf, "tokenizer.ggml.model")) return CLEF_OK;
    const tok_pre_kind qwen2 = TOK_PRE_QWEN2;
    return tok_load_gguf_ex(m->gguf, has_decision_head(m) ? &qwen2 : NULL, &m->tokenizer, err);
}

clef_status clef_model_load(const char *path, const clef_model_params *params,
                            clef_model **out, clef_error *err) {
    if (!out) return clef_err_set(err, CLEF_ERR_INVALID_ARG, "clef_model_load: out is NULL");
    *out = NULL;
    if (!path) return clef_err_set(err, CLEF_ERR_INVALID_ARG, "clef_model_load: path is NULL");
    clef_model_params defaults = clef_model_default_params();
    if (!params) params = &defaults;

    clef_model *m = calloc(1, sizeof *m);
    if (!m) return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory");
    clef_status st = params->no_mmap ? gguf_open_copy(path, &m->gguf, err)
                                     : gguf_open(path, &m->gguf, err);
    if (st == CLEF_OK) st = read_arch(m, err);
    if (st == CLEF_OK) st = read_name(m, path, err);
    if (st == CLEF_OK) st = tp_create(params->n_threads, &m->pool, err);
    if (st == CLEF_OK) st = qwen35_load(m, m->arch, &m->backbone, err);
    if (st == CLEF_OK) st = load_tokenizer(m, err);
    /* The decision head: every clef file has one, a qwen35 file none. */
    if (st == CLEF_OK && !strcmp(m->arch, "clef")) st = head_load(m->gguf, &m->head, err);
    if (st != CLEF_OK) {
        clef_err_wrap(err, "%s", path);
        clef_model_free(m);
        return st;
    }
    *out = m;
    return CLEF_OK;
}

void clef_model_free(clef_model *m) {
    if (!m) return;
    head_free(m->head);
    clef_tokenizer_free(m->tokenizer);
    qwen35_free(&m->backbone);
    tp_free(m->pool);
    for (size_t i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    free(m->name);
    gguf_close(m->gguf);
    free(m);
}

const clef_tokenizer *clef_model_tokenizer(const clef_model *m) { return m ? m->tokenizer : NULL; }
int clef_model_n_embd(const clef_model *m) { return m ? m->backbone.cfg.n_embd : 0; }
int clef_model_n_ctx(const clef_model *m) { return m ? m->backbone.cfg.n_ctx : 0; }
const char *clef_model_arch(const clef_model *m) { return m ? m->arch : NULL; }
const char *clef_model_name(const clef_model *m) { return m ? m->name : NULL; }

clef_status clef_forward(clef_model *m, const int32_t *ids, size_t n, float *hidden,
                         clef_error *err) {
    if (!m || !ids || !hidden)
        return clef_err_set(err, CLEF_ERR_INVALID_ARG, "clef_forward: model, ids and hidden are required");
    qwen35_seq seq = {ids, (int64_t)n, hidden};
    return model_forward_batch(m, &seq, 1, err);
}
