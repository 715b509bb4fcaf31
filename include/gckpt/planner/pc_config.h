/* The N-D mesh a plan is asked for (gckpt-plan --dp-replicate R --dp-shard S --tp T --cp C, or
 * --parallelism-config FILE: a JSON object of accelerate's ParallelismConfig fields), checked as
 * accelerate 1.15 checks it (parallelism_config.py, FINDINGS R-DIST-27). HSDP (dp_replicate x
 * dp_shard under FSDP2) is planned; tensor, context and sequence parallelism are refused. */
#ifndef GCKPT_PC_CONFIG_H
#define GCKPT_PC_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "gckpt/util/util.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ParallelismConfig's sizes; 0: not given (accelerate reads PARALLELISM_CONFIG_*_SIZE, then 1). */
typedef struct {
    uint64_t dp_replicate, dp_shard, tp, cp, sp;
} gckpt_pc_sizes;

/* Read path's JSON object (dp_replicate_size, dp_shard_size, tp_size, cp_size, sp_size: integers
 * >= 1 or null; cp_backend "torch", sp_backend "deepspeed"); false with one line in err naming
 * the file and the field (an unknown field is refused by name). */
bool gckpt_pc_config_read(const char *path, gckpt_pc_sizes *out, gckpt_err *err);

/* The mesh against a world of `world` processes and FSDP2 (accelerate's checks, then what is not
 * planned): with tp, cp or sp other than 1, accelerate's own checks (the product of every size must
 * equal the world; tp or cp with dp_replicate > 1 and dp_shard 1 is refused), then not yet
 * planned, except tp alone (every other size 1): then *tp is its size and *dp_replicate 0; the
 * product must equal the world; FSDP needs dp_shard > 1. On success without tp *dp_replicate is
 * the replicate size (>= 1) and *tp 0. */
bool gckpt_pc_check(const gckpt_pc_sizes *pc, uint32_t world, uint32_t *dp_replicate, uint32_t *tp, gckpt_err *err);

/* Context parallelism (cp_size > 1): accelerate's checks (the product of the sizes equals the world;
 * cp with sp refused; cp with dp_replicate > 1 and dp_shard 1 refused), then tp, which transformers'
 * loader and the Trainer cannot build together with cp (measured, R-CP-19); *cp its size, *dp_replicate the replicas (0 when dp_replicate_size is 1 or unset): FSDP2
 * over dp_shard x cp, HSDP across the dp_replicate groups when R > 1 (FINDINGS R-CP-1, R-CP-11,
 * R-CP-17). cp_size 1 or none: true, *cp 0. One line in err when refused. */
bool gckpt_pc_cp(const gckpt_pc_sizes *pc, uint32_t world, uint32_t *cp, uint32_t *dp_replicate, gckpt_err *err);

#ifdef __cplusplus
}
#endif

#endif
