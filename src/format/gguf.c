/*
 * format/gguf.c — the GGUF v2/v3 reader: map (or copy), validate
 * everything, then serve lookups that can no longer fail on bounds.
 *
 * Parsing walks the header once with a bounds-checked cursor.  Every length
 * and count is checked against the bytes that remain before it is used, so a
 * hostile file makes the parser fail with a message, never read past the end.
 * Arrays of kvs/tensors grow as records are parsed (a bogus count runs into
 * the file end instead of into a huge allocation).  Lookups by name use small
 * open-addressing hash tables built at open, which also find duplicates.
 */
#include "format/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/dtype.h"
#include "core/error.h"

#define GGUF_MAGIC "GGUF"
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_KEY_LEN 65535u          /* the spec's limit on key length          */
#define GGUF_MAX_NAME_LEN 255u           /* tensor names (ggml allows 63)          */
#define GGUF_MAX_STR_LEN (256u << 20)    /* one string value: 256 MiB is absurd    */
/* Smallest possible records, to refuse counts the file cannot hold. */
#define GGUF_MIN_KV_BYTES (8 + 1 + 4 + 1)
#define GGUF_MIN_TENSOR_BYTES (8 + 1 + 4 + 8 + 4 + 8)

struct gguf_file {
    const uint8_t *base;
    size_t size;
    bool mapped;              /* base came from mmap (of the file, or anonymous
                                 holding its copy) and is unmapped at close */
    uint32_t version;
    uint64_t alignment;
    uint64_t data_offset;     /* start of the tensor data section             */

    gguf_kv *kvs;
    uint64_t n_kv;
    uint64_t **str_off;       /* per kv: element offsets of string arrays, else NULL */
    uint32_t *kv_index;       /* hash table of kv index + 1; 0 = empty        */
    uint64_t kv_index_mask;

    gguf_tensor *tensors;
    uint64_t n_tensors;
    uint32_t *t_index;
    uint64_t t_index_mask;
};

/* ---- bounds-checked cursor ------------------------------------------------ */

typedef struct cursor {
    const uint8_t *base;
    size_t size;
    size_t pos;
    clef_error *err;
} cursor;

static size_t cur_left(const cursor *c) { return c->size - c->pos; }

static clef_status cur_truncated(cursor *c, const char *what, uint64_t need) {
    return clef_err_set(c->err, CLEF_ERR_FORMAT,
                        "truncated at byte %zu: %s needs %llu bytes, only %zu left "
                        "(file is %zu bytes)",
                        c->pos, what, (unsigned long long)need, cur_left(c), c->size);
}

static clef_status cur_bytes(cursor *c, const char *what, uint64_t n, const uint8_t **out) {
    if (n > cur_left(c)) return cur_truncated(c, what, n);
    *out = c->base + c->pos;
    c->pos += (size_t)n;
    return CLEF_OK;
}

static clef_status cur_u32(cursor *c, const char *what, uint32_t *out) {
    const uint8_t *p = NULL;
    clef_status st = cur_bytes(c, what, 4, &p);
    if (st == CLEF_OK) *out = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                              (uint32_t)p[3] << 24;
    return st;
}

static uint64_t load_u64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static clef_status cur_u64(cursor *c, const char *what, uint64_t *out) {
    const uint8_t *p = NULL;
    clef_status st = cur_bytes(c, what, 8, &p);
    if (st == CLEF_OK) *out = load_u64(p);
    return st;
}

/* A GGUF string: u64 length + bytes.  `what` names it for messages. */
static clef_status cur_str(cursor *c, const char *what, uint64_t max_len, gguf_str *out) {
    size_t at = c->pos;
    uint64_t len;
    clef_status st = cur_u64(c, what, &len);
    if (st) return st;
    if (len > max_len)
        return clef_err_set(c->err, CLEF_ERR_FORMAT,
                            "%s at byte %zu: length %llu exceeds the limit of %llu", what, at,
                            (unsigned long long)len, (unsigned long long)max_len);
    const uint8_t *p = NULL;
    if ((st = cur_bytes(c, what, len, &p))) return st;
    out->ptr = (const char *)p;
    out->len = len;
    return CLEF_OK;
}

