/* gckpt-run's CUDA diagnoses, decided from error codes and versions (no GPU needed):
 * no driver at all is said as such (cudaGetDeviceCount reports "CUDA driver version is
 * insufficient" then too), an old driver, no GPU, and a binary without code for the
 * GPU's architecture. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "gckpt/executor/cuda_diag.h"

static void unavailable(void **state)
{
    (void)state;
    char b[512];
    gckpt_cuda_why_unavailable(GCKPT_CUDA_ERR_INSUFFICIENT_DRIVER, 0, 0, 13000,
                               "CUDA driver version is insufficient for CUDA runtime version", b, sizeof b);
    assert_string_equal(b, "no NVIDIA driver is installed (or it cannot be loaded): the CUDA backend needs one");
    gckpt_cuda_why_unavailable(GCKPT_CUDA_ERR_INSUFFICIENT_DRIVER, 0, 12020, 13000, "x", b, sizeof b);
    assert_string_equal(b, "the NVIDIA driver supports CUDA 12.2 but this gckpt-run was built with CUDA 13.0: update the driver");
    gckpt_cuda_why_unavailable(GCKPT_CUDA_ERR_NO_DEVICE, 0, 13000, 13000, "no CUDA-capable device is detected", b,
                               sizeof b);
    assert_string_equal(b, "the NVIDIA driver (CUDA 13.0) sees no GPU");
    gckpt_cuda_why_unavailable(0, 0, 13000, 13000, "no error", b, sizeof b);
    assert_string_equal(b, "the NVIDIA driver (CUDA 13.0) sees no GPU");
    gckpt_cuda_why_unavailable(999, 0, 13000, 13000, "unknown error", b, sizeof b);
    assert_string_equal(b, "unknown error");
}

static void architecture(void **state)
{
    (void)state;
    char b[512] = "";
    assert_true(gckpt_cuda_has_code(0, "NVIDIA H100 80GB HBM3", 9, 0, "80-real,89-real,90", b, sizeof b));
    assert_string_equal(b, "");
    assert_false(gckpt_cuda_has_code(GCKPT_CUDA_ERR_NO_KERNEL_IMAGE, "NVIDIA A100-SXM4-80GB", 8, 0, "90", b, sizeof b));
    assert_string_equal(b, "this gckpt-run has no code for NVIDIA A100-SXM4-80GB (compute capability 8.0): it was "
                           "built for CUDA architectures 90; rebuild with -DCMAKE_CUDA_ARCHITECTURES=80 (or =native "
                           "on this machine)");
    assert_false(gckpt_cuda_has_code(GCKPT_CUDA_ERR_INVALID_DEVICE_FUNCTION, "NVIDIA L40S", 8, 9, "90", b, sizeof b));
    assert_non_null(strstr(b, "(compute capability 8.9)"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(unavailable), cmocka_unit_test(architecture)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
