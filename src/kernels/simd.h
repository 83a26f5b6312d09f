/*
 * kernels/simd.h — internal interface between the kernel dispatchers
 * (mm_fast.c, attention.c, gdn.c, ops.c) and the per-ISA code
 * (simd_avx512.c, simd_amx.c, simd_avx2.c, simd_neon.c).  Not for use
 * outside src/kernels.
 *
 * Every function here is defined on every build so that the dispatchers link
 * unchanged; the x86-64 definitions have empty bodies elsewhere, and the
 * NEON ones off AArch64, and cpu_choose offers only the paths the build's
 * architecture has, so those are unreachable by design.
 *
 * Two kernel forms (measured on Zen 5: ~90% of the FMA peak for the first,
 * ~85% for the second):
 *   dot form   y[t][r] = x[t]·w[r] with both rows contiguous in k: register
 *              tile of 6 tokens x 4 rows, 16 (f32) or 32 (bf16) k per step,
 *              one horizontal sum per output at the end.  Weights are read
 *              in their stored layout (F32, BF16) or dequantized to f32 rows.
 *   broadcast form  C[i][n..n+48) += A(i,k)·B[k][n..n+48): 8 x 48 or 6 x 64
 *              f32 tiles (avx512), 4 x 48 int8 tile on packed weight panels
 *              (VNNI; there one explicit broadcast feeds three vpdpbusd, as
 *              {1to16} operands would make the load ports the limit).  The
 *              f32 tiles take the target's broadcast (cpu_target.bcast_fold):
 *              on Zen 5 a separate broadcast costs an FMA slot, so it is
 *              folded into each FMA; on Emerald Rapids one vbroadcastss per
 *              tile row is faster (6 x 64 alone: 165-173 against 138-152
 *              GFLOP/s per core, best of 7).  F16 weights, and BF16 on
 *              targets without dpbf16, are widened into [k][48] f32 panels
 *              for it.
 *
 * Packed I8 panel (built per call from the stored blocks, in a per-thread
 * buffer: no second copy of the model is kept).  Per group of 48 rows and
 * per weight block of bk k-values (32; 16 for Q6_K):
 *     u8 q[bk/4][48][4], f32 s[48], f32 m[48]   with W[r][k] = s[r]·q + m[r]
 * where q is the stored quant made unsigned (Q8_0: q+128, m = −128·s; Q6_K:
 * q6 in 0..63, m = −32·s; Q4_K/Q5_K: the quant, s = d·sc, m = −dmin·min);
 * for the AMX, NEON and AVX2 kernels Q8_0 stays signed (m = 0); for
 * SMMLA (kind->k8) q is q[bk/8][48][8], the same bytes in runs of 8.
 * Rows past the weight's end are zero.  I8 activations: per ab values (32
 * for Q8_0, its layout; 256 for the K-quants, llama.cpp's Q8_K) an int8
 * block with one f32 scale dx, plus per weight block the m term: −off·Σq
 * (int32, symmetric types), or for Q4_K/Q5_K dx·Σq (f32; Σq when ab is 256,
 * as the tile then applies dx once per 256).
 *
 * Integer-scale K-quant panel (kind->isc: the K-quants on the vpmaddubsw
 * tile).  Per group of 48 rows and per super-block of 256 k-values, with
 * nb = 256/bk blocks:
 *     u8 q[nb][bk/4][48][4]      the blocks' quants as above
 *     i32 sc[nb][48]             block j's scale in both int16 halves
 *     i32 mn[nb/2][48]           the mins of blocks 2c and 2c+1, an int16 pair
 *     f32 d[48], f32 dmin[48]    W = d·sc·q − dmin·mn
 * and per weight block the activations' m term is the int16 pair (Σq of
 * block 2c, Σq of block 2c+1) of its pair c, in both blocks' slots.
 * Q6_K differs: its quants are stored as q − 32 (signed bytes) with its
 * signed scales, and its activations as x + 128 (unsigned bytes:
 * avx2_act_i8 flips their sign bits), so vpmaddubsw takes them the other
 * way round; the offset is then a term of the weights alone, the row's
 * 128·Σ_j sc_j·Σ(q − 32), an int32 in mn's first slot (dmin unused), and
 * W·x = d·(Σ sc·(q − 32)·(x + 128) − that).  The tile's sums stay
 * integers for a whole super-block.
 */
