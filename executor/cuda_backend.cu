// The CUDA backend: device memory per schedule event (the stream-ordered allocator by
// default, cudaMalloc / cudaFree with sync_alloc), cudaMemGetInfo sampled after every
// allocation against a baseline taken after context and cuBLAS initialisation, pinned host
// buffers and copies on the compute stream for offload, CUDA events for time. Kernels live
// in cuda_elem.cu, cuda_matmul.cu, cuda_attn.cu, cuda_source.cu and cuda_optim.cu.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_common.cuh"
#include "cuda_quant.cuh"
#include "gckpt/core/prim.h"
#include "gckpt/executor/cuda_diag.h"
extern "C" {
#include "gckpt/executor/op_sizes.h"
}
#include "gckpt/util/safe_text.h"

namespace {

const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

// Pinned host buffers are cached and reused, as PyTorch's CachingHostAllocator does
// (cudaHostAlloc per offloaded layer would cost milliseconds each): a released buffer is
// reusable once the copies queued before its release have run (its event). The pinned
// figures count bytes in use, not the cache.
struct pinned_buf {
    void *p;
    size_t sz;
    cudaEvent_t ev; // recorded at release; nullptr once known complete
};

constexpr int kPinnedCache = 512;

struct cuda_state {
    cuda_be b;
    pinned_buf cache[kPinnedCache];
    int ncache;
};

cuda_state *state_of(gckpt_backend *be) { return reinterpret_cast<cuda_state *>(be); }

void sample(cuda_be *b)
{
    size_t fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) {
        (void)cudaGetLastError();
        return;
    }
    uint64_t used = static_cast<uint64_t>(tot - fr);
    if (used > b->ms.device_used_peak) b->ms.device_used_peak = used;
}

// Free every cached pinned buffer (after its copies).
gckpt_xstatus drain(gckpt_backend *be)
{
    cuda_state *s = state_of(be);
    gckpt_xstatus rc = GCKPT_XS_OK;
    for (int i = 0; i < s->ncache; i++) {
        cudaError_t e = s->cache[i].ev ? cudaEventSynchronize(s->cache[i].ev) : cudaSuccess;
        if (s->cache[i].ev) (void)cudaEventDestroy(s->cache[i].ev);
        if (e == cudaSuccess) e = cudaFreeHost(s->cache[i].p);
        if (e != cudaSuccess && rc == GCKPT_XS_OK) rc = cu_fail(be, e, "freeing pinned host memory", __FILE__, __LINE__);
    }
    s->ncache = 0;
    return rc;
}

// A cached buffer of exactly sz bytes whose copies have finished, or nullptr.
void *reuse_pinned(cuda_state *s, size_t sz)
{
    for (int i = 0; i < s->ncache; i++) {
        pinned_buf *c = &s->cache[i];
        if (c->sz != sz) continue;
        if (c->ev) {
            if (cudaEventQuery(c->ev) != cudaSuccess) {
                (void)cudaGetLastError(); /* cudaErrorNotReady is not an error here */
                continue;
            }
            (void)cudaEventDestroy(c->ev);
            c->ev = nullptr;
        }
        void *p = c->p;
        s->cache[i] = s->cache[--s->ncache];
        return p;
    }
    return nullptr;
}

gckpt_xstatus c_alloc(gckpt_backend *be, gckpt_mem_kind k, uint64_t bytes, void **out)
{
    cuda_be *b = as_cuda(be);
    *out = nullptr;
    size_t sz = static_cast<size_t>(bytes ? bytes : 1); // a zero-byte tensor still gets an address
    if (k == GCKPT_MEM_PINNED) {
        *out = reuse_pinned(state_of(be), sz);
        if (!*out) CUDA_TRY(be, cudaHostAlloc(out, sz, cudaHostAllocDefault));
        b->ms.pinned += bytes;
        if (b->ms.pinned > b->ms.pinned_peak) b->ms.pinned_peak = b->ms.pinned;
        return GCKPT_XS_OK;
    }
    if (b->limit && (bytes > b->limit || b->ms.allocated > b->limit - bytes)) {
        gckpt_seterr(&be->err, "out of memory: %llu bytes requested with %llu of the %llu-byte limit in use",
                     static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(b->ms.allocated),
                     static_cast<unsigned long long>(b->limit));
        return GCKPT_XS_OOM;
    }
    if (b->sync_alloc) CUDA_TRY(be, cudaMalloc(out, sz));
    else CUDA_TRY(be, cudaMallocAsync(out, sz, b->stream));
    b->ms.allocated += bytes;
    if (b->ms.allocated > b->ms.allocated_peak) b->ms.allocated_peak = b->ms.allocated;
    sample(b);
    return GCKPT_XS_OK;
}

