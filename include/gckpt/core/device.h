/* A device profile (a devices/NAME.json file, schema gckpt.device/1): a GPU, or the CPU
 * (kind "cpu": tests/data/devices/cpu-exact.json, PyTorch's CPU kernels). */
#ifndef GCKPT_DEVICE_H
#define GCKPT_DEVICE_H

#include <stdbool.h>
#include <stdint.h>

#include "gckpt/util/util.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where the step runs, so whose kernels the recipe follows (gckpt/core/recipe.h): a CUDA
 * GPU, or PyTorch's CPU kernels (the probe's measurements, tools/hf_probe). A profile's
 * optional "kind" says which ("cuda" when absent); gckpt-plan --target overrides it. */
typedef enum {
    GCKPT_TARGET_CUDA,
    GCKPT_TARGET_CPU, /* PyTorch's CPU kernels under CPU autocast's op lists (a CPU run) */
    GCKPT_NTARGET,
    /* not a device's kind: the CPU's kernels under CUDA's autocast op lists and CUDA's
     * torch.is_autocast_enabled() answer, as the probe's "amp-bf16-cudalists" fixtures
     * emulate them (FINDINGS 7, 12.10 C2) to check the CUDA rules on the CPU */
    GCKPT_TARGET_CPU_CUDA_LISTS = GCKPT_NTARGET
} gckpt_target;
extern const char *const gckpt_target_names[GCKPT_NTARGET]; /* "cuda", "cpu" */
/* The target named s (exactly as gckpt_target_names spells it), or -1. */
int gckpt_target_from(const char *s);

typedef struct {
    char name[128];
    gckpt_target kind;         /* "kind": whose kernels the device runs (default cuda) */
    uint64_t memory_bytes;
    double tflops_fp32, tflops_tf32, tflops_bf16, tflops_fp16; /* dense peak */
    double matmul_efficiency;  /* achievable fraction of peak for large GEMMs */
    double hbm_bytes_per_s, hbm_efficiency;
    double h2d_bytes_per_s, d2h_bytes_per_s; /* pinned host <-> device */
    uint64_t context_bytes;    /* CUDA context + library handles */
    uint64_t workspace_bytes;  /* cuBLAS workspace */
    uint64_t alloc_round_bytes;   /* caching allocator block rounding (512) */
    uint64_t segment_round_bytes; /* device segment rounding (2 MiB) */
    /* collectives' bus bandwidth (nccl-tests' busbw) between the GPUs of one node and, per GPU,
     * between nodes; 0: not in the profile (optional fields: several GPUs only) */
    double intra_node_bus_bytes_per_s, inter_node_bus_bytes_per_s;
} gckpt_device;

/* Seconds to copy `bytes` between pinned host memory and the device (d2h: to the host) at
 * the profile's h2d / d2h rates: the one rule for checkpoint offload and parallel CPU offload. */
double gckpt_copy_seconds(const gckpt_device *d, bool d2h, double bytes);

bool gckpt_device_parse(const char *file, const char *text, gckpt_device *d, gckpt_err *err);
bool gckpt_device_load(const char *name_or_path, gckpt_device *d, gckpt_err *err);
/* (Written back as JSON by gckpt/formats/device_json.h: core writes no output.) */

#ifdef __cplusplus
}
#endif

#endif
