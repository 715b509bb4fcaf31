/* The CUDA backend of the executor (built when a CUDA compiler is found). Its functions
 * have C linkage. */
#ifndef GCKPT_EXEC_CUDA_H
#define GCKPT_EXEC_CUDA_H

#include <stdio.h>

#include "gckpt/executor/executor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int device;               /* CUDA device ordinal */
    bool sync_alloc;          /* cudaMalloc / cudaFree instead of the stream-ordered allocator */
    uint64_t memory_limit;    /* refuse allocations beyond this many bytes (0: none) */
} gckpt_cuda_opts;

/* NULL with err set when there is no usable GPU. */
gckpt_backend *gckpt_cuda_backend_new(const gckpt_cuda_opts *o, gckpt_err *err);

/* Whether the CUDA backend's kernel table has a forward (bwd false) or a backward kernel
 * of primitive prim (gckpt_prim); refused by name otherwise. No device needed. */
bool gckpt_cuda_has_kernel(int prim, bool bwd);

/* Whether a CUDA device is present; why not in err. */
bool gckpt_cuda_available(gckpt_err *err);

/* Measure this GPU (GEMM throughput at the given shapes, device copy bandwidth, pinned
 * host <-> device bandwidth, context size) and write a device profile (schema
 * gckpt.device/1) to out_path. base: a profile whose peak figures are kept (the
 * efficiencies become measured / peak), or NULL (peaks = measured, efficiency 1).
 * hidden / inter: GEMM shapes (0: 4096 / 14336). */
bool gckpt_cuda_calibrate(int device, const gckpt_device *base, uint64_t hidden, uint64_t inter, uint64_t tokens,
                          const char *out_path, FILE *log, gckpt_err *err);

#ifdef __cplusplus
}
#endif

#endif
