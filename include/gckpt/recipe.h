/* Recipe: the op list of one training forward, split into three sections (embedding,
 * one transformer block, head = final norm + LM head + loss), with every tensor's size
 * and dtype and which tensors autograd saves for backward. It is the single source of
 * truth for "what exists in memory"; the schedule derives lifetimes from it.
 *
 * A recipe is built by tracing primitive ops (mul, linear, sdpa, ...) whose save rules
 * follow PyTorch's derivatives.yaml and whose dtypes follow type promotion and
 * torch.autocast's op lists. Sizes are symbolic in the micro-batch b and sequence s:
 *     elements = c0 + cS * s + cT * (b*s) + cBSS * (b*s*s)                              */
#ifndef GCKPT_RECIPE_H
#define GCKPT_RECIPE_H

#include <stdbool.h>
#include <stdint.h>

#include "gckpt/model.h"
#include "gckpt/setting.h"

#define GCKPT_MAX_TENSORS 192
#define GCKPT_MAX_OPS 160
#define GCKPT_OP_MAX_IN 4
#define GCKPT_OP_MAX_SAVED 6

typedef enum { GCKPT_SEC_EMBED, GCKPT_SEC_BLOCK, GCKPT_SEC_HEAD, GCKPT_NSEC } gckpt_section;

typedef enum {
    GCKPT_T_ACT,    /* activation: lifetime from producer to last use / last backward */
    GCKPT_T_PARAM,  /* a parameter: no allocation here (weights are persistent) */
    GCKPT_T_CONST,  /* shared, no grad (token ids, labels, rotary cos/sin, masks): lives all step */
    GCKPT_T_WCAST,  /* autocast's cached low-precision copy of a weight */
} gckpt_tensor_kind;

typedef enum {
    GCKPT_OP_MATMUL, /* FLOPs-bound: linear, batched matmul */
    GCKPT_OP_ATTN,   /* fused attention (SDPA) */
    GCKPT_OP_ELEM,   /* bandwidth-bound elementwise / reduction / copy */
    GCKPT_OP_EMBED,  /* gather */
} gckpt_op_kind;

typedef struct {
    char name[40];
    uint8_t kind;        /* gckpt_tensor_kind */
    uint8_t section;     /* gckpt_section */
    uint8_t dtype;       /* bytes per element: 1, 2, 4, 8 */
    bool requires_grad;
    bool fwd_end_free;   /* held until the forward pass ends (autocast cache, returned logits) */
    bool logits;         /* accounted as logits/loss memory */
    uint64_t c0, cS, cT, cBSS;     /* for PARAM and WCAST tensors only c0 is used */
} gckpt_tensor;

typedef struct {
    char name[40];
    uint8_t kind;        /* gckpt_op_kind */
    uint8_t section;
    uint8_t nin, nout, nsaved;
    int16_t in[GCKPT_OP_MAX_IN];
    int16_t out[2];               /* out[1] = -1 unless the op has a second output */
    int16_t saved[GCKPT_OP_MAX_SAVED];
    bool grad_alias[GCKPT_OP_MAX_IN]; /* input's grad is the output grad itself (add, view) */
    /* Time: forward FLOPs = fT*(b*s) + fBSS*(b*s*s); backward = bwd_mult * forward. */
    double fT, fBSS, bwd_mult;
    /* Elementwise traffic (bytes read + written) is derived from tensor sizes. */
    /* Backward workspace elements (fp32), allocated and freed inside the op's backward. */
    uint64_t bws_cT;
} gckpt_op;

typedef struct {
    gckpt_tensor t[GCKPT_MAX_TENSORS];
    int nt;
    gckpt_op op[GCKPT_MAX_OPS];
    int nop;
    int sec_begin[GCKPT_NSEC], sec_end[GCKPT_NSEC]; /* op index ranges per section */
    int embed_out;   /* tensor: output of the embedding section = block input of layer 0 */
    int block_in;    /* tensor: the block's input (hidden_states) */
    int block_out;   /* tensor: the block's output */
    int head_in;     /* tensor: the head's input */
    int loss;        /* tensor: the scalar loss */
    uint8_t stream_dtype, compute_dtype, param_dtype, grad_dtype;
    bool amp;
    /* For the closed form: elements of the checkpointed input per token (= hidden). */
    uint64_t hidden;
} gckpt_recipe;

/* Build the recipe of model m for the setting's precision and attention. Never fails
 * for a validated model. */
void gckpt_recipe_build(const gckpt_model *m, gckpt_precision p, gckpt_attention a,
                        gckpt_recipe *r);

/* Elements / bytes of tensor i for micro-batch b and sequence s; false on overflow. */
bool gckpt_tensor_bytes(const gckpt_recipe *r, int i, uint64_t b, uint64_t s, uint64_t *bytes);

/* Static op facts derived from the table. */
int gckpt_recipe_producer(const gckpt_recipe *r, int tensor); /* op index or -1 */

#endif
