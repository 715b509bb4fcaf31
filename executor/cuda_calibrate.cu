// gckpt-run --calibrate: measure this GPU and write a device profile (gckpt.device/1)
// the planner accepts: GEMM throughput at the model's shapes for bf16, fp16, fp32 and
// tf32, device copy bandwidth, pinned host <-> device bandwidth, and the memory a context
// plus cuBLAS takes.
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_common.cuh"
#include "gckpt/util/atomic_file.h"
#include "gckpt/formats/device_json.h"

namespace {

__global__ void k_init(void *p, uint8_t dt, uint64_t n, uint64_t key)
{
    GRID_LOOP(i, n) stx(p, dt, i, (2.0f * gckpt_rng_unit(key, i) - 1.0f) * 0.05f);
}

struct Cal {
    gckpt_err *err;
    FILE *log;
    cudaStream_t st;
    cublasHandle_t h;
    cudaEvent_t a, b;
};

#define CK(call)                                                                                    \
    do {                                                                                            \
        cudaError_t e_ = (call);                                                                    \
        if (e_ != cudaSuccess) {                                                                    \
            gckpt_seterr(c->err, "%s:%d: %s: %s", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            return false;                                                                           \
        }                                                                                           \
    } while (0)
#define CKB(call)                                                                                   \
    do {                                                                                            \
        cublasStatus_t s_ = (call);                                                                 \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                          \
            gckpt_seterr(c->err, "%s:%d: %s: %s", __FILE__, __LINE__, #call, cublasGetStatusString(s_)); \
            return false;                                                                           \
        }                                                                                           \
    } while (0)

// seconds of `iters` runs of fn after two warm-up runs
template <typename F> bool timed(Cal *c, int iters, F fn, double *sec)
{
    for (int i = 0; i < 2; i++)
        if (!fn()) return false;
    CK(cudaEventRecord(c->a, c->st));
    for (int i = 0; i < iters; i++)
        if (!fn()) return false;
    CK(cudaEventRecord(c->b, c->st));
    CK(cudaEventSynchronize(c->b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, c->a, c->b));
    *sec = 1e-3 * ms;
    return *sec > 0;
}

// best TFLOP/s of C[M x N] = A[M x K] B[N x K]^T over the two shapes of a transformer MLP
bool gemm_tflops(Cal *c, cudaDataType t, cublasComputeType_t ct, uint8_t dt, uint64_t M, uint64_t H, uint64_t I, double *out)
{
    size_t es = gckpt_dtype_size(static_cast<gckpt_dtype>(dt));
    uint64_t big = H > I ? H : I;
    void *A = nullptr, *B = nullptr, *C = nullptr;
    CK(cudaMalloc(&A, M * big * es));
    CK(cudaMalloc(&B, H * I * es));
    CK(cudaMalloc(&C, M * big * es));
    k_init<<<grid_for(M * big, 256), 256, 0, c->st>>>(A, dt, M * big, 1);
    k_init<<<grid_for(H * I, 256), 256, 0, c->st>>>(B, dt, H * I, 2);
    CK(cudaGetLastError());
    double best = 0;
    const uint64_t shapes[2][2] = {{I, H}, {H, I}}; /* (N, K): up/gate projection, down projection */
    for (int s = 0; s < 2; s++) {
        int m = static_cast<int>(M), n = static_cast<int>(shapes[s][0]), k = static_cast<int>(shapes[s][1]);
        float alpha = 1.0f, beta = 0.0f;
        double sec = 0;
        bool ok = timed(c, 10, [&]() {
            return cublasGemmEx(c->h, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, B, t, k, A, t, k, &beta, C, t, n, ct,
                                CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS;
        }, &sec);
        if (!ok) {
            if (!c->err->msg[0]) gckpt_seterr(c->err, "cublasGemmEx failed while calibrating");
            cudaFree(A);
            cudaFree(B);
            cudaFree(C);
            return false;
        }
        double tf = 2.0 * m * static_cast<double>(n) * k * 10 / sec / 1e12;
        best = tf > best ? tf : best;
    }
    CK(cudaFree(A));
    CK(cudaFree(B));
    CK(cudaFree(C));
    *out = best;
    return true;
}

bool copy_rate(Cal *c, void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, double *out)
{
    double sec = 0;
    if (!timed(c, 5, [&]() { return cudaMemcpyAsync(dst, src, bytes, kind, c->st) == cudaSuccess; }, &sec)) {
        gckpt_seterr(c->err, "copy failed while calibrating");
        return false;
    }
    *out = static_cast<double>(bytes) * 5 / sec;
    return true;
}

bool measure(Cal *c, const gckpt_device *base, uint64_t H, uint64_t I, uint64_t T, gckpt_device *d)
{
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    size_t fr = 0, tot = 0;
    CK(cudaDeviceSynchronize());
    CK(cudaMemGetInfo(&fr, &tot));
    uint64_t context = static_cast<uint64_t>(tot - fr);
    memset(d, 0, sizeof *d);
    memcpy(d->name, prop.name, sizeof d->name - 1); /* GPU names are far shorter than either buffer */
    d->name[sizeof d->name - 1] = 0;
    d->memory_bytes = tot;
    double bf16, fp16, fp32, tf32;
    if (!gemm_tflops(c, CUDA_R_16BF, CUBLAS_COMPUTE_32F, GCKPT_DT_BF16, T, H, I, &bf16) ||
        !gemm_tflops(c, CUDA_R_16F, CUBLAS_COMPUTE_32F, GCKPT_DT_F16, T, H, I, &fp16) ||
        !gemm_tflops(c, CUDA_R_32F, CUBLAS_COMPUTE_32F, GCKPT_DT_F32, T, H, I, &fp32) ||
        !gemm_tflops(c, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, GCKPT_DT_F32, T, H, I, &tf32))
        return false;
    fprintf(c->log, "gckpt-run: GEMM %llu x %llu x %llu: bf16 %.1f, fp16 %.1f, tf32 %.1f, fp32 %.1f TFLOP/s\n",
            static_cast<unsigned long long>(T), static_cast<unsigned long long>(H), static_cast<unsigned long long>(I), bf16,
            fp16, tf32, fp32);
    const size_t bytes = 512ull << 20;
    void *x = nullptr, *y = nullptr, *hp = nullptr;
    CK(cudaMalloc(&x, bytes));
    CK(cudaMalloc(&y, bytes));
    CK(cudaHostAlloc(&hp, bytes, cudaHostAllocDefault));
    memset(hp, 1, bytes);
    double d2d, h2d, d2h;
    bool ok = copy_rate(c, y, x, bytes, cudaMemcpyDeviceToDevice, &d2d) && copy_rate(c, x, hp, bytes, cudaMemcpyHostToDevice, &h2d) &&
              copy_rate(c, hp, x, bytes, cudaMemcpyDeviceToHost, &d2h);
    cudaFree(x);
    cudaFree(y);
    cudaFreeHost(hp);
    if (!ok) return false;
    d2d *= 2; /* a device copy reads and writes every byte */
    fprintf(c->log, "gckpt-run: device copy %.0f GB/s, pinned host to device %.1f GB/s, device to host %.1f GB/s, context %.0f MiB\n",
            d2d / 1e9, h2d / 1e9, d2h / 1e9, static_cast<double>(context) / (1 << 20));
    if (base) {
        /* keep the base profile's peaks; the efficiencies become measured / peak */
        d->tflops_bf16 = base->tflops_bf16;
        d->tflops_fp16 = base->tflops_fp16;
        d->tflops_fp32 = base->tflops_fp32;
        d->tflops_tf32 = base->tflops_tf32;
        d->matmul_efficiency = fmin(1.0, fmax(0.01, bf16 / base->tflops_bf16));
        d->hbm_bytes_per_s = base->hbm_bytes_per_s;
        d->hbm_efficiency = fmin(1.0, fmax(0.01, d2d / base->hbm_bytes_per_s));
        d->workspace_bytes = base->workspace_bytes;
        d->alloc_round_bytes = base->alloc_round_bytes;
        d->segment_round_bytes = base->segment_round_bytes;
    } else {
        /* the measured rates are the peaks */
        d->tflops_bf16 = bf16;
        d->tflops_fp16 = fp16;
        d->tflops_fp32 = fp32;
        d->tflops_tf32 = tf32;
        d->matmul_efficiency = 1.0;
        d->hbm_bytes_per_s = d2d;
        d->hbm_efficiency = 1.0;
        d->workspace_bytes = 32ull << 20; /* PyTorch's cuBLAS workspace on Hopper */
        d->alloc_round_bytes = 512;
        d->segment_round_bytes = 2ull << 20;
    }
    d->h2d_bytes_per_s = h2d;
    d->d2h_bytes_per_s = d2h;
    d->context_bytes = context;
    return true;
}

char *profile_json(const gckpt_device *d, const char *note)
{
    cJSON *o = gckpt_device_to_json(d);
    cJSON_AddStringToObject(o, "source", note);
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    return text;
}

} // namespace

extern "C" bool gckpt_cuda_calibrate(int device, const gckpt_device *base, uint64_t hidden, uint64_t inter, uint64_t tokens,
                                     const char *out_path, FILE *log, gckpt_err *err)
{
    Cal cal = {err, log ? log : stderr, nullptr, nullptr, nullptr, nullptr};
    Cal *c = &cal;
    uint64_t H = hidden ? hidden : 4096, I = inter ? inter : 14336, T = tokens ? tokens : 4096;
    if (H > (1u << 16) || I > (1u << 17) || T > (1u << 16)) {
        gckpt_seterr(err, "calibration shapes too large (hidden %llu, intermediate %llu)", static_cast<unsigned long long>(H),
                     static_cast<unsigned long long>(I));
        return false;
    }
    gckpt_device d;
    bool ok = false;
    char *text = nullptr;
    CK(cudaSetDevice(device));
    CK(cudaFree(nullptr));
    CK(cudaStreamCreateWithFlags(&cal.st, cudaStreamNonBlocking));
    CK(cudaEventCreate(&cal.a));
    CK(cudaEventCreate(&cal.b));
    CKB(cublasCreate(&cal.h));
    CKB(cublasSetStream(cal.h, cal.st));
    ok = measure(c, base, H, I, T, &d);
    if (ok) {
        text = profile_json(&d, "gckpt-run --calibrate");
        gckpt_device check;
        char label[600];
        snprintf(label, sizeof label, "%s (calibrated)", out_path);
        ok = text && gckpt_device_parse(label, text, &check, err) && gckpt_write_file_atomic(out_path, text, err);
    }
    free(text);
    cublasDestroy(cal.h);
    cudaEventDestroy(cal.a);
    cudaEventDestroy(cal.b);
    cudaStreamDestroy(cal.st);
    return ok;
}
