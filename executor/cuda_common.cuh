// Shared by the CUDA backend's translation units: the backend state, error wrappers
// that report file:line, element access by dtype, and launch helpers.
#ifndef GCKPT_CUDA_COMMON_CUH
#define GCKPT_CUDA_COMMON_CUH

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

// The library's headers are C without linkage guards: declare them with C linkage here
// (the system headers they include are included above, outside the block).
#include "gckpt/executor/exec_rng.h"
extern "C" {
#include "gckpt/core/device.h"
#include "gckpt/executor/executor.h"
#include "gckpt/util/util.h"
}
#include "gckpt/executor/exec_cuda.h"

struct ncclComm; // nccl.h's ncclComm_t, in cuda_nccl.cu only

struct cuda_be {
    gckpt_backend be;          // first: the interface
    int device;
    bool sync_alloc;
    uint64_t limit;
    cudaStream_t stream;
    cublasHandle_t blas;
    cudaMemPool_t pool;
    cudaEvent_t t0, t1;
    bool timing;
    float *records;            // device: GCKPT_MAX_RECORDS loss slots
    unsigned long long *sums;  // device: checksum accumulators (hash, then a double)
    gckpt_memstat ms;
    size_t smem_optin;         // max dynamic shared memory per block
    gckpt_comm *comm;          // the run's ranks (nullptr: one)
    ncclComm *nccl;            // their NCCL communicator (cuda_nccl.cu), nullptr for one rank
    // the process groups joined (attach_group: HSDP's, TP x FSDP's; nullptr: not joined) and an
    // NCCL communicator of each (nullptr for a group of one rank)
    gckpt_comm *group[GCKPT_NGROUP];
    ncclComm *group_nccl[GCKPT_NGROUP];
};

// The backend behind the interface.
static inline cuda_be *as_cuda(gckpt_backend *be) { return reinterpret_cast<cuda_be *>(be); }

// Record a CUDA / cuBLAS failure in be->err as "file:line: call: reason".
gckpt_xstatus cu_fail(gckpt_backend *be, cudaError_t e, const char *what, const char *file, int line);
gckpt_xstatus cublas_fail(gckpt_backend *be, cublasStatus_t s, const char *what, const char *file, int line);
gckpt_xstatus op_fail(gckpt_backend *be, const gckpt_xcall *c, const char *why);