#ifndef CLEF_KERNELS_SIMD_H
#define CLEF_KERNELS_SIMD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/cpu.h"
#include "core/dtype.h"
#include "kernels/matmul.h"

enum {
    MM_I8_G = 48,       /* rows per packed I8 group                           */
    MM_I8_RM = 4,       /* tokens per I8 micro-tile                           */
    MM_DOT_RM = 6,      /* tokens per dot-form micro-tile                     */
    MM_DOT_RN = 4,      /* rows per dot-form micro-tile                       */
    MM_BC_NP = 48,      /* rows (columns of B) per widened 16-bit float panel */
};

/* Activations quantized for the I8 kernels. */
typedef struct mm_i8_act {
    const int8_t *q;    /* [T][ld]                                            */
    const float *dx;    /* [T][ld/ab] activation scales                       */
    const void *mb;     /* [T][ld/bk]: int32 −off·Σq (sym) or f32 (asym): d·Σq,
                           or Σq when ab is 256 (d is applied per 256)       */
    int64_t ld;         /* = in                                               */
    /* amx only, 16 tokens side by side: Q8_0 dx [T/16][ld/32][16]; the
     * K-quant planes their own per-256 dT here and d·Σq per 32 in mbT */
    const float *dxT;
    const void *mbT;
} mm_i8_act;

/* The quantized-weight parameters of the I8 kernels. */
typedef struct mm_i8_kind {
    int bk;             /* weight block: 32, or 16 (Q6_K)                     */
    int ab;             /* activations per scale: 32 (Q8_0), or 256 (the
                           K-quants: llama.cpp's Q8_K blocks)               */
    bool sym;           /* m = −off·s: the m term is an integer correction    */
    int off;            /* 128 (Q8_0), 32 (Q6_K), 0                           */
    bool f16_scale;     /* activation scales rounded through f16 (Q8_0)       */
    bool signed_q;      /* amx, Q8_0: quants packed signed (off 0, m 0) for
                           TDPBSSD: no offset term                          */
    bool k8;            /* i8mm: each row's quants in runs of 8 k (SMMLA's
                           operands), not 4: q[bk/8][48][8]                 */
    int isc;            /* the K-quants as the integer-scale panel (above):
                           the quants' bits, 4, 5 or 6; 0 for the others   */
} mm_i8_kind;

/* An int8 tile's views of its tokens' activations: row i's quants, scales
 * and m terms (mm_i8_act), i < MM_I8_RM; rows from mr on repeat the last
 * one, so a partial tile computes (and does not store) whole rows. */
typedef struct mm_i8_rows {
    const int8_t *a[MM_I8_RM];
    const float *d[MM_I8_RM];
    const int32_t *mi[MM_I8_RM]; /* the m term as int32 (symmetric types) */
    const float *mf[MM_I8_RM];   /* or as f32 (Q4_K, Q5_K)               */
} mm_i8_rows;

static inline __attribute__((always_inline)) mm_i8_rows
mm_i8_rows_at(int mr, const int8_t *A, int64_t lda, const float *dx, int64_t ldx, const void *mb,
              int64_t ldm) {
    mm_i8_rows r;
    for (int i = 0; i < MM_I8_RM; i++) {
        const int64_t row = i < mr ? i : mr - 1;
        r.a[i] = A + row * lda;
        r.d[i] = dx + row * ldx;
        r.mi[i] = (const int32_t *)mb + row * ldm;
        r.mf[i] = (const float *)mb + row * ldm;
    }
    return r;
}

/* Bytes of one packed I8 group of kc k-values (mm_fast.c). */
size_t mm_i8_group_bytes(const mm_i8_kind *kind, int64_t kc);

/* ---- AVX-512 (simd_avx512.c) ---- */

/* Dot form over one panel: for t in [0, T), r in [0, np):
 *   y[t·ldy + r] (=, +=) Σ_k x[t·ldx + k] · w[r·ldw + k],  k in [0, kc).
 * bf16: x and w are BF16 (uint16) and the kernel needs AVX512_BF16. */
void avx512_dot_f32(int64_t kc, const float *x, int64_t ldx, int64_t T, const float *w,
                    int64_t ldw, int64_t np, float *y, int64_t ldy, bool add);
