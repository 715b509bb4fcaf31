/* Names users already know, accepted on gckpt-plan's command line next to gckpt's own:
 * the TrainingArguments spellings of optimizers (optim=...) and attention
 * (attn_implementation=...), precisions in any case. (A Hub model id is
 * gckpt/planner/hub.h's.) The plan file keeps gckpt's names only. */
#ifndef GCKPT_CLI_NAMES_H
#define GCKPT_CLI_NAMES_H

#include <stdbool.h>
#include <stddef.h>

#include "gckpt/core/setting.h"

#ifdef __cplusplus
extern "C" {
#endif

/* -1 when unknown. */
int gckpt_precision_from_user(const char *s);
int gckpt_optimizer_from_user(const char *s);
/* note (may be NULL) receives a sentence when the name is planned as another one
 * (flash_attention_2 as sdpa), else "". */
int gckpt_attention_from_user(const char *s, char *note, size_t n);

/* The accepted spellings, for error messages. */
extern const char *const gckpt_precision_spellings;
extern const char *const gckpt_attention_spellings;
/* Every optimizer with the TrainingArguments.optim names that build it, from the one
 * table: "adamw or adamw_torch_fused, ..." for error messages, or with help
 * "adamw (adamw_torch_fused: fused, HF's default) | ..." for --help (truncated to n). */
void gckpt_optimizer_spellings(char *buf, size_t n, bool help);

#ifdef __cplusplus
}
#endif

#endif
