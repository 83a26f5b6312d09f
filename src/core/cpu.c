/*
 * core/cpu.c — CPUID feature detection and the choice of kernel path.
 *
 * Bits (Intel SDM vol. 2, CPUID): leaf 1 ECX: FMA 12, OSXSAVE 27, F16C 29;
 * leaf 7.0 EBX: AVX2 5, AVX512F 16, DQ 17, BW 30, VL 31; ECX: VNNI 11;
 * EDX: AMX-BF16 22, AMX-TILE 24, AMX-INT8 25; leaf 7.1 EAX: AVX512_BF16 5.
 * XCR0 must enable SSE|AVX state (bits 1,2) for AVX2, opmask|ZMM (5,6,7)
 * for AVX-512, and XTILECFG|XTILEDATA (17,18) for AMX.  AArch64: Linux
 * reports the dot product (SDOT/UDOT) as HWCAP_ASIMDDP in AT_HWCAP, and
 * the int8 matrix product (SMMLA) as HWCAP2_I8MM (bit 13) and BFDOT as
 * HWCAP2_BF16 (bit 14) in AT_HWCAP2.
 */
#include "core/cpu.h"

#include <string.h>

#include "core/error.h"

#if defined(__aarch64__) && defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#ifndef HWCAP2_I8MM /* kernel headers before 5.10 */
#define HWCAP2_I8MM (1 << 13)
#endif
#ifndef HWCAP2_BF16
#define HWCAP2_BF16 (1 << 14)
#endif
#endif

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

static unsigned long long xgetbv0(void) {
    unsigned int lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}

void cpu_detect(cpu_features *f) {
    memset(f, 0, sizeof *f);
    unsigned int a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    bool osxsave = c & (1u << 27);
    bool fma = c & (1u << 12), f16c = c & (1u << 29);
    if (!osxsave) return;
    unsigned long long xcr0 = xgetbv0();
    bool ymm_os = (xcr0 & 0x6) == 0x6;
    bool zmm_os = (xcr0 & 0xe6) == 0xe6;
    bool amx_os = (xcr0 & 0x60000) == 0x60000;
    unsigned int max_leaf = __get_cpuid_max(0, NULL);
    unsigned int v[4];
    __cpuid(0, v[0], v[1], v[2], v[3]); /* vendor: EBX, EDX, ECX */
    f->amd = v[1] == 0x68747541u && v[3] == 0x69746e65u && v[2] == 0x444d4163u;
    unsigned int b7 = 0, c7 = 0, d7 = 0, a71 = 0;
    if (max_leaf >= 7) {
        __cpuid_count(7, 0, a, b7, c7, d7);
        unsigned int sub = a;
        if (sub >= 1) __cpuid_count(7, 1, a71, b, c, d);
    }
    if (ymm_os) {
        f->fma = fma;
        f->f16c = f16c;
        f->avx2 = b7 & (1u << 5);
        f->avx_vnni = a71 & (1u << 4);
    }
    if (zmm_os) {
        f->avx512f = b7 & (1u << 16);
        f->avx512dq = b7 & (1u << 17);
        f->avx512bw = b7 & (1u << 30);
        f->avx512vl = b7 & (1u << 31);
        f->avx512vnni = c7 & (1u << 11);
        f->avx512bf16 = a71 & (1u << 5);
    }
    if (amx_os) {
        f->amx_bf16 = d7 & (1u << 22);
        f->amx_tile = d7 & (1u << 24);
        f->amx_int8 = d7 & (1u << 25);
    }
}

/* Linux keeps AMX tile data off until a process asks (kernel >= 5.16). */
static bool amx_request_permission(void) {
    enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}
#else
void cpu_detect(cpu_features *f) {
    memset(f, 0, sizeof *f);
#if defined(__aarch64__)
    f->neon = true; /* Advanced SIMD is mandatory in AArch64 */
#if defined(__linux__)
    f->neon_dot = getauxval(AT_HWCAP) & HWCAP_ASIMDDP;
    f->neon_i8mm = getauxval(AT_HWCAP2) & HWCAP2_I8MM;
    f->neon_bf16 = getauxval(AT_HWCAP2) & HWCAP2_BF16;
#endif
#endif
}
static bool amx_request_permission(void) { return false; }
#endif

#if defined(__x86_64__)
enum { MXCSR_DAZ = 1u << 6, MXCSR_FTZ = 1u << 15 };
unsigned long cpu_fp_flush_enter(void) {
    unsigned int prev = _mm_getcsr();
    _mm_setcsr(prev | MXCSR_DAZ | MXCSR_FTZ);
    return prev;
}
void cpu_fp_restore(unsigned long prev) { _mm_setcsr((unsigned int)prev); }
#elif defined(__aarch64__)
unsigned long cpu_fp_flush_enter(void) {
    unsigned long prev;
    __asm__ volatile("mrs %0, fpcr" : "=r"(prev));
    __asm__ volatile("msr fpcr, %0" : : "r"(prev | (1ul << 24))); /* FZ */
    return prev;
}
void cpu_fp_restore(unsigned long prev) { __asm__ volatile("msr fpcr, %0" : : "r"(prev)); }
#else
unsigned long cpu_fp_flush_enter(void) { return 0; }
void cpu_fp_restore(unsigned long prev) { (void)prev; }
#endif