#define CUDA_TRY(be, call)                                                                          \
    do {                                                                                            \
        cudaError_t e_ = (call);                                                                    \
        if (e_ != cudaSuccess) return cu_fail((be), e_, #call, __FILE__, __LINE__);                  \
    } while (0)

#define CUBLAS_TRY(be, call)                                                                        \
    do {                                                                                            \
        cublasStatus_t s_ = (call);                                                                 \
        if (s_ != CUBLAS_STATUS_SUCCESS) return cublas_fail((be), s_, #call, __FILE__, __LINE__);    \
    } while (0)

// After a kernel launch.
#define LAUNCH_TRY(be) CUDA_TRY(be, cudaGetLastError())

// A needed operand that was not kept.
#define NEED_T(be, c, t, what)                                                                      \
    do {                                                                                            \
        if (!(t).p) return op_fail((be), (c), what " is not available (freed before use)");       \
    } while (0)

// ---- element access ------------------------------------------------------------------------

__device__ __forceinline__ float ldx(const void *p, uint8_t dt, uint64_t i)
{
    switch (dt) {
    case GCKPT_DT_F32: return static_cast<const float *>(p)[i];
    case GCKPT_DT_BF16: return __bfloat162float(static_cast<const __nv_bfloat16 *>(p)[i]);
    case GCKPT_DT_F16: return __half2float(static_cast<const __half *>(p)[i]);
    case GCKPT_DT_BOOL: case GCKPT_DT_U8: return static_cast<float>(static_cast<const uint8_t *>(p)[i]);
    case GCKPT_DT_I8: return static_cast<float>(static_cast<const int8_t *>(p)[i]);
    case GCKPT_DT_I32: return static_cast<float>(static_cast<const int32_t *>(p)[i]);
    default: return static_cast<float>(static_cast<const int64_t *>(p)[i]);
    }
}

__device__ __forceinline__ void stx(void *p, uint8_t dt, uint64_t i, float v)
{
    switch (dt) {
    case GCKPT_DT_F32: static_cast<float *>(p)[i] = v; break;
    case GCKPT_DT_BF16: static_cast<__nv_bfloat16 *>(p)[i] = __float2bfloat16_rn(v); break;
    case GCKPT_DT_F16: static_cast<__half *>(p)[i] = __float2half_rn(v); break;
    case GCKPT_DT_BOOL: static_cast<uint8_t *>(p)[i] = v != 0.0f; break;
    case GCKPT_DT_U8: static_cast<uint8_t *>(p)[i] = static_cast<uint8_t>(v); break;
    case GCKPT_DT_I8: static_cast<int8_t *>(p)[i] = static_cast<int8_t>(v); break;
    case GCKPT_DT_I32: static_cast<int32_t *>(p)[i] = static_cast<int32_t>(v); break;
    default: static_cast<int64_t *>(p)[i] = static_cast<int64_t>(v); break;
    }
}

// element i of an integer tensor (int64 or int32: indices, offsets)
__device__ __forceinline__ int64_t ldi(const void *p, uint8_t dt, uint64_t i)
{
    return dt == GCKPT_DT_I32 ? static_cast<const int32_t *>(p)[i] : static_cast<const int64_t *>(p)[i];
}
__device__ __forceinline__ void sti(void *p, uint8_t dt, uint64_t i, int64_t v)
{
    if (dt == GCKPT_DT_I32) static_cast<int32_t *>(p)[i] = static_cast<int32_t>(v);
    else static_cast<int64_t *>(p)[i] = v;
}

// Grid for n elements with a grid-stride loop.
static inline unsigned grid_for(uint64_t n, unsigned block)
{
    uint64_t g = (n + block - 1) / block;
    if (g < 1) g = 1;
    if (g > 65535u * 16u) g = 65535u * 16u;
    return static_cast<unsigned>(g);
}

#define GRID_LOOP(i, n)                                                                             \
    for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < (n);       \
         i += static_cast<uint64_t>(gridDim.x) * blockDim.x)

// Deterministic block reductions (fixed tree order). blockDim.x must be a multiple of 32,
// at most 1024; scratch holds 32 values.
template <typename T> __device__ __forceinline__ T warp_sum(T v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, o));
    return v;
}
template <typename T> __device__ T block_sum(T v, T *scratch)
{
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) scratch[w] = v;
    __syncthreads();
    int nw = (blockDim.x + 31) >> 5;
    T r = threadIdx.x < static_cast<unsigned>(nw) ? scratch[threadIdx.x] : T(0);
    if (w == 0) r = warp_sum(r);
    if (threadIdx.x == 0) scratch[0] = r;
    __syncthreads();
    r = scratch[0];
    __syncthreads();
    return r;
}
__device__ inline float block_max(float v, float *scratch)
{
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) scratch[w] = v;
    __syncthreads();
    int nw = (blockDim.x + 31) >> 5;
    float r = threadIdx.x < static_cast<unsigned>(nw) ? scratch[threadIdx.x] : -INFINITY;
    if (w == 0) r = warp_max(r);
    if (threadIdx.x == 0) scratch[0] = r;
    __syncthreads();
    r = scratch[0];
    __syncthreads();
    return r;
}

// ---- the kernels' entry points (one translation unit each) ----------------------------------

// The primitives' kernels, rows of cuda_backend.cu's table: cuda_<kernel>_fwd / _bwd.
typedef gckpt_xstatus (*cuda_kernel_fn)(cuda_be *b, const gckpt_xcall *c);
#define CUDA_KERNEL_PAIR(name)                                                                      \
    gckpt_xstatus cuda_##name##_fwd(cuda_be *b, const gckpt_xcall *c);                             \
    gckpt_xstatus cuda_##name##_bwd(cuda_be *b, const gckpt_xcall *c)
