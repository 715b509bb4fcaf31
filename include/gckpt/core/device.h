/* A device profile (a devices/NAME.json file, schema gckpt.device/1): a GPU, or the CPU
 * (kind "cpu": tests/data/devices/cpu-exact.json, PyTorch's CPU kernels). */
#ifndef GCKPT_DEVICE_H
#define GCKPT_DEVICE_H

#include <stdbool.h>
#include <stdint.h>

#include "gckpt/core/setting.h"
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
/* t's name: gckpt_target_names', or "cpu-cuda-lists" for the probe's emulation (a test's plan,
 * never a user's: no reader takes it back). */
const char *gckpt_target_label(gckpt_target t);
/* The target named s (exactly as gckpt_target_names spells it), or -1. */
int gckpt_target_from(const char *s);

/* One code base's time parameters on a device (a profile's optional "code_bases" object,
 * fitted by tools/step_time_fit.py to published measurements, docs/step-time.md). An op takes
 * max(GEMM FLOPs / (peak x matmul_efficiency x matmul_factor),
 *     fused attention FLOPs / (peak x matmul_efficiency x attention_eff(seq)),
 *     bytes / (HBM x hbm_efficiency x hbm_factor)) + op_overhead_s;
 * attention_eff(seq) = attention_factor x seq / (seq + attention_seq_half); every optimizer
 * step adds step_overhead_s. A profile without the object (or a CPU target): factors 1,
 * seq_half and overheads 0, the datasheet roofline. */
typedef struct {
    double matmul_factor, attention_factor, attention_seq_half, hbm_factor, op_overhead_s, step_overhead_s;
    /* optional: the 10th and 90th percentiles of published / predicted step time over the fit's
     * held-out points (1 when absent): each entry's step-time range */
    double step_ratio_p10, step_ratio_p90;
    /* optional: the 10th and 90th percentiles of (measured ratio / planned ratio) of tokens/s
     * of two settings on one setup (tools/step_time_pairs.py; 1 when absent): how far apart two
     * entries of one plan must be before their order is trusted (the recommendation's tie rule,
     * planner/plan.c). p10 <= 1 <= p90. */
    double ratio_p10, ratio_p90;
} gckpt_code_base_eff;

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
    bool has_code_bases;                           /* the profile has "code_bases" */
    gckpt_code_base_eff code_base[GCKPT_NCODEBASE]; /* neutral when absent */
    char code_base_fit[4096];                      /* "code_bases.fit" (provenance) as compact JSON */
} gckpt_device;

/* The neutral parameters: the datasheet roofline (no code-base correction). */
extern const gckpt_code_base_eff gckpt_code_base_neutral;
/* The time parameters an op of a `target` recipe gets at code base `code_base` (a setting's):
 * the profile's for CUDA, the neutral ones for a CPU target or an unknown code base. */
const gckpt_code_base_eff *gckpt_code_base_of(const gckpt_device *d, gckpt_target target, unsigned code_base);
/* Fraction of matmul_efficiency x peak the code base's fused attention reaches at seq. */
double gckpt_attention_eff(const gckpt_code_base_eff *e, double seq);

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
