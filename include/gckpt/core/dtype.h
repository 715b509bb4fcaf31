/* Element types of every buffer a step holds: what the recipe's tensors, the parameter
 * state table and the schedule's allocations say, and what the executor stores.
 * (core: read by the planner and the executor) */
#ifndef GCKPT_DTYPE_H
#define GCKPT_DTYPE_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    GCKPT_DT_BOOL, /* 1 byte: dropout masks */
    GCKPT_DT_U8,   /* 8-bit codes: adamw-8bit's optimizer states */
    GCKPT_DT_I8,   /* signed 8-bit codes (int8 weights; none yet) */
    GCKPT_DT_NF4,  /* 4-bit codes, two per byte (QLoRA's packed weights; none yet) */
    GCKPT_DT_BF16,
    GCKPT_DT_F16,
    GCKPT_DT_F32,
    GCKPT_DT_I64,  /* token ids, labels, positions */
    GCKPT_DT_I32,  /* the experts' group offsets (mixture of experts) */
    GCKPT_NDT
} gckpt_dtype;

extern const char *const gckpt_dtype_names[GCKPT_NDT];

static inline unsigned gckpt_dtype_bits(gckpt_dtype d)
{
    static const unsigned bits[GCKPT_NDT] = {8, 8, 8, 4, 16, 16, 32, 64, 32};
    return (unsigned)d < GCKPT_NDT ? bits[d] : 0;
}

/* Bytes per element of a whole-byte dtype (0 for a packed one: use gckpt_dtype_storage). */
static inline unsigned gckpt_dtype_size(gckpt_dtype d)
{
    unsigned b = gckpt_dtype_bits(d);
    return b % 8 ? 0 : b / 8;
}

/* Bytes that hold n elements (packed dtypes: rounded up to whole bytes); false on overflow. */
static inline bool gckpt_dtype_storage(gckpt_dtype d, uint64_t n, uint64_t *bytes)
{
    unsigned b = gckpt_dtype_bits(d);
    if (!b) return false;
    if (b % 8) { /* below a byte: n * b bits, rounded up */
        if (n > UINT64_MAX / b) return false;
        *bytes = (n * b + 7) / 8;
        return true;
    }
    if (n > UINT64_MAX / (b / 8)) return false;
    *bytes = n * (b / 8);
    return true;
}

/* Floating types the recipe computes in (promotion: the wider wins). */
static inline bool gckpt_dtype_is_float(gckpt_dtype d)
{
    return d == GCKPT_DT_BF16 || d == GCKPT_DT_F16 || d == GCKPT_DT_F32;
}

#ifdef __cplusplus
}
#endif

#endif
