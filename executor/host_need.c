/* The host backend's memory needs of an entry (gckpt_host_need_of, include/gckpt/executor/exec_host.h). */
#include "gckpt/executor/exec_host.h"

#include <stdio.h>

#include "gckpt/executor/host_memory.h"
#include "host_blas.h"

/* Bytes of fp32 scratch per element of an op's operands: a kernel converts inputs,
 * outputs and their gradients to fp32 (4 bytes each) and holds them together with a few
 * rows. Measured: at most 84 % of this bound on every setting of test_exec_host (which
 * checks it), 72-88 % on the GPT-2 cases of gckpt-bench-host-memory. */
#define SCRATCH_PER_ELEMENT 12
/* What an allocation can take beyond its bytes: up to a page of rounding when glibc maps
 * it, plus the 64-byte alignment (host_backend.c). */
#define ROUNDING_PER_ALLOC (4096 + 64)
/* A margin for what the parts above do not model (interpreter tables, allocator
 * metadata, stack). On gckpt-bench-host-memory's cases the measured growth of the
 * resident set and of the address space stays below the other parts alone. */
#define FIXED_BYTES ((uint64_t)32 << 20)

static uint64_t elements(const gckpt_ctx *c, int t) { return t >= 0 ? c->numel[t] : 0; }

void gckpt_host_need_of(const gckpt_exec *x, uint64_t peak, uint64_t pinned, uint64_t limit, gckpt_host_need *n)
{
    const gckpt_ctx *c = gckpt_exec_ctx(x);
    const gckpt_schedule *ev = gckpt_exec_schedule(x);
    const gckpt_recipe *r = c->recipe;
    uint64_t scratch = 0, allocs = 1; /* the workspace */
    for (size_t i = 0; i < ev->n; i++) {
        const gckpt_event *e = &ev->ev[i];
        if (e->kind == GCKPT_EV_ALLOC || e->kind == GCKPT_EV_ALLOC_SCRATCH || e->kind == GCKPT_EV_OPT_TEMP_ALLOC ||
            e->kind == GCKPT_EV_HOST_ALLOC)
            allocs++;
        if (e->kind != GCKPT_EV_FWD && e->kind != GCKPT_EV_RECOMPUTE && e->kind != GCKPT_EV_BWD) continue;
        const gckpt_op *op = &r->op[e->op];
        uint64_t el = 0;
        for (int k = 0; k < op->nin; k++) el += elements(c, op->in[k]);
        for (int k = 0; k < op->nout; k++) el += elements(c, op->out[k]);
        if (el * SCRATCH_PER_ELEMENT > scratch) scratch = el * SCRATCH_PER_ELEMENT;
    }
    /* persistent allocations: each parameter (per layer), its gradient, up to four
     * optimizer buffers (8-bit AdamW: two states and two absmax tables) */
    for (int i = 0; i < c->params.n; i++) allocs += 6 * c->params.p[i].copies;
    n->predicted = (limit && limit < peak ? limit : peak) + pinned;
    n->scratch = scratch;
    n->rounding = allocs * ROUNDING_PER_ALLOC;
    n->blas = host_blas_pending_bytes();
    n->fixed = FIXED_BYTES;
    n->total = n->predicted + n->scratch + n->rounding + n->blas + n->fixed;
}

bool gckpt_host_admit(const gckpt_exec *x, uint64_t peak, uint64_t pinned, uint64_t limit, char *msg, size_t n)
{
    gckpt_host_need need;
    gckpt_host_need_of(x, peak, pinned, limit, &need);
    gckpt_host_mem m;
    gckpt_host_memory(&m);
    if (need.total <= m.left) return true;
    char a[32], b[32], c[32], d[32], e[32], f[32];
    snprintf(msg, n,
             "needs %s of host memory (predicted %s + kernel scratch %s + OpenBLAS %s + rounding and the rest %s) but "
             "only %s is available (%s); --force runs it",
             gckpt_fmt_bytes(need.total, a, sizeof a), gckpt_fmt_bytes(need.predicted, b, sizeof b),
             gckpt_fmt_bytes(need.scratch, c, sizeof c), gckpt_fmt_bytes(need.blas, d, sizeof d),
             gckpt_fmt_bytes(need.rounding + need.fixed, e, sizeof e), gckpt_fmt_bytes(m.left, f, sizeof f), m.which);
    return false;
}