void avx512_dot_bf16(int64_t kc, const uint16_t *x, int64_t ldx, int64_t T, const uint16_t *w,
                     int64_t ldw, int64_t np, float *y, int64_t ldy, bool add);
/* The same with f32 x and w rows of BF16 (f16: F16) widened exactly in
 * registers: the bits avx512_dot_f32 gives on w's f32 decoding. */
void avx512_dot_w16(bool f16, int64_t kc, const float *x, int64_t ldx, int64_t T,
                    const uint16_t *w, int64_t ldw, int64_t np, float *y, int64_t ldy, bool add);
/* Broadcast form, general strides for A: C[i][j] (=, +=) Σ_k A[i·rsa + k·csa]·B[k·ldb + j];
 * fold: the broadcast as each FMA's memory operand (cpu_target.bcast_fold). */
void avx512_gemm_nn(bool fold, int64_t m, int64_t n, int64_t k, const float *A, int64_t rsa,
                    int64_t csa, const float *B, int64_t ldb, float *C, int64_t ldc, bool add);
/* dst[c·ldd + r] = src[r·lds + c], r < rows, c < cols: 16 x 16 blocks
 * transposed in registers. */
void avx512_transpose(int64_t rows, int64_t cols, const float *src, int64_t lds, float *dst,
                      int64_t ldd);
/* BF16 (f16: F16) w rows [0, np) (np <= MM_BC_NP, ldw elements apart) x
 * k [0, kc) widened to the broadcast form's B: dst[k·MM_BC_NP + r] (f32,
 * exact). */
void avx512_pack_f32_panel(bool f16, const uint16_t *w, int64_t ldw, int64_t np, int64_t kc,
                           float *dst);
/* mm_round_bf16 (below), bit for bit. */
void avx512_round_bf16(const float *x, int64_t n, float *dst);
/* x rows [t0, t1) to BF16 (round to nearest even), dst rows of `in`. */
void avx512_act_bf16(const float *x, int64_t in, int64_t t0, int64_t t1, uint16_t *dst);
/* x rows [t0, t1) quantized per kind->ab (see above); in % ab == 0.  Per
 * 32 is Q8_0's alone: bk 32, symmetric. */
void avx512_act_i8(const mm_i8_kind *kind, const float *x, int64_t in, int64_t t0, int64_t t1,
                   int8_t *q, float *dx, void *mb);
/* Pack rows [r0, r0+np) x k [k0, k0+kc) of w into ceil(np/48) groups. */
void avx512_pack_i8(const mm_i8_kind *kind, const mm_weight *w, int64_t r0, int64_t np,
                    int64_t k0, int64_t kc, uint8_t *dst);
/* Stored weight bytes to bring into L2 while a panel's tiles run (the rows
 * the thread packs next): `rows` segments of `seg` bytes, `stride` apart. */
typedef struct mm_prefetch {
    const uint8_t *row;
    int64_t seg, stride, rows;
} mm_prefetch;

/* A cursor over an mm_prefetch's lines, per_step lines a step: a panel
 * spreads them over its `steps` (tile calls, or their weight blocks). */
typedef struct mm_pf_cursor {
    mm_prefetch at;
    int64_t off;
    int per_step;
} mm_pf_cursor;

static inline mm_pf_cursor mm_pf_start(const mm_prefetch *next, int64_t steps) {
    if (!next || next->rows <= 0 || steps <= 0) return (mm_pf_cursor){{0}, 0, 0};
    const int64_t lines = next->rows * ((next->seg + 63) / 64);
    return (mm_pf_cursor){*next, 0, (int)((lines + steps - 1) / steps)};
}

/* The next per_step lines into L2 (prefetcht1 on x86). */
static inline void mm_pf_step(mm_pf_cursor *c) {
    for (int i = 0; i < c->per_step && c->at.rows > 0; i++) {
        __builtin_prefetch(c->at.row + c->off, 0, 2);
        if ((c->off += 64) >= c->at.seg) {
            c->off = 0;
            c->at.row += c->at.stride;
            c->at.rows--;
        }
    }
}

/* Packed panel times tokens [0, T): y[t·ldy + r] (=, +=), r in [0, np);
 * pf (may be NULL) is prefetched a little per weight block on the way. */
