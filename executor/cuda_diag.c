/* CUDA diagnoses in words (include/gckpt/executor/cuda_diag.h). */
#include "gckpt/executor/cuda_diag.h"

#include <stdio.h>

static void version(int v, char *buf, size_t n) { snprintf(buf, n, "%d.%d", v / 1000, (v % 1000) / 10); }

void gckpt_cuda_why_unavailable(int err, int count, int driver_version, int runtime_version,
                                const char *cuda_msg, char *buf, size_t n)
{
    char dv[16], rv[16];
    version(driver_version, dv, sizeof dv);
    version(runtime_version, rv, sizeof rv);
    if (driver_version == 0)
        snprintf(buf, n, "no NVIDIA driver is installed (or it cannot be loaded): the CUDA backend needs one");
    else if (err == GCKPT_CUDA_ERR_INSUFFICIENT_DRIVER)
        snprintf(buf, n, "the NVIDIA driver supports CUDA %s but this gckpt-run was built with CUDA %s: update the driver",
                 dv, rv);
    else if (err == GCKPT_CUDA_ERR_NO_DEVICE || (err == 0 && count < 1))
        snprintf(buf, n, "the NVIDIA driver (CUDA %s) sees no GPU", dv);
    else
        snprintf(buf, n, "%s", cuda_msg && *cuda_msg ? cuda_msg : "CUDA error");
}

bool gckpt_cuda_has_code(int probe_err, const char *gpu, int major, int minor, const char *archs,
                         char *buf, size_t n)
{
    if (probe_err != GCKPT_CUDA_ERR_NO_KERNEL_IMAGE && probe_err != GCKPT_CUDA_ERR_INVALID_DEVICE_FUNCTION)
        return true;
    snprintf(buf, n, "this gckpt-run has no code for %s (compute capability %d.%d): it was built for CUDA "
                     "architectures %s; rebuild with -DCMAKE_CUDA_ARCHITECTURES=%d%d (or =native on this machine)",
             gpu, major, minor, archs, major, minor);
    return false;
}
