/* Optimizer states: which buffers an optimizer keeps for one parameter tensor, in which
 * dtype. The one rule both the planner (gckpt_ctx_init) and the executor's setup read.
 *
 *  adamw / adamw-foreach: exp_avg, exp_avg_sq in the parameter's dtype (torch.optim.AdamW);
 *      the foreach implementation also materialises one parameter-sized temporary.
 *  sgd: one momentum_buffer in the parameter's dtype (torch.optim.SGD, momentum 0.9).
 *  adamw-8bit (bitsandbytes AdamW, optim_bits=8): state1/state2 as uint8 codes plus one
 *      fp32 absmax per block of 256 elements; fp32 state1/state2 for tensors under
 *      4096 elements (min_8bit_size) and for every nn.Embedding weight, which the HF
 *      Trainer's create_optimizer registers with GlobalOptimManager for optim_bits=32
 *      (a tied lm_head shares the embedding's weight, so it is 32-bit too). */
#ifndef GCKPT_OPTSTATE_H
#define GCKPT_OPTSTATE_H

#include <stdbool.h>
#include <stdint.h>

#include "gckpt/core/recipe.h"
#include "gckpt/core/setting.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GCKPT_OPT_8BIT_BLOCK 256    /* bitsandbytes blockwise quantisation */
#define GCKPT_OPT_8BIT_MIN 4096     /* bitsandbytes min_8bit_size */

typedef enum { GCKPT_ST_PARAM, GCKPT_ST_F32, GCKPT_ST_U8 } gckpt_state_dtype;

typedef struct {
    uint64_t n;      /* elements */
    uint8_t dtype;   /* gckpt_state_dtype */
} gckpt_state_buf;

typedef enum {
    GCKPT_OSR_NONE,      /* states in the parameter's dtype (or no states) */
    GCKPT_OSR_8BIT,      /* 8-bit codes + absmax */
    GCKPT_OSR_SMALL,     /* 32-bit: under min_8bit_size */
    GCKPT_OSR_EMBEDDING, /* 32-bit: nn.Embedding weight registered by the Trainer */
} gckpt_state_reason;

typedef struct {
    int n;                     /* buffers: codes/states first, then absmax scales */
    gckpt_state_buf buf[4];
    uint64_t temp_n;           /* elements of the step temporary (parameter dtype) */
    uint8_t reason;            /* gckpt_state_reason */
} gckpt_opt_layout;

/* Whether recipe tensor t is the table of an embedding lookup (an nn.Embedding weight). */
bool gckpt_param_is_embedding(const gckpt_recipe *r, int t);

/* The states of parameter tensor t (c0 elements) under optimizer o. */
void gckpt_opt_layout_of(gckpt_optimizer o, const gckpt_recipe *r, int t, gckpt_opt_layout *out);

/* Bytes per element of a state buffer for a parameter of param_bytes per element. */
static inline uint64_t gckpt_state_elem_bytes(uint8_t dtype, uint64_t param_bytes)
{
    return dtype == GCKPT_ST_U8 ? 1 : dtype == GCKPT_ST_F32 ? 4 : param_bytes;
}

/* One line saying which parameters keep 32-bit states under an 8-bit optimizer
 * ("" when none or another optimizer), e.g. "32-bit optimizer states: embed_tokens.weight
 * (nn.Embedding, registered by the Trainer), 65 tensors under 4096 elements". */
void gckpt_opt_fp32_note(gckpt_optimizer o, const gckpt_recipe *r, uint64_t layers, char *buf,
                         unsigned long n);

#ifdef __cplusplus
}
#endif

#endif
