/* Why the CUDA backend cannot run, in words, decided from plain numbers (CUDA error
 * codes, driver / runtime versions, compute capability) so that the decisions are
 * tested on machines without a GPU. The CUDA backend (cuda_backend.cu) feeds them. */
#ifndef GCKPT_CUDA_DIAG_H
#define GCKPT_CUDA_DIAG_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* cudaError_t values used here (cuda_backend.cu checks them against driver_types.h) */
enum {
    GCKPT_CUDA_ERR_INSUFFICIENT_DRIVER = 35,
    GCKPT_CUDA_ERR_INVALID_DEVICE_FUNCTION = 98,
    GCKPT_CUDA_ERR_NO_DEVICE = 100,
    GCKPT_CUDA_ERR_NO_KERNEL_IMAGE = 209,
};

/* cudaGetDeviceCount failed with err (or found count == 0 GPUs): one sentence.
 * driver_version: cudaDriverGetVersion (0 when no driver is installed); runtime_version:
 * cudaRuntimeGetVersion; cuda_msg: cudaGetErrorString(err). */
void gckpt_cuda_why_unavailable(int err, int count, int driver_version, int runtime_version,
                                const char *cuda_msg, char *buf, size_t n);

/* Whether a kernel of this binary can run on the GPU: probe_err is the result of
 * cudaFuncGetAttributes on one of its kernels. When it cannot, writes a sentence naming
 * the GPU, its compute capability, the architectures built (archs, as configured) and
 * how to rebuild, and returns false. */
bool gckpt_cuda_has_code(int probe_err, const char *gpu, int major, int minor, const char *archs,
                         char *buf, size_t n);

#ifdef __cplusplus
}
#endif

#endif
