/* libFuzzer target: the device-profile reader (gckpt_device_parse) on arbitrary bytes.
 * A profile is either refused with one line naming the file, or accepted with every
 * figure finite, positive where the model divides by it, and in its documented range. */
#include <math.h>

#include "fuzz_common.h"
#include "gckpt/core/device.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_text(data, size);
    gckpt_device d;
    gckpt_err err = {{0}};
    if (!gckpt_device_parse("fuzz.json", text, &d, &err)) {
        fuzz_check_error(&err, "fuzz.json");
    } else {
        FUZZ_CHECK(memchr(d.name, 0, sizeof d.name) != NULL, "name unterminated");
        FUZZ_CHECK(d.memory_bytes >= (1u << 20), "memory_bytes %llu", (unsigned long long)d.memory_bytes);
        const double pos[] = {d.tflops_fp32, d.tflops_tf32, d.tflops_bf16, d.tflops_fp16,
                              d.matmul_efficiency, d.hbm_bytes_per_s, d.hbm_efficiency,
                              d.h2d_bytes_per_s, d.d2h_bytes_per_s};
        for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
            FUZZ_CHECK(isfinite(pos[i]) && pos[i] > 0, "figure %zu = %g", i, pos[i]);
        FUZZ_CHECK(d.matmul_efficiency <= 1 && d.hbm_efficiency <= 1, "efficiency above 1");
        FUZZ_CHECK(d.alloc_round_bytes >= 1 && d.segment_round_bytes >= 1, "rounding of 0 bytes");
    }
    free(text);
    return 0;
}