void avx512_i8_panel(const mm_i8_kind *kind, const mm_i8_act *a, int64_t T, int64_t k0,
                     int64_t kc, const uint8_t *panel, int64_t np, float *y, int64_t ldy,
                     bool add, const mm_prefetch *pf);

/* Elementwise, n values (x == y allowed).  exp: Cephes' expf polynomial on
 * a ln 2 range reduction, within 2 ulp of libm; inputs below −87.3 give 0
 * (avx2) or the gradual underflow (avx512). */
void avx512_exp(const float *x, float *y, int64_t n);
void avx512_silu_mul(float *x, const float *g, int64_t n);    /* x = silu(x)·g   */
void avx512_mul_silu(float *x, const float *g, int64_t n);    /* x = x·silu(g)   */
void avx512_mul_sigmoid(float *x, const float *g, int64_t n); /* x = x·σ(g)      */
void avx512_sigmoid(float *x, int64_t n);
/* n channels of one output row of the causal conv with its SiLU, in one
 * pass: o[i] = silu(Σ_{k ≥ first} hist[k·ld + i]·wt[k·ld + i]), the taps
 * summed in gdn_conv1d_silu's order. */
void avx512_conv_silu_row(const float *hist, const float *wt, int64_t ld, int first, int K,
                          float *o, int64_t n);
/* y = x / sqrt(mean(x²) + eps) · w per row (sum of squares in double). */
void avx512_rmsnorm(float *y, const float *x, const float *w, int64_t n, int64_t rows, float eps);
/* x = x / max(‖x‖, eps) per row (double sum). */
void avx512_l2norm(float *x, int64_t n, int64_t rows, float eps);

/* Peak loops: 12 independent register chains of one instruction, `iters`
 * rounds; returns the operations done (an FMA lane = 2, a vdpbf16ps lane =
 * 4, a vpdpbusd lane = 8).  kind: 0 f32 FMA, 1 vdpbf16ps, 2 vpdpbusd. */
double avx512_peak(int kind, int64_t iters);

/* ---- AMX (simd_amx.c); each call loads its own tile configuration ---- */

/* BF16 on tiles: activations and each 32-row weight panel are repacked so
 * that every tile is 1 KiB contiguous (16 rows x 64 bytes):
 *   activations  [T/16][in/32][16 tokens][32 k]      (rows past T zero)
 *   panel        [kc/32][2 groups][16 k-pairs][16 rows][2]   (B layout)
 * MM_AMX_KB k blocks of 32 (a 32 KiB panel slice, kept in L1) are run over
 * every token before the next; MM_AMX_TT tokens share one f32 accumulator
 * block of MM_AMX_TT x 32 in the thread's scratch. */
enum { MM_AMX_KB = 16, MM_AMX_TT = 512 };
/* Rows t0 <= t < t1 of the packed activations (t1 may pass T up to a
 * multiple of 32: those rows are zero); in % 32 == 0. */
void amx_act_bf16(const float *x, int64_t in, int64_t T, int64_t t0, int64_t t1, uint16_t *dst);
/* Rows [r0, r0+np) (np <= 32) x k [k0, k0+kc) of BF16 w, packed. */
void amx_pack_bf16(const mm_weight *w, int64_t r0, int64_t np, int64_t k0, int64_t kc,
                   uint16_t *dst);
/* y[t·ldy + r] = Σ_k x[t][k]·W[r][k] for t < T, r < np (<= 32), k < K:
 * packed activations xp, packed panel over all of K; acc: MM_AMX_TT x 32
 * floats, 64-byte aligned. */
void amx_bf16_panel(int64_t K, const uint16_t *xp, int64_t T, const uint16_t *panel, int64_t np,
                    float *y, int64_t ldy, float *acc);
/* avx512_i8_panel's contract on AMX, for Q8_0 packed signed (signed_q),
 * the one kind that runs here; a->q and dxT readable up to row T rounded up
 * to 16. */
void amx_i8_panel(const mm_i8_kind *kind, const mm_i8_act *a, int64_t T, int64_t k0, int64_t kc,
                  const uint8_t *panel, int64_t np, float *y, int64_t ldy, bool add);