void c_release(gckpt_backend *be, gckpt_mem_kind k, void *p, uint64_t bytes)
{
    cuda_be *b = as_cuda(be);
    cuda_state *s = state_of(be);
    if (!p) return;
    if (k == GCKPT_MEM_PINNED) {
        b->ms.pinned -= bytes;
        size_t sz = static_cast<size_t>(bytes ? bytes : 1);
        cudaEvent_t ev;
        if (s->ncache == kPinnedCache) (void)drain(be);
        if (cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) == cudaSuccess &&
            cudaEventRecord(ev, b->stream) == cudaSuccess) {
            s->cache[s->ncache++] = {p, sz, ev};
            return;
        }
        (void)cudaGetLastError();
        (void)cudaStreamSynchronize(b->stream);
        (void)cudaFreeHost(p);
        return;
    }
    b->ms.allocated -= bytes;
    if (b->sync_alloc) (void)cudaFree(p);
    else (void)cudaFreeAsync(p, b->stream);
}

gckpt_xstatus c_copy(gckpt_backend *be, void *dst, const void *src, uint64_t bytes, bool to_host)
{
    CUDA_TRY(be, cudaMemcpyAsync(dst, src, bytes, to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice, as_cuda(be)->stream));
    return GCKPT_XS_OK;
}

gckpt_xstatus c_upload(gckpt_backend *be, void *dst, const void *src, uint64_t bytes)
{
    CUDA_TRY(be, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, as_cuda(be)->stream));
    CUDA_TRY(be, cudaStreamSynchronize(as_cuda(be)->stream));
    return GCKPT_XS_OK;
}

gckpt_xstatus c_download(gckpt_backend *be, void *dst, const void *src, uint64_t bytes)
{
    CUDA_TRY(be, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, as_cuda(be)->stream));
    CUDA_TRY(be, cudaStreamSynchronize(as_cuda(be)->stream));
    return GCKPT_XS_OK;
}

gckpt_xstatus c_init(gckpt_backend *be, gckpt_xt t, gckpt_init how, float scale, uint64_t key)
{
    return cuda_fill(as_cuda(be), t, how, scale, key);
}

// Every launch below is preceded by the op's own size checks (op_sizes.h), on the host.
gckpt_xstatus c_source(gckpt_backend *be, gckpt_source what, const gckpt_xcall *c, const int64_t *host)
{
    if (gckpt_op_check_source(what, c, &be->err) != GCKPT_XS_OK) return GCKPT_XS_ERROR;
    return cuda_source(as_cuda(be), what, c, host);
}

