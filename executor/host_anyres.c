/* LLaVA-NeXT's pack_image_features and its backward on the host (host_anyres.h): copies
 * and, for the newline's gradient, a sum in row order (torch's expand backward sums the
 * same rows; the order may differ, within fp32 rounding). */
#include "host_anyres.h"

#include <string.h>

void host_anyres_pack(const float *feat, uint64_t images, uint64_t stride, const float *newline, const int64_t *src,
                      uint64_t n, uint64_t W, float *out)
{
    for (uint64_t i = 0; i < images; i++)
        for (uint64_t k = 0; k < n; k++) {
            const float *from = src[k] < 0 ? newline : feat + (i * stride + (uint64_t)src[k]) * W;
            memcpy(out + (i * n + k) * W, from, sizeof *out * W);
        }
}

void host_anyres_unpack(const float *gout, uint64_t images, uint64_t stride, const int64_t *src, uint64_t n,
                        uint64_t W, float *gfeat, float *gnewline)
{
    memset(gfeat, 0, sizeof *gfeat * images * stride * W);
    for (uint64_t i = 0; i < images; i++)
        for (uint64_t k = 0; k < n; k++) {
            const float *g = gout + (i * n + k) * W;
            if (src[k] < 0)
                for (uint64_t c = 0; c < W; c++) gnewline[c] += g[c];
            else
                memcpy(gfeat + (i * stride + (uint64_t)src[k]) * W, g, sizeof *g * W);
        }
}
