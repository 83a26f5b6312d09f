/*
 * core/dtype.h — tensor element types, numbered as ggml numbers them.
 *
 * The numbers are part of the GGUF format, so they must never change.  Block
 * types pack `block_size` elements into `type_size` bytes; plain types have a
 * block of one element.  Only the types clef can compute with are "known";
 * others are still named so that error messages can say what a file holds.
 */
#ifndef CLEF_CORE_DTYPE_H
#define CLEF_CORE_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum clef_dtype {
    CLEF_DTYPE_F32 = 0,
    CLEF_DTYPE_F16 = 1,
    CLEF_DTYPE_Q4_0 = 2,
    CLEF_DTYPE_Q4_1 = 3,
    CLEF_DTYPE_Q5_0 = 6,
    CLEF_DTYPE_Q5_1 = 7,
    CLEF_DTYPE_Q8_0 = 8,
    CLEF_DTYPE_Q8_1 = 9,
    CLEF_DTYPE_Q2_K = 10,
    CLEF_DTYPE_Q3_K = 11,
    CLEF_DTYPE_Q4_K = 12,
    CLEF_DTYPE_Q5_K = 13,
    CLEF_DTYPE_Q6_K = 14,
    CLEF_DTYPE_Q8_K = 15,
    CLEF_DTYPE_I8 = 24,
    CLEF_DTYPE_I16 = 25,
    CLEF_DTYPE_I32 = 26,
    CLEF_DTYPE_I64 = 27,
    CLEF_DTYPE_F64 = 28,
    CLEF_DTYPE_BF16 = 30,
    CLEF_DTYPE_COUNT = 40, /* upper bound for tables indexed by type */
} clef_dtype;

#define CLEF_QK8_0 32
#define CLEF_QK_K 256

typedef struct clef_dtype_info {
    const char *name;     /* "F32", "Q4_K", ... ; NULL for unassigned numbers */
    uint32_t block_size;  /* elements per block                               */
    uint32_t type_size;   /* bytes per block                                  */
    bool supported;       /* clef can dequantize / compute with it            */
} clef_dtype_info;

/* Info for a type number; name NULL when the number is not a ggml type. */
const clef_dtype_info *clef_dtype_get(uint32_t type);

/* Bytes for n elements of type t (n must be a multiple of the block size);
 * returns false on overflow or a bad multiple. */
bool clef_dtype_row_bytes(uint32_t type, uint64_t n, uint64_t *bytes);

#endif