// The kernel table: one row per primitive in gckpt_prim's order (C++ has no array
// designators: the row's prim is checked below); a NULL kernel is refused by the
// primitive's name (tests/executor/test_prim_coverage.c lists them). Sources are the
// backend's source call (cuda_source.cu), not a kernel.
struct cuda_kernel {
    int prim;
    cuda_kernel_fn fwd, bwd;
};
constexpr cuda_kernel kernels[] = {
    {GCKPT_P_SOURCE, nullptr, nullptr},
    {GCKPT_P_CAST, cuda_unary_fwd, cuda_unary_bwd},
    {GCKPT_P_MUL, cuda_binary_fwd, cuda_binary_bwd},
    {GCKPT_P_ADD, cuda_binary_fwd, cuda_binary_bwd},
    {GCKPT_P_AFFINE, cuda_unary_fwd, cuda_unary_bwd},
    {GCKPT_P_NEG_HALF, cuda_half_fwd, cuda_half_bwd},
    {GCKPT_P_CAT_HALF, cuda_half_fwd, cuda_half_bwd},
    {GCKPT_P_POW, cuda_unary_fwd, cuda_unary_bwd},
    {GCKPT_P_RSQRT, cuda_unary_fwd, cuda_unary_bwd},
    {GCKPT_P_TANH, cuda_unary_fwd, cuda_unary_bwd},
    {GCKPT_P_SILU, cuda_unary_fwd, cuda_unary_bwd},
    {GCKPT_P_GELU, cuda_unary_fwd, cuda_unary_bwd},
    {GCKPT_P_MEAN, cuda_mean_fwd, cuda_mean_bwd},
    {GCKPT_P_LINEAR, cuda_linear_fwd, cuda_linear_bwd},
    {GCKPT_P_LAYERNORM, cuda_layernorm_fwd, cuda_layernorm_bwd},
    {GCKPT_P_DROPOUT, cuda_unary_fwd, cuda_unary_bwd},
    {GCKPT_P_SDPA, cuda_sdpa_fwd, cuda_sdpa_bwd},
    {GCKPT_P_REPEAT_KV, cuda_repeat_kv_fwd, cuda_repeat_kv_bwd},
    {GCKPT_P_QK, cuda_qk_fwd, cuda_qk_bwd},
    {GCKPT_P_SOFTMAX, cuda_softmax_fwd, cuda_softmax_bwd},
    {GCKPT_P_PV, cuda_pv_fwd, cuda_pv_bwd},
    {GCKPT_P_TRANSPOSE, cuda_transpose_fwd, cuda_transpose_bwd},
    {GCKPT_P_EMBED, cuda_embed_fwd, cuda_embed_bwd},
    {GCKPT_P_LOG_SOFTMAX, cuda_logsoftmax_fwd, cuda_logsoftmax_bwd},
    {GCKPT_P_NLL, cuda_nll_fwd, cuda_nll_bwd},
    {GCKPT_P_SPLIT, cuda_split_fwd, cuda_split_bwd},
    {GCKPT_P_CAT_PASS, cuda_cat_pass_fwd, cuda_cat_pass_bwd},
    {GCKPT_P_TOPK, cuda_topk_fwd, cuda_topk_bwd},
    {GCKPT_P_SUM, cuda_sum_fwd, cuda_sum_bwd},
    {GCKPT_P_DIV, cuda_div_fwd, cuda_div_bwd},
    {GCKPT_P_SORT, cuda_sort_fwd, nullptr},
    {GCKPT_P_FLOORDIV, cuda_floordiv_fwd, nullptr},
    {GCKPT_P_GATHER_ROWS, cuda_embed_fwd, cuda_embed_bwd},
    {GCKPT_P_HISTC, cuda_histc_fwd, nullptr},
    {GCKPT_P_INVERT_PERM, cuda_invert_perm_fwd, nullptr},
    {GCKPT_P_GROUPED_LINEAR, cuda_grouped_linear_fwd, cuda_grouped_linear_bwd},
    {GCKPT_P_SUB, cuda_binary_fwd, cuda_binary_bwd},
    {GCKPT_P_CLAMP, cuda_unary_fwd, cuda_unary_bwd},
    {GCKPT_P_SIGMOID, cuda_unary_fwd, cuda_unary_bwd},
    {GCKPT_P_CAT_SINK, cuda_cat_sink_fwd, cuda_cat_sink_bwd},
    {GCKPT_P_MAX_LAST, cuda_max_last_fwd, cuda_max_last_bwd},
    {GCKPT_P_DROP_SINK, cuda_drop_sink_fwd, cuda_drop_sink_bwd},
    {GCKPT_P_CAT_HALVES, cuda_cat_halves_fwd, cuda_cat_halves_bwd},
    {GCKPT_P_BOOL_MASK, cuda_bool_mask_fwd, nullptr},
    {GCKPT_P_FUSED_LCE, nullptr, nullptr}, // planned only (core/prim.c): gckpt-run refuses the plan
    {GCKPT_P_CCE_LSE, nullptr, nullptr},
    {GCKPT_P_SWIGLU, nullptr, nullptr}, // Liger's SwiGLU: planned only
    {GCKPT_P_ROUTE_MASK, nullptr, nullptr}, // DeepSeek-V3's router: executed on the host only
    {GCKPT_P_LIGER_RMS_NORM, nullptr, nullptr}, // Liger's RMSNorm: planned only
    {GCKPT_P_LIGER_ROPE, nullptr, nullptr}, // Liger's RoPE: planned only
    {GCKPT_P_PATCH_CONV, nullptr, nullptr}, // a vision tower's embedding: planned only
    {GCKPT_P_CAT_CLS, nullptr, nullptr},
    {GCKPT_P_ROWS_OF, nullptr, nullptr},
    {GCKPT_P_AVG_POOL, nullptr, nullptr}, // Gemma 3's projector pool: planned only
    {GCKPT_P_LIGER_MOE_ROUTE, nullptr, nullptr}, // Liger's fused MoE: planned only
    {GCKPT_P_LIGER_MOE, nullptr, nullptr},
#ifdef GCKPT_TOY
    {GCKPT_P_TOY, cuda_unary_fwd, cuda_unary_bwd}, // a copy: k_unary_fwd / _bwd's default case, as CAST
#endif
};
static_assert(sizeof kernels / sizeof *kernels == GCKPT_NPRIM, "a primitive without a row in the CUDA kernel table");
constexpr bool rows_in_order()
{
    for (int i = 0; i < GCKPT_NPRIM; i++)
        if (kernels[i].prim != i) return false;
    return true;
}
static_assert(rows_in_order(), "the CUDA kernel table's rows are not in gckpt_prim's order");