/* ---- small helpers -------------------------------------------------------- */

bool gguf_str_eq(gguf_str s, const char *cstr) {
    size_t n = strlen(cstr);
    return s.len == n && (n == 0 || memcmp(s.ptr, cstr, n) == 0);
}

const char *gguf_vtype_name(gguf_vtype t) {
    static const char *const names[] = {"u8",  "i8",  "u16",    "i16",   "u32", "i32", "f32",
                                        "bool", "string", "array", "u64", "i64", "f64"};
    return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "unknown";
}

/* Bytes of one fixed-size value, 0 for string/array/unknown. */
uint64_t gguf_vtype_size(gguf_vtype t) {
    switch (t) {
    case GGUF_VT_UINT8: case GGUF_VT_INT8: case GGUF_VT_BOOL: return 1;
    case GGUF_VT_UINT16: case GGUF_VT_INT16: return 2;
    case GGUF_VT_UINT32: case GGUF_VT_INT32: case GGUF_VT_FLOAT32: return 4;
    case GGUF_VT_UINT64: case GGUF_VT_INT64: case GGUF_VT_FLOAT64: return 8;
    default: return 0;
    }
}

static bool vtype_known(uint32_t t) { return t <= GGUF_VT_FLOAT64; }

static uint64_t hash_bytes(const char *p, uint64_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (uint64_t i = 0; i < n; i++) h = (h ^ (uint8_t)p[i]) * 1099511628211ull;
    return h;
}

/* Printable, truncated copy of a file string for messages. */
static const char *show(gguf_str s, char buf[80]) {
    size_t n = s.len < 64 ? (size_t)s.len : 64, j = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s.ptr[i];
        buf[j++] = (ch >= 0x20 && ch < 0x7f) ? (char)ch : '?';
    }
    if (s.len > n) { buf[j++] = '.'; buf[j++] = '.'; buf[j++] = '.'; }
    buf[j] = '\0';
    return buf;
}

static clef_status grow(void **arr, uint64_t *cap, uint64_t need, size_t elem, clef_error *err) {
    if (need <= *cap) return CLEF_OK;
    uint64_t ncap = *cap ? *cap * 2 : 16;
    while (ncap < need) ncap *= 2;
    void *p = realloc(*arr, (size_t)ncap * elem);
    if (!p) return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory growing the GGUF index");
    *arr = p;
    *cap = ncap;
    return CLEF_OK;
}

/* ---- metadata ------------------------------------------------------------- */

/* Check the bytes of n fixed-size values (bools must be 0 or 1). */
static clef_status check_fixed(cursor *c, gguf_str key, uint32_t t, const uint8_t *p, uint64_t n) {
    if (t != GGUF_VT_BOOL) return CLEF_OK;
    char kb[80];
    for (uint64_t i = 0; i < n; i++)
        if (p[i] > 1)
            return clef_err_set(c->err, CLEF_ERR_FORMAT,
                                "key '%s': bool value %u at byte %zu is not 0 or 1",
                                show(key, kb), p[i], (size_t)(p + i - c->base));
    return CLEF_OK;
}