bool cpu_path_supported(const cpu_features *f, cpu_path path) {
    switch (path) {
    case CPU_PATH_REF: return true;
    case CPU_PATH_AVX2: return f->avx2 && f->fma && f->f16c; /* every AVX2 CPU has F16C */
    case CPU_PATH_AVX512: return f->avx512f && f->avx512bw && f->avx512vl && cpu_path_supported(f, CPU_PATH_AVX2);
    case CPU_PATH_AMX:
        return cpu_path_supported(f, CPU_PATH_AVX512) && f->amx_tile && f->amx_bf16 && f->amx_int8;
    case CPU_PATH_NEON: return f->neon;
    default: return false;
    }
}

const char *cpu_path_name(cpu_path path) {
    static const char *const names[CPU_PATH_COUNT] = {"ref", "avx2", "avx512", "amx", "neon"};
    return (unsigned)path < CPU_PATH_COUNT ? names[path] : "?";
}

const char *cpu_target_name(const cpu_target *t) {
    /* Every combination is spelled out so the name can be a static string. */
    static const char *const avx512[2][2] = {{"avx512", "avx512+vnni"}, {"avx512+bf16", "avx512+bf16+vnni"}};
    static const char *const amx[2][2] = {{"amx", "amx+vnni"}, {"amx+bf16", "amx+bf16+vnni"}};
    switch (t->path) {
    case CPU_PATH_AVX512: return avx512[t->bf16][t->vnni];
    case CPU_PATH_AMX: return amx[t->bf16][t->vnni];
    case CPU_PATH_NEON: {
        static const char *const neon[2][3] = {{"neon", "neon+dot", "neon+dot+i8mm"},
                                               {"neon+bf16", "neon+dot+bf16", "neon+dot+i8mm+bf16"}};
        return neon[t->bf16][t->i8mm ? 2 : t->dot ? 1 : 0];
    }
    case CPU_PATH_AVX2: return t->vnni ? "avx2+vnni" : "avx2";
    default: return cpu_path_name(t->path);
    }
}

static bool parse_path(const char *s, cpu_path *out) {
    for (int p = 0; p < CPU_PATH_COUNT; p++)
        if (!strcmp(s, cpu_path_name((cpu_path)p))) {
            *out = (cpu_path)p;
            return true;
        }
    return false;
}

clef_status cpu_choose(const char *request, const cpu_features *f, cpu_target *out,
                       clef_error *err) {
    memset(out, 0, sizeof *out);
    cpu_path path;
    /* avx2+vnni: the ymm vpdpbusd in the encoding this CPU has */
    const bool vnni256 = f->avx_vnni || (f->avx512vnni && f->avx512vl);
    const bool avx2_vnni = request && !strcmp(request, "avx2+vnni");
    if (avx2_vnni) {
        if (!cpu_path_supported(f, CPU_PATH_AVX2) || !vnni256)
            return clef_err_set(err, CLEF_ERR_UNSUPPORTED,
                                "CLEF_CPU=avx2+vnni: this CPU (or OS) has no vpdpbusd on ymm "
                                "(AVX-VNNI, or AVX512_VNNI with AVX512VL)");
        path = CPU_PATH_AVX2;
    } else if (!request || !*request || !strcmp(request, "auto")) {
        /* amx when Linux grants the tile permission, else the next best */
        path = cpu_path_supported(f, CPU_PATH_AVX512) ? CPU_PATH_AVX512
             : cpu_path_supported(f, CPU_PATH_AVX2)   ? CPU_PATH_AVX2
             : cpu_path_supported(f, CPU_PATH_NEON)   ? CPU_PATH_NEON
                                                      : CPU_PATH_REF;
        if (cpu_path_supported(f, CPU_PATH_AMX) && amx_request_permission()) path = CPU_PATH_AMX;
    } else if (!parse_path(request, &path)) {
        return clef_err_set(err, CLEF_ERR_INVALID_ARG,
                            "CLEF_CPU='%.40s' is not one of ref, avx2, avx2+vnni, avx512, amx, neon, auto",
                            request);
    } else if (!cpu_path_supported(f, path)) {
        return clef_err_set(err, CLEF_ERR_UNSUPPORTED,
                            "CLEF_CPU=%s: this CPU (or OS) lacks the instructions it needs", request);
    } else if (path == CPU_PATH_AMX && !amx_request_permission()) {
        return clef_err_set(err, CLEF_ERR_UNSUPPORTED,
                            "CLEF_CPU=amx: Linux refused the AMX tile-data permission (arch_prctl)");
    }
    out->path = path;
    if (cpu_path_avx512_family(path)) {
        /* vdpbf16ps only where it is faster than widening to f32 FMAs (on
         * amx BF16 runs on tiles; dpbf16 takes widths they cannot) */
        out->bf16 = f->avx512bf16 && (f->amd || path == CPU_PATH_AMX);
        out->bcast_fold = f->amd;
        out->vnni = f->avx512vnni;
        out->amx = path == CPU_PATH_AMX;
    }
    if (path == CPU_PATH_AVX2) {
        out->vnni = f->avx_vnni || avx2_vnni;
        out->vnni_evex = out->vnni && !f->avx_vnni;
    }
    if (path == CPU_PATH_NEON) {
        out->dot = f->neon_dot;
        out->i8mm = f->neon_dot && f->neon_i8mm;
        out->bf16 = f->neon_bf16;
    }
    return CLEF_OK;
}
