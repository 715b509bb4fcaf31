/* bitsandbytes' 4-bit blockwise quantization (QLoRA's Linear4bit) on the host: the NF4
 * and FP4 code books, the quantizer (absmax per 64 elements, the midpoint rule, two codes
 * a byte), double quantization of the absmax (offset = mean, the signed 8-bit dynamic map
 * per 256 blocks) and the dequantizer. Every rule is checked bit for bit against
 * bitsandbytes 0.50.2's own output (tests/data/quant/nf4_fp4.json, test_quant).
 * (executor) */
#ifndef GCKPT_QUANT4_H
#define GCKPT_QUANT4_H

#include <stdbool.h>
#include <stdint.h>

#include "gckpt/core/dtype.h"
#include "gckpt/executor/quant_math.h"
#include "gckpt/util/util.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The 16 code book values of GCKPT_QUANT_NF4 or GCKPT_QUANT_FP4 in bit-pattern order (what
 * quant_state.code holds); NULL for another scheme. */
const float *gckpt_q4_codebook(gckpt_quant_scheme t);
/* bitsandbytes' create_dynamic_map(signed=True): 256 ascending fp32 values (what
 * quant_state.state2.code holds). */
const float *gckpt_q4_dynamic_map(void);

/* What bitsandbytes stores for one 4-bit weight of n elements, sized by
 * gckpt_quant_layout_of: packed (weight), and either absmax fp32 [nb] (plain) or absmax_u8
 * [nb] + absmax2 fp32 [nested blocks] + offset (double quantization). The caller owns the
 * buffers; the code book copies are gckpt_q4_codebook / gckpt_q4_dynamic_map. */
typedef struct {
    uint8_t *packed;
    float *absmax;      /* plain: the block absmax; double: NULL */
    uint8_t *absmax_u8; /* double: the nested codes; plain: NULL */
    float *absmax2;     /* double: the nested blocks' absmax */
    float *offset;      /* double: one fp32, mean of the block absmax */
} gckpt_q4_store;

/* The store of a weight of layout l from its buffers (stat indexed by gckpt_quant_stat). */
static inline gckpt_q4_store gckpt_q4_store_of(const gckpt_quant_layout *l, void *weight, void *const stat[GCKPT_NQS])
{
    bool dq = l->double_quant;
    return (gckpt_q4_store){(uint8_t *)weight, dq ? NULL : (float *)stat[GCKPT_QS_ABSMAX],
                            dq ? (uint8_t *)stat[GCKPT_QS_ABSMAX] : NULL, (float *)stat[GCKPT_QS_NESTED_ABSMAX],
                            (float *)stat[GCKPT_QS_OFFSET]};
}

/* Quantize x[0..n) (fp32 values; a bf16 weight converted exactly). raw_absmax [nb] is
 * scratch that receives the unquantized block absmax (used for the nested step). Refuses
 * a scheme other than NF4 / FP4, n = 0, a missing buffer and a NaN or infinite element
 * (err names the element). */
bool gckpt_q4_quantize(gckpt_quant_scheme t, const float *x, uint64_t n, const gckpt_q4_store *out,
                       float *raw_absmax, gckpt_err *err);

/* Dequantize into out[0..n) of dtype dt (f32, bf16 or f16: the fp32 value rounded to
 * nearest even). Refuses a non-finite statistic. */
bool gckpt_q4_dequantize(gckpt_quant_scheme t, const gckpt_q4_store *in, uint64_t n, gckpt_dtype dt,
                         void *out, gckpt_err *err);

/* The nested code of a normalised value v as bitsandbytes' CPU kernel picks it (a 65,536
 * point grid over [-1, 1]; what the quantizer stores), and the nearest entry of the dynamic
 * map (ties to the lower index), which the grid does not always find (FINDINGS 12.4, C9). */
uint8_t gckpt_q4_dynamic_code(float v);
uint8_t gckpt_q4_dynamic_nearest(float v);

/* Whether dt is a dequantizer's output dtype (f32, bf16, f16); else err says so for who. */
bool gckpt_quant_out_ok(gckpt_dtype dt, const char *who, gckpt_err *err);

/* torch.mean of a contiguous fp32 vector on the CPU with one thread, in torch's summation
 * order (the offset of double quantization). */
float gckpt_torch_mean_f32(const float *x, uint64_t n);

#ifdef __cplusplus
}
#endif

#endif
