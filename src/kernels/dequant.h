/*
 * kernels/dequant.h — turning stored weight rows into f32.
 *
 * Block layouts are ggml's (the bytes llama-quantize writes):
 *   F16/BF16: 2 bytes an element.  Q8_0: {f16 d; int8 q[32]}, x = d*q.
 *   Q4_K: {f16 d, dmin; u8 scales[12]; u8 qs[128]} per 256 elements, 8 sub-blocks
 *         of 32 with 6-bit scale and min.  Q5_K: Q4_K plus u8 qh[32] high bits.
 *   Q6_K: {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}.
 * The reference C versions here are the arbiter the fast kernel paths are
 * tested against.
 */
#ifndef CLEF_KERNELS_DEQUANT_H
#define CLEF_KERNELS_DEQUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

float clef_f16_to_f32(uint16_t h);
uint16_t clef_f32_to_f16(float f);      /* round to nearest even */
float clef_bf16_to_f32(uint16_t h);
uint16_t clef_f32_to_bf16(float f);     /* round to nearest even, NaN kept quiet */

/* Dequantize n elements (a multiple of the type's block size) of type
 * `type` (a clef_dtype) from src to dst.  Returns false for a type clef cannot
 * dequantize or a bad n. */
bool clef_dequantize_row(uint32_t type, const void *src, float *dst, int64_t n);

/* The f16 stored little-endian at p (any alignment), as f32. */
float clef_load_f16(const uint8_t *p);

/* Scale and min j (0..7) of a Q4_K/Q5_K block's 12 packed scale bytes s:
 * 8 pairs of 6 bits (pairs 0..3 in the low bits of bytes 0..7, pairs 4..7
 * split between bytes 8..11 and the spare top bits of bytes 0..7). */
void clef_k_scale_min(const uint8_t *s, int j, uint8_t *sc, uint8_t *mn);

/* One K-quant super-block (256 values) as its integers, for kernels that
 * multiply the quants themselves (the bit layouts are read here alone):
 *   Q4_K, Q5_K  x[i] = d·sc[i/32]·q[i] − dmin·mn[i/32], q 0..15 / 0..31,
 *               sc and mn 0..63 (8 sub-blocks of 32)
 *   Q6_K        x[i] = d·sc[i/16]·(q[i] − 32), q 0..63, sc signed
 *               (16 sub-blocks of 16), mn and dmin 0 */
typedef struct clef_kq_parts {
    uint8_t q[256];
    int8_t sc[16];
    uint8_t mn[8];
    float d, dmin;
} clef_kq_parts;

/* false: type is not Q4_K, Q5_K or Q6_K. */
bool clef_kq_unpack(uint32_t type, const uint8_t *block, clef_kq_parts *out);

#endif
