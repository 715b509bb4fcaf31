/* The toy parallel mode's hooks and the toy primitive's host kernels, compiled only into the
 * test build's executor (GCKPT_TOY, tests/toy/CMakeLists.txt; docs/architecture.md). A real
 * mode's hooks go in executor/interp_<mode>.c, a real primitive's kernels in
 * executor/host_*.c (scalar math shared with CUDA in gckpt/executor/kernel_math.h). */
#include "host_num.h"
#include "host_ops.h"
#include "interp_parallel.h"

/* The toy mode allocates the rank's buffers as the core's rows size them (exec_rank_buffers
 * checks their sum against the schedule's) and has no collective: nothing else to hook. */
const exec_par_ops exec_toy_ops = {.setup = exec_rank_buffers};

/* x.clone(): the output is the input; its backward hands the output gradient on. */
static gckpt_xstatus toy_copy(const gckpt_xcall *c, bool bwd, gckpt_err *err)
{
    const gckpt_xt *from = bwd ? &c->gout : &c->in[0], *to = bwd ? &c->gin[0] : &c->out[0];
    if (!to->p) return GCKPT_XS_OK; /* backward: the input needs no gradient */
    NEED(c, *from, bwd ? "output gradient" : "input 0");
    for (uint64_t i = 0; i < to->n; i++) st(to, i, ld(from, i));
    return GCKPT_XS_OK;
}
HOST_KERNEL_BOTH(toy, toy_copy)
