/*
 * kernels/peak.h — measuring the arithmetic peak a kernel path can reach.
 */
#ifndef CLEF_KERNELS_PEAK_H
#define CLEF_KERNELS_PEAK_H

#include "core/cpu.h"
#include "core/threadpool.h"

/* GFLOP/s (GOP/s for int8) of all the pool's threads together running the
 * instruction tg's matmuls use for `precision` ("f32", "bf16", "int8", as
 * mm_precision names it), for about `seconds` (after a short calibration). */
double mm_peak_gflops(const cpu_target *tg, const char *precision, tp_pool *pool, double seconds);

#endif
