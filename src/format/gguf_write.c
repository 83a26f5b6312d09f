/*
 * format/gguf_write.c — the GGUF v3 builder.
 *
 * Metadata is serialized into a byte buffer as it is added (key, type,
 * value: exactly the file's bytes), so writing is a concatenation: header,
 * kv bytes, tensor records, padding, tensor data.
 */
#include "format/gguf_write.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/error.h"

typedef struct bytebuf {
    uint8_t *p;
    size_t n, cap;
} bytebuf;

typedef struct wtensor {
    char *name;
    uint32_t type, n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    const void *data;
    void *owned;              /* copy of data when added with add_tensor */
    bool deferred;            /* no data: bytes come through a gguf_stream */
    uint64_t nbytes, offset;
} wtensor;

struct gguf_writer {
    bytebuf kv;               /* serialized metadata records */
    uint64_t n_kv;
    char **keys;              /* copies, for duplicate checks */
    uint64_t keys_cap;
    wtensor *tensors;
    uint64_t n_tensors, tensors_cap;
    uint64_t alignment;
    uint64_t data_size;       /* bytes of the data section so far */
    clef_error err;           /* first failure, sticky */
};

static clef_status fail(gguf_writer *w, clef_status st, const char *fmt, const char *what) {
    if (w->err.status == CLEF_OK) clef_err_set(&w->err, st, fmt, what);
    return st;
}

static clef_status nomem(gguf_writer *w) { return fail(w, CLEF_ERR_NOMEM, "gguf writer: %s", "out of memory"); }

static bool buf_put(bytebuf *b, const void *src, size_t n) {
    if (n > SIZE_MAX - b->n) return false;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) return false;
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, src, n);
    b->n += n;
    return true;
}

static bool buf_le(bytebuf *b, uint64_t v, int nbytes) {
    uint8_t t[8];
    for (int i = 0; i < nbytes; i++) t[i] = (uint8_t)(v >> (8 * i));
    return buf_put(b, t, (size_t)nbytes);
}

static bool buf_str(bytebuf *b, const char *s, size_t len) {
    return buf_le(b, len, 8) && buf_put(b, s, len);
}

gguf_writer *gguf_writer_new(void) {
    gguf_writer *w = calloc(1, sizeof *w);
    if (w) w->alignment = 32;
    return w;
}

void gguf_writer_free(gguf_writer *w) {
    if (!w) return;
    free(w->kv.p);
    for (uint64_t i = 0; i < w->n_kv; i++) free(w->keys[i]);
    free(w->keys);
    for (uint64_t i = 0; i < w->n_tensors; i++) {
        free(w->tensors[i].name);
        free(w->tensors[i].owned);
    }
    free(w->tensors);
    free(w);
}

clef_status gguf_writer_status(const gguf_writer *w, clef_error *err) {
    if (w->err.status != CLEF_OK && err) *err = w->err;
    return w->err.status;
}

/* Check the key, remember it, write its string and type.  Returns non-OK
 * (recorded) on a bad or duplicate key. */
static clef_status kv_begin(gguf_writer *w, const char *key, gguf_vtype type) {
    if (w->err.status) return w->err.status;
    if (!key || !*key) return fail(w, CLEF_ERR_INVALID_ARG, "gguf writer: %s", "empty metadata key");
    for (uint64_t i = 0; i < w->n_kv; i++)
        if (!strcmp(w->keys[i], key))
            return fail(w, CLEF_ERR_INVALID_ARG, "gguf writer: duplicate metadata key '%s'", key);
    if (w->n_kv == w->keys_cap) {
        uint64_t cap = w->keys_cap ? 2 * w->keys_cap : 32;
        char **k = realloc(w->keys, (size_t)cap * sizeof *k);
        if (!k) return nomem(w);
        w->keys = k;
        w->keys_cap = cap;
    }
    char *copy = strdup(key);
    if (!copy) return nomem(w);
    if (!buf_str(&w->kv, key, strlen(key)) || !buf_le(&w->kv, (uint64_t)type, 4)) {
        free(copy);
        return nomem(w);
    }
    w->keys[w->n_kv++] = copy;
    return CLEF_OK;
}

static clef_status add_scalar(gguf_writer *w, const char *key, gguf_vtype t, uint64_t bits, int n) {
    clef_status st = kv_begin(w, key, t);
    if (st) return st;
    return buf_le(&w->kv, bits, n) ? CLEF_OK : nomem(w);
}

