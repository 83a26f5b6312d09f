/*
 * format/describe.c — clef_describe_file: a readable summary of any GGUF
 * file (what `clef info` prints).
 *
 * Sections: file facts, general.* metadata, every `<arch>.*` key (the
 * hyperparameters), a tokenizer summary, other keys, then one line per
 * tensor and the totals.  Arrays are summarized (type, count, first few
 * elements); strings are quoted, escaped and cut, so that a binary or huge
 * value cannot flood the terminal.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clef.h"
#include "core/dtype.h"
#include "core/error.h"
#include "format/gguf.h"

#define DESCRIBE_STR_MAX 72   /* bytes of a string value shown   */
#define DESCRIBE_ARR_MAX 8    /* elements of an array shown      */

static void put_quoted(FILE *out, gguf_str s, uint64_t max) {
    fputc('"', out);
    uint64_t n = s.len < max ? s.len : max;
    for (uint64_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (c == '"' || c == '\\') fprintf(out, "\\%c", c);
        else if (c == '\n') fputs("\\n", out);
        else if (c == '\t') fputs("\\t", out);
        else if (c < 0x20 || c == 0x7f) fprintf(out, "\\x%02x", c);
        else fputc(c, out); /* bytes >= 0x80: UTF-8 text is shown as is */
    }
    fputc('"', out);
    if (s.len > n) fprintf(out, "... (%" PRIu64 " bytes)", s.len);
}

static uint64_t load_le(const uint8_t *p, uint64_t n) {
    uint64_t v = 0;
    for (uint64_t i = n; i-- > 0;) v = v << 8 | p[i];
    return v;
}

/* The shortest %g spelling that reads back as the same value (1e-06, not
 * 9.99999997e-07); max_digits is 9 for f32, 17 for f64. */
static void put_float(FILE *out, double v, int max_digits) {
    char buf[40];
    for (int digits = 6; digits <= max_digits; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, v);
        double back = strtod(buf, NULL);
        if (max_digits == 9 ? (float)back == (float)v : back == v) break;
    }
    fputs(buf, out);
}

/* One fixed-size value at p. */
static void put_fixed(FILE *out, gguf_vtype t, const uint8_t *p) {
    uint64_t raw = load_le(p, gguf_vtype_size(t));
    switch (t) {
    case GGUF_VT_UINT8: case GGUF_VT_UINT16: case GGUF_VT_UINT32: case GGUF_VT_UINT64:
        fprintf(out, "%" PRIu64, raw);
        break;
    case GGUF_VT_INT8: fprintf(out, "%d", (int)(int8_t)raw); break;
    case GGUF_VT_INT16: fprintf(out, "%d", (int)(int16_t)raw); break;
    case GGUF_VT_INT32: fprintf(out, "%" PRId32, (int32_t)raw); break;
    case GGUF_VT_INT64: {
        int64_t v;
        memcpy(&v, &raw, sizeof v);
        fprintf(out, "%" PRId64, v);
        break;
    }
    case GGUF_VT_FLOAT32: {
        float v;
        uint32_t u = (uint32_t)raw;
        memcpy(&v, &u, sizeof v);
        put_float(out, v, 9);
        break;
    }
    case GGUF_VT_FLOAT64: {
        double v;
        memcpy(&v, &raw, sizeof v);
        put_float(out, v, 17);
        break;
    }
    case GGUF_VT_BOOL: fputs(raw ? "true" : "false", out); break;
    default: fputs("?", out); break;
    }
}

static void put_value(FILE *out, const gguf_file *f, const gguf_kv *kv) {
    if (kv->type == GGUF_VT_STRING) {
        gguf_str s = {(const char *)kv->data + 8, load_le(kv->data, 8)};
        put_quoted(out, s, DESCRIBE_STR_MAX);
        return;
    }
    if (kv->type != GGUF_VT_ARRAY) {
        put_fixed(out, kv->type, kv->data);
        return;
    }
    fprintf(out, "[%s x %" PRIu64 "]", gguf_vtype_name(kv->arr_type), kv->arr_n);
    uint64_t shown = kv->arr_n < DESCRIBE_ARR_MAX ? kv->arr_n : DESCRIBE_ARR_MAX;
    for (uint64_t i = 0; i < shown; i++) {
        fputs(i ? ", " : " ", out);
        if (kv->arr_type == GGUF_VT_STRING) {
            gguf_str s;
            if (gguf_arr_str(f, kv, i, &s)) put_quoted(out, s, 24);
        } else {
            put_fixed(out, kv->arr_type, kv->data + i * gguf_vtype_size(kv->arr_type));
        }
    }
    if (kv->arr_n > shown) fputs(", ...", out);
}

static bool has_prefix(gguf_str s, const char *prefix) {
    size_t n = strlen(prefix);
    return s.len >= n && memcmp(s.ptr, prefix, n) == 0;
}

