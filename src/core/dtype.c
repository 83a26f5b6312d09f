/* core/dtype.c — the table of ggml tensor types (sizes from the GGUF spec). */
#include "core/dtype.h"

static const clef_dtype_info dtype_table[CLEF_DTYPE_COUNT] = {
    [CLEF_DTYPE_F32] = {"F32", 1, 4, true},
    [CLEF_DTYPE_F16] = {"F16", 1, 2, true},
    [CLEF_DTYPE_Q4_0] = {"Q4_0", 32, 18, false},
    [CLEF_DTYPE_Q4_1] = {"Q4_1", 32, 20, false},
    [CLEF_DTYPE_Q5_0] = {"Q5_0", 32, 22, false},
    [CLEF_DTYPE_Q5_1] = {"Q5_1", 32, 24, false},
    [CLEF_DTYPE_Q8_0] = {"Q8_0", 32, 34, true},
    [CLEF_DTYPE_Q8_1] = {"Q8_1", 32, 36, false},
    [CLEF_DTYPE_Q2_K] = {"Q2_K", 256, 84, false},
    [CLEF_DTYPE_Q3_K] = {"Q3_K", 256, 110, false},
    [CLEF_DTYPE_Q4_K] = {"Q4_K", 256, 144, true},
    [CLEF_DTYPE_Q5_K] = {"Q5_K", 256, 176, true},
    [CLEF_DTYPE_Q6_K] = {"Q6_K", 256, 210, true},
    [CLEF_DTYPE_Q8_K] = {"Q8_K", 256, 292, false},
    [CLEF_DTYPE_I8] = {"I8", 1, 1, false},
    [CLEF_DTYPE_I16] = {"I16", 1, 2, false},
    [CLEF_DTYPE_I32] = {"I32", 1, 4, false},
    [CLEF_DTYPE_I64] = {"I64", 1, 8, false},
    [CLEF_DTYPE_F64] = {"F64", 1, 8, false},
    [CLEF_DTYPE_BF16] = {"BF16", 1, 2, true},
};

const clef_dtype_info *clef_dtype_get(uint32_t type) {
    static const clef_dtype_info none = {0};
    if (type >= CLEF_DTYPE_COUNT || !dtype_table[type].name) return &none;
    return &dtype_table[type];
}

bool clef_dtype_row_bytes(uint32_t type, uint64_t n, uint64_t *bytes) {
    const clef_dtype_info *info = clef_dtype_get(type);
    if (!info->name || n % info->block_size) return false;
    uint64_t blocks = n / info->block_size;
    if (blocks > UINT64_MAX / info->type_size) return false;
    *bytes = blocks * info->type_size;
    return true;
}