clef_status gguf_writer_add_u8(gguf_writer *w, const char *k, uint8_t v) { return add_scalar(w, k, GGUF_VT_UINT8, v, 1); }
clef_status gguf_writer_add_i8(gguf_writer *w, const char *k, int8_t v) { return add_scalar(w, k, GGUF_VT_INT8, (uint8_t)v, 1); }
clef_status gguf_writer_add_u16(gguf_writer *w, const char *k, uint16_t v) { return add_scalar(w, k, GGUF_VT_UINT16, v, 2); }
clef_status gguf_writer_add_i16(gguf_writer *w, const char *k, int16_t v) { return add_scalar(w, k, GGUF_VT_INT16, (uint16_t)v, 2); }
clef_status gguf_writer_add_u32(gguf_writer *w, const char *k, uint32_t v) { return add_scalar(w, k, GGUF_VT_UINT32, v, 4); }
clef_status gguf_writer_add_i32(gguf_writer *w, const char *k, int32_t v) { return add_scalar(w, k, GGUF_VT_INT32, (uint32_t)v, 4); }
clef_status gguf_writer_add_u64(gguf_writer *w, const char *k, uint64_t v) { return add_scalar(w, k, GGUF_VT_UINT64, v, 8); }
clef_status gguf_writer_add_i64(gguf_writer *w, const char *k, int64_t v) { return add_scalar(w, k, GGUF_VT_INT64, (uint64_t)v, 8); }
clef_status gguf_writer_add_bool(gguf_writer *w, const char *k, bool v) { return add_scalar(w, k, GGUF_VT_BOOL, v ? 1 : 0, 1); }

clef_status gguf_writer_add_f32(gguf_writer *w, const char *k, float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    return add_scalar(w, k, GGUF_VT_FLOAT32, u, 4);
}

clef_status gguf_writer_add_f64(gguf_writer *w, const char *k, double v) {
    uint64_t u;
    memcpy(&u, &v, 8);
    return add_scalar(w, k, GGUF_VT_FLOAT64, u, 8);
}

clef_status gguf_writer_add_strn(gguf_writer *w, const char *key, const char *s, size_t len) {
    clef_status st = kv_begin(w, key, GGUF_VT_STRING);
    if (st) return st;
    return buf_str(&w->kv, s, len) ? CLEF_OK : nomem(w);
}

clef_status gguf_writer_add_str(gguf_writer *w, const char *key, const char *s) {
    return gguf_writer_add_strn(w, key, s, strlen(s));
}

clef_status gguf_writer_set_alignment(gguf_writer *w, uint32_t alignment) {
    if (alignment == 0 || (alignment & (alignment - 1)))
        return fail(w, CLEF_ERR_INVALID_ARG, "gguf writer: %s",
                    "alignment must be a non-zero power of two");
    if (w->n_tensors)
        return fail(w, CLEF_ERR_INVALID_ARG, "gguf writer: %s",
                    "set the alignment before adding tensors");
    clef_status st = gguf_writer_add_u32(w, "general.alignment", alignment);
    if (st == CLEF_OK) w->alignment = alignment;
    return st;
}

/* Element size of a fixed-size vtype, 0 for STRING/ARRAY/unknown. */
static int elem_size(gguf_vtype t) {
    switch (t) {
    case GGUF_VT_UINT8: case GGUF_VT_INT8: case GGUF_VT_BOOL: return 1;
    case GGUF_VT_UINT16: case GGUF_VT_INT16: return 2;
    case GGUF_VT_UINT32: case GGUF_VT_INT32: case GGUF_VT_FLOAT32: return 4;
    case GGUF_VT_UINT64: case GGUF_VT_INT64: case GGUF_VT_FLOAT64: return 8;
    default: return 0;
    }
}

clef_status gguf_writer_add_arr(gguf_writer *w, const char *key, gguf_vtype elem_type,
                                const void *elems, uint64_t n) {
    int es = elem_size(elem_type);
    if (!es) return fail(w, CLEF_ERR_INVALID_ARG, "gguf writer: key '%s': array element type must be fixed-size", key ? key : "");
    clef_status st = kv_begin(w, key, GGUF_VT_ARRAY);
    if (st) return st;
    if (!buf_le(&w->kv, (uint64_t)elem_type, 4) || !buf_le(&w->kv, n, 8)) return nomem(w);
    const uint8_t *p = elems;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t v = 0;
        if (elem_type == GGUF_VT_BOOL) {
            bool b;
            memcpy(&b, p + i, 1);
            v = b ? 1 : 0;
        } else {
            memcpy(&v, p + i * (uint64_t)es, (size_t)es); /* host is little-endian */
        }
        if (!buf_le(&w->kv, v, es)) return nomem(w);
    }
    return CLEF_OK;
}