/* Parse an array value; string arrays get their element offsets indexed. */
static clef_status parse_array(cursor *c, gguf_kv *kv, uint64_t **str_off) {
    char kb[80];
    size_t at = c->pos;
    uint32_t et;
    uint64_t n;
    clef_status st = cur_u32(c, "array element type", &et);
    if (st || (st = cur_u64(c, "array element count", &n))) return st;
    if (et == GGUF_VT_ARRAY)
        return clef_err_set(c->err, CLEF_ERR_UNSUPPORTED,
                            "key '%s': arrays of arrays are not supported (byte %zu)",
                            show(kv->key, kb), at);
    if (!vtype_known(et))
        return clef_err_set(c->err, CLEF_ERR_FORMAT,
                            "key '%s': unknown array element type %u at byte %zu",
                            show(kv->key, kb), et, at);
    kv->arr_type = (gguf_vtype)et;
    kv->arr_n = n;
    size_t start = c->pos;
    if (et != GGUF_VT_STRING) {
        uint64_t es = gguf_vtype_size(et);
        if (n > cur_left(c) / es)
            return clef_err_set(c->err, CLEF_ERR_FORMAT,
                                "key '%s': array of %llu %s values at byte %zu runs past the "
                                "file end (truncated at byte %zu: %zu bytes left)",
                                show(kv->key, kb), (unsigned long long)n, gguf_vtype_name(et), at,
                                c->pos, cur_left(c));
        const uint8_t *p = NULL;
        if ((st = cur_bytes(c, "array data", n * es, &p))) return st;
        if ((st = check_fixed(c, kv->key, et, p, n))) return st;
    } else {
        if (n > cur_left(c) / 8)
            return clef_err_set(c->err, CLEF_ERR_FORMAT,
                                "key '%s': array of %llu strings at byte %zu runs past the "
                                "file end (truncated at byte %zu: %zu bytes left)",
                                show(kv->key, kb), (unsigned long long)n, at, c->pos,
                                cur_left(c));
        uint64_t *off = malloc((size_t)(n ? n : 1) * sizeof *off);
        if (!off) return clef_err_set(c->err, CLEF_ERR_NOMEM, "out of memory indexing key '%s'",
                                      show(kv->key, kb));
        *str_off = off;
        for (uint64_t i = 0; i < n; i++) {
            off[i] = c->pos - start;
            gguf_str s = {0};
            if ((st = cur_str(c, "string array element", GGUF_MAX_STR_LEN, &s)))
                return clef_err_wrap(c->err, "key '%s' element %llu", show(kv->key, kb),
                                     (unsigned long long)i);
        }
    }
    kv->data = c->base + start;
    kv->nbytes = c->pos - start;
    return CLEF_OK;
}

static clef_status parse_kv(cursor *c, gguf_kv *kv, uint64_t **str_off) {
    char kb[80];
    size_t at = c->pos;
    clef_status st = cur_str(c, "metadata key", GGUF_MAX_KEY_LEN, &kv->key);
    if (st) return st;
    if (kv->key.len == 0)
        return clef_err_set(c->err, CLEF_ERR_FORMAT, "empty metadata key at byte %zu", at);
    if (memchr(kv->key.ptr, 0, (size_t)kv->key.len))
        return clef_err_set(c->err, CLEF_ERR_FORMAT,
                            "metadata key at byte %zu contains a NUL byte", at);
    uint32_t t;
    size_t tat = c->pos;
    if ((st = cur_u32(c, "value type", &t))) return clef_err_wrap(c->err, "key '%s'", show(kv->key, kb));
    if (!vtype_known(t))
        return clef_err_set(c->err, CLEF_ERR_FORMAT, "key '%s': unknown value type %u at byte %zu",
                            show(kv->key, kb), t, tat);
    kv->type = (gguf_vtype)t;
    kv->arr_type = 0;
    kv->arr_n = 0;
    if (t == GGUF_VT_ARRAY) return parse_array(c, kv, str_off);
    size_t start = c->pos;
    if (t == GGUF_VT_STRING) {
        gguf_str s = {0};
        if ((st = cur_str(c, "string value", GGUF_MAX_STR_LEN, &s)))
            return clef_err_wrap(c->err, "key '%s'", show(kv->key, kb));
    } else {
        const uint8_t *p = NULL;
        if ((st = cur_bytes(c, gguf_vtype_name(kv->type), gguf_vtype_size(t), &p)))
            return clef_err_wrap(c->err, "key '%s'", show(kv->key, kb));
        if ((st = check_fixed(c, kv->key, t, p, 1))) return st;
    }
    kv->data = c->base + start;
    kv->nbytes = c->pos - start;
    return CLEF_OK;
}

/* ---- hash index ------------------------------------------------------------ */

typedef gguf_str (*name_of_fn)(const gguf_file *f, uint64_t i);
static gguf_str kv_name(const gguf_file *f, uint64_t i) { return f->kvs[i].key; }
static gguf_str tensor_name(const gguf_file *f, uint64_t i) { return f->tensors[i].name; }

static bool str_same(gguf_str a, gguf_str b) {
    return a.len == b.len && (a.len == 0 || memcmp(a.ptr, b.ptr, (size_t)a.len) == 0);
}