// cuda_elem.cu
CUDA_KERNEL_PAIR(unary);
CUDA_KERNEL_PAIR(binary);
CUDA_KERNEL_PAIR(half);
CUDA_KERNEL_PAIR(split);
CUDA_KERNEL_PAIR(cat_pass);
CUDA_KERNEL_PAIR(layernorm);
CUDA_KERNEL_PAIR(mean);
CUDA_KERNEL_PAIR(embed);
CUDA_KERNEL_PAIR(logsoftmax);
CUDA_KERNEL_PAIR(nll);
// cuda_matmul.cu
CUDA_KERNEL_PAIR(linear);
CUDA_KERNEL_PAIR(grouped_linear);
CUDA_KERNEL_PAIR(qk);
CUDA_KERNEL_PAIR(pv);
// cuda_attn.cu
CUDA_KERNEL_PAIR(sdpa);
CUDA_KERNEL_PAIR(softmax);
CUDA_KERNEL_PAIR(transpose);
CUDA_KERNEL_PAIR(repeat_kv);
gckpt_xstatus cuda_bool_mask_fwd(cuda_be *b, const gckpt_xcall *c);
// cuda_moe.cu: sort, floordiv, histc and the inverse permutation make integers (no backward)
CUDA_KERNEL_PAIR(topk);
CUDA_KERNEL_PAIR(sum);
CUDA_KERNEL_PAIR(div);
gckpt_xstatus cuda_sort_fwd(cuda_be *b, const gckpt_xcall *c);
gckpt_xstatus cuda_floordiv_fwd(cuda_be *b, const gckpt_xcall *c);
gckpt_xstatus cuda_histc_fwd(cuda_be *b, const gckpt_xcall *c);
gckpt_xstatus cuda_invert_perm_fwd(cuda_be *b, const gckpt_xcall *c);
// cuda_sink.cu
CUDA_KERNEL_PAIR(cat_sink);
CUDA_KERNEL_PAIR(max_last);
CUDA_KERNEL_PAIR(drop_sink);
CUDA_KERNEL_PAIR(cat_halves);
gckpt_xstatus cuda_source(cuda_be *b, gckpt_source what, const gckpt_xcall *c, const int64_t *host);
gckpt_xstatus cuda_optim(cuda_be *b, const gckpt_optcall *c);
gckpt_xstatus cuda_nccl_attach(cuda_be *b, gckpt_comm *comm);
gckpt_xstatus cuda_nccl_collective(cuda_be *b, gckpt_coll op, gckpt_redop red, gckpt_xt send, gckpt_xt recv, int root);
gckpt_xstatus cuda_nccl_attach_group(cuda_be *b, gckpt_coll_group g, gckpt_comm *comm);
gckpt_xstatus cuda_nccl_collective_group(cuda_be *b, gckpt_coll_group g, gckpt_coll op, gckpt_redop red, gckpt_xt send,
                                         gckpt_xt recv);
// cuda_tp.cu: the backend's scratch, copy2d and embed_rows (tensor parallelism's vocabulary ops)
void cuda_tp_ops(gckpt_backend *be);
void cuda_cp_ops(gckpt_backend *be); // cuda_cp.cu: the ring attention's block ops
void cuda_nccl_destroy(cuda_be *b);
gckpt_xstatus cuda_add(cuda_be *b, gckpt_xt dst, gckpt_xt a, gckpt_xt x);
gckpt_xstatus cuda_fill(cuda_be *b, gckpt_xt t, gckpt_init how, float scale, uint64_t key);
gckpt_xstatus cuda_checksum(cuda_be *b, gckpt_xt t, uint64_t salt, uint64_t *hash, double *sumsq);
size_t cuda_checksum_scratch_bytes();

gckpt_xstatus cuda_dense_view(cuda_be *b, const gckpt_xt &v, void **out);



#endif
