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

/* Which towers checkpointing covers (gckpt-plan --checkpoint-towers; gckpt_setting.ckpt_towers):
 * all, transformers' own every_n_layers over both towers in module order; text or vision,
 * every_n counted from that tower's own layer 0 and the other tower's layers plain, as
 * per-layer flags set after gradient_checkpointing_enable make it (FINDINGS R-VLM-70..72).
 * Tower 0 is the vision tower, tower 1 the text model. */
typedef enum { GCKPT_CKPT_TOWERS_ALL, GCKPT_CKPT_TOWERS_TEXT, GCKPT_CKPT_TOWERS_VISION, GCKPT_NCKPT_TOWERS } gckpt_ckpt_towers;
extern const char *const gckpt_ckpt_towers_names[GCKPT_NCKPT_TOWERS]; /* "all", "text", "vision" */
int gckpt_ckpt_towers_from(const char *s); /* -1: unknown */

/* The checkpointed layers of tower t (tower-local indices, ascending) under every_n (0:
 * none) and the towers choice `which` (gckpt_ckpt_towers), up to max of them into out;
 * returns how many there are. */
size_t gckpt_tower_checkpointed(uint32_t every_n, uint8_t which, const uint64_t *towers, size_t t, uint64_t *out,
                                size_t max);

/* The layers the every_n rule counts under `which`: both towers' (all) or the chosen one's;
 * towers[2] = {vision, text}. */
uint64_t gckpt_towers_counted(uint8_t which, const uint64_t *towers);

#ifdef __cplusplus
}
#endif

#endif