/* Build a table for n names; *dup = index of the first duplicate, or n. */
static clef_status index_build(const gguf_file *f, uint64_t n, name_of_fn name, uint32_t **table,
                               uint64_t *mask, uint64_t *dup, clef_error *err) {
    uint64_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    *table = calloc((size_t)cap, sizeof **table);
    if (!*table) return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory for the GGUF index");
    *mask = cap - 1;
    *dup = n;
    for (uint64_t i = 0; i < n; i++) {
        gguf_str s = name(f, i);
        uint64_t h = hash_bytes(s.ptr, s.len) & *mask;
        while ((*table)[h]) {
            if (str_same(name(f, (*table)[h] - 1), s)) { *dup = i; return CLEF_OK; }
            h = (h + 1) & *mask;
        }
        (*table)[h] = (uint32_t)(i + 1);
    }
    return CLEF_OK;
}

static uint64_t index_find(const gguf_file *f, const uint32_t *table, uint64_t mask,
                           name_of_fn name, const char *key) {
    if (!table) return UINT64_MAX;
    size_t n = strlen(key);
    uint64_t h = hash_bytes(key, n) & mask;
    while (table[h]) {
        gguf_str s = name(f, table[h] - 1);
        if (s.len == n && memcmp(s.ptr, key, n) == 0) return table[h] - 1;
        h = (h + 1) & mask;
    }
    return UINT64_MAX;
}

/* ---- tensors ---------------------------------------------------------------- */

static clef_status parse_tensor(cursor *c, gguf_tensor *t) {
    char nb[80];
    size_t at = c->pos;
    clef_status st = cur_str(c, "tensor name", GGUF_MAX_NAME_LEN, &t->name);
    if (st) return st;
    if (t->name.len == 0)
        return clef_err_set(c->err, CLEF_ERR_FORMAT, "empty tensor name at byte %zu", at);
    const char *nm = show(t->name, nb);
    if ((st = cur_u32(c, "tensor n_dims", &t->n_dims))) return clef_err_wrap(c->err, "tensor '%s'", nm);
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
        return clef_err_set(c->err, CLEF_ERR_FORMAT, "tensor '%s': n_dims %u is not in 1..%d",
                            nm, t->n_dims, GGUF_MAX_DIMS);
    uint64_t count = 1;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
        uint64_t v = 1;
        if (d < t->n_dims && (st = cur_u64(c, "tensor dimension", &v)))
            return clef_err_wrap(c->err, "tensor '%s'", nm);
        if (v == 0 || v > (uint64_t)INT64_MAX)
            return clef_err_set(c->err, CLEF_ERR_FORMAT, "tensor '%s': dimension %u is %llu",
                                nm, d, (unsigned long long)v);
        if (count > (uint64_t)INT64_MAX / v)
            return clef_err_set(c->err, CLEF_ERR_FORMAT,
                                "tensor '%s': element count overflows (dimension %u = %llu)", nm,
                                d, (unsigned long long)v);
        count *= v;
        t->ne[d] = (int64_t)v;
    }
    if ((st = cur_u32(c, "tensor type", &t->type))) return clef_err_wrap(c->err, "tensor '%s'", nm);
    const clef_dtype_info *info = clef_dtype_get(t->type);
    if (!info->name)
        return clef_err_set(c->err, CLEF_ERR_FORMAT, "tensor '%s': unknown type %u", nm, t->type);
    if ((uint64_t)t->ne[0] % info->block_size)
        return clef_err_set(c->err, CLEF_ERR_FORMAT,
                            "tensor '%s': ne[0] = %lld is not a multiple of the %s block size %u",
                            nm, (long long)t->ne[0], info->name, info->block_size);
    uint64_t row;
    if (!clef_dtype_row_bytes(t->type, (uint64_t)t->ne[0], &row) || row == 0 ||
        count / (uint64_t)t->ne[0] > UINT64_MAX / row)
        return clef_err_set(c->err, CLEF_ERR_FORMAT, "tensor '%s': byte size overflows", nm);
    t->nbytes = row * (count / (uint64_t)t->ne[0]);
    if ((st = cur_u64(c, "tensor offset", &t->offset))) return clef_err_wrap(c->err, "tensor '%s'", nm);
    t->data = NULL;
    return CLEF_OK;
}

