/* OpenBLAS loaded on demand, single-threaded, after a headroom check (executor/host_blas.h). */
#define _GNU_SOURCE /* setenv, RTLD_* */
#include "host_blas.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gckpt/executor/host_memory.h"

typedef void (*sgemm_fn)(enum CBLAS_ORDER, enum CBLAS_TRANSPOSE, enum CBLAS_TRANSPOSE, blasint, blasint, blasint, float,
                         const float *, blasint, const float *, blasint, float, float *, blasint);
static sgemm_fn p_sgemm;
static int (*p_threads)(void);
static bool warm;
static uint64_t loaded_bytes;

/* The thread count the user asked for, 0 when none. */
static int env_threads(void)
{
    static const char *const names[] = {"OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        const char *v = getenv(names[i]);
        int n = v ? atoi(v) : 0;
        if (n > 0) return n;
    }
    return 0;
}

int host_blas_threads(void)
{
    if (p_threads) return p_threads();
    int n = env_threads();
    return n > 0 ? n : 1;
}

/* Its code and data are mapped too: a load measured here took 38 MiB beyond the buffer
 * with one thread, 46 MiB with two (VmSize before and after host_blas_ready). */
#define BLAS_CODE_BYTES ((uint64_t)64 << 20)

uint64_t host_blas_pending_bytes(void)
{
    return warm ? 0 : (uint64_t)host_blas_threads() * GCKPT_BLAS_BUFFER_BYTES + BLAS_CODE_BYTES;
}

uint64_t host_blas_loaded_bytes(void) { return loaded_bytes; }

bool host_blas_ready(gckpt_err *err)
{
    if (warm) return true;
    if (!env_threads()) setenv("OPENBLAS_NUM_THREADS", "1", 1); /* read by OpenBLAS when it loads */
    /* its buffers are private mappings: they count against RLIMIT_AS and RLIMIT_DATA at
     * once, whether touched or not */
    gckpt_host_mem m;
    gckpt_host_memory(&m);
    uint64_t need = host_blas_pending_bytes(), room = m.as_left < m.data_left ? m.as_left : m.data_left;
    if (need > room) {
        gckpt_seterr(err,
                     "out of memory: OpenBLAS needs %llu MiB of address space (%d buffer%s of %llu MiB and its code), "
                     "%s leaves %llu MiB",
                     (unsigned long long)(need >> 20), host_blas_threads(), host_blas_threads() > 1 ? "s" : "",
                     (unsigned long long)(GCKPT_BLAS_BUFFER_BYTES >> 20), m.as_left <= m.data_left ? "RLIMIT_AS" : "RLIMIT_DATA",
                     (unsigned long long)(room >> 20));
        return false;
    }
    uint64_t before = gckpt_self_status_bytes("VmSize");
    if (!p_sgemm) {
        void *h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            gckpt_seterr(err, "cannot load OpenBLAS (libopenblas.so.0): %s", dlerror());
            return false;
        }
        p_sgemm = (sgemm_fn)dlsym(h, "cblas_sgemm");
        *(void **)&p_threads = dlsym(h, "openblas_get_num_threads");
        if (!p_sgemm) {
            gckpt_seterr(err, "OpenBLAS (libopenblas.so.0) has no cblas_sgemm");
            return false;
        }
    }
    /* a product large enough to take OpenBLAS's buffer path (small ones skip it) */
    enum { N = 256 };
    float *a = calloc((size_t)3 * N * N, sizeof *a);
    if (!a) {
        gckpt_seterr(err, "out of memory warming up OpenBLAS");
        return false;
    }
    p_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1.0f, a, N, a + N * N, N, 0.0f, a + 2 * N * N, N);
    free(a);
    uint64_t after = gckpt_self_status_bytes("VmSize");
    loaded_bytes = after > before ? after - before : 0;
    warm = true;
    return true;
}

void host_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha,
                const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    if (!warm) {
        fprintf(stderr, "gckpt: host_sgemm before host_blas_ready (a bug)\n");
        abort();
    }
    p_sgemm(order, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
