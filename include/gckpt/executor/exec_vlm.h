/* gckpt-run's LLaVA step (executor/interp_vlm.c): the step the planner walks
 * (gckpt_vlm_step_new, core/vlm_step.c) performed on a backend: the text model's and the
 * vision tower's segments by an interpreter each, in the composed schedule's order, and
 * between them what LlavaModel.forward does itself: the projected features scattered into
 * the image placeholders' rows of the text embeddings (masked_scatter), and in the backward
 * those rows' gradient handed to the projector (masked_select) and zeroed for the text
 * embedding (masked_fill). Host backend only, fp32 and amp-bf16; llava only (not llava_next's
 * tiles). */
#ifndef GCKPT_EXEC_VLM_H
#define GCKPT_EXEC_VLM_H

#include "gckpt/core/vlm_step.h"
#include "gckpt/executor/executor.h"

typedef struct gckpt_vexec gckpt_vexec;

/* Whether the executor runs VLM v's step on backend be (NULL: any); false with err naming
 * what it does not run. */
bool gckpt_vexec_supported(const gckpt_backend *be, const gckpt_vlm *v, const gckpt_setting *s, gckpt_err *err);
/* Build the step of setting s (micro-batch, sequence: text and image tokens per sample) with
 * `im` images per sample; nothing is allocated on the backend yet. */
gckpt_vexec *gckpt_vexec_new(gckpt_backend *be, const gckpt_vlm *v, const gckpt_device *d, const gckpt_setting *s,
                             const gckpt_vlm_images *im, const gckpt_exec_opts *o, gckpt_err *err);
/* The step as the core built it (its schedule and the bytes held when it starts: the
 * prediction's, gckpt_vlm_walk's). */
const gckpt_vlm_step *gckpt_vexec_plan(const gckpt_vexec *vx);
/* Each side's interpreter (parameter access, gckpt_exec_read_grad inside on_grads): the text
 * model's (vision false) or the tower's with the projector (true). */
gckpt_exec *gckpt_vexec_side(gckpt_vexec *vx, bool vision);
gckpt_xstatus gckpt_vexec_setup(gckpt_vexec *vx, gckpt_err *err);
/* One training step (gckpt_exec_step's contract; on_grads gets the text side). */
gckpt_xstatus gckpt_vexec_step(gckpt_vexec *vx, const gckpt_step_opts *o, gckpt_step_result *res, gckpt_err *err);
/* The latest micro-step's input ids and labels (micro_batch x seq) and, when keep is set
 * before the step, its pixel values (fp32, [images, C, H, W]; NULL otherwise). */
void gckpt_vexec_keep_pixels(gckpt_vexec *vx, bool keep);
void gckpt_vexec_batch(const gckpt_vexec *vx, const int64_t **ids, const int64_t **labels, const float **pixels,
                       uint64_t *npixels);
void gckpt_vexec_release_all(gckpt_vexec *vx);
void gckpt_vexec_free(gckpt_vexec *vx);

#endif
