/* A quantized weight of the executor (QLoRA's frozen base weights): its initial values made
 * on the host exactly as a weight's init would make them (gckpt_rng_uniform, rounded to the
 * load dtype), quantized as bitsandbytes does (quant4.h / quant8.h), and every stored
 * piece of gckpt_quant_layout_of uploaded to the backend buffers the caller allocated.
 * Backend-independent: it only calls the backend's upload. (executor) */
#ifndef GCKPT_EXEC_QUANT_H
#define GCKPT_EXEC_QUANT_H

#include <stdbool.h>
#include <stdint.h>

#include "gckpt/core/quant_layout.h"
#include "gckpt/executor/executor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Backend buffers of one quantized weight instance: the weight piece and each statistics
 * piece the layout stores (NULL where its numel is 0). */
typedef struct {
    void *weight;
    void *stat[GCKPT_NQS];
} gckpt_qbufs;

/* Fill b for a weight of layout l (rows x cols) from uniform(-scale, scale) keyed by key,
 * rounded to load_dt (the dtype from_pretrained loads it in) before quantizing. host_values,
 * when not NULL, receives the rounded values (rows x cols fp32: what the quantizer saw). */
gckpt_xstatus gckpt_quant_fill(gckpt_backend *be, const gckpt_quant_layout *l, uint64_t rows, uint64_t cols,
                               uint64_t key, float scale, gckpt_dtype load_dt, const gckpt_qbufs *b,
                               float *host_values, gckpt_err *err);

#ifdef __cplusplus
}
#endif

#endif
