/* The interpreter's state (private to executor/). */
#ifndef GCKPT_INTERP_H
#define GCKPT_INTERP_H

#include <stdarg.h>

#include "gckpt/executor/executor.h"
#include "host_num.h"

typedef struct {
    void *p;
    uint64_t bytes, n;
    int16_t tensor;   /* recipe tensor, -1 for a backward workspace */
    uint8_t dt;
    bool live;
    bool is_pgrad;    /* a parameter's .grad (freed by zero_grad only) */
} inst_t;

/* One instance of a parameter (a block parameter has one per layer): its buffers as its
 * entry in the parameter state table describes them. */
typedef struct {
    const gckpt_param *spec;
    int tensor, layer;  /* layer -1 for embedding / head parameters */
    void *w;
    void *st[GCKPT_MAX_STATES];
    uint64_t temp_off;  /* adamw-foreach: offset in the optimizer temporary */
    uint32_t grad;      /* instance of .grad, GCKPT_NOINST when none */
} param_t;

typedef struct {
    void *p;
    uint64_t bytes;
    uint64_t wr, rd;    /* bytes copied out so far, bytes copied back so far */
} hostbuf_t;

struct gckpt_exec {
    gckpt_backend *be;
    gckpt_model m;
    gckpt_device dev;
    gckpt_setting set;
    gckpt_exec_opts o;
    gckpt_recipe *r;
    gckpt_ctx ctx;
    gckpt_events ev;
    size_t seg[3][2];               /* [first micro-step, later micro-step, optimizer] */
    gckpt_dtype tdt[GCKPT_MAX_TENSORS];
    uint64_t tnumel[GCKPT_MAX_TENSORS];
    inst_t *inst;
    uint32_t ninst;
    int pidx[GCKPT_MAX_TENSORS];
    param_t *params;
    size_t nparams;
    int nslot;                      /* layers + 2: embedding, blocks, head */
    uint32_t (*bind)[6];            /* [slot * nop + op]: bindings of the latest forward */
    uint32_t *bind_gen;
    uint32_t gen;
    hostbuf_t *hb;                  /* per layer */
    void *workspace, *opt_temp;
    uint64_t workspace_bytes, opt_temp_bytes;
    uint64_t step;                  /* optimizer steps done */
    int64_t *ids, *labels, *positions;
    bool setup_done, in_grads;
};

static inline void exec_convert_to_f32(const gckpt_xt *t, float *out)
{
    for (uint64_t i = 0; i < t->n; i++) out[i] = ld(t, i);
}
static inline void exec_convert_from_f32(const gckpt_xt *t, const float *in)
{
    for (uint64_t i = 0; i < t->n; i++) st(t, i, in[i]);
}

#endif