gckpt_xstatus dispatch(cuda_be *cb, const gckpt_xcall *c, bool bwd)
{
    int p = c->op->prim;
    cuda_kernel_fn fn = p < 0 || p >= GCKPT_NPRIM ? nullptr : bwd ? kernels[p].bwd : kernels[p].fwd;
    if (!fn) {
        gckpt_seterr(&cb->be.err, "op %s: primitive %s has no CUDA %s", c->op->name, gckpt_prim_name(p),
                     bwd ? "backward" : "forward");
        return GCKPT_XS_ERROR;
    }
    return fn(cb, c);
}

// The kernels read dense operands: strided views (gckpt_xt.vW: Phi-3's blocks, gpt_oss's
// sink-dropped probabilities; in backward also an output gradient that is part of a wider
// one) are gathered into temporaries first (on the pool: the device measurement sees
// them; unverified, no GPU). A gradient an op writes is never strided (interp_events.c).
gckpt_xstatus with_dense_inputs(cuda_be *cb, const gckpt_xcall *c, bool bwd)
{
    bool strided = bwd && c->gout.vW != 0 && c->gout.p;
    for (int k = 0; k < c->op->nin; k++) strided |= c->in[k].vW != 0 && c->in[k].p;
    if (!strided) return dispatch(cb, c, bwd);
    gckpt_xcall d = *c;
    gckpt_xt *view[GCKPT_OP_MAX_IN + 1] = {};
    const gckpt_xt *src[GCKPT_OP_MAX_IN + 1] = {};
    for (int k = 0; k < c->op->nin; k++) {
        view[k] = &d.in[k];
        src[k] = &c->in[k];
    }
    if (bwd) {
        view[GCKPT_OP_MAX_IN] = &d.gout;
        src[GCKPT_OP_MAX_IN] = &c->gout;
    }
    void *tmp[GCKPT_OP_MAX_IN + 1] = {};
    gckpt_xstatus rc = GCKPT_XS_OK;
    for (int k = 0; k <= GCKPT_OP_MAX_IN && rc == GCKPT_XS_OK; k++) {
        if (!src[k] || !src[k]->vW || !src[k]->p) continue;
        rc = cuda_dense_view(cb, *src[k], &tmp[k]);
        view[k]->p = tmp[k];
        view[k]->vW = view[k]->voff = view[k]->vblk = view[k]->vstride = view[k]->vstep = 0;
    }
    if (rc == GCKPT_XS_OK) rc = dispatch(cb, &d, bwd);
    for (int k = 0; k <= GCKPT_OP_MAX_IN; k++)
        if (tmp[k]) cudaFreeAsync(tmp[k], cb->stream);
    return rc;
}

gckpt_xstatus c_forward(gckpt_backend *be, const gckpt_xcall *c)
{
    if (gckpt_op_check_forward(c, &be->err) != GCKPT_XS_OK) return GCKPT_XS_ERROR;
    return with_dense_inputs(as_cuda(be), c, false);
}