/* K-quants on tiles, in planes.  Their sub-block scales are small integers,
 * so with activations quantized per 256 (llama.cpp's Q8_K granularity) a
 * super-block's integer dot Σ_g sc_g·Σ_k x·q splits by the digits of sc
 * into products on byte planes of q·digit, each a chain of 16 x 16 x 64
 * tile products over the whole 256, combined exactly in int32:
 *   Q4_K, Q5_K  sc = 8·hi + lo (6 bits): planes q·hi, q·lo (≤ 31·7,
 *               unsigned, TDPBSUD); the min term Σ_j (dmin·m_j)·(d·Σ_32 q)
 *               in f32 per super-block
 *   Q6_K        sc = Σ 4^i·c_i, c_i in [−2, 2] (int8): four planes of
 *               (q − 32)·c_i (|·| ≤ 64, signed, TDPBSSD); no min term
 * One f32 scale step per 256 weights instead of one per 32 or 16.
 *   activations  q [T][in], dT [T/16][in/256][16] the per-256 scales d,
 *                bsT [T/16][in/32][16] = d·Σq over each 32, for the min
 *                term (NULL: not made) (amx_act_kq; rows from T up to a
 *                multiple of 32 zero)
 *   panel        per 16-row subgroup and super-block a record of
 *                mm_kq_rec_bytes(type): the planes, each 4 B tiles of 64 k,
 *                then d[16] and (Q4_K, Q5_K) dmin·m_j [8][16]
 *                (amx_pack_kq, per call)
 * amx_kq_panel: y (+)= over k [k0, k0+kc) for t < T, r < np; uses a->q,
 * a->dxT (= dT), a->mbT (= bsT) and a->ld. */
static inline bool mm_kq_has_mins(uint32_t type) { return type != CLEF_DTYPE_Q6_K; }
static inline size_t mm_kq_rec_bytes(uint32_t type) {
    return mm_kq_has_mins(type) ? 2 * 4096 + (16 + 128) * 4 : 4 * 4096 + 16 * 4;
}
void amx_act_kq(const float *x, int64_t in, int64_t T, int64_t t0, int64_t t1, int8_t *q,
                float *dT, float *bsT);
void amx_pack_kq(const mm_weight *w, int64_t r0, int64_t np, int64_t k0, int64_t kc,
                 uint8_t *dst);
void amx_kq_panel(uint32_t type, const mm_i8_act *a, int64_t T, int64_t k0, int64_t kc,
                  const uint8_t *panel, int64_t np, float *y, int64_t ldy, bool add);
/* Tile peak loop (kind 1: bf16, 2: int8), as avx512_peak. */
double amx_peak(int kind, int64_t iters);

/* ---- AVX2 + FMA (simd_avx2.c) ---- */
/* kind 0: f32 FMA on ymm; 2: vpmaddubsw (a lane = 2 products and their
 * sum, counted 4 operations, as a vpdpbusd lane's 4 products count 8);
 * 3: vpdpbusd on ymm, VEX (AVX-VNNI); 4: the same, EVEX (AVX512_VNNI+VL) */
double avx2_peak(int kind, int64_t iters);
/* mm_pack_i8_portable's contract, and the K-quants as the integer-scale
 * panel where kind->isc. */
void avx2_pack_i8(const mm_i8_kind *kind, const mm_weight *w, int64_t r0, int64_t np, int64_t k0,
                  int64_t kc, uint8_t *dst);
/* avx512_act_i8's contract, and the int16 pairs of the integer-scale
 * panel where kind->isc. */
void avx2_act_i8(const mm_i8_kind *kind, const float *x, int64_t in, int64_t t0, int64_t t1,
                 int8_t *q, float *dx, void *mb);
/* avx512_i8_panel's contract on panels from avx2_pack_i8, on vpmaddubsw
 * (pf prefetched a few lines per tile call); the K-quants only as the
 * integer-scale panel (kind->isc).  Its int16 pair sums must not
 * saturate: Q8_0 (signed) multiplies |w| by x with w's sign (|Σ| ≤
 * 2·128·127); the K-quants' unsigned quants (below 64) meet x as they are,
 * and several k-quads are summed in int16 before vpmaddwd by the scale
 * (Q4_K 8, Q5_K 4, Q6_K 2: at most 8·2·15·128, 4·2·31·128 and 2·2·63·128,
 * below 2^15); a super-block's int32 sums then stay below 2^29 (Q6_K: 32
 * runs · 2·32256·128). */
