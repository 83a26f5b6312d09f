/*
 * fuzz/gen_gguf_seeds.c — writes the GGUF seed corpus of fuzz_gguf (the
 * files in fuzz/corpus/fuzz_gguf were made with it):
 *     gen_gguf_seeds OUT_DIR [MODEL.gguf]
 * Small files built with the project's writer: an empty file, one value of
 * every metadata type, one small tensor of every supported type, a tiny
 * byte-level BPE tokenizer (qwen2 and qwen35 split), GGUF v2 spellings, and
 * — when MODEL is given — that model's metadata without its tensors (real
 * keys, a real tokenizer, a few tens of KB instead of megabytes).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clef.h"
#include "core/dtype.h"
#include "format/gguf.h"
#include "format/gguf_write.h"
#include "text/bpe.h"

static int write_seed(const char *dir, const char *name, gguf_writer *w, int version) {
    void *buf = NULL;
    size_t len = 0;
    clef_error err;
    if (gguf_writer_write_memory(w, &buf, &len, &err) != CLEF_OK) {
        fprintf(stderr, "%s: %s\n", name, err.message);
        gguf_writer_free(w);
        return 1;
    }
    gguf_writer_free(w);
    if (version) ((unsigned char *)buf)[4] = (unsigned char)version; /* u32 LE after "GGUF" */
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *fp = fopen(path, "wb");
    int bad = !fp || fwrite(buf, 1, len, fp) != len;
    if (fp && fclose(fp)) bad = 1;
    free(buf);
    if (bad) fprintf(stderr, "cannot write %s\n", path);
    else printf("%s: %zu bytes\n", path, len);
    return bad;
}

static gguf_writer *new_writer(void) {
    gguf_writer *w = gguf_writer_new();
    if (!w) { fprintf(stderr, "out of memory\n"); exit(1); }
    return w;
}

static gguf_writer *kv_all(void) {
    gguf_writer *w = new_writer();
    gguf_writer_add_str(w, "general.architecture", "llama");
    gguf_writer_add_u8(w, "t.u8", 200);
    gguf_writer_add_i8(w, "t.i8", -5);
    gguf_writer_add_u16(w, "t.u16", 60000);
    gguf_writer_add_i16(w, "t.i16", -30000);
    gguf_writer_add_u32(w, "t.u32", 4000000000u);
    gguf_writer_add_i32(w, "t.i32", -2000000000);
    gguf_writer_add_u64(w, "t.u64", 18000000000000000000ull);
    gguf_writer_add_i64(w, "t.i64", -9000000000000000000ll);
    gguf_writer_add_f32(w, "t.f32", 1.5f);
    gguf_writer_add_f64(w, "t.f64", -2.25);
    gguf_writer_add_bool(w, "t.bool", true);
    gguf_writer_add_str(w, "t.str", "caf\xC3\xA9");
    gguf_writer_add_strn(w, "t.strn", "a\0b", 3);
    const int32_t i32s[] = {1, -2, 3};
    const float f32s[] = {0.5f, -1.0f};
    const bool bools[] = {true, false};
    const uint8_t u8s[] = {1, 2, 255};
    const double f64s[] = {1e300};
    const char *strs[] = {"one", "", "three"};
    gguf_writer_add_arr(w, "a.i32", GGUF_VT_INT32, i32s, 3);
    gguf_writer_add_arr(w, "a.f32", GGUF_VT_FLOAT32, f32s, 2);
    gguf_writer_add_arr(w, "a.bool", GGUF_VT_BOOL, bools, 2);
    gguf_writer_add_arr(w, "a.u8", GGUF_VT_UINT8, u8s, 3);
    gguf_writer_add_arr(w, "a.f64", GGUF_VT_FLOAT64, f64s, 1);
    gguf_writer_add_arr(w, "a.empty", GGUF_VT_INT32, i32s, 0);
    gguf_writer_add_arr_str(w, "a.str", strs, NULL, 3);
    return w;
}

/* One small tensor of each type clef computes with; bytes are a fixed
 * pseudo-random pattern (scales stay finite: every 16-bit word is small). */
static gguf_writer *tensors(uint32_t alignment) {
    gguf_writer *w = new_writer();
    gguf_writer_set_alignment(w, alignment);
    static const struct { const char *name; uint32_t type; uint32_t n_dims; int64_t ne[2]; } ts[] = {
        {"f32", CLEF_DTYPE_F32, 2, {4, 3}},    {"f16", CLEF_DTYPE_F16, 2, {8, 2}},
        {"bf16", CLEF_DTYPE_BF16, 1, {8, 1}},  {"q8_0", CLEF_DTYPE_Q8_0, 2, {32, 2}},
        {"q4_k", CLEF_DTYPE_Q4_K, 1, {256, 1}}, {"q5_k", CLEF_DTYPE_Q5_K, 1, {256, 1}},
        {"q6_k", CLEF_DTYPE_Q6_K, 1, {256, 1}}, {"i32", CLEF_DTYPE_I32, 1, {4, 1}},
    };
    unsigned char data[512];
    for (size_t i = 0; i < sizeof data; i++) data[i] = (unsigned char)((i * 37 + 11) & 0x3b);
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) {
        uint64_t n = (uint64_t)ts[i].ne[0] * (uint64_t)(ts[i].n_dims > 1 ? ts[i].ne[1] : 1), bytes;
        if (!clef_dtype_row_bytes(ts[i].type, n, &bytes) || bytes > sizeof data) abort();
        gguf_writer_add_tensor(w, ts[i].name, ts[i].type, ts[i].n_dims, ts[i].ne, data, bytes);
    }
    return w;
}