gckpt_xstatus c_backward(gckpt_backend *be, const gckpt_xcall *c)
{
    if (gckpt_op_check_backward(c, &be->err) != GCKPT_XS_OK) return GCKPT_XS_ERROR;
    return with_dense_inputs(as_cuda(be), c, true);
}

// A quantized weight dequantized into out (cuda_quant.cu; unverified: no GPU here).
gckpt_xstatus c_dequant(gckpt_backend *be, const gckpt_xquant *q, gckpt_xt w, gckpt_xt out)
{
    if (gckpt_op_check_dequant(q, w, out, &be->err) != GCKPT_XS_OK) return GCKPT_XS_ERROR;
    const gckpt_quant_layout *l = q->layout;
    cudaStream_t st = as_cuda(be)->stream;
    if (l->scheme == GCKPT_QUANT_INT8) {
        CUDA_TRY(be, gckpt_cuda_q8_dequant(st, static_cast<const int8_t *>(w.p),
                                           static_cast<const float *>(q->stat[GCKPT_QS_SCB]), out.rows, out.cols,
                                           out.dt, out.p));
        return GCKPT_XS_OK;
    }
    bool dq = l->double_quant;
    gckpt_q4_dev d = {static_cast<const uint8_t *>(w.p), static_cast<const float *>(q->stat[GCKPT_QS_CODE]),
                      dq ? nullptr : static_cast<const float *>(q->stat[GCKPT_QS_ABSMAX]),
                      dq ? static_cast<const uint8_t *>(q->stat[GCKPT_QS_ABSMAX]) : nullptr,
                      static_cast<const float *>(q->stat[GCKPT_QS_NESTED_CODE]),
                      static_cast<const float *>(q->stat[GCKPT_QS_NESTED_ABSMAX]),
                      static_cast<const float *>(q->stat[GCKPT_QS_OFFSET])};
    CUDA_TRY(be, gckpt_cuda_q4_dequant(st, &d, out.n, out.dt, out.p));
    return GCKPT_XS_OK;
}

gckpt_xstatus c_add(gckpt_backend *be, gckpt_xt dst, gckpt_xt a, gckpt_xt x)
{
    if (gckpt_op_check_add(dst, a, x, &be->err) != GCKPT_XS_OK) return GCKPT_XS_ERROR;
    return cuda_add(as_cuda(be), dst, a, x);
}

gckpt_xstatus c_set_scalar(gckpt_backend *be, gckpt_xt dst, float v) { return cuda_fill(as_cuda(be), dst, GCKPT_INIT_CONST, v, 0); }

gckpt_xstatus c_optim(gckpt_backend *be, const gckpt_optcall *c)
{
    if (gckpt_op_check_optim(c, &be->err) != GCKPT_XS_OK) return GCKPT_XS_ERROR;
    return cuda_optim(as_cuda(be), c);
}

gckpt_xstatus c_checksum(gckpt_backend *be, gckpt_xt t, uint64_t salt, uint64_t *hash, double *sumsq)
{
    return cuda_checksum(as_cuda(be), t, salt, hash, sumsq);
}

gckpt_xstatus c_record(gckpt_backend *be, gckpt_xt s, int slot)
{
    if (slot < 0 || slot >= GCKPT_MAX_RECORDS || !s.p || s.dt != GCKPT_DT_F32) {
        gckpt_seterr(&be->err, "record: bad slot %d or a scalar that is not fp32", slot);
        return GCKPT_XS_ERROR;
    }
    CUDA_TRY(be, cudaMemcpyAsync(as_cuda(be)->records + slot, s.p, sizeof(float), cudaMemcpyDeviceToDevice, as_cuda(be)->stream));
    return GCKPT_XS_OK;
}

gckpt_xstatus c_read_records(gckpt_backend *be, float *out, int n)
{
    if (n < 0 || n > GCKPT_MAX_RECORDS) return GCKPT_XS_ERROR;
    if (!n) return GCKPT_XS_OK;
    CUDA_TRY(be, cudaMemcpyAsync(out, as_cuda(be)->records, sizeof(float) * static_cast<size_t>(n), cudaMemcpyDeviceToHost,
                                 as_cuda(be)->stream));
    CUDA_TRY(be, cudaStreamSynchronize(as_cuda(be)->stream));
    return GCKPT_XS_OK;
}

