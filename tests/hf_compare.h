/* The planner next to one HF probe fixture (tools/hf_probe: a training step of real
 * Transformers measured on the CPU). One place holds the comparison rules, used by
 * tests/test_hf_fixtures (which applies the tolerances) and by gckpt-hf-compare (which
 * prints measured vs planned for any fixture, e.g. one the probe made from a user's own
 * config.json).
 *
 * The planner runs with a CPU target (PyTorch's CPU kernels, recipe.h) and an exact
 * byte-accounting device profile. Documented, explicit adjustments to what the probe
 * records (tools/hf_probe/FINDINGS.md):
 *   - rotary cos/sin (llama family) are saved once, by the first non-checkpointed
 *     layer, and the probe charges them to it; the planner keeps them as shared tensors
 *     of the embedding; Gemma 3's second pair (one per layer type) is charged to the
 *     first non-checkpointed layer of the other type;
 *   - gpt2 eager: the positional mask is saved once, by the first checkpointed layer;
 *   - the HF loss's shifted labels are a view of the padded [1, s+1] labels when b = 1
 *     (8 bytes more than the [T] copy made for b > 1);
 *   - fixtures that emulate CUDA's autocast op lists and torch.is_autocast_enabled()
 *     answer ("amp-bf16-cudalists", FINDINGS R-AMP-3 and R-CPU-3 C2) are planned with
 *     GCKPT_TARGET_CPU_CUDA_LISTS, the others (a plain CPU run) with GCKPT_TARGET_CPU,
 *     as gckpt-plan --target cpu plans them (hf_target). */
#ifndef GCKPT_HF_COMPARE_H
#define GCKPT_HF_COMPARE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "gckpt/core/device.h"
#include "gckpt/core/model.h"
#include "gckpt/core/setting.h"
#include "gckpt/util/jsonget.h"
#include "gckpt/util/util.h"

#define HF_MAX_LAYERS 256

typedef struct {
    char path[1024];
    char family[16], precision[32], attention[16];
    gckpt_model m;
    gckpt_setting s;
    bool comparable;          /* false: a rule the planner does not model (why_not) */
    const char *why_not;      /* when not comparable */
    bool virtual_states;      /* the probe counted AdamW's states instead of allocating them */
    double dropout;
    char method[8];           /* "full", or LoRA / QLoRA fixtures (tests/data/hf-peft): "lora", "qlora" */
    char optimizer[24];       /* as the probe names it (adamw_torch_fused, paged_adamw_8bit, ...) */
    /* measured */
    uint64_t params;
    uint64_t trainable;       /* peft's trainable_params (full: the parameter count) */
    int nlayers;
    bool ckpt[HF_MAX_LAYERS];
    uint64_t layer_saved[HF_MAX_LAYERS];
    uint64_t head_saved, embed_saved, offload;
    double host_peak;         /* the step's host peak: offloaded copies and checkpoint RNG states
                               * (allocs.py's "host"); -1 when the fixture lacks it */
    double peak, after;       /* live bytes: steady-state step's peak, after micro-step 1's forward */
    char peak_phase[32], peak_where[256];
    /* the most live bytes per "phase/region" near the peak (steps[].region_peaks; older
     * fixtures lack it: nregion 0) */
    int nregion;
    char region_key[16][48];
    double region_peak[16];
    /* mixture of experts (moe_routing): forwards recorded, the largest share one expert
     * received over the balanced share S / E (1 = balanced), and whether every layer's
     * counts covered its S = b * s * top_k token-expert pairs over E experts */
    int moe_forwards;
    double moe_imbalance;
    bool moe_counts_ok;
    char moe_impl[16];
} hf_fixture;

typedef struct {
    uint64_t params, trainable;
    uint64_t layer_saved[HF_MAX_LAYERS];
    uint64_t head_saved, embed_saved, offload;
    uint64_t host;            /* planned host peak: host_pinned_bytes + host_rng_bytes */
    uint64_t peak, after;
    const char *peak_phase;
    int peak_layer;           /* -1 embedding, 0..L-1, L head, L+1 optimizer */
    char peak_what[96];
    bool peak_at_linear;      /* the planned peak allocates a LINEAR op's output (a GEMM's) */
    char peak_key[48];        /* "phase/region" as the probe names it */
    double measured_there;    /* measured most live bytes in that region (-1 unknown) */
    /* the comparison */
    bool params_ok, saved_ok, offload_ok, same_phase; /* params_ok: the count and the trainable count */
    bool host_ok;             /* host equals the measured host peak (true when not measured) */
    int first_bad_layer;      /* -1 none, L head, L+1 embedding */
    double e_peak, e_after;   /* (planned - measured) / measured */
} hf_cmp;

/* Read a fixture (schema gckpt.hf-fixture/1); false with err naming file and field. */
/* A probe setting's precision name as gckpt's ("amp-bf16-cudalists" is amp-bf16), or -1. */
int hf_precision_from(const char *name);
/* A VLM fixture's step peak from its last step (steps[-1]): live_peak_bytes, unless that
 * falls between the micro-steps ("idle"): the probe's own batch making (vlm_cases.py builds
 * the pixels in fp32 and casts them to bf16 for its pure-bf16 cases, both alive at once; a
 * Trainer's collator hands the processor's fp32 pixels to the model), then the highest of
 * the step's other regions (region_peaks). */
struct cJSON;
double hf_vlm_step_peak(const struct cJSON *last);
/* The target f was measured as: GCKPT_TARGET_CPU, or _CPU_CUDA_LISTS for "cudalists". */
gckpt_target hf_target(const hf_fixture *f);
bool hf_fixture_read(const char *path, hf_fixture *f, gckpt_err *err);

/* The LoRA / QLoRA fields of fixture root (method, lora, quant) into s->peft (full fine-tuning
 * when it has no method); false with err naming file and field. */
bool hf_peft_read(const char *path, const cJSON *root, gckpt_setting *s, gckpt_err *err);

/* Plan f's setting and compare; false (err) when the planner refuses it. */
bool hf_compare(const hf_fixture *f, const gckpt_device *exact, hf_cmp *c, gckpt_err *err);

/* Live-peak (and after-forward) tolerance: 0.1 % for fp32 and amp, 0.5 % for bf16. */
double hf_tolerance(const hf_fixture *f);

/* Whether c passes: parameters, saved and offloaded bytes and the host peak exact, peak and after-forward
 * within hf_tolerance, and the planned peak where it is measured: in the same phase and
 * region, or (near ties) in a region where the measured live bytes come within
 * hf_tolerance of the measured peak. */
bool hf_pass(const hf_fixture *f, const hf_cmp *c);

/* The planner's events of f's setting, one line each with the running total (a tool to
 * find where measured and planned part). */
bool hf_events(FILE *out, const hf_fixture *f, const gckpt_device *exact, gckpt_err *err);

/* Measured vs planned, a few lines. */
void hf_print(FILE *out, const hf_fixture *f, const hf_cmp *c);

#endif