static int cmp_by_offset(const void *a, const void *b) {
    const gguf_tensor *x = *(const gguf_tensor *const *)a, *y = *(const gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Offsets aligned, data inside the file, no two tensors sharing bytes. */
static clef_status place_tensors(gguf_file *f, clef_error *err) {
    char nb[80], nb2[80];
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        if (t->offset % f->alignment)
            return clef_err_set(err, CLEF_ERR_FORMAT,
                                "tensor '%s': offset %llu is not a multiple of the alignment %llu",
                                show(t->name, nb), (unsigned long long)t->offset,
                                (unsigned long long)f->alignment);
        uint64_t room = f->size - f->data_offset;
        if (t->offset > room || t->nbytes > room - t->offset)
            return clef_err_set(err, CLEF_ERR_FORMAT,
                                "tensor '%s': data [%llu, +%llu) ends past the file end "
                                "(data section holds %llu bytes)",
                                show(t->name, nb), (unsigned long long)t->offset,
                                (unsigned long long)t->nbytes, (unsigned long long)room);
        t->data = f->base + f->data_offset + t->offset;
    }
    if (f->n_tensors < 2) return CLEF_OK;
    gguf_tensor **order = malloc((size_t)f->n_tensors * sizeof *order);
    if (!order) return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory checking tensor overlap");
    for (uint64_t i = 0; i < f->n_tensors; i++) order[i] = &f->tensors[i];
    qsort(order, (size_t)f->n_tensors, sizeof *order, cmp_by_offset);
    clef_status st = CLEF_OK;
    for (uint64_t i = 1; i < f->n_tensors && !st; i++) {
        const gguf_tensor *a = order[i - 1], *b = order[i];
        if (b->offset < a->offset + a->nbytes)
            st = clef_err_set(err, CLEF_ERR_FORMAT,
                              "tensor '%s' (offset %llu) overlaps tensor '%s' [%llu, %llu)",
                              show(b->name, nb), (unsigned long long)b->offset,
                              show(a->name, nb2), (unsigned long long)a->offset,
                              (unsigned long long)(a->offset + a->nbytes));
    }
    free(order);
    return st;
}

/* ---- open ------------------------------------------------------------------- */

static clef_status parse_header(gguf_file *f, clef_error *err) {
    cursor c = {f->base, f->size, 0, err};
    if (f->size == 0) return clef_err_set(err, CLEF_ERR_FORMAT, "empty file (0 bytes), not GGUF");
    if (f->size < 4 || memcmp(f->base, GGUF_MAGIC, 4) != 0)
        return clef_err_set(err, CLEF_ERR_FORMAT,
                            "bad magic: not a GGUF file (first bytes are not \"GGUF\")");
    c.pos = 4;
    clef_status st;
    if ((st = cur_u32(&c, "version", &f->version))) return st;
    if (f->version == 1)
        return clef_err_set(err, CLEF_ERR_UNSUPPORTED,
                            "GGUF version 1 is not supported (clef reads v2 and v3)");
    if (f->version == 0x02000000u || f->version == 0x03000000u)
        return clef_err_set(err, CLEF_ERR_UNSUPPORTED,
                            "big-endian GGUF is not supported (version field reads %u)", f->version);
    if (f->version != 2 && f->version != 3)
        return clef_err_set(err, CLEF_ERR_UNSUPPORTED,
                            "unsupported GGUF version %u (clef reads v2 and v3)", f->version);
    uint64_t n_t, n_kv;
    if ((st = cur_u64(&c, "tensor count", &n_t)) || (st = cur_u64(&c, "kv count", &n_kv))) return st;
    if (n_kv > cur_left(&c) / GGUF_MIN_KV_BYTES || n_kv > UINT32_MAX - 1)
        return clef_err_set(err, CLEF_ERR_FORMAT,
                            "kv count %llu is more than a %zu-byte file could hold "
                            "(corrupt count or truncated file)",
                            (unsigned long long)n_kv, f->size);
    if (n_t > cur_left(&c) / GGUF_MIN_TENSOR_BYTES || n_t > UINT32_MAX - 1)
        return clef_err_set(err, CLEF_ERR_FORMAT,
                            "tensor count %llu is more than a %zu-byte file could hold "
                            "(corrupt count or truncated file)",
                            (unsigned long long)n_t, f->size);

    uint64_t cap = 0;
    for (uint64_t i = 0; i < n_kv; i++) {
        uint64_t old = cap;
        if ((st = grow((void **)&f->kvs, &cap, i + 1, sizeof *f->kvs, err))) return st;
        if (cap != old) {
            uint64_t cap2 = old;
            if ((st = grow((void **)&f->str_off, &cap2, cap, sizeof *f->str_off, err))) return st;
            for (uint64_t j = old; j < cap; j++) f->str_off[j] = NULL;
        }
        f->n_kv = i + 1;
        if ((st = parse_kv(&c, &f->kvs[i], &f->str_off[i]))) return st;
    }
    uint64_t dup = 0;
    if ((st = index_build(f, f->n_kv, kv_name, &f->kv_index, &f->kv_index_mask, &dup, err))) return st;
    char nb[80];
    if (dup < f->n_kv)
        return clef_err_set(err, CLEF_ERR_FORMAT, "duplicate metadata key '%s'",
                            show(f->kvs[dup].key, nb));

    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *al = gguf_find_kv(f, "general.alignment");
    if (al) {
        if (al->type != GGUF_VT_UINT32)
            return clef_err_set(err, CLEF_ERR_FORMAT, "general.alignment must be u32, not %s",
                                gguf_vtype_name(al->type));
        uint32_t a = (uint32_t)al->data[0] | (uint32_t)al->data[1] << 8 |
                     (uint32_t)al->data[2] << 16 | (uint32_t)al->data[3] << 24;
        if (a == 0 || (a & (a - 1)))
            return clef_err_set(err, CLEF_ERR_FORMAT,
                                "general.alignment %u is not a non-zero power of two", a);
        f->alignment = a;
    }

    cap = 0;
    for (uint64_t i = 0; i < n_t; i++) {
        if ((st = grow((void **)&f->tensors, &cap, i + 1, sizeof *f->tensors, err))) return st;
        f->n_tensors = i + 1;
        if ((st = parse_tensor(&c, &f->tensors[i]))) return st;
    }
    if ((st = index_build(f, f->n_tensors, tensor_name, &f->t_index, &f->t_index_mask, &dup, err)))
        return st;
    if (dup < f->n_tensors)
        return clef_err_set(err, CLEF_ERR_FORMAT, "duplicate tensor name '%s'",
                            show(f->tensors[dup].name, nb));

    uint64_t pad = (f->alignment - c.pos % f->alignment) % f->alignment;
    f->data_offset = c.pos + pad;
    if (f->n_tensors == 0) {
        if (f->data_offset > f->size) f->data_offset = f->size; /* no data section needed */
        return CLEF_OK;
    }
    if (f->data_offset > f->size)
        return clef_err_set(err, CLEF_ERR_FORMAT,
                            "truncated: the data section would start at byte %llu, past the "
                            "file end (%zu bytes)",
                            (unsigned long long)f->data_offset, f->size);
    return place_tensors(f, err);
}

static clef_status open_common(gguf_file *f, gguf_file **out, clef_error *err) {
    clef_status st = parse_header(f, err);
    if (st) {
        gguf_close(f);
        return st;
    }
    *out = f;
    return CLEF_OK;
}

clef_status gguf_open_memory(const void *data, size_t size, gguf_file **out, clef_error *err) {
    if (!out) return clef_err_set(err, CLEF_ERR_INVALID_ARG, "gguf_open_memory: out is NULL");
    *out = NULL;
    if (!data && size)
        return clef_err_set(err, CLEF_ERR_INVALID_ARG, "gguf_open_memory: data is NULL");
    gguf_file *f = calloc(1, sizeof *f);
    if (!f) return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory opening GGUF");
    f->base = data;
    f->size = size;
    return open_common(f, out, err);
}

/* The whole file read into anonymous memory (page-aligned, so tensor data
 * keeps the file's alignment).  The size read must be the size fstat gave:
 * a file that shrinks while we read is refused, one that grows is cut. */
static clef_status read_whole(int fd, const char *path, size_t size, void **out,
                              clef_error *err) {
    void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return clef_err_set(err, CLEF_ERR_NOMEM, "%s: no memory to copy the file (%zu bytes): %s",
                            path, size, strerror(errno));
    size_t got = 0;
    while (got < size) {
        ssize_t n = pread(fd, (char *)m + got, size - got, (off_t)got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            int e = n < 0 ? errno : 0;
            munmap(m, size);
            return clef_err_set(err, CLEF_ERR_IO, "%s: read failed at byte %zu of %zu: %s", path,
                                got, size, e ? strerror(e) : "the file shrank while loading");
        }
        got += (size_t)n;
    }
    mprotect(m, size, PROT_READ);   /* a gguf_file is immutable: keep it so */
    *out = m;
    return CLEF_OK;
}

static clef_status open_path(const char *path, bool copy, gguf_file **out, clef_error *err) {
    if (!out || !path) return clef_err_set(err, CLEF_ERR_INVALID_ARG, "gguf_open: NULL argument");
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return clef_err_set(err, CLEF_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return clef_err_set(err, CLEF_ERR_IO, "%s: not a regular file", path);
    }
    gguf_file *f = calloc(1, sizeof *f);
    if (!f) {
        close(fd);
        return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory opening %s", path);
    }
    f->size = (size_t)sb.st_size;
    if (f->size > 0 && copy) {
        void *m = NULL;
        clef_status st = read_whole(fd, path, f->size, &m, err);
        if (st != CLEF_OK) {
            close(fd);
            free(f);
            return st;
        }
        f->base = m;
        f->mapped = true;
    } else if (f->size > 0) {
        void *m = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            close(fd);
            free(f);
            return clef_err_set(err, CLEF_ERR_IO, "%s: cannot map: %s", path, strerror(e));
        }
        f->base = m;
        f->mapped = true;
    } else {
        f->base = (const uint8_t *)"";
    }
    close(fd);
    clef_status st = open_common(f, out, err);
    if (st) clef_err_wrap(err, "%s", path);
    return st;
}