void c_memstat(gckpt_backend *be, gckpt_memstat *m)
{
    *m = as_cuda(be)->ms;
    m->has_device = true;
}

// Between entries: everything is freed; give the pool's memory back so the next entry's
// device peak starts from the baseline.
void c_reset_peaks(gckpt_backend *be)
{
    cuda_be *b = as_cuda(be);
    (void)cudaStreamSynchronize(b->stream);
    (void)drain(be);
    if (!b->sync_alloc) (void)cudaMemPoolTrimTo(b->pool, 0);
    (void)cudaGetLastError();
    b->ms.allocated_peak = b->ms.allocated;
    b->ms.pinned_peak = b->ms.pinned;
    b->ms.device_used_peak = 0;
    sample(b);
}

gckpt_xstatus c_timer_start(gckpt_backend *be)
{
    cuda_be *b = as_cuda(be);
    CUDA_TRY(be, cudaEventRecord(b->t0, b->stream));
    b->timing = true;
    sample(b);
    return GCKPT_XS_OK;
}

gckpt_xstatus c_timer_stop(gckpt_backend *be, double *seconds)
{
    cuda_be *b = as_cuda(be);
    if (!b->timing) {
        gckpt_seterr(&be->err, "timer stopped before it was started");
        return GCKPT_XS_ERROR;
    }
    b->timing = false;
    CUDA_TRY(be, cudaEventRecord(b->t1, b->stream));
    CUDA_TRY(be, cudaEventSynchronize(b->t1));
    float ms = 0.0f;
    CUDA_TRY(be, cudaEventElapsedTime(&ms, b->t0, b->t1));
    *seconds = 1e-3 * static_cast<double>(ms);
    sample(b);
    return GCKPT_XS_OK;
}

gckpt_xstatus c_sync(gckpt_backend *be)
{
    CUDA_TRY(be, cudaStreamSynchronize(as_cuda(be)->stream));
    return GCKPT_XS_OK;
}

gckpt_xstatus c_set_workspace(gckpt_backend *be, void *p, uint64_t bytes)
{
    cuda_be *b = as_cuda(be);
    if (!p || !bytes) {
        /* the workspace is about to be freed: finish the work that may use it */
        CUDA_TRY(be, cudaStreamSynchronize(b->stream));
        CUBLAS_TRY(be, cublasSetWorkspace(b->blas, nullptr, 0));
        return GCKPT_XS_OK;
    }
    CUBLAS_TRY(be, cublasSetWorkspace(b->blas, p, static_cast<size_t>(bytes)));
    return GCKPT_XS_OK;
}

void version_str(int v, char *buf, size_t n) { snprintf(buf, n, "%d.%d", v / 1000, (v % 1000) / 10); }

void c_describe(gckpt_backend *be, gckpt_devinfo *d)
{
    cuda_be *b = as_cuda(be);
    memset(d, 0, sizeof *d);
    snprintf(d->kind, sizeof d->kind, "gpu");
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, b->device) == cudaSuccess) {
        snprintf(d->name, sizeof d->name, "%s", prop.name);
        gckpt_text_sanitize(d->name);
        d->memory_bytes = prop.totalGlobalMem;
        snprintf(d->arch, sizeof d->arch, "sm_%d%d", prop.major, prop.minor);
    }
    int v = 0;
    if (cudaDriverGetVersion(&v) == cudaSuccess) version_str(v, d->driver, sizeof d->driver);
    if (cudaRuntimeGetVersion(&v) == cudaSuccess) version_str(v, d->runtime, sizeof d->runtime);
    (void)cudaGetLastError();
}

gckpt_xstatus c_attach(gckpt_backend *be, gckpt_comm *comm) { return cuda_nccl_attach(as_cuda(be), comm); }

gckpt_xstatus c_collective(gckpt_backend *be, gckpt_coll op, gckpt_redop red, gckpt_xt send, gckpt_xt recv, int root)
{
    return cuda_nccl_collective(as_cuda(be), op, red, send, recv, root);
}

gckpt_xstatus c_attach_group(gckpt_backend *be, gckpt_coll_group g, gckpt_comm *comm)
{
    return cuda_nccl_attach_group(as_cuda(be), g, comm);
}

