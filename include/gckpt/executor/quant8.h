/* bitsandbytes' int8 weights (Linear8bitLt, the CPU training path MatMul8bitFp) on the
 * host: the row-wise quantizer (Int8Params._quantize -> int8_vectorwise_quant) and the
 * dequantizer. Checked bit for bit against bitsandbytes 0.50.2 (tests/data/quant/
 * nf4_fp4.json, each tensor's "int8"; test_quant). Sizes: gckpt_quant_layout_of(INT8).
 * (executor) */
#ifndef GCKPT_QUANT8_H
#define GCKPT_QUANT8_H

#include <stdbool.h>
#include <stdint.h>

#include "gckpt/core/dtype.h"
#include "gckpt/util/util.h"

#ifdef __cplusplus
extern "C" {
#endif

/* w: rows x cols fp32 values (the loaded weight); it is converted to fp16 first, as
 * Int8Params does. cb [rows x cols] int8, scb [rows] fp32 = the fp16 row absmax. A row of
 * zeros stores 0 codes and scb 0 (bitsandbytes divides by 0 there: NaN codes). Refuses an
 * empty shape, a missing buffer, a NaN or infinite element and one beyond fp16's range
 * (err names the element). */
bool gckpt_q8_quantize(const float *w, uint64_t rows, uint64_t cols, int8_t *cb, float *scb, gckpt_err *err);

/* out [rows x cols] in dt (f32, bf16 or f16) = cb * (scb[r] * (1 / 127)) in fp32, rounded
 * to nearest even. Refuses a non-finite or negative scb. */
bool gckpt_q8_dequantize(const int8_t *cb, const float *scb, uint64_t rows, uint64_t cols, gckpt_dtype dt,
                         void *out, gckpt_err *err);

#ifdef __cplusplus
}
#endif

#endif
