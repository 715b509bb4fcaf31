/* The parameter state table: for every parameter tensor of a recipe, what exists of it
 * for the whole run and in which dtype — the weight, its gradient, the optimizer's states
 * and step temporary, a master copy — with each buffer's allocation. Persistent memory,
 * the optimizer's traffic and temporaries, parameter counts and the executor's setup are
 * all read from it. (core: read by the planner and the executor)
 *
 * Optimizer states (the one rule, from torch.optim, bitsandbytes' Optimizer2State and
 * transformers' Trainer):
 *  adamw / adamw-foreach: exp_avg, exp_avg_sq in the parameter's dtype (torch.optim.AdamW);
 *      the foreach implementation also materialises one parameter-sized temporary.
 *  sgd: one momentum_buffer in the parameter's dtype (torch.optim.SGD, momentum 0.9).
 *  adamw-8bit (bitsandbytes AdamW, optim_bits=8): state1/state2 as uint8 codes plus one
 *      fp32 absmax per block of 256 elements; fp32 state1/state2 for tensors under
 *      4096 elements (min_8bit_size) and for every nn.Embedding weight, which the HF
 *      Trainer's create_optimizer registers with GlobalOptimManager for optim_bits=32
 *      (a tied lm_head shares the embedding's weight, so it is 32-bit too).
 *  paged-adamw-8bit / paged-adamw-32bit (bitsandbytes paged_adamw_*: optimizer.py
 *      get_state_buffer): the 8-bit rule above / fp32 state1 and state2 whatever the
 *      parameter's dtype; on CUDA the state1/state2 of a parameter with at least 1e5
 *      elements are CUDA managed memory (cudaMallocManaged), outside PyTorch's allocator,
 *      prefetched to the device for each update and evictable by the driver (`paged`);
 *      absmax and qmaps never are. On the CPU they fall back to plain tensors
 *      (FINDINGS 12.8, 12.10 C7).
 *
 * Fields for what comes next are here and empty today: trainable = false (a frozen base
 * weight: no gradient, no states), a quantized weight (4-bit codes plus statistics), a
 * master copy. The shard fields say how a parallel mode splits a parameter across GPUs
 * (gckpt/core/parallel.h). */
#ifndef GCKPT_PARAMS_H
#define GCKPT_PARAMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gckpt/core/quant_layout.h"
#include "gckpt/core/recipe.h"
#include "gckpt/core/setting.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GCKPT_OPT_8BIT_BLOCK 256    /* bitsandbytes blockwise quantisation */
#define GCKPT_OPT_8BIT_MIN 4096     /* bitsandbytes min_8bit_size */
#define GCKPT_OPT_PAGED_MIN 100000  /* bitsandbytes get_state_buffer: paged from 1e5 elements */
#define GCKPT_MAX_PARAMS 64         /* parameter tensors of one recipe (llama with every bias: 21; LoRA on all 7 linears: +14, modules_to_save copies +2) */
#define GCKPT_MAX_STATES 4

/* How a parallel mode splits a parameter (gckpt/core/parallel.h). */
typedef enum {
    GCKPT_SHARD_NONE, /* a full replica on every rank (DDP; ZeRO-1/2 weights) */
    GCKPT_SHARD_DIM0, /* FSDP2 fully_shard: dim 0 padded to a multiple of the ranks, one chunk each */
    GCKPT_SHARD_FLAT, /* DeepSpeed ZeRO: a slice of a flattened, padded buffer */
} gckpt_shard_how;
enum { GCKPT_SHARD_WEIGHT = 1, GCKPT_SHARD_GRAD = 2, GCKPT_SHARD_STATES = 4 };

/* One buffer of a parameter: numel elements of dtype, allocated as bytes (the storage
 * rounded to the device's allocation granule). numel 0: it does not exist. */
typedef struct {
    uint8_t dtype;   /* gckpt_dtype */
    uint64_t numel;
    uint64_t bytes;
} gckpt_buffer;

/* Why a parameter keeps the optimizer states it keeps (adamw-8bit's exceptions). */
typedef enum {
    GCKPT_OSR_NONE,      /* states in the parameter's dtype (or no states) */
    GCKPT_OSR_8BIT,      /* 8-bit codes + absmax */
    GCKPT_OSR_SMALL,     /* 32-bit: under min_8bit_size */
    GCKPT_OSR_EMBEDDING, /* 32-bit: nn.Embedding weight registered by the Trainer */
} gckpt_state_reason;