static void put_kv_line(FILE *out, const gguf_file *f, const gguf_kv *kv) {
    fprintf(out, "  %.*s = ", (int)kv->key.len, kv->key.ptr);
    put_value(out, f, kv);
    fputc('\n', out);
}

/* The name of the most common llama.cpp file types (general.file_type). */
static const char *ftype_name(uint32_t t) {
    switch (t) {
    case 0: return "all F32";
    case 1: return "mostly F16";
    case 2: return "mostly Q4_0";
    case 3: return "mostly Q4_1";
    case 7: return "mostly Q8_0";
    case 8: return "mostly Q5_0";
    case 9: return "mostly Q5_1";
    case 10: return "mostly Q2_K";
    case 14: return "mostly Q4_K_S";
    case 15: return "mostly Q4_K_M";
    case 16: return "mostly Q5_K_S";
    case 17: return "mostly Q5_K_M";
    case 18: return "mostly Q6_K";
    case 32: return "mostly BF16";
    default: return "other";
    }
}

static void describe_header(FILE *out, const char *path, const gguf_file *f, gguf_str arch) {
    fprintf(out, "file: %s\n", path);
    fprintf(out, "GGUF version: %" PRIu32 "\n", gguf_version(f));
    fprintf(out, "size: %" PRIu64 " bytes, alignment %" PRIu64 ", data at byte %" PRIu64 "\n",
            gguf_file_size(f), gguf_alignment(f), gguf_data_offset(f));
    fprintf(out, "architecture: %.*s\n", (int)arch.len, arch.ptr);
    gguf_str name;
    if (gguf_get_str(f, "general.name", &name)) fprintf(out, "name: %.*s\n", (int)name.len, name.ptr);
    uint32_t ft;
    if (gguf_get_u32(f, "general.file_type", &ft)) fprintf(out, "file type: %" PRIu32 " (%s)\n", ft, ftype_name(ft));
    fprintf(out, "metadata: %" PRIu64 " keys\n", gguf_kv_count(f));
}

/* Keys of one group: prefix ("clef." / "general." / "tokenizer."), or
 * NULL for keys outside general., tokenizer. and arch. */
static void describe_keys(FILE *out, const gguf_file *f, const char *title, const char *prefix,
                          const char *arch_prefix) {
    bool any = false;
    for (uint64_t i = 0; i < gguf_kv_count(f); i++) {
        const gguf_kv *kv = gguf_kv_at(f, i);
        bool mine = prefix ? has_prefix(kv->key, prefix)
                           : !has_prefix(kv->key, "general.") && !has_prefix(kv->key, "tokenizer.") &&
                                 !(arch_prefix && has_prefix(kv->key, arch_prefix));
        if (!mine) continue;
        if (!any) fprintf(out, "\n%s:\n", title);
        any = true;
        put_kv_line(out, f, kv);
    }
}

/* Token id key -> "id 'text'". */
static void put_token_id(FILE *out, const gguf_file *f, const gguf_kv *tokens, const char *label,
                         const char *key) {
    int64_t id;
    if (!gguf_get_i64(f, key, &id)) return;
    fprintf(out, "  %s: %" PRId64, label, id);
    gguf_str s;
    if (tokens && id >= 0 && gguf_arr_str(f, tokens, (uint64_t)id, &s)) {
        fputc(' ', out);
        put_quoted(out, s, 32);
    } else if (tokens) {
        fputs(" (out of range)", out);
    }
    fputc('\n', out);
}

