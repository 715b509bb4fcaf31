/* A per-rank fixture of tools/hf_probe/probe_dist.py / probe_dist_peft.py (tests/data/hf-dist,
 * tests/data/hf-dist-peft) read into the planner's model and setting: test_parallel and
 * test_parallel_peft read them here. */
#ifndef GCKPT_DIST_FIXTURE_H
#define GCKPT_DIST_FIXTURE_H

#include <stdbool.h>
#include <stdint.h>

#include "gckpt/core/model.h"
#include "gckpt/core/setting.h"

/* One per-rank fixture: the model, the setting with its layout, what was measured at step 2. */
typedef struct {
    gckpt_model m;
    gckpt_setting s;
    uint32_t rank;
    bool fake;           /* PyTorch's fake process group (the gloo twins: false) */
    char mode[16], variant[48];
    /* LoRA (tests/data/hf-dist-peft): the base loaded in bf16 and trained under the Trainer's
     * bf16=True autocast (the probe's lb16 variant), which the planner has no setting for */
    bool bf16_base;
    uint64_t start, end; /* live bytes at step 2's start and end */
    uint64_t offload_bytes; /* activation offload: the bytes save_on_cpu moved to the host (0 without) */
    double peak;         /* step 2's live peak */
    char where[160];
    /* step 2's collectives' bytes (all-gather output, reduce-scatter input, all-reduce buffer):
     * all-gathers of the forward and of the backward, the backward's reductions */
    double gather_fwd, gather_bwd, reduce;
    /* ... of them the gradients' all-reduces in the backward (fp32 or bf16; not DDP's int32
     * local_used_map), bytes and calls */
    double grad_all_reduce;
    int grad_all_reduce_calls;
    /* the all-gathers after the optimizer step (of the weights), bytes and calls */
    double gather_opt;
    int gather_opt_calls;
    /* HSDP (tests/data/hf-hsdp): the process groups' sizes step 2's collectives ran in (the
     * "/group<n>" of a per_step key; 0 where none named one: the world), the all-gathers' and
     * reduce-scatters' and the all-reduces'; the all-reduces' bytes and calls */
    uint32_t shard_group, replicate_group;
    double replicate_all_reduce;
    int replicate_all_reduce_calls;
} dist_fixture;


/* Read fixture `path` into f (a cmocka failure naming the file and field when it cannot). */
void dist_fixture_read(const char *path, dist_fixture *f);

#endif