clef_status gguf_writer_add_arr_str(gguf_writer *w, const char *key, const char *const *strs,
                                    const size_t *lens, uint64_t n) {
    clef_status st = kv_begin(w, key, GGUF_VT_ARRAY);
    if (st) return st;
    if (!buf_le(&w->kv, GGUF_VT_STRING, 4) || !buf_le(&w->kv, n, 8)) return nomem(w);
    for (uint64_t i = 0; i < n; i++)
        if (!buf_str(&w->kv, strs[i], lens ? lens[i] : strlen(strs[i]))) return nomem(w);
    return CLEF_OK;
}

static clef_status add_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                              const int64_t *ne, const void *data, size_t nbytes, bool copy,
                              bool deferred) {
    if (w->err.status) return w->err.status;
    if (!name || !*name) return fail(w, CLEF_ERR_INVALID_ARG, "gguf writer: %s", "empty tensor name");
    for (uint64_t i = 0; i < w->n_tensors; i++)
        if (!strcmp(w->tensors[i].name, name))
            return fail(w, CLEF_ERR_INVALID_ARG, "gguf writer: duplicate tensor name '%s'", name);
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return fail(w, CLEF_ERR_INVALID_ARG, "gguf writer: tensor '%s': n_dims must be 1..4", name);
    uint64_t count = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] < 1 || count > (uint64_t)INT64_MAX / (uint64_t)ne[d])
            return fail(w, CLEF_ERR_INVALID_ARG, "gguf writer: tensor '%s': bad dimension", name);
        count *= (uint64_t)ne[d];
    }
    uint64_t row, want;
    if (!clef_dtype_row_bytes(type, (uint64_t)ne[0], &row) || row == 0)
        return fail(w, CLEF_ERR_INVALID_ARG,
                    "gguf writer: tensor '%s': unknown type or ne[0] not a multiple of its block", name);
    if (row > UINT64_MAX / (count / (uint64_t)ne[0]))
        return fail(w, CLEF_ERR_INVALID_ARG, "gguf writer: tensor '%s': too large", name);
    want = row * (count / (uint64_t)ne[0]);
    if (deferred) nbytes = (size_t)want; /* the stream supplies exactly this many */
    if (want != nbytes)
        return fail(w, CLEF_ERR_INVALID_ARG,
                    "gguf writer: tensor '%s': byte count does not match type and shape", name);
    if (w->n_tensors == w->tensors_cap) {
        uint64_t cap = w->tensors_cap ? 2 * w->tensors_cap : 32;
        wtensor *t = realloc(w->tensors, (size_t)cap * sizeof *t);
        if (!t) return nomem(w);
        w->tensors = t;
        w->tensors_cap = cap;
    }
    wtensor t = {0};
    t.name = strdup(name);
    if (!t.name) return nomem(w);
    if (copy && nbytes) {
        t.owned = malloc(nbytes);
        if (!t.owned) { free(t.name); return nomem(w); }
        memcpy(t.owned, data, nbytes);
    }
    t.data = copy ? t.owned : data;
    t.deferred = deferred;
    t.type = type;
    t.n_dims = n_dims;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) t.ne[d] = d < n_dims ? ne[d] : 1;
    t.nbytes = nbytes;
    t.offset = w->data_size;
    w->data_size += (nbytes + w->alignment - 1) / w->alignment * w->alignment;
    w->tensors[w->n_tensors++] = t;
    return CLEF_OK;
}

clef_status gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t type,
                                   uint32_t n_dims, const int64_t *ne, const void *data,
                                   size_t nbytes) {
    return add_tensor(w, name, type, n_dims, ne, data, nbytes, true, false);
}

clef_status gguf_writer_add_tensor_ref(gguf_writer *w, const char *name, uint32_t type,
                                       uint32_t n_dims, const int64_t *ne, const void *data,
                                       size_t nbytes) {
    return add_tensor(w, name, type, n_dims, ne, data, nbytes, false, false);
}

clef_status gguf_writer_add_tensor_info(gguf_writer *w, const char *name, uint32_t type,
                                        uint32_t n_dims, const int64_t *ne) {
    return add_tensor(w, name, type, n_dims, ne, NULL, 0, false, true);
}

