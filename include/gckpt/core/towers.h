/* Which layers of a model's towers gradient checkpointing checkpoints. transformers 5.24's
 * _set_gradient_checkpointing numbers every GradientCheckpointingLayer in model.modules()
 * order, across all towers (a VLM's vision blocks before its text layers), and
 * checkpoints index k when k % every_n_layers == 0 (FINDINGS R-VLM-1): a tower's set
 * depends on the layers of the towers before it. A tower whose blocks are not
 * GradientCheckpointingLayer (mllama's vision encoder) has 0 layers here. */
#ifndef GCKPT_TOWERS_H
#define GCKPT_TOWERS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The module-order index of layer `layer` of tower t, towers[i] the
 * GradientCheckpointingLayer count of tower i in module order. */
uint64_t gckpt_tower_module_index(const uint64_t *towers, size_t t, uint64_t layer);

/* The checkpointed layers of tower t (tower-local indices, ascending) under every_n (0:
 * none), up to max of them into out; returns how many there are. */
size_t gckpt_tower_checkpointed(uint32_t every_n, const uint64_t *towers, size_t t, uint64_t *out, size_t max);

#ifdef __cplusplus
}
#endif

#endif