clef_status gguf_open(const char *path, gguf_file **out, clef_error *err) {
    return open_path(path, false, out, err);
}

clef_status gguf_open_copy(const char *path, gguf_file **out, clef_error *err) {
    return open_path(path, true, out, err);
}

void gguf_close(gguf_file *f) {
    if (!f) return;
    if (f->str_off)
        for (uint64_t i = 0; i < f->n_kv; i++) free(f->str_off[i]);
    free(f->str_off);
    free(f->kvs);
    free(f->kv_index);
    free(f->tensors);
    free(f->t_index);
    if (f->mapped) munmap((void *)f->base, f->size);
    free(f);
}

/* ---- accessors ---------------------------------------------------------------- */

uint32_t gguf_version(const gguf_file *f) { return f->version; }
uint64_t gguf_alignment(const gguf_file *f) { return f->alignment; }
uint64_t gguf_file_size(const gguf_file *f) { return f->size; }
uint64_t gguf_data_offset(const gguf_file *f) { return f->data_offset; }
uint64_t gguf_kv_count(const gguf_file *f) { return f->n_kv; }
uint64_t gguf_tensor_count(const gguf_file *f) { return f->n_tensors; }

const gguf_kv *gguf_kv_at(const gguf_file *f, uint64_t i) {
    return i < f->n_kv ? &f->kvs[i] : NULL;
}

