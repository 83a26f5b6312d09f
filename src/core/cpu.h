/*
 * core/cpu.h — what the processor can run, and which kernel path to use.
 *
 * Detection asks CPUID (and XGETBV: the OS must save the wide registers) on
 * every call — it is a handful of instructions, so no result is cached and
 * there is no global state.  The choice is made once per model load
 * (qwen35_load) and kept in the model: cpu_target says which kernel family
 * runs and which optional instructions those kernels may use.
 *
 * Paths (CLEF_CPU=ref|avx2|avx2+vnni|avx512|amx|neon forces one; unset or "auto" picks
 * the best the CPU has):
 *   ref     portable C, weights dequantized to f32, f32 activations: the
 *           arbiter every other path is tested against
 *   avx2    AVX2+FMA+F16C: f32 kernels (BF16 weights widened to f32 meet
 *           activations rounded to BF16, as llama.cpp); Q8_0/Q4_K/Q5_K/Q6_K
 *           weights meet int8 activations on vpmaddubsw, or on the ymm
 *           vpdpbusd of AVX-VNNI where the CPU has it (`avx2+vnni`: Intel
 *           client cores from Alder Lake on, the E-core Xeons); the decision
 *           head's BF16/F16 matrices are widened in registers (f32_act).
 *           CLEF_CPU=avx2+vnni forces the vpdpbusd kernels, also on a CPU
 *           that has the instruction only in its AVX-512 (EVEX) encoding
 *   avx512  AVX-512F/BW/VL; BF16 weights meet BF16 activations, on
 *           vdpbf16ps where it outruns f32 FMAs (AMD: Zen 4/5), else widened
 *           to f32 panels for FMAs (Intel: vdpbf16ps zmm issues at 1.3/ns
 *           against 5.4/ns for an FMA on Emerald Rapids, half the flops);
 *           Q8_0/Q4_K/Q5_K/Q6_K weights meet int8 activations, on vpdpbusd
 *           with AVX512_VNNI, else on avx2's vpmaddubsw kernels
 *   amx     avx512 plus AMX tiles: BF16 and quantized weights on
 *           TDPBF16PS / TDPBSSD / TDPBSUD.  Needs the tile-data
 *           permission from Linux (arch_prctl ARCH_REQ_XCOMP_PERM);
 *           "auto" asks for it and falls back to avx512 when refused
 *   neon    AArch64 Advanced SIMD (every AArch64 CPU has it): the avx2
 *           path's f32 kernels on 4-float vectors (BF16 weights meet
 *           BF16-rounded activations); with the ARMv8.2 dot product
 *           (SDOT), Q8_0/Q4_K/Q5_K/Q6_K weights meet int8 activations as
 *           on avx512+vnni (on SMMLA where the CPU has I8MM), else they
 *           are dequantized to f32; with BF16 (BFDOT), BF16 weights meet
 *           BF16 activations in place
 * Elsewhere only `ref` exists.
 */
#ifndef CLEF_CORE_CPU_H
#define CLEF_CORE_CPU_H

#include <stdbool.h>

#include "clef.h"

typedef enum cpu_path {
    CPU_PATH_REF = 0,
    CPU_PATH_AVX2,
    CPU_PATH_AVX512,
    CPU_PATH_AMX,
    CPU_PATH_NEON,
    CPU_PATH_COUNT,
} cpu_path;

/* Instruction sets usable by this process (CPU and OS both agree). */
typedef struct cpu_features {
    bool avx2, fma, f16c;
    bool avx512f, avx512bw, avx512vl, avx512dq;
    bool avx512bf16, avx512vnni;
    bool avx_vnni;                      /* AVX-VNNI: VEX vpdpbusd on ymm        */
    bool amx_tile, amx_bf16, amx_int8;  /* CPU + XCR0; the permission is separate */
    bool amd;                           /* vendor AuthenticAMD                  */
    bool neon;                          /* AArch64 Advanced SIMD                */
    bool neon_dot;                      /* ARMv8.2 SDOT/UDOT (Linux HWCAP_ASIMDDP) */
    bool neon_i8mm;                     /* ARMv8.6 SMMLA (Linux HWCAP2_I8MM)    */
    bool neon_bf16;                     /* ARMv8.6 BFDOT (Linux HWCAP2_BF16)    */
} cpu_features;

/* The kernels a model runs with. */
typedef struct cpu_target {
    cpu_path path;
    bool bf16;      /* avx512 family: dpbf16 kernels for BF16 weights; neon: BFDOT */
    bool bcast_fold;/* avx512 family: f32 broadcasts folded into each FMA as a
                       {1to16} operand (AMD: a separate broadcast takes an FP
                       pipe); else one vbroadcastss feeds a row of FMAs (Intel:
                       a broadcast is a load-port uop, and folded into every
                       FMA the loads become the limit)                      */
    bool vnni;      /* avx512 family: vpdpbusd kernels for quantized weights;
                       avx2: the same on ymm (AVX-VNNI)                     */
    bool vnni_evex; /* avx2 with vnni: that ymm vpdpbusd in its EVEX encoding
                       (AVX512_VNNI + VL), for a CPU without AVX-VNNI: an
                       AVX-512 machine testing or timing the avx2+vnni
                       kernels (the bits are the same)                       */
    bool amx;       /* AMX tiles usable (permission granted)                   */
    bool dot;       /* neon: sdot kernels for quantized weights (int8 activations) */
    bool i8mm;      /* neon with dot: those products on SMMLA's 2 x 8 x 2 blocks  */
} cpu_target;

/* avx512 or amx: the paths that run the AVX-512 kernels (amx adds tiles). */
static inline bool cpu_path_avx512_family(cpu_path p) {
    return p == CPU_PATH_AVX512 || p == CPU_PATH_AMX;
}

/* Fill *f from CPUID/XGETBV on x86-64; on AArch64 neon (always there)
 * and, from the kernel's HWCAP and HWCAP2, neon_dot, neon_i8mm and neon_bf16;
 * elsewhere all false. */
void cpu_detect(cpu_features *f);

/* Can this CPU run `path`'s kernels? */
bool cpu_path_supported(const cpu_features *f, cpu_path path);

/* Choose the target.  request: the CLEF_CPU value (NULL, "" or "auto": the
 * best supported path; "avx2+vnni": avx2 with the vpdpbusd kernels, in
 * either encoding).  A named path the CPU cannot run, or an unknown
 * name, is CLEF_ERR_UNSUPPORTED / CLEF_ERR_INVALID_ARG naming it.  For
 * `amx` this asks Linux for the tile-data permission. */
clef_status cpu_choose(const char *request, const cpu_features *f, cpu_target *out,
                       clef_error *err);

/* The calling thread's floating-point mode for the kernels: denormal inputs
 * read as zero and denormal results flush to zero (x86-64: MXCSR DAZ | FTZ;
 * aarch64: FPCR.FZ; elsewhere unchanged).  Values below 2^-126 never matter
 * to a decision's probabilities, but on Intel cores each instruction that
 * meets one takes a microcode assist: the delta rule of a model whose gates
 * decay fast (e^{G_t-G_s} underflowing inside a chunk) ran 10x slower.
 * Returns the previous mode, for cpu_fp_restore. */
unsigned long cpu_fp_flush_enter(void);
void cpu_fp_restore(unsigned long prev);

/* "ref", "avx2", "avx512", "amx", "neon". */
const char *cpu_path_name(cpu_path path);

/* A short description of the target, e.g. "avx512+bf16+vnni" or
 * "neon+dot+i8mm" (static). */
const char *cpu_target_name(const cpu_target *t);

#endif
