// The CUDA dequantization kernels of 4-bit and int8 weights (cuda_quant.cuh): one thread per element,
// the same scalar decode as the host (gckpt/executor/quant_math.h), so both backends give
// the same bits. Unverified on a GPU: compiled only.
#include "cuda_common.cuh"
#include "cuda_quant.cuh"
#include "gckpt/executor/quant_math.h"

__global__ void k_q4_dequant(gckpt_q4_dev w, uint64_t n, uint8_t dt, void *out)
{
    float offset = w.absmax_u8 ? *w.offset : 0.0f;
    GRID_LOOP(i, n) {
        float scale = gckpt_q4_block_scale(i / GCKPT_QUANT_BLOCK, w.absmax, w.absmax_u8, w.dyn, w.absmax2, offset);
        stx(out, dt, i, gckpt_q4_value(w.code[gckpt_q4_code_at(w.packed, i)], scale));
    }
}

__global__ void k_q8_dequant(const int8_t *cb, const float *scb, uint64_t rows, uint64_t cols, uint8_t dt, void *out)
{
    GRID_LOOP(i, rows * cols) stx(out, dt, i, gckpt_q8_value(cb[i], gckpt_q8_row_scale(scb[i / cols])));
}

cudaError_t gckpt_cuda_q8_dequant(cudaStream_t stream, const int8_t *cb, const float *scb, uint64_t rows,
                                  uint64_t cols, uint8_t dt, void *out)
{
    if (rows == 0 || cols == 0) return cudaErrorInvalidValue;
    k_q8_dequant<<<grid_for(rows * cols, 256), 256, 0, stream>>>(cb, scb, rows, cols, dt, out);
    return cudaGetLastError();
}

cudaError_t gckpt_cuda_q4_dequant(cudaStream_t stream, const gckpt_q4_dev *w, uint64_t n, uint8_t dt, void *out)
{
    if (n == 0) return cudaErrorInvalidValue;
    k_q4_dequant<<<grid_for(n, 256), 256, 0, stream>>>(*w, n, dt, out);
    return cudaGetLastError();
}