const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key) {
    uint64_t i = index_find(f, f->kv_index, f->kv_index_mask, kv_name, key);
    return i == UINT64_MAX ? NULL : &f->kvs[i];
}

const gguf_tensor *gguf_tensor_at(const gguf_file *f, uint64_t i) {
    return i < f->n_tensors ? &f->tensors[i] : NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    uint64_t i = index_find(f, f->t_index, f->t_index_mask, tensor_name, name);
    return i == UINT64_MAX ? NULL : &f->tensors[i];
}

/* An integer value as sign + magnitude; false for non-integer types. */
typedef struct ival {
    bool neg;
    int64_t s;   /* valid when neg        */
    uint64_t u;  /* valid when !neg       */
} ival;

static bool int_value(gguf_vtype t, const uint8_t *p, ival *v) {
    uint64_t raw = 0;
    uint64_t sz = gguf_vtype_size(t);
    for (uint64_t i = sz; i-- > 0;) raw = raw << 8 | p[i];
    int64_t s;
    switch (t) {
    case GGUF_VT_UINT8: case GGUF_VT_UINT16: case GGUF_VT_UINT32: case GGUF_VT_UINT64:
        *v = (ival){false, 0, raw};
        return true;
    case GGUF_VT_INT8: s = (int8_t)raw; break;
    case GGUF_VT_INT16: s = (int16_t)raw; break;
    case GGUF_VT_INT32: s = (int32_t)raw; break;
    case GGUF_VT_INT64: memcpy(&s, &raw, sizeof s); break;
    default: return false;
    }
    *v = s < 0 ? (ival){true, s, 0} : (ival){false, 0, (uint64_t)s};
    return true;
}