/* 256 byte tokens, a few merges, two control tokens. */
static gguf_writer *tokenizer(const char *pre) {
    gguf_writer *w = new_writer();
    gguf_writer_add_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_add_str(w, "tokenizer.ggml.pre", pre);
    enum { N_BYTES = 256, N_EXTRA = 6 };
    static const char *extra[N_EXTRA] = {"hi", "\xC4\xA0t", "\xC4\xA0th", "er",
                                         "<|im_start|>", "<|im_end|>"};
    static const char *merges[] = {"h i", "\xC4\xA0 t", "\xC4\xA0t h", "e r"};
    char bytes[N_BYTES][3];
    const char *toks[N_BYTES + N_EXTRA];
    int32_t types[N_BYTES + N_EXTRA];
    for (int b = 0; b < N_BYTES; b++) {
        size_t n = tok_byte_to_utf8((uint8_t)b, bytes[b]);
        bytes[b][n] = '\0';
        toks[b] = bytes[b];
        types[b] = 1;
    }
    for (int i = 0; i < N_EXTRA; i++) {
        toks[N_BYTES + i] = extra[i];
        types[N_BYTES + i] = i >= 4 ? 3 : 1;
    }
    gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", toks, NULL, N_BYTES + N_EXTRA);
    gguf_writer_add_arr(w, "tokenizer.ggml.token_type", GGUF_VT_INT32, types, N_BYTES + N_EXTRA);
    gguf_writer_add_arr_str(w, "tokenizer.ggml.merges", merges, NULL, 4);
    gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", N_BYTES + 4);
    gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", N_BYTES + 5);
    return w;
}

static void copy_kv(gguf_writer *w, const gguf_file *f, const gguf_kv *kv) {
    char key[256];
    snprintf(key, sizeof key, "%.*s", (int)kv->key.len, kv->key.ptr);
    const void *p = kv->data;
    switch (kv->type) {
    case GGUF_VT_STRING: {
        gguf_str s;
        gguf_get_str(f, key, &s);
        gguf_writer_add_strn(w, key, s.ptr, (size_t)s.len);
        break;
    }
    case GGUF_VT_ARRAY:
        if (kv->arr_type == GGUF_VT_STRING) {
            const char **strs = malloc((kv->arr_n + 1) * sizeof *strs);
            size_t *lens = malloc((kv->arr_n + 1) * sizeof *lens);
            if (!strs || !lens) abort();
            for (uint64_t i = 0; i < kv->arr_n; i++) {
                gguf_str s;
                gguf_arr_str(f, kv, i, &s);
                strs[i] = s.ptr;
                lens[i] = (size_t)s.len;
            }
            gguf_writer_add_arr_str(w, key, strs, lens, kv->arr_n);
            free(strs);
            free(lens);
        } else {
            gguf_writer_add_arr(w, key, kv->arr_type, p, kv->arr_n);
        }
        break;
    case GGUF_VT_UINT8: gguf_writer_add_u8(w, key, *(const uint8_t *)p); break;
    case GGUF_VT_INT8: gguf_writer_add_i8(w, key, *(const int8_t *)p); break;
    case GGUF_VT_UINT16: { uint16_t v; memcpy(&v, p, 2); gguf_writer_add_u16(w, key, v); break; }
    case GGUF_VT_INT16: { int16_t v; memcpy(&v, p, 2); gguf_writer_add_i16(w, key, v); break; }
    case GGUF_VT_UINT32: { uint32_t v; memcpy(&v, p, 4); gguf_writer_add_u32(w, key, v); break; }
    case GGUF_VT_INT32: { int32_t v; memcpy(&v, p, 4); gguf_writer_add_i32(w, key, v); break; }
    case GGUF_VT_FLOAT32: { float v; memcpy(&v, p, 4); gguf_writer_add_f32(w, key, v); break; }
    case GGUF_VT_BOOL: gguf_writer_add_bool(w, key, *(const uint8_t *)p != 0); break;
    case GGUF_VT_UINT64: { uint64_t v; memcpy(&v, p, 8); gguf_writer_add_u64(w, key, v); break; }
    case GGUF_VT_INT64: { int64_t v; memcpy(&v, p, 8); gguf_writer_add_i64(w, key, v); break; }
    case GGUF_VT_FLOAT64: { double v; memcpy(&v, p, 8); gguf_writer_add_f64(w, key, v); break; }
    }
}

static int model_metadata(const char *dir, const char *path) {
    gguf_file *f = NULL;
    clef_error err;
    if (gguf_open(path, &f, &err) != CLEF_OK) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    gguf_writer *w = new_writer();
    for (uint64_t i = 0; i < gguf_kv_count(f); i++) copy_kv(w, f, gguf_kv_at(f, i));
    gguf_close(f);
    return write_seed(dir, "model_metadata.gguf", w, 0);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: gen_gguf_seeds OUT_DIR [MODEL.gguf]\n");
        return 2;
    }
    const char *dir = argv[1];
    int bad = write_seed(dir, "empty.gguf", new_writer(), 0);
    bad |= write_seed(dir, "empty_v2.gguf", new_writer(), 2);
    bad |= write_seed(dir, "kv_all.gguf", kv_all(), 0);
    bad |= write_seed(dir, "tensors.gguf", tensors(32), 0);
    bad |= write_seed(dir, "tensors_align1_v2.gguf", tensors(1), 2);
    bad |= write_seed(dir, "tokenizer_qwen2.gguf", tokenizer("qwen2"), 0);
    bad |= write_seed(dir, "tokenizer_qwen35.gguf", tokenizer("qwen35"), 0);
    if (argc > 2) bad |= model_metadata(dir, argv[2]);
    return bad;
}
