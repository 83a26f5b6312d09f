/*
 * kernels/matmul.c — the reference (portable, exact-dequantization) matmul.
 *
 * Blocking: each thread owns a contiguous range of output rows.  It walks
 * its rows MM_ROWS at a time and the reduction dimension MM_SEG elements at a
 * time, dequantizes that [MM_ROWS x MM_SEG] tile once into a stack buffer
 * (64 KiB: stays in L2) and reuses it for MM_TOK tokens, whose activation
 * slices also stay in cache.  Weights are dequantized ceil(T / MM_TOK) times,
 * i.e. once per MM_TOK dot products of each element.
 */
#include "kernels/matmul.h"

#include <assert.h>
#include <string.h>

#include "core/dtype.h"
#include "kernels/dequant.h"

enum {
    MM_ROWS = 8,     /* output rows dequantized together                     */
    MM_SEG = 1024,   /* reduction elements per tile; a multiple of every block */
    MM_TOK = 64,     /* tokens that reuse one dequantized tile                */
};

bool mm_weight_init(mm_weight *w, uint32_t type, const void *data, int64_t in, int64_t out) {
    const clef_dtype_info *info = clef_dtype_get(type);
    uint64_t rb;
    if (!info->name || !info->supported || in <= 0 || out <= 0) return false;
    if (MM_SEG % info->block_size) return false;
    if (!clef_dtype_row_bytes(type, (uint64_t)in, &rb)) return false;
    w->type = type;
    w->data = data;
    w->in = in;
    w->out = out;
    w->row_bytes = (size_t)rb;
    w->f32_act = false;
    return true;
}

/* Eight interleaved partial sums: independent chains the compiler can keep
 * in one vector register, and a fixed order so results do not depend on the
 * thread count. */
static float dot_seg(const float *a, const float *b, int64_t n) {
    float acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) acc[j] += a[i + j] * b[i + j];
    float tail = 0.0f;
    for (; i < n; i++) tail += a[i] * b[i];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail;
}

float mm_dot(const float *a, const float *b, int64_t n) {
    float sum = 0.0f;
    for (int64_t s = 0; s < n; s += MM_SEG) sum += dot_seg(a + s, b + s, n - s < MM_SEG ? n - s : MM_SEG);
    return sum;
}

/* Elements [s, s+ns) of row r as f32: a pointer into the mapping for F32,
 * else dequantized into buf. */
static const float *row_segment(const mm_weight *w, int64_t r, int64_t s, int64_t ns, float *buf) {
    const uint8_t *row = (const uint8_t *)w->data + (size_t)r * w->row_bytes;
    if (w->type == CLEF_DTYPE_F32) return (const float *)row + s;
    const clef_dtype_info *info = clef_dtype_get(w->type);
    const uint8_t *src = row + (size_t)(s / info->block_size) * info->type_size;
    bool ok = clef_dequantize_row(w->type, src, buf, ns);
    assert(ok && "mm_weight_init admitted a type dequant cannot read");
    (void)ok;
    return buf;
}

typedef struct mm_job {
    const mm_weight *w;
    const float *x;
    float *y;
    int64_t T;
} mm_job;

static void mm_rows(const mm_job *job, int64_t r0, int64_t nr, int64_t t0, int64_t nt) {
    const mm_weight *w = job->w;
    float buf[MM_ROWS][MM_SEG];
    const float *rows[MM_ROWS];
    for (int64_t s = 0; s < w->in; s += MM_SEG) {
        int64_t ns = w->in - s < MM_SEG ? w->in - s : MM_SEG;
        for (int64_t r = 0; r < nr; r++) rows[r] = row_segment(w, r0 + r, s, ns, buf[r]);
        for (int64_t t = t0; t < t0 + nt; t++) {
            const float *xt = job->x + t * w->in + s;
            float *yt = job->y + t * w->out + r0;
            for (int64_t r = 0; r < nr; r++) {
                float d = dot_seg(xt, rows[r], ns);
                yt[r] = s == 0 ? d : yt[r] + d;
            }
        }
    }
}

static void mm_task(void *ctx, int ith, int nth) {
    const mm_job *job = ctx;
    int64_t r_begin, r_end;
    tp_split(job->w->out, MM_ROWS, ith, nth, &r_begin, &r_end);
    for (int64_t t0 = 0; t0 < job->T; t0 += MM_TOK) {
        int64_t nt = job->T - t0 < MM_TOK ? job->T - t0 : MM_TOK;
        for (int64_t r0 = r_begin; r0 < r_end; r0 += MM_ROWS) {
            int64_t nr = r_end - r0 < MM_ROWS ? r_end - r0 : MM_ROWS;
            mm_rows(job, r0, nr, t0, nt);
        }
    }
}

void mm_matmul(tp_pool *pool, const mm_weight *w, const float *x, float *y, int64_t T) {
    if (T <= 0) return;
    mm_job job = {w, x, y, T};
    /* Small products are not worth waking the workers for. */
    if (w->out * w->in * T < 32768) pool = NULL;
    tp_run(pool, mm_task, &job);
}

void mm_get_row(const mm_weight *w, int64_t r, float *dst) {
    assert(r >= 0 && r < w->out);
    const uint8_t *row = (const uint8_t *)w->data + (size_t)r * w->row_bytes;
    if (w->type == CLEF_DTYPE_F32) {
        memcpy(dst, row, (size_t)w->in * sizeof *dst);
        return;
    }
    bool ok = clef_dequantize_row(w->type, row, dst, w->in);
    assert(ok && "mm_weight_init admitted a type dequant cannot read");
    (void)ok;
}
