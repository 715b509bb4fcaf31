/* Quantized weights at the executor's setup (gckpt/executor/exec_quant.h). */
#include "gckpt/executor/exec_quant.h"

#include <stdlib.h>
#include <string.h>

#include "gckpt/executor/quant4.h"
#include "gckpt/executor/quant8.h"
#include "host_num.h"

/* the host copy of every stored piece, sized by the layout */
typedef struct {
    void *weight;
    void *stat[GCKPT_NQS];
} host_pieces;

static void free_pieces(host_pieces *h)
{
    free(h->weight);
    for (int k = 0; k < GCKPT_NQS; k++) free(h->stat[k]);
}

static bool alloc_pieces(const gckpt_quant_layout *l, const gckpt_qbufs *b, host_pieces *h, gckpt_err *err)
{
    memset(h, 0, sizeof *h);
    if (!b->weight) { gckpt_seterr(err, "quantized weight: no buffer for the weight"); return false; }
    h->weight = malloc(l->weight.bytes);
    bool ok = h->weight != NULL;
    for (int k = 0; ok && k < GCKPT_NQS; k++) {
        if (!l->stat[k].numel) continue;
        if (!b->stat[k]) {
            gckpt_seterr(err, "quantized weight: no buffer for %s", gckpt_quant_stat_names[k]);
            free_pieces(h);
            return false;
        }
        ok = (h->stat[k] = malloc(l->stat[k].bytes)) != NULL;
    }
    if (!ok) {
        gckpt_seterr(err, "quantized weight: out of host memory");
        free_pieces(h);
    }
    return ok;
}

static bool quantize(const gckpt_quant_layout *l, const float *v, uint64_t rows, uint64_t cols, host_pieces *h,
                     gckpt_err *err)
{
    if (l->scheme == GCKPT_QUANT_INT8) return gckpt_q8_quantize(v, rows, cols, h->weight, h->stat[GCKPT_QS_SCB], err);
    bool dq = l->double_quant;
    gckpt_q4_store st = gckpt_q4_store_of(l, h->weight, h->stat);
    float *raw = malloc(l->blocks * sizeof *raw);
    if (!raw) { gckpt_seterr(err, "quantized weight: out of host memory"); return false; }
    bool ok = gckpt_q4_quantize((gckpt_quant_scheme)l->scheme, v, rows * cols, &st, raw, err);
    free(raw);
    if (!ok) return false;
    /* the per-weight copies of the code books (quant_state.code, state2.code) */
    memcpy(h->stat[GCKPT_QS_CODE], gckpt_q4_codebook((gckpt_quant_scheme)l->scheme), l->stat[GCKPT_QS_CODE].bytes);
    if (dq) memcpy(h->stat[GCKPT_QS_NESTED_CODE], gckpt_q4_dynamic_map(), l->stat[GCKPT_QS_NESTED_CODE].bytes);
    return true;
}

static gckpt_xstatus upload_pieces(gckpt_backend *be, const gckpt_quant_layout *l, const gckpt_qbufs *b,
                                   const host_pieces *h)
{
    gckpt_xstatus rc = be->upload(be, b->weight, h->weight, l->weight.bytes);
    for (int k = 0; rc == GCKPT_XS_OK && k < GCKPT_NQS; k++)
        if (l->stat[k].numel) rc = be->upload(be, b->stat[k], h->stat[k], l->stat[k].bytes);
    return rc;
}

gckpt_xstatus gckpt_quant_fill(gckpt_backend *be, const gckpt_quant_layout *l, uint64_t rows, uint64_t cols,
                               uint64_t key, float scale, gckpt_dtype load_dt, const gckpt_qbufs *b,
                               float *host_values, gckpt_err *err)
{
    if (l->scheme != GCKPT_QUANT_NF4 && l->scheme != GCKPT_QUANT_FP4 && l->scheme != GCKPT_QUANT_INT8) {
        gckpt_seterr(err, "quantized weight: scheme %u is not quantized", (unsigned)l->scheme);
        return GCKPT_XS_ERROR;
    }
    uint64_t n = rows * cols;
    bool fits = rows && cols && n / cols == rows &&
                (l->scheme == GCKPT_QUANT_INT8 ? l->weight.numel == n
                                               : l->blocks == (n + GCKPT_QUANT_BLOCK - 1) / GCKPT_QUANT_BLOCK);
    if (!fits) {
        gckpt_seterr(err, "quantized weight: layout of %llu blocks for %llu x %llu elements",
                     (unsigned long long)l->blocks, (unsigned long long)rows, (unsigned long long)cols);
        return GCKPT_XS_ERROR;
    }
    float *v = host_values ? host_values : malloc(n * sizeof *v);
    if (!v) { gckpt_seterr(err, "quantized weight: out of host memory"); return GCKPT_XS_ERROR; }
    uint64_t cell = 0; /* one element of load_dt */
    gckpt_xt one = {&cell, 1, (uint8_t)load_dt, 1, 1};
    for (uint64_t i = 0; i < n; i++) { /* the loaded weight: the init's value in load_dt */
        st(&one, 0, gckpt_rng_uniform(key, i, scale));
        v[i] = ld(&one, 0);
    }
    host_pieces h;
    gckpt_xstatus rc = GCKPT_XS_ERROR;
    if (alloc_pieces(l, b, &h, err)) {
        if (quantize(l, v, rows, cols, &h, err)) {
            rc = upload_pieces(be, l, b, &h);
            if (rc != GCKPT_XS_OK) gckpt_seterr(err, "quantized weight: %s", be->err.msg);
        }
        free_pieces(&h);
    }
    if (!host_values) free(v);
    return rc;
}
