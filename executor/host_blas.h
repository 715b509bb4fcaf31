/* The host backend's BLAS: OpenBLAS, loaded when the first kernel needs it, with one
 * thread unless the user chose a count (OPENBLAS_NUM_THREADS, GOTO_NUM_THREADS,
 * OMP_NUM_THREADS), and only when the address space it needs is there.
 *
 * Why: OpenBLAS maps one buffer per thread (BUFFER_SIZE = 32 << 22 bytes plus a page in
 * OpenBLAS 0.3.21, common_x86_64.h) when the thread starts or first calls it, and
 * blas_memory_alloc (driver/others/memory.c) retries a failed mapping forever: under
 * ulimit -v a linked, multi-threaded OpenBLAS spins at 100% CPU from program start and
 * the process cannot even exit (the exit handler joins the spinning thread). Loaded
 * later, single-threaded and after a headroom check, a missing buffer is an out of memory
 * of the entry, not a hang. */
#ifndef GCKPT_HOST_BLAS_H
#define GCKPT_HOST_BLAS_H

#include <cblas.h>
#include <stdbool.h>
#include <stdint.h>

#include "gckpt/util/util.h"

/* One OpenBLAS buffer. */
#define GCKPT_BLAS_BUFFER_BYTES (((uint64_t)32 << 22) + 4096)

/* Load and warm up (the first call maps the buffer) unless done; false with err ("out of
 * memory: ...", or why OpenBLAS cannot be loaded). */
bool host_blas_ready(gckpt_err *err);
/* Address space that host_blas_ready will still take (0 once it has succeeded). */
uint64_t host_blas_pending_bytes(void);
/* Threads OpenBLAS runs (after host_blas_ready; before: what it will run). */
int host_blas_threads(void);
/* Measured growth of the process's address space by loading and warming up OpenBLAS. */
uint64_t host_blas_loaded_bytes(void);

/* cblas_sgemm through the loaded library; only after host_blas_ready succeeded (the
 * backend's forward and backward make sure of it). */
void host_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha,
                const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);

#endif
