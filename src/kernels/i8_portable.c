/*
 * kernels/i8_portable.c — the ISA-independent halves of the int8 matmul
 * path (kernels/simd.h): the I8 group packer for Q8_0 and the K-quants,
 * and the per-block bookkeeping of the activation quantizer.  The NEON
 * (SDOT) and AVX2 (vpmaddubsw, AVX-VNNI) paths share them; the AVX-512
 * path has its own vectorised versions.
 */
#include <string.h>

#include "core/dtype.h"
#include "kernels/dequant.h"
#include "kernels/simd.h"

#define INLINE static inline __attribute__((always_inline))

enum { IG = MM_I8_G };

/* The run of kw bytes (4, or 8 for SMMLA: k8) of row i that holds k-values
 * [kw·r, kw·r + kw) within a packed block (I8 layout). */
static uint8_t *run_at(uint8_t *block, int kw, int r, int i) {
    return block + (size_t)(r * IG + i) * (size_t)kw;
}

/* Q8_0 rows in runs of kw bytes: as stored (signed_q: m = 0), or made
 * unsigned for vpdpbusd (q + 128 by flipping the sign bit, m = −128·s). */
INLINE void pack_q8_0(const int kw, const mm_i8_kind *kind, const mm_weight *w, int64_t r0,
                      int64_t np, int64_t k0, int64_t kc, uint8_t *dst) {
    const int64_t nblk = kc / 32, groups = (np + IG - 1) / IG;
    const size_t bbytes = 32 * IG + 2 * IG * sizeof(float);
    const uint64_t flip = kind->signed_q ? 0 : 0x8080808080808080u;
    for (int64_t g = 0; g < groups; g++)
        for (int i = 0; i < IG; i++) {
            const int64_t row = g * IG + i;
            const bool live = row < np; /* rows past np are zero */
            const uint8_t *src = live ? (const uint8_t *)w->data + (size_t)(r0 + row) * w->row_bytes +
                                            (size_t)(k0 / 32) * 34
                                      : NULL;
            for (int64_t b = 0; b < nblk; b++) {
                uint8_t *bp = dst + (size_t)(g * nblk + b) * bbytes;
                float *s = (float *)(bp + 32 * IG);
                s[i] = live ? clef_load_f16(src + 34 * b) : 0.0f;
                s[IG + i] = kind->signed_q ? 0.0f : -128.0f * s[i];
                for (int r = 0; r < 32 / kw; r++) {
                    uint64_t v = 0; /* kw (4 or 8) bytes */
                    if (live) memcpy(&v, src + 34 * b + 2 + kw * r, (size_t)kw);
                    v ^= live ? flip : 0;
                    memcpy(run_at(bp, kw, r, i), &v, (size_t)kw);
                }
            }
        }
}

/* Q4_K / Q5_K / Q6_K rows: each super-block unpacked to its integers
 * (clef_kq_unpack), quants unsigned below 64 (so the same bytes as int8),
 * s = d·sc and m = −dmin·mn (Q6_K: m = −32·s), as the dequantizer forms
 * them. */
INLINE void pack_kquant(const int kw, const mm_i8_kind *kind, const mm_weight *w, int64_t r0,
                        int64_t np, int64_t k0, int64_t kc, uint8_t *dst) {
    const int bk = kind->bk, per = 256 / bk;
    const int64_t nsb = kc / 256, nblk = kc / bk, groups = (np + IG - 1) / IG;
    const size_t bbytes = (size_t)bk * IG + 2 * IG * sizeof(float);
    const size_t tsz = clef_dtype_get(w->type)->type_size;
    clef_kq_parts k;
    for (int64_t g = 0; g < groups; g++)
        for (int i = 0; i < IG; i++) {
            const int64_t row = g * IG + i;
            const bool live = row < np;
            const uint8_t *src = live ? (const uint8_t *)w->data + (size_t)(r0 + row) * w->row_bytes +
                                            (size_t)(k0 / 256) * tsz
                                      : NULL;
            for (int64_t sb = 0; sb < nsb; sb++) {
                if (live) clef_kq_unpack(w->type, src + sb * tsz, &k);
                else memset(&k, 0, sizeof k);
                for (int j = 0; j < per; j++) {
                    uint8_t *bp = dst + (size_t)(g * nblk + sb * per + j) * bbytes;
                    float *s = (float *)(bp + (size_t)bk * IG);
                    s[i] = k.d * (float)k.sc[j];
                    s[IG + i] = kind->sym ? -32.0f * s[i] : -(k.dmin * (float)k.mn[j]);
                    for (int r = 0; r < bk / kw; r++)
                        memcpy(run_at(bp, kw, r, i), k.q + j * bk + kw * r, (size_t)kw);
                }
            }
        }
}

void mm_pack_i8_portable(const mm_i8_kind *kind, const mm_weight *w, int64_t r0, int64_t np,
                       int64_t k0, int64_t kc, uint8_t *dst) {
    /* the run width as a constant: memcpy of 4 or 8 bytes is one move */
    const bool q8 = w->type == CLEF_DTYPE_Q8_0;
    if (kind->k8) {
        if (q8) pack_q8_0(8, kind, w, r0, np, k0, kc, dst);
        else pack_kquant(8, kind, w, r0, np, k0, kc, dst);
    } else {
        if (q8) pack_q8_0(4, kind, w, r0, np, k0, kc, dst);
        else pack_kquant(4, kind, w, r0, np, k0, kc, dst);
    }
}

void mm_act_i8_by_blocks(mm_quant_block_fn quant, const mm_i8_kind *kind, const float *x,
                         int64_t in, int64_t t0, int64_t t1, int8_t *q, float *dx, void *mb) {
    const int ab = kind->ab, bk = kind->bk;
    const int64_t nab = in / ab, nbk = in / bk;
    for (int64_t t = t0; t < t1; t++)
        for (int64_t b = 0; b < nab; b++) {
            int32_t s16[256 / 16];
            const int64_t at = t * in + b * ab;
            const float d = quant(x + at, ab, q + at, s16);
            const float dd = kind->f16_scale ? clef_f16_to_f32(clef_f32_to_f16(d)) : d;
            dx[t * nab + b] = dd;
            int32_t bs[256 / 16]; /* Σq per weight block */
            for (int j = 0; j < ab / bk; j++) {
                bs[j] = 0;
                for (int u = 0; u < bk / 16; u++) bs[j] += s16[j * (bk / 16) + u];
            }
            for (int j = 0; j < ab / bk; j++) { /* the m term per weight block */
                const int32_t s = bs[j];
                const int64_t o = t * nbk + b * (ab / bk) + j;
                if (kind->isc) /* the pair of blocks j belongs to; |Σq| ≤ 32·128: int16s */
                    ((uint32_t *)mb)[o] = (uint16_t)bs[j & ~1] | (uint32_t)(uint16_t)bs[j | 1] << 16;
                else if (kind->sym) ((int32_t *)mb)[o] = -kind->off * s;
                else ((float *)mb)[o] = ab == 256 ? (float)s : dd * (float)s;
            }
        }
}
