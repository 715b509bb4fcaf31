/* A rough duration of a host-backend run (host_estimate.c). */
#ifndef GCKPT_HOST_ESTIMATE_H
#define GCKPT_HOST_ESTIMATE_H

#include <stdbool.h>
#include <stddef.h>

#include "gckpt/core/plan_read.h"
#include "gckpt/core/schedule.h"

/* FLOP/s of cblas_sgemm on this machine (about 0.15 s of measuring); 0 on failure. */
double gckpt_host_gemm_rate(void);
/* Bytes per second of the host backend's bf16 load / compute / store loops. */
double gckpt_host_elem_rate(void);
/* One training step of entry i: FLOPs of its matrix and attention ops, bytes moved by
 * the others (elementwise, reductions, the optimizer). false when it cannot be built. */
bool gckpt_entry_step_work(const gckpt_plan_file *pf, size_t i, double *flops, double *bytes);

#endif
