/*
 * kernels/transpose_x86.h — dword transposes in registers: 16 x 16, which
 * the AVX-512 and AMX files share (f32 transposes, 16-bit panel packs),
 * AVX-512F; and 8 x 8 on ymm for the AVX2 panel packs.  Inlined into
 * callers built for a superset of their ISA.
 */
#ifndef CLEF_KERNELS_TRANSPOSE_X86_H
#define CLEF_KERNELS_TRANSPOSE_X86_H

#if defined(__x86_64__)
#include <immintrin.h>

/* In place, r becomes its 16 x 16 dword transpose: r[j] = dword j of each
 * of the 16 rows given.  Pairs interleaved, then 64-bit pairs, then the
 * 128-bit lanes in two steps. */
static inline __attribute__((always_inline, target("avx512f"))) void
x86_transpose16x16(__m512i r[16]) {
    __m512i t[16], u[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    /* u[4i+m], 128-bit lane L: column 4L+m of rows 4i..4i+3 */
    for (int m = 0; m < 4; m++) {
        __m512i p0 = _mm512_shuffle_i32x4(u[m], u[4 + m], 0x44);
        __m512i p1 = _mm512_shuffle_i32x4(u[m], u[4 + m], 0xEE);
        __m512i q0 = _mm512_shuffle_i32x4(u[8 + m], u[12 + m], 0x44);
        __m512i q1 = _mm512_shuffle_i32x4(u[8 + m], u[12 + m], 0xEE);
        r[m] = _mm512_shuffle_i32x4(p0, q0, 0x88);
        r[4 + m] = _mm512_shuffle_i32x4(p0, q0, 0xDD);
        r[8 + m] = _mm512_shuffle_i32x4(p1, q1, 0x88);
        r[12 + m] = _mm512_shuffle_i32x4(p1, q1, 0xDD);
    }
}

/* In place, r becomes its 8 x 8 dword transpose, in the same three steps. */
static inline __attribute__((always_inline, target("avx2"))) void
x86_transpose8x8(__m256i r[8]) {
    __m256i t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 2; i++) {
        u[4 * i] = _mm256_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 1] = _mm256_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 2] = _mm256_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        u[4 * i + 3] = _mm256_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    /* u[4i+m], 128-bit lane L: column 4L+m of rows 4i..4i+3 */
    for (int m = 0; m < 4; m++) {
        r[m] = _mm256_permute2x128_si256(u[m], u[4 + m], 0x20);
        r[4 + m] = _mm256_permute2x128_si256(u[m], u[4 + m], 0x31);
    }
}

#endif
#endif