gckpt_xstatus c_collective_group(gckpt_backend *be, gckpt_coll_group g, gckpt_coll op, gckpt_redop red, gckpt_xt send,
                                 gckpt_xt recv)
{
    return cuda_nccl_collective_group(as_cuda(be), g, op, red, send, recv);
}

void c_destroy(gckpt_backend *be)
{
    cuda_be *b = as_cuda(be);
    // Also after an interrupted or failed entry: the work queued on the stream finishes,
    // the cached pinned buffers and the pool's free memory go back to the driver.
    if (b->stream) (void)cudaStreamSynchronize(b->stream);
    (void)drain(be);
    if (b->pool) (void)cudaMemPoolTrimTo(b->pool, 0);
    cuda_nccl_destroy(b);
    if (b->blas) (void)cublasDestroy(b->blas);
    if (b->records) (void)cudaFree(b->records);
    if (b->sums) (void)cudaFree(b->sums);
    if (b->t0) (void)cudaEventDestroy(b->t0);
    if (b->t1) (void)cudaEventDestroy(b->t1);
    if (b->stream) (void)cudaStreamDestroy(b->stream);
    free(state_of(be));
}

} // namespace

gckpt_xstatus cu_fail(gckpt_backend *be, cudaError_t e, const char *what, const char *file, int line)
{
    gckpt_seterr(&be->err, "%s:%d: %s: %s (%s)", base_name(file), line, what, cudaGetErrorString(e), cudaGetErrorName(e));
    (void)cudaGetLastError(); /* clear a non-sticky error */
    return e == cudaErrorMemoryAllocation ? GCKPT_XS_OOM : GCKPT_XS_ERROR;
}

gckpt_xstatus cublas_fail(gckpt_backend *be, cublasStatus_t s, const char *what, const char *file, int line)
{
    gckpt_seterr(&be->err, "%s:%d: %s: %s", base_name(file), line, what, cublasGetStatusString(s));
    return s == CUBLAS_STATUS_ALLOC_FAILED ? GCKPT_XS_OOM : GCKPT_XS_ERROR;
}

/* A kernel whose image tells whether this binary has code for the GPU. */
__global__ void gckpt_cuda_probe_kernel() {}

static_assert((int)cudaErrorInsufficientDriver == (int)GCKPT_CUDA_ERR_INSUFFICIENT_DRIVER, "cuda_diag.h");
static_assert((int)cudaErrorInvalidDeviceFunction == (int)GCKPT_CUDA_ERR_INVALID_DEVICE_FUNCTION, "cuda_diag.h");
static_assert((int)cudaErrorNoDevice == (int)GCKPT_CUDA_ERR_NO_DEVICE, "cuda_diag.h");
static_assert((int)cudaErrorNoKernelImageForDevice == (int)GCKPT_CUDA_ERR_NO_KERNEL_IMAGE, "cuda_diag.h");

extern "C" bool gckpt_cuda_has_kernel(int prim, bool bwd)
{
    if (prim < 0 || prim >= GCKPT_NPRIM) return false;
    return (bwd ? kernels[prim].bwd : kernels[prim].fwd) != nullptr;
}

extern "C" bool gckpt_cuda_available(gckpt_err *err)
{
    int n = 0, dv = 0, rv = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaSuccess && n >= 1) return true;
    (void)cudaGetLastError();
    (void)cudaDriverGetVersion(&dv); /* 0 when no driver is installed */
    (void)cudaRuntimeGetVersion(&rv);
    gckpt_cuda_why_unavailable((int)e, n, dv, rv, cudaGetErrorString(e), err->msg, sizeof err->msg);
    return false;
}

#ifndef GCKPT_CUDA_ARCHS
#define GCKPT_CUDA_ARCHS "(unknown)"
#endif

/* Before anything runs: does this binary carry code the GPU can run? */
static bool has_code_for(int device, gckpt_err *err)
{
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
        (void)cudaGetLastError();
        return true; /* the backend's own initialisation reports it */
    }
    cudaFuncAttributes fa;
    cudaError_t e = cudaFuncGetAttributes(&fa, (const void *)gckpt_cuda_probe_kernel);
    (void)cudaGetLastError();
    return gckpt_cuda_has_code((int)e, prop.name, prop.major, prop.minor, GCKPT_CUDA_ARCHS, err->msg,
                               sizeof err->msg);
}

