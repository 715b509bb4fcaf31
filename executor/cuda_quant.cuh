// The CUDA dequantization of bitsandbytes' quantized weights (QLoRA's 4-bit, int8): the
// stored pieces on the device and the launchers. The scalar decode is gckpt/executor/quant_math.h, shared with
// the host dequantizer (quant4.c).
#ifndef GCKPT_CUDA_QUANT_CUH
#define GCKPT_CUDA_QUANT_CUH

#include <cuda_runtime.h>
#include <stdint.h>

// One 4-bit weight as it lies on the device (what gckpt_q4_store holds on the host), with
// its code book (quant_state.code, 16 fp32) and, under double quantization, the dynamic
// map (state2.code, 256 fp32) and the offset (one fp32, read on the device).
struct gckpt_q4_dev {
    const uint8_t *packed;
    const float *code;
    const float *absmax;      // plain: fp32 [nb]; double: nullptr
    const uint8_t *absmax_u8; // double: [nb]
    const float *dyn;
    const float *absmax2;
    const float *offset;
};

// out[0..n) in dt (GCKPT_DT_F32 / BF16 / F16) = code[q] * scale in fp32, rounded to nearest
// even; enqueued on stream. Unverified on a GPU (compiled only).
cudaError_t gckpt_cuda_q4_dequant(cudaStream_t stream, const gckpt_q4_dev *w, uint64_t n, uint8_t dt, void *out);

// out[rows x cols] in dt = cb * (scb[row] * (1 / 127)) in fp32, rounded to nearest even;
// enqueued on stream. Unverified on a GPU (compiled only).
cudaError_t gckpt_cuda_q8_dequant(cudaStream_t stream, const int8_t *cb, const float *scb, uint64_t rows,
                                  uint64_t cols, uint8_t dt, void *out);

#endif