void avx2_i8_panel(const mm_i8_kind *kind, const mm_i8_act *a, int64_t T, int64_t k0,
                   int64_t kc, const uint8_t *panel, int64_t np, float *y, int64_t ldy,
                   bool add, const mm_prefetch *pf);
/* The same on the ymm vpdpbusd (exact int32 sums of four products, no
 * saturation), with Q8_0 packed unsigned (kind->signed_q false, off 128):
 * avx2_vnni_i8_panel in the VEX encoding (AVX-VNNI), avx2_vnni_evex_i8_panel
 * in the EVEX one (AVX512_VNNI + VL).  One source: only the encoding of
 * that instruction differs, so the EVEX build, which runs on AVX-512
 * machines, tests the logic of the VEX one. */
void avx2_vnni_i8_panel(const mm_i8_kind *kind, const mm_i8_act *a, int64_t T, int64_t k0,
                        int64_t kc, const uint8_t *panel, int64_t np, float *y, int64_t ldy,
                        bool add, const mm_prefetch *pf);
void avx2_vnni_evex_i8_panel(const mm_i8_kind *kind, const mm_i8_act *a, int64_t T, int64_t k0,
                             int64_t kc, const uint8_t *panel, int64_t np, float *y,
                             int64_t ldy, bool add, const mm_prefetch *pf);
void avx2_exp(const float *x, float *y, int64_t n);
void avx2_silu_mul(float *x, const float *g, int64_t n);
void avx2_mul_silu(float *x, const float *g, int64_t n);
void avx2_mul_sigmoid(float *x, const float *g, int64_t n);
/* avx512_conv_silu_row's contract, the same bits as the avx2 conv then its SiLU. */
void avx2_conv_silu_row(const float *hist, const float *wt, int64_t ld, int first, int K,
                        float *o, int64_t n);
void avx2_sigmoid(float *x, int64_t n);
void avx2_rmsnorm(float *y, const float *x, const float *w, int64_t n, int64_t rows, float eps);
void avx2_l2norm(float *x, int64_t n, int64_t rows, float eps);
/* avx512_dot_f32's contract; pf (may be NULL): stored bytes brought into
 * L2 a few lines per tile on the way (the rows the thread widens next). */
void avx2_dot_f32(int64_t kc, const float *x, int64_t ldx, int64_t T, const float *w,
                  int64_t ldw, int64_t np, float *y, int64_t ldy, bool add, const mm_prefetch *pf);
/* BF16 (f16: F16) rows [0, nr) of w, ldw elements apart, k [0, kc), widened
 * exactly into dst [nr][ldd] (the dot form's rows for 16-bit weights). */
void avx2_widen_w16(bool f16, const uint16_t *w, int64_t ldw, int64_t nr, int64_t kc, float *dst,
                    int64_t ldd);
/* avx512_dot_w16's contract: the bits avx2_dot_f32 gives on w's f32 decoding. */
void avx2_dot_w16(bool f16, int64_t kc, const float *x, int64_t ldx, int64_t T, const uint16_t *w,
                  int64_t ldw, int64_t np, float *y, int64_t ldy, bool add);
void avx2_gemm_nn(int64_t m, int64_t n, int64_t k, const float *A, int64_t rsa, int64_t csa,
                  const float *B, int64_t ldb, float *C, int64_t ldc, bool add);

/* ---- AArch64 NEON (simd_neon.c): the avx2 contracts on 4-float vectors,
 * and the avx512 int8 contracts on SDOT (ARMv8.2 dot product: call only
 * where cpu_features.neon_dot) ---- */
/* kind 0: f32 FMA on 128-bit vectors; 1: BFDOT (a lane = 2 products and
 * their sum, 4 operations; needs BF16); 2: SDOT (as avx512_peak); 3: SMMLA
 * (an instruction = 2 x 2 dots of 8 = 64 operations; needs I8MM) */
double neon_peak(int kind, int64_t iters);
/* avx512_act_i8's contract. */
void neon_act_i8(const mm_i8_kind *kind, const float *x, int64_t in, int64_t t0, int64_t t1,
                 int8_t *q, float *dx, void *mb);
