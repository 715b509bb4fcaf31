// The CUDA backend's ops for tensor parallelism's vocabulary-parallel ops (executor.h:
// scratch, copy2d, embed_rows; interp_tp.c calls them). Scratch comes from the stream's
// pool outside the allocator's counts, as a kernel's temporaries (cuda_dense_view); the
// column copies are cudaMemcpy2DAsync on the compute stream. Compiled here, never run: no
// GPU in the session that wrote it (unverified).
#include "cuda_common.cuh"

namespace {

constexpr unsigned kBlock = 256;

gckpt_xstatus t_scratch(gckpt_backend *be, uint64_t bytes, void **out)
{
    cuda_be *b = as_cuda(be);
    *out = nullptr;
    cudaError_t e = cudaMallocAsync(out, static_cast<size_t>(bytes ? bytes : 1), b->stream);
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        gckpt_seterr(&be->err, "out of memory: %llu bytes of scratch", static_cast<unsigned long long>(bytes));
        return GCKPT_XS_OOM;
    }
    CUDA_TRY(be, e);
    return GCKPT_XS_OK;
}

void t_scratch_free(gckpt_backend *be, void *p)
{
    if (p) (void)cudaFreeAsync(p, as_cuda(be)->stream); // stream-ordered: after the ops queued on it
}

gckpt_xstatus t_copy2d(gckpt_backend *be, void *dst, uint64_t dpitch, const void *src, uint64_t spitch, uint64_t width,
                       uint64_t height)
{
    if (!width || !height) return GCKPT_XS_OK;
    CUDA_TRY(be, cudaMemcpy2DAsync(dst, static_cast<size_t>(dpitch), src, static_cast<size_t>(spitch),
                                   static_cast<size_t>(width), static_cast<size_t>(height), cudaMemcpyDeviceToDevice,
                                   as_cuda(be)->stream));
    return GCKPT_XS_OK;
}

// one thread per output element: row k's id in [lo, lo + rows) reads its row of the table, else 0
__global__ void k_embed_rows(void *out, uint8_t odt, const void *tab, uint8_t tdt, const int64_t *ids, uint64_t n, uint64_t W,
                             uint64_t lo, uint64_t rows)
{
    GRID_LOOP(i, n)
    {
        int64_t id = ids[i / W];
        bool mine = id >= 0 && static_cast<uint64_t>(id) >= lo && static_cast<uint64_t>(id) < lo + rows;
        stx(out, odt, i, mine ? ldx(tab, tdt, (static_cast<uint64_t>(id) - lo) * W + i % W) : 0.0f);
    }
}

gckpt_xstatus t_embed_rows(gckpt_backend *be, gckpt_xt out, gckpt_xt tab, gckpt_xt ids, uint64_t lo, uint64_t vocab)
{
    (void)vocab; // the ids are the executor's own (gckpt_exec's batch, in the vocabulary); a kernel cannot fail the step
    uint64_t W = ids.n ? out.n / ids.n : 0, rows = W ? tab.n / W : 0;
    if (ids.dt != GCKPT_DT_I64 || (ids.n && (out.n % ids.n || tab.n % W))) {
        gckpt_seterr(&be->err, "embedding lookup: %llu ids, %llu outputs and a table of %llu do not agree",
                     static_cast<unsigned long long>(ids.n), static_cast<unsigned long long>(out.n),
                     static_cast<unsigned long long>(tab.n));
        return GCKPT_XS_ERROR;
    }
    if (!out.n) return GCKPT_XS_OK;
    cuda_be *b = as_cuda(be);
    k_embed_rows<<<grid_for(out.n, kBlock), kBlock, 0, b->stream>>>(out.p, out.dt, tab.p, tab.dt,
                                                                    static_cast<const int64_t *>(ids.p), out.n, W, lo, rows);
    LAUNCH_TRY(be);
    return GCKPT_XS_OK;
}

} // namespace

void cuda_tp_ops(gckpt_backend *be)
{
    be->scratch = t_scratch;
    be->scratch_free = t_scratch_free;
    be->copy2d = t_copy2d;
    be->embed_rows = t_embed_rows;
}
