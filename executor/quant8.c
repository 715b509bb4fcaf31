/* bitsandbytes' int8 row-wise weights on the host (gckpt/executor/quant8.h). Sources,
 * bitsandbytes 0.50.2: nn/modules.py Int8Params._quantize (the weight to fp16, then
 * functional.int8_vectorwise_quant: backends/default/ops.py, no CPU kernel), autograd/
 * _functions.py MatMul8bitFp (the dequantization of forward and backward). */
#include "gckpt/executor/quant8.h"

#include <math.h>

#include "gckpt/executor/quant4.h" /* gckpt_quant_out_ok */
#include "gckpt/executor/quant_math.h"
#include "host_num.h"

/* out_row = torch.round(A * (127.0 / row_stats)): A fp16 promoted to fp32, the factor
 * two fp32 roundings (Tensor.__rtruediv__ is reciprocal() * 127: a single division gives
 * 7 of 16,640 other codes in w130x128), round half to even (nearbyintf in the default
 * rounding mode) */
bool gckpt_q8_quantize(const float *w, uint64_t rows, uint64_t cols, int8_t *cb, float *scb, gckpt_err *err)
{
    if (rows == 0 || cols == 0 || rows > UINT64_MAX / cols) {
        gckpt_seterr(err, "int8 quantizer: a weight of %llu x %llu elements", (unsigned long long)rows,
                     (unsigned long long)cols);
        return false;
    }
    if (!w || !cb || !scb) { gckpt_seterr(err, "int8 quantizer: a missing buffer"); return false; }
    for (uint64_t i = 0; i < rows * cols; i++)
        if (!isfinite(w[i]) || !isfinite(f16_to_f32(f32_to_f16(w[i])))) {
            gckpt_seterr(err, "int8 quantizer: element %llu is %s", (unsigned long long)i,
                         isnan(w[i]) ? "NaN" : "beyond fp16's range");
            return false;
        }
    for (uint64_t r = 0; r < rows; r++) {
        const float *row = w + r * cols;
        float am = 0.0f;
        for (uint64_t c = 0; c < cols; c++) am = fmaxf(am, fabsf(f16_to_f32(f32_to_f16(row[c]))));
        scb[r] = am;
        float k = am == 0.0f ? 0.0f : (1.0f / am) * 127.0f; /* torch's 127.0 / t is t.reciprocal() * 127 */
        for (uint64_t c = 0; c < cols; c++)
            cb[r * cols + c] = (int8_t)nearbyintf(f16_to_f32(f32_to_f16(row[c])) * k);
    }
    return true;
}

bool gckpt_q8_dequantize(const int8_t *cb, const float *scb, uint64_t rows, uint64_t cols, gckpt_dtype dt,
                         void *out, gckpt_err *err)
{
    if (rows == 0 || cols == 0 || rows > UINT64_MAX / cols || !cb || !scb || !out) {
        gckpt_seterr(err, "int8 dequantizer: %s", rows && cols ? "a missing buffer" : "an empty weight");
        return false;
    }
    if (!gckpt_quant_out_ok(dt, "int8 dequantizer", err)) return false;
    for (uint64_t r = 0; r < rows; r++)
        if (!isfinite(scb[r]) || scb[r] < 0.0f) {
            gckpt_seterr(err, "int8 dequantizer: SCB[%llu] is %s", (unsigned long long)r,
                         isfinite(scb[r]) ? "negative" : "not finite");
            return false;
        }
    gckpt_xt o = {out, rows * cols, (uint8_t)dt, cols, rows};
    for (uint64_t r = 0; r < rows; r++) {
        float scale = gckpt_q8_row_scale(scb[r]);
        for (uint64_t c = 0; c < cols; c++) st(&o, r * cols + c, gckpt_q8_value(cb[r * cols + c], scale));
    }
    return true;
}