/* The avx2 elementwise contracts (exp: 0 below −87.3). */
void neon_exp(const float *x, float *y, int64_t n);
void neon_sigmoid(float *x, int64_t n);
void neon_silu_mul(float *x, const float *g, int64_t n);
void neon_mul_silu(float *x, const float *g, int64_t n);
void neon_mul_sigmoid(float *x, const float *g, int64_t n);
/* avx512_conv_silu_row's contract on 4-float vectors. */
void neon_conv_silu_row(const float *hist, const float *wt, int64_t ld, int first, int K,
                        float *o, int64_t n);
void neon_rmsnorm(float *y, const float *x, const float *w, int64_t n, int64_t rows, float eps);
void neon_l2norm(float *x, int64_t n, int64_t rows, float eps);
/* avx512_i8_panel's contract on panels from mm_pack_i8_portable (pf is
 * not used); on SMMLA where kind->k8 (call only where cpu_features.neon_i8mm). */
void neon_i8_panel(const mm_i8_kind *kind, const mm_i8_act *a, int64_t T, int64_t k0,
                   int64_t kc, const uint8_t *panel, int64_t np, float *y, int64_t ldy,
                   bool add, const mm_prefetch *pf);
void neon_dot_f32(int64_t kc, const float *x, int64_t ldx, int64_t T, const float *w,
                  int64_t ldw, int64_t np, float *y, int64_t ldy, bool add);
/* avx512_act_bf16's and avx512_dot_bf16's contracts, on BFDOT (call the
 * dot only where cpu_features.neon_bf16). */
void neon_act_bf16(const float *x, int64_t in, int64_t t0, int64_t t1, uint16_t *dst);
void neon_dot_bf16(int64_t kc, const uint16_t *x, int64_t ldx, int64_t T, const uint16_t *w,
                   int64_t ldw, int64_t np, float *y, int64_t ldy, bool add);
/* avx2_widen_w16's contract. */
void neon_widen_w16(bool f16, const uint16_t *w, int64_t ldw, int64_t nr, int64_t kc, float *dst,
                    int64_t ldd);
void neon_gemm_nn(int64_t m, int64_t n, int64_t k, const float *A, int64_t rsa, int64_t csa,
                  const float *B, int64_t ldb, float *C, int64_t ldc, bool add);

/* ---- portable helpers (mm_fast.c) ---- */

/* Rows [r0, r0+nr) x k [k0, k0+kc) of w dequantized into dst [nr][kc]
 * (k0, kc multiples of the type's block). */
void mm_dequant_rows(const mm_weight *w, int64_t r0, int64_t nr, int64_t k0, int64_t kc,
                     float *dst);
/* x rounded to BF16 and back (llama.cpp's BF16 activations), n values. */
void mm_round_bf16(const float *x, int64_t n, float *dst);

/* ---- portable halves of the int8 path (i8_portable.c) ---- */

/* avx512_pack_i8's contract, row by row: Q8_0 kept signed where
 * kind->signed_q (m = 0), for the products that multiply int8 by int8
 * (SDOT) or need the weight's sign (vpmaddubsw), else made unsigned as
 * avx512_pack_i8 does (the ymm vpdpbusd).  The K-quants' quants are below
 * 64, the same bytes signed or not. */
void mm_pack_i8_portable(const mm_i8_kind *kind, const mm_weight *w, int64_t r0, int64_t np,
                         int64_t k0, int64_t kc, uint8_t *dst);
/* One block of n values (32 or 256) with one scale, llama.cpp's rule:
 * d = max|x|/127, q = x·(1/d) rounded to nearest even and saturated;
 * sums16[i] = Σq of values [16i, 16i+16).  Returns d. */
typedef float (*mm_quant_block_fn)(const float *x, int n, int8_t *q, int32_t *sums16);
/* avx512_act_i8's contract, block by block through `quant`; kind->isc:
 * the m terms as the integer-scale panel's int16 pairs. */
void mm_act_i8_by_blocks(mm_quant_block_fn quant, const mm_i8_kind *kind, const float *x,
                         int64_t in, int64_t t0, int64_t t1, int8_t *q, float *dx, void *mb);

#endif