extern "C" gckpt_backend *gckpt_cuda_backend_new(const gckpt_cuda_opts *o, gckpt_err *err)
{
    if (!gckpt_cuda_available(err) || !has_code_for(o->device, err)) return nullptr;
    cuda_state *s = static_cast<cuda_state *>(calloc(1, sizeof *s));
    if (!s) {
        gckpt_seterr(err, "out of memory");
        return nullptr;
    }
    cuda_be *b = &s->b;
    gckpt_backend *be = &b->be;
    b->device = o ? o->device : 0;
    b->sync_alloc = o && o->sync_alloc;
    b->limit = o ? o->memory_limit : 0;
    be->name = "cuda";
    be->alloc = c_alloc;
    be->release = c_release;
    be->copy = c_copy;
    be->upload = c_upload;
    be->download = c_download;
    be->init = c_init;
    be->source = c_source;
    be->forward = c_forward;
    be->backward = c_backward;
    be->dequant = c_dequant;
    be->add = c_add;
    be->set_scalar = c_set_scalar;
    be->optim = c_optim;
    be->checksum = c_checksum;
    be->record = c_record;
    be->read_records = c_read_records;
    be->memstat = c_memstat;
    be->reset_peaks = c_reset_peaks;
    be->timer_start = c_timer_start;
    be->timer_stop = c_timer_stop;
    be->sync = c_sync;
    be->set_workspace = c_set_workspace;
    be->describe = c_describe;
    be->attach = c_attach;
    be->collective = c_collective;
    be->attach_group = c_attach_group;
    be->collective_group = c_collective_group;
    cuda_tp_ops(be);
    cuda_cp_ops(be);
    be->destroy = c_destroy;
    cudaDeviceProp prop;
    cudaError_t e;
    cublasStatus_t bs;
    uint64_t thr = UINT64_MAX;
    size_t fr = 0, tot = 0;
    int pools = 0;
#define INIT(call)                                                                                  \
    do {                                                                                            \
        if ((e = (call)) != cudaSuccess) {                                                          \
            cu_fail(be, e, #call, __FILE__, __LINE__);                                               \
            goto fail;                                                                              \
        }                                                                                           \
    } while (0)
    INIT(cudaSetDevice(b->device));
    INIT(cudaFree(nullptr)); /* the context */
    INIT(cudaGetDeviceProperties(&prop, b->device));
    b->smem_optin = prop.sharedMemPerBlockOptin;
    INIT(cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking));
    if ((bs = cublasCreate(&b->blas)) != CUBLAS_STATUS_SUCCESS || (bs = cublasSetStream(b->blas, b->stream)) != CUBLAS_STATUS_SUCCESS ||
        (bs = cublasSetWorkspace(b->blas, nullptr, 0)) != CUBLAS_STATUS_SUCCESS) {
        cublas_fail(be, bs, "cuBLAS initialisation", __FILE__, __LINE__);
        goto fail;
    }
    INIT(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, b->device));
    if (!pools) b->sync_alloc = true; /* no stream-ordered allocator here (e.g. some MIG setups) */
    if (!b->sync_alloc) {
        INIT(cudaDeviceGetDefaultMemPool(&b->pool, b->device));
        /* keep freed memory in the pool, as PyTorch's caching allocator keeps its segments */
        INIT(cudaMemPoolSetAttribute(b->pool, cudaMemPoolAttrReleaseThreshold, &thr));
    }
    INIT(cudaEventCreate(&b->t0));
    INIT(cudaEventCreate(&b->t1));
    INIT(cudaMalloc(reinterpret_cast<void **>(&b->records), sizeof(float) * (GCKPT_MAX_RECORDS + 1)));
    INIT(cudaMalloc(reinterpret_cast<void **>(&b->sums), cuda_checksum_scratch_bytes()));
    INIT(cudaDeviceSynchronize());
    INIT(cudaMemGetInfo(&fr, &tot));
#undef INIT
    b->ms.device_total = tot;
    b->ms.device_baseline = static_cast<uint64_t>(tot - fr);
    b->ms.device_used_peak = b->ms.device_baseline;
    return be;
fail:
    snprintf(err->msg, sizeof err->msg, "%s", be->err.msg);
    c_destroy(be);
    return nullptr;
}