/* Header bytes up to (not including) the padding before the data section. */
static bool build_header(const gguf_writer *w, bytebuf *h) {
    bool ok = buf_put(h, "GGUF", 4) && buf_le(h, 3, 4) && buf_le(h, w->n_tensors, 8) &&
              buf_le(h, w->n_kv, 8) && buf_put(h, w->kv.p, w->kv.n);
    for (uint64_t i = 0; ok && i < w->n_tensors; i++) {
        const wtensor *t = &w->tensors[i];
        ok = buf_str(h, t->name, strlen(t->name)) && buf_le(h, t->n_dims, 4);
        for (uint32_t d = 0; ok && d < t->n_dims; d++) ok = buf_le(h, (uint64_t)t->ne[d], 8);
        ok = ok && buf_le(h, t->type, 4) && buf_le(h, t->offset, 8);
    }
    /* The data section starts at the next multiple of the alignment. */
    static const uint8_t zeros[64] = {0};
    while (ok && w->n_tensors && h->n % w->alignment) {
        size_t pad = (size_t)(w->alignment - h->n % w->alignment);
        ok = buf_put(h, zeros, pad < sizeof zeros ? pad : sizeof zeros);
    }
    return ok;
}

/* Calls emit(ctx, bytes, n) for every piece of the file in order. */
typedef bool (*emit_fn)(void *ctx, const void *p, size_t n);

static clef_status emit_all(const gguf_writer *w, emit_fn emit, void *ctx, clef_error *err) {
    if (w->err.status) return gguf_writer_status(w, err);
    for (uint64_t i = 0; i < w->n_tensors; i++)
        if (w->tensors[i].deferred)
            return clef_err_set(err, CLEF_ERR_INVALID_ARG,
                                "gguf writer: tensor '%s' has no data (write it with gguf_stream)",
                                w->tensors[i].name);
    bytebuf h = {0};
    if (!build_header(w, &h)) {
        free(h.p);
        return clef_err_set(err, CLEF_ERR_NOMEM, "gguf writer: out of memory building the header");
    }
    bool ok = emit(ctx, h.p, h.n);
    free(h.p);
    static const uint8_t zeros[64] = {0};
    for (uint64_t i = 0; ok && i < w->n_tensors; i++) {
        const wtensor *t = &w->tensors[i];
        ok = emit(ctx, t->data, (size_t)t->nbytes);
        for (uint64_t pad = (w->alignment - t->nbytes % w->alignment) % w->alignment; ok && pad;) {
            size_t n = pad < sizeof zeros ? (size_t)pad : sizeof zeros;
            ok = emit(ctx, zeros, n);
            pad -= n;
        }
    }
    return ok ? CLEF_OK : CLEF_ERR_IO;
}

static bool emit_file(void *ctx, const void *p, size_t n) {
    return n == 0 || fwrite(p, 1, n, (FILE *)ctx) == n;
}

static bool emit_mem(void *ctx, const void *p, size_t n) { return buf_put(ctx, p, n); }