static bool to_i64(gguf_vtype t, const uint8_t *p, int64_t *out) {
    ival v;
    if (!int_value(t, p, &v)) return false;
    if (v.neg) { *out = v.s; return true; }
    if (v.u > (uint64_t)INT64_MAX) return false;
    *out = (int64_t)v.u;
    return true;
}

static bool to_f32(gguf_vtype t, const uint8_t *p, float *out) {
    if (t == GGUF_VT_FLOAT32) {
        memcpy(out, p, 4); /* little-endian host assumed, as ggml does */
        return true;
    }
    if (t == GGUF_VT_FLOAT64) {
        double d;
        memcpy(&d, p, 8);
        *out = (float)d;
        return true;
    }
    return false;
}

static const gguf_kv *scalar(const gguf_file *f, const char *key) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    return kv && kv->type != GGUF_VT_ARRAY ? kv : NULL;
}

bool gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out) {
    const gguf_kv *kv = scalar(f, key);
    ival v;
    if (!kv || !int_value(kv->type, kv->data, &v) || v.neg || v.u > UINT32_MAX) return false;
    *out = (uint32_t)v.u;
    return true;
}

bool gguf_get_i64(const gguf_file *f, const char *key, int64_t *out) {
    const gguf_kv *kv = scalar(f, key);
    return kv && to_i64(kv->type, kv->data, out);
}

bool gguf_get_f32(const gguf_file *f, const char *key, float *out) {
    const gguf_kv *kv = scalar(f, key);
    return kv && to_f32(kv->type, kv->data, out);
}

bool gguf_get_bool(const gguf_file *f, const char *key, bool *out) {
    const gguf_kv *kv = scalar(f, key);
    if (!kv || kv->type != GGUF_VT_BOOL) return false;
    *out = kv->data[0] != 0;
    return true;
}

bool gguf_get_str(const gguf_file *f, const char *key, gguf_str *out) {
    const gguf_kv *kv = scalar(f, key);
    if (!kv || kv->type != GGUF_VT_STRING) return false;
    out->len = load_u64(kv->data);
    out->ptr = (const char *)kv->data + 8;
    return true;
}

bool gguf_arr_str(const gguf_file *f, const gguf_kv *kv, uint64_t i, gguf_str *out) {
    if (!kv || kv < f->kvs || kv >= f->kvs + f->n_kv) return false;
    if (kv->type != GGUF_VT_ARRAY || kv->arr_type != GGUF_VT_STRING || i >= kv->arr_n) return false;
    const uint8_t *p = kv->data + f->str_off[kv - f->kvs][i];
    out->len = load_u64(p);
    out->ptr = (const char *)p + 8;
    return true;
}

bool gguf_arr_i64(const gguf_kv *kv, uint64_t i, int64_t *out) {
    if (!kv || kv->type != GGUF_VT_ARRAY || i >= kv->arr_n) return false;
    uint64_t es = gguf_vtype_size(kv->arr_type);
    return es && to_i64(kv->arr_type, kv->data + i * es, out);
}

bool gguf_arr_f32(const gguf_kv *kv, uint64_t i, float *out) {
    if (!kv || kv->type != GGUF_VT_ARRAY || i >= kv->arr_n) return false;
    uint64_t es = gguf_vtype_size(kv->arr_type);
    return es && to_f32(kv->arr_type, kv->data + i * es, out);
}
