/* Stored pieces of a quantized weight as bitsandbytes 0.50.2 allocates them
 * (functional.py quantize_4bit / quantize_blockwise, _ops.py's quantize_4bit fake:
 * out = empty(((n + 1) // (storage.itemsize * 2), 1), storage), absmax = empty(ceil(n / 64))
 * fp32; nn/modules.py Int8Params: CB int8 [out, in] and SCB fp32 [out]). */
#include "gckpt/core/quant_layout.h"

#include <stdbool.h>
#include <string.h>

const char *const gckpt_quant_names[GCKPT_NQUANT] = {"none", "nf4", "fp4", "int8"};
const char *const gckpt_quant_stat_names[GCKPT_NQS] = {
    "absmax", "code", "offset", "state2.absmax", "state2.code", "SCB"};

static bool piece(gckpt_dtype dt, uint64_t numel, gckpt_quant_piece *p)
{
    p->dtype = (uint8_t)dt;
    p->numel = numel;
    return gckpt_dtype_storage(dt, numel, &p->bytes);
}

static bool storage_ok(gckpt_dtype d)
{
    /* BitsAndBytesConfig also takes float64, which no gckpt dtype holds */
    return d == GCKPT_DT_U8 || d == GCKPT_DT_I8 || d == GCKPT_DT_BF16 || d == GCKPT_DT_F16 ||
           d == GCKPT_DT_F32;
}

/* 0, -1 (a storage dtype the packed bytes do not fill), -2 (overflow) */
static int layout_4bit(uint64_t n, int double_quant, gckpt_dtype storage, gckpt_quant_layout *q)
{
    uint64_t s = gckpt_dtype_size(storage), packed = n / 2 + n % 2;
    /* (n + 1) // (2s) elements of s bytes is ceil(n / 2) bytes only when s divides it; the
     * CPU backend refuses other counts (view(storage) fails), CUDA would allocate short */
    if (packed % s) return -1;
    q->block = GCKPT_QUANT_BLOCK;
    q->blocks = n / GCKPT_QUANT_BLOCK + (n % GCKPT_QUANT_BLOCK != 0);
    q->nested_blocks = (q->blocks + GCKPT_QUANT_NESTED_BLOCK - 1) / GCKPT_QUANT_NESTED_BLOCK;
    q->double_quant = double_quant != 0;
    bool ok = piece(storage, packed / s, &q->weight) &&
              piece(GCKPT_DT_F32, GCKPT_QUANT_CODE_4BIT, &q->stat[GCKPT_QS_CODE]);
    if (!double_quant) {
        q->nested_blocks = 0;
        ok = ok && piece(GCKPT_DT_F32, q->blocks, &q->stat[GCKPT_QS_ABSMAX]);
    } else
        ok = ok && piece(GCKPT_DT_U8, q->blocks, &q->stat[GCKPT_QS_ABSMAX]) &&
             piece(GCKPT_DT_F32, 1, &q->stat[GCKPT_QS_OFFSET]) &&
             piece(GCKPT_DT_F32, q->nested_blocks, &q->stat[GCKPT_QS_NESTED_ABSMAX]) &&
             piece(GCKPT_DT_F32, GCKPT_QUANT_CODE_8BIT, &q->stat[GCKPT_QS_NESTED_CODE]);
    return ok ? 0 : -2;
}

int gckpt_quant_layout_of(gckpt_quant_scheme scheme, uint64_t rows, uint64_t cols,
                          int double_quant, gckpt_dtype storage, gckpt_quant_layout *out)
{
    if ((unsigned)scheme >= GCKPT_NQUANT || !rows || !cols) return -1;
    if ((scheme == GCKPT_QUANT_NONE || scheme == GCKPT_QUANT_NF4 || scheme == GCKPT_QUANT_FP4) &&
        !storage_ok(storage))
        return -1;
    if (rows > UINT64_MAX / cols) return -2;
    uint64_t n = rows * cols;
    gckpt_quant_layout q;
    memset(&q, 0, sizeof q);
    q.scheme = (uint8_t)scheme;
    int rc = 0;
    switch (scheme) {
    case GCKPT_QUANT_NF4:
    case GCKPT_QUANT_FP4: rc = layout_4bit(n, double_quant, storage, &q); break;
    case GCKPT_QUANT_INT8:
        q.block = cols > UINT32_MAX ? 0 : (uint32_t)cols; /* one scale per row */
        q.blocks = rows;
        rc = piece(GCKPT_DT_I8, n, &q.weight) && piece(GCKPT_DT_F32, rows, &q.stat[GCKPT_QS_SCB])
                 ? 0 : -2;
        break;
    default: rc = piece(storage, n, &q.weight) ? 0 : -2; break;
    }
    if (rc) return rc;
    for (int i = 0; i < GCKPT_NQS; i++) {
        if (q.stats_bytes > UINT64_MAX - q.stat[i].bytes) return -2;
        q.stats_bytes += q.stat[i].bytes;
    }
    *out = q;
    return 0;
}
