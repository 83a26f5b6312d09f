/*
 * kernels/kquant_x86.h — the K-quant blocks' quants as bytes, 32 at a time,
 * for the x86 packers (pack_kquant in simd_avx512.c, the AMX planes in
 * simd_amx.c).  AVX2, inlined into callers built for a superset of it.
 * Block layouts: kernels/dequant.c.
 */
#ifndef CLEF_KERNELS_KQUANT_X86_H
#define CLEF_KERNELS_KQUANT_X86_H

#if defined(__x86_64__)
#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>

#define KQ_AVX2 static inline __attribute__((always_inline, target("avx2")))

/* Q4_K / Q5_K: the quants of 64 k from 64·c as two runs of 32 (sub-blocks
 * 2c and 2c+1), unsigned 0..15 / 0..31. */
KQ_AVX2 void kq_quants45(bool five, const uint8_t *blk, int c, __m256i q[2]) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
    const __m256i v = _mm256_loadu_si256((const __m256i *)(blk + (five ? 48 : 16) + 32 * c));
    q[0] = _mm256_and_si256(v, m4);
    q[1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    if (five) {
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(blk + 16));
        q[0] = _mm256_or_si256(
            q[0], _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c), one), 4));
        q[1] = _mm256_or_si256(
            q[1], _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c + 1), one), 4));
    }
}

/* Q6_K: the same 64 k as two runs of 32, q6 − bias (bias 0: unsigned
 * 0..63; 32: signed −32..31, what the stored value means).  Half c/2 of the
 * block; its runs 0, 1 (c even) or 2, 3 (c odd). */
KQ_AVX2 void kq_quants6(const uint8_t *blk, int c, int bias, __m256i q[2]) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), three = _mm256_set1_epi8(3);
    const __m256i b8 = _mm256_set1_epi8((char)bias);
    const uint8_t *ql = blk + 64 * (c / 2), *qh = blk + 128 + 32 * (c / 2);
    const int hi = c % 2; /* runs 2, 3: the high nibbles */
    const __m256i a = _mm256_loadu_si256((const __m256i *)ql),
                  b = _mm256_loadu_si256((const __m256i *)(ql + 32));
    const __m256i h = _mm256_loadu_si256((const __m256i *)qh);
    const __m256i la = _mm256_and_si256(hi ? _mm256_srli_epi16(a, 4) : a, m4);
    const __m256i lb = _mm256_and_si256(hi ? _mm256_srli_epi16(b, 4) : b, m4);
    const __m256i ha = _mm256_and_si256(_mm256_srli_epi16(h, 4 * hi), three);
    const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(h, 4 * hi + 2), three);
    q[0] = _mm256_sub_epi8(_mm256_or_si256(la, _mm256_slli_epi16(ha, 4)), b8);
    q[1] = _mm256_sub_epi8(_mm256_or_si256(lb, _mm256_slli_epi16(hb, 4)), b8);
}

#endif
#endif