clef_status gguf_writer_write_file(const gguf_writer *w, const char *path, clef_error *err) {
    if (w->err.status) return gguf_writer_status(w, err);
    FILE *f = fopen(path, "wb");
    if (!f) return clef_err_set(err, CLEF_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    clef_status st = emit_all(w, emit_file, f, err);
    if (fclose(f) != 0 && st == CLEF_OK) st = CLEF_ERR_IO;
    if (st == CLEF_ERR_IO) clef_err_set(err, st, "%s: write failed: %s", path, strerror(errno));
    return st;
}

clef_status gguf_writer_write_memory(const gguf_writer *w, void **out, size_t *len,
                                     clef_error *err) {
    *out = NULL;
    *len = 0;
    bytebuf b = {0};
    clef_status st = emit_all(w, emit_mem, &b, err);
    if (st == CLEF_ERR_IO) st = clef_err_set(err, CLEF_ERR_NOMEM, "gguf writer: out of memory");
    if (st) {
        free(b.p);
        return st;
    }
    *out = b.p;
    *len = b.n;
    return CLEF_OK;
}

/* ---- streaming ---------------------------------------------------------------- */

struct gguf_stream {
    const gguf_writer *w;
    FILE *f;
    char *path;
    uint64_t cur;             /* tensor the next bytes belong to */
    uint64_t done;            /* bytes of tensor cur already written */
    clef_error err;           /* first failure, sticky */
};

static clef_status stream_fail_io(gguf_stream *s) {
    if (s->err.status == CLEF_OK)
        clef_err_set(&s->err, CLEF_ERR_IO, "%s: write failed: %s", s->path, strerror(errno));
    return s->err.status;
}

static bool stream_put(gguf_stream *s, const void *p, size_t n) {
    return n == 0 || fwrite(p, 1, n, s->f) == n;
}

/* Close tensor cur (padding) and write every following tensor that has its
 * data, stopping at the next deferred one. */
static clef_status stream_advance(gguf_stream *s) {
    static const uint8_t zeros[64] = {0};
    const gguf_writer *w = s->w;
    while (s->cur < w->n_tensors) {
        const wtensor *t = &w->tensors[s->cur];
        if (s->done < t->nbytes) {
            if (t->deferred) return CLEF_OK;
            if (!stream_put(s, t->data, (size_t)t->nbytes)) return stream_fail_io(s);
            s->done = t->nbytes;
        }
        for (uint64_t pad = (w->alignment - t->nbytes % w->alignment) % w->alignment; pad;) {
            size_t n = pad < sizeof zeros ? (size_t)pad : sizeof zeros;
            if (!stream_put(s, zeros, n)) return stream_fail_io(s);
            pad -= n;
        }
        s->cur++;
        s->done = 0;
    }
    return CLEF_OK;
}

clef_status gguf_stream_open(const gguf_writer *w, const char *path, gguf_stream **out,
                             clef_error *err) {
    *out = NULL;
    if (w->err.status) return gguf_writer_status(w, err);
    gguf_stream *s = calloc(1, sizeof *s);
    if (s) s->path = strdup(path);
    if (!s || !s->path) {
        free(s);
        return clef_err_set(err, CLEF_ERR_NOMEM, "gguf writer: out of memory");
    }
    s->w = w;
    s->f = fopen(path, "wb");
    if (!s->f) {
        clef_err_set(err, CLEF_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
        free(s->path);
        free(s);
        return CLEF_ERR_IO;
    }
    setvbuf(s->f, NULL, _IOFBF, 1 << 20);
    bytebuf h = {0};
    clef_status st = CLEF_OK;
    if (!build_header(w, &h))
        st = clef_err_set(&s->err, CLEF_ERR_NOMEM, "gguf writer: out of memory building the header");
    else if (!stream_put(s, h.p, h.n))
        st = stream_fail_io(s);
    free(h.p);
    if (st == CLEF_OK) st = stream_advance(s);
    if (st != CLEF_OK) {
        if (err) *err = s->err;
        gguf_stream_abort(s);
        return st;
    }
    *out = s;
    return CLEF_OK;
}

uint64_t gguf_stream_tensor(const gguf_stream *s) { return s->cur; }

clef_status gguf_stream_write(gguf_stream *s, const void *p, size_t n, clef_error *err) {
    const uint8_t *b = p;
    while (n && s->err.status == CLEF_OK) {
        if (s->cur >= s->w->n_tensors) {
            clef_err_set(&s->err, CLEF_ERR_INVALID_ARG, "%s: %zu bytes past the last tensor",
                         s->path, n);
            break;
        }
        const wtensor *t = &s->w->tensors[s->cur];
        size_t take = (size_t)(t->nbytes - s->done) < n ? (size_t)(t->nbytes - s->done) : n;
        if (!stream_put(s, b, take)) {
            stream_fail_io(s);
            break;
        }
        s->done += take;
        b += take;
        n -= take;
        if (s->done == t->nbytes) stream_advance(s);
    }
    if (s->err.status && err) *err = s->err;
    return s->err.status;
}

clef_status gguf_stream_close(gguf_stream *s, clef_error *err) {
    if (s->err.status == CLEF_OK && s->cur < s->w->n_tensors)
        clef_err_set(&s->err, CLEF_ERR_INVALID_ARG,
                     "%s: tensor '%s' incomplete (%llu of %llu bytes written)", s->path,
                     s->w->tensors[s->cur].name, (unsigned long long)s->done,
                     (unsigned long long)s->w->tensors[s->cur].nbytes);
    if (s->err.status == CLEF_OK && fflush(s->f) != 0) stream_fail_io(s);
    if (fclose(s->f) != 0 && s->err.status == CLEF_OK) stream_fail_io(s);
    s->f = NULL;
    clef_status st = s->err.status;
    if (st != CLEF_OK) {
        if (err) *err = s->err;
        remove(s->path);
    }
    free(s->path);
    free(s);
    return st;
}

void gguf_stream_abort(gguf_stream *s) {
    if (!s) return;
    if (s->f) fclose(s->f);
    remove(s->path);
    free(s->path);
    free(s);
}
