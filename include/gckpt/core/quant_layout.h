/* How bitsandbytes stores a quantized weight: the bytes of each stored piece (packed
 * codes, absmax, nested absmax / code / offset, the per-weight code-book copies, int8's
 * SCB), exactly as bitsandbytes 0.50.2 allocates them (tools/hf_probe/FINDINGS.md 12.4,
 * measured for every quantized tensor of tests/data/hf-peft and tests/data/quant).
 * The one place that sizes a quantized weight: the parameter state table, the planner's
 * breakdown and the executor's quantizer all read it. (core) */
#ifndef GCKPT_QUANT_LAYOUT_H
#define GCKPT_QUANT_LAYOUT_H

#include <stdint.h>

#include "gckpt/core/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* NF4 / FP4: Linear4bit's Params4bit (4-bit codes, two per byte, one absmax per block of
 * GCKPT_QUANT_BLOCK elements; with double quantization the absmax are 8-bit codes of a
 * nested blockwise quantization). INT8: Linear8bitLt's Int8Params (int8 [out, in] plus
 * one fp32 scale per output row, SCB). */
typedef enum {
    GCKPT_QUANT_NONE,
    GCKPT_QUANT_NF4,
    GCKPT_QUANT_FP4,
    GCKPT_QUANT_INT8,
    GCKPT_NQUANT
} gckpt_quant_scheme;

extern const char *const gckpt_quant_names[GCKPT_NQUANT]; /* "none", "nf4", "fp4", "int8" */

#define GCKPT_QUANT_BLOCK 64         /* quantize_4bit's blocksize (Linear4bit's default) */
#define GCKPT_QUANT_NESTED_BLOCK 256 /* quantize_blockwise(absmax - offset, blocksize=256) */
#define GCKPT_QUANT_CODE_4BIT 16     /* quant_state.code: the 4-bit code book, fp32 [16] */
#define GCKPT_QUANT_CODE_8BIT 256    /* state2.code: the signed dynamic map, fp32 [256] */

/* The statistics pieces, in the order and with the names of the fixtures'
 * quant.tensors[].stats (gckpt_quant_stat_names). */
typedef enum {
    GCKPT_QS_ABSMAX,        /* fp32 [nb]; with double quantization uint8 [nb] */
    GCKPT_QS_CODE,          /* fp32 [16], a copy per weight */
    GCKPT_QS_OFFSET,        /* fp32 scalar: mean(absmax) (double quantization) */
    GCKPT_QS_NESTED_ABSMAX, /* fp32 [ceil(nb / 256)] (double quantization) */
    GCKPT_QS_NESTED_CODE,   /* fp32 [256], a copy per weight (double quantization) */
    GCKPT_QS_SCB,           /* int8: fp32 [out] */
    GCKPT_NQS
} gckpt_quant_stat;

extern const char *const gckpt_quant_stat_names[GCKPT_NQS];
/* "absmax", "code", "offset", "state2.absmax", "state2.code", "SCB" */

/* One stored tensor: numel elements of dtype in bytes (its storage, not rounded to an
 * allocator's granule). numel 0: not stored under this scheme. */
typedef struct {
    uint8_t dtype; /* gckpt_dtype */
    uint64_t numel;
    uint64_t bytes;
} gckpt_quant_piece;

typedef struct {
    uint8_t scheme;       /* gckpt_quant_scheme */
    uint8_t double_quant; /* 4-bit only */
    uint32_t block;       /* elements per absmax (4-bit: 64; int8: the row length) */
    uint64_t blocks;      /* nb: absmax count (int8: rows) */
    uint64_t nested_blocks;
    gckpt_quant_piece weight;            /* packed codes / int8 weight / the plain weight */
    gckpt_quant_piece stat[GCKPT_NQS];   /* statistics: neither parameters nor buffers */
    uint64_t stats_bytes;                /* sum of stat[].bytes */
} gckpt_quant_layout;

/* The layout of a weight of rows x cols elements (rows = out_features, cols =
 * in_features, as the module stores it; GPT-2's Conv1D is transposed to [out, in] before
 * quantization) under scheme.
 *  NF4 / FP4: the packed weight is ceil(n / 2) bytes as (n + 1) / (2s) elements of the
 *   storage dtype of s bytes (bnb_4bit_quant_storage: GCKPT_DT_U8, I8, BF16, F16 or F32);
 *   -1 when s does not divide ceil(n / 2) (bitsandbytes' CPU backend raises, CUDA would
 *   allocate fewer bytes than it packs: FINDINGS 12.4); absmax per 64 elements;
 *   double_quant != 0 adds the nested pieces.
 *  INT8: int8 [rows, cols] and SCB fp32 [rows]; storage and double_quant are ignored.
 *  NONE: the weight as rows x cols elements of storage; no statistics.
 * Returns 0, or -1 for an unknown scheme or storage dtype, an empty shape or a storage
 * dtype the packed bytes do not fill, -2 when a
 * size exceeds 64 bits; *out is written only on success. */
int gckpt_quant_layout_of(gckpt_quant_scheme scheme, uint64_t rows, uint64_t cols,
                          int double_quant, gckpt_dtype storage, gckpt_quant_layout *out);

#ifdef __cplusplus
}
#endif

#endif
