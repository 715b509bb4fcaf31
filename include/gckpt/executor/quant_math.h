/* The scalar decode math of bitsandbytes' quantized weights (QLoRA's 4-bit NF4 / FP4 and
 * the int8 Linear8bitLt), compiled for the host dequantizers (C) and the CUDA
 * dequantization kernels (__host__ __device__): where a 4-bit code sits in the packed
 * bytes, the block or row scale, and the dequantized fp32 value. The code books and the
 * quantizers are gckpt/executor/quant4.h and quant8.h. (executor) */
#ifndef GCKPT_QUANT_MATH_H
#define GCKPT_QUANT_MATH_H

#include <stdint.h>

#include "gckpt/core/quant_layout.h"  /* GCKPT_QUANT_BLOCK, GCKPT_QUANT_NESTED_BLOCK */
#include "gckpt/executor/exec_rng.h" /* GCKPT_HD */

/* The 4-bit code of element i: two codes a byte, the first element in the high nibble
 * (backends/default/ops.py quantize_4bit: byte k = q[2k] << 4 | q[2k+1]). */
GCKPT_HD unsigned gckpt_q4_code_at(const uint8_t *packed, uint64_t i)
{
    uint8_t b = packed[i >> 1];
    return (i & 1u) ? (unsigned)(b & 0xfu) : (unsigned)(b >> 4);
}

/* Block b's scale under double quantization: dynamic[absmax_u8[b]] * absmax2[b / 256] +
 * offset, two fp32 roundings (dequantize_blockwise, then `absmax += offset`); never an FMA,
 * which nvcc would otherwise contract. */
GCKPT_HD float gckpt_q4_nested_scale(float dyn_value, float absmax2, float offset)
{
#ifdef __CUDA_ARCH__
    return __fadd_rn(__fmul_rn(dyn_value, absmax2), offset);
#else
    float s = dyn_value * absmax2;
    return s + offset;
#endif
}

/* An element's dequantized value: code book entry times its block's scale, in fp32
 * (then rounded to the compute dtype by the caller). */
GCKPT_HD float gckpt_q4_value(float code_value, float scale)
{
#ifdef __CUDA_ARCH__
    return __fmul_rn(code_value, scale);
#else
    return code_value * scale;
#endif
}

/* The scale of block b from the stored statistics: absmax (fp32 [nb]) without double
 * quantization, else absmax_u8 [nb] with the 256-entry dynamic map, absmax2 and offset. */
GCKPT_HD float gckpt_q4_block_scale(uint64_t b, const float *absmax, const uint8_t *absmax_u8,
                                    const float *dyn, const float *absmax2, float offset)
{
    if (!absmax_u8) return absmax[b];
    return gckpt_q4_nested_scale(dyn[absmax_u8[b]], absmax2[b / GCKPT_QUANT_NESTED_BLOCK], offset);
}

/* ---- int8 (Linear8bitLt) ------------------------------------------------------------ */

/* Row r's scale: SCB[r] * (1 / 127) in fp32 (MatMul8bitFp: SCB.unsqueeze(1).mul(1.0 / 127.0)) */
GCKPT_HD float gckpt_q8_row_scale(float scb)
{
#ifdef __CUDA_ARCH__
    return __fmul_rn(scb, 1.0f / 127.0f);
#else
    return scb * (1.0f / 127.0f);
#endif
}

/* An int8 element's dequantized value: CB.to(dtype).mul_(scale), computed in fp32 (then
 * rounded to the compute dtype by the caller) */
GCKPT_HD float gckpt_q8_value(int8_t q, float row_scale)
{
#ifdef __CUDA_ARCH__
    return __fmul_rn((float)q, row_scale);
#else
    return (float)q * row_scale;
#endif
}

#endif