typedef struct {
    char name[40];
    int16_t tensor;        /* the recipe tensor */
    uint8_t section;       /* gckpt_section: a block parameter exists once per layer */
    uint8_t role;          /* gckpt_param_role */
    uint64_t copies;       /* instances: the layer count for block parameters, else 1 */
    uint64_t rows, cols;   /* shape as the module stores it */
    uint64_t numel;
    bool trainable;        /* false: frozen (no gradient, no optimizer states) */
    gckpt_buffer weight;
    gckpt_buffer grad;     /* .grad */
    gckpt_buffer master;   /* a wider copy the optimizer updates (none today: amp keeps fp32 weights) */
    uint8_t nstates;
    gckpt_buffer state[GCKPT_MAX_STATES]; /* exp_avg, exp_avg_sq (8-bit: their codes, then their absmax) */
    uint8_t state_reason;  /* gckpt_state_reason */
    bool paged;            /* state[0] and state[1] are managed memory (paged optimizers) */
    gckpt_buffer opt_temp; /* the optimizer step's temporary (adamw-foreach): a slice of one block */
    struct {
        uint8_t scheme;    /* gckpt_quant_scheme */
        uint32_t block;    /* elements per statistics block */
        gckpt_buffer stats; /* all statistics pieces: their raw bytes (numel, as uint8) and
                             * their allocations (bytes, each piece rounded) */
        gckpt_quant_layout layout; /* the pieces (gckpt_quant_layout_of) */
    } quant;
    struct {               /* filled by gckpt_params_shard (core/parallel.c) for a layout */
        uint32_t ways;     /* split across this many GPUs (1: not sharded) */
        uint8_t dim;       /* along rows (0) or columns (1) */
        uint8_t how;       /* gckpt_shard_how */
        uint8_t buffers;   /* which buffers are split: bits of gckpt_shard_buf */
        uint8_t group;     /* the Trainer's optimizer group: 0 weight decay, 1 none (norms, biases) */
        bool whole;        /* ZeRO-3: under stage3_param_persistence_threshold, kept whole on every rank */
        uint64_t part;     /* elements every rank stores of one copy, padding included (FSDP2:
                            * ceil(dim0 / ways) x the rest; ZeRO-3: ceil(numel / ways); ZeRO-1/2:
                            * 0, the group's flat partition decides) */
    } shard;
} gckpt_param;

typedef struct {
    gckpt_param p[GCKPT_MAX_PARAMS];
    int n;
    int8_t of_tensor[GCKPT_MAX_TENSORS]; /* entry of a recipe tensor, -1 */
    /* over every copy of every parameter */
    uint64_t weight_bytes, grad_bytes, state_bytes, temp_bytes, numel;
    uint64_t quant_bytes, stats_bytes; /* of quantized weights: their packed / int8 storage
                                        * (in weight_bytes) and statistics (not in it) */
    uint64_t trainable;                /* elements of trainable parameters (peft's count) */
    uint64_t paged_bytes;              /* paged optimizer states (not in state_bytes) */
    double opt_traffic; /* bytes one optimizer step reads and writes over the trainable
                         * parameters: the implementation's passes over p, g, states and
                         * temporaries, gradient clipping's and fp16 unscaling's (params.c) */
} gckpt_params;

/* The table of recipe r's parameters for a model of `layers` layers under optimizer o,
 * allocations rounded to round bytes. false (err set) when there are more parameter
 * tensors than GCKPT_MAX_PARAMS; *overflow when a total exceeds 64 bits (one parameter
 * tensor is below 2^50 bytes: model.c's bounds). */
bool gckpt_params_build(const gckpt_recipe *r, uint64_t layers, gckpt_optimizer o, uint64_t round,
                        gckpt_params *out, bool *overflow, gckpt_err *err);

/* The entry of recipe tensor t (-1 or a tensor of the recipe), NULL when t is not a parameter. */
static inline const gckpt_param *gckpt_params_of(const gckpt_params *ps, int t)
{
    return t >= 0 && ps->of_tensor[t] >= 0 ? &ps->p[ps->of_tensor[t]] : NULL;
}

/* Whether recipe tensor t is the table of an embedding lookup (an nn.Embedding weight). */
bool gckpt_param_is_embedding(const gckpt_recipe *r, int t);

/* The model's parameter count, from its table (the published counts: test_model). */
uint64_t gckpt_param_count(const gckpt_model *m);

/* One line saying which parameters keep 32-bit states under an 8-bit optimizer
 * ("" when none or another optimizer), e.g. "32-bit optimizer states: embed_tokens.weight
 * (nn.Embedding, registered by the Trainer), 65 tensors under 4096 elements". */
void gckpt_opt_fp32_note(const gckpt_params *ps, gckpt_optimizer o, char *buf, size_t n);

#ifdef __cplusplus
}
#endif

#endif