static void describe_tokenizer(FILE *out, const gguf_file *f) {
    const gguf_kv *tokens = gguf_find_kv(f, "tokenizer.ggml.tokens");
    gguf_str model;
    bool has_model = gguf_get_str(f, "tokenizer.ggml.model", &model);
    if (!tokens && !has_model) return;
    fprintf(out, "\ntokenizer:\n");
    if (has_model) fprintf(out, "  model: %.*s\n", (int)model.len, model.ptr);
    gguf_str pre;
    if (gguf_get_str(f, "tokenizer.ggml.pre", &pre)) fprintf(out, "  pre: %.*s\n", (int)pre.len, pre.ptr);
    if (tokens && (tokens->type != GGUF_VT_ARRAY || tokens->arr_type != GGUF_VT_STRING)) tokens = NULL;
    if (tokens) fprintf(out, "  tokens: %" PRIu64 "\n", tokens->arr_n);
    const gguf_kv *merges = gguf_find_kv(f, "tokenizer.ggml.merges");
    if (merges && merges->type == GGUF_VT_ARRAY) fprintf(out, "  merges: %" PRIu64 "\n", merges->arr_n);
    put_token_id(out, f, tokens, "bos", "tokenizer.ggml.bos_token_id");
    put_token_id(out, f, tokens, "eos", "tokenizer.ggml.eos_token_id");
    put_token_id(out, f, tokens, "padding", "tokenizer.ggml.padding_token_id");
    put_token_id(out, f, tokens, "unknown", "tokenizer.ggml.unknown_token_id");
    bool b;
    if (gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &b)) fprintf(out, "  add_bos: %s\n", b ? "true" : "false");
    if (gguf_get_bool(f, "tokenizer.ggml.add_eos_token", &b)) fprintf(out, "  add_eos: %s\n", b ? "true" : "false");
    /* llama.cpp token types: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte */
    const gguf_kv *types = gguf_find_kv(f, "tokenizer.ggml.token_type");
    if (types && types->type == GGUF_VT_ARRAY) {
        uint64_t count[8] = {0};
        for (uint64_t i = 0; i < types->arr_n; i++) {
            int64_t t;
            count[gguf_arr_i64(types, i, &t) && t >= 1 && t <= 6 ? t : 0]++;
        }
        fprintf(out, "  added tokens: %" PRIu64 " (%" PRIu64 " control, %" PRIu64 " user-defined)\n",
                count[3] + count[4], count[3], count[4]);
        fprintf(out, "  token types: %" PRIu64 " normal, %" PRIu64 " unknown, %" PRIu64 " unused, %" PRIu64
                     " byte, %" PRIu64 " other\n",
                count[1], count[2], count[5], count[6], count[0]);
    }
    for (uint64_t i = 0; i < gguf_kv_count(f); i++) {
        const gguf_kv *kv = gguf_kv_at(f, i);
        if (has_prefix(kv->key, "tokenizer.chat_template") && kv->type == GGUF_VT_STRING)
            fprintf(out, "  %.*s: %" PRIu64 " bytes\n", (int)kv->key.len, kv->key.ptr, load_le(kv->data, 8));
    }
}

static void describe_tensors(FILE *out, const gguf_file *f) {
    uint64_t n = gguf_tensor_count(f), total = 0, params = 0;
    uint64_t by_type[CLEF_DTYPE_COUNT] = {0};
    fprintf(out, "\ntensors: %" PRIu64 "\n", n);
    if (n) fprintf(out, "  %-40s %-6s %-24s %12s\n", "name", "type", "shape", "bytes");
    for (uint64_t i = 0; i < n; i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        char shape[96];
        int len = snprintf(shape, sizeof shape, "[");
        uint64_t count = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) {
            len += snprintf(shape + len, sizeof shape - (size_t)len, "%s%" PRId64, d ? ", " : "", t->ne[d]);
            count *= (uint64_t)t->ne[d];
        }
        snprintf(shape + len, sizeof shape - (size_t)len, "]");
        fprintf(out, "  %-40.*s %-6s %-24s %12" PRIu64 "\n", (int)t->name.len, t->name.ptr,
                clef_dtype_get(t->type)->name, shape, t->nbytes);
        total += t->nbytes;
        params += count;
        by_type[t->type]++; /* the reader refused unknown types, so type < COUNT */
    }
    fprintf(out, "\ntotal: %" PRIu64 " tensors, %" PRIu64 " elements, %" PRIu64 " bytes (%.2f MiB)\n",
            n, params, total, (double)total / (1024.0 * 1024.0));
    if (!n) return;
    fprintf(out, "types:");
    for (uint32_t t = 0; t < CLEF_DTYPE_COUNT; t++)
        if (by_type[t]) fprintf(out, " %s %" PRIu64, clef_dtype_get(t)->name, by_type[t]);
    fputc('\n', out);
}

clef_status clef_describe_file(const char *path, FILE *out, clef_error *err) {
    if (!path || !out) return clef_err_set(err, CLEF_ERR_INVALID_ARG, "clef_describe_file: NULL argument");
    gguf_file *f;
    clef_status st = gguf_open(path, &f, err);
    if (st) return st;
    gguf_str arch = {"(none)", 6};
    gguf_get_str(f, "general.architecture", &arch);
    /* "<arch>." as a C string, for the hyperparameter section */
    char arch_prefix[80];
    snprintf(arch_prefix, sizeof arch_prefix, "%.*s.", (int)(arch.len < 64 ? arch.len : 64), arch.ptr);
    describe_header(out, path, f, arch);
    describe_keys(out, f, "general", "general.", NULL);
    char title[128];
    snprintf(title, sizeof title, "hyperparameters (%s*)", arch_prefix);
    describe_keys(out, f, title, arch_prefix, NULL);
    describe_tokenizer(out, f);
    describe_keys(out, f, "other metadata", NULL, arch_prefix);
    describe_tensors(out, f);
    gguf_close(f);
    if (ferror(out)) return clef_err_set(err, CLEF_ERR_IO, "%s: writing the description failed", path);
    return CLEF_OK;
}
