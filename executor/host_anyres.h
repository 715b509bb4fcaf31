/* LLaVA-NeXT's pack_image_features on the host (FINDINGS R-VLM-37): rows copied by the map
 * gckpt_anyres_pack gives, fp32 as the VLM bridge moves them. */
#ifndef GCKPT_EXEC_HOST_ANYRES_H
#define GCKPT_EXEC_HOST_ANYRES_H

#include <stdint.h>

/* out [images n, W]: image i's row k is feat's row i stride + src[k] ([images stride, W],
 * stride = tiles x patches per tile), or newline [W] where src[k] < 0. */
void host_anyres_pack(const float *feat, uint64_t images, uint64_t stride, const float *newline, const int64_t *src,
                      uint64_t n, uint64_t W, float *out);
/* Its backward: gfeat [images stride, W] is the gradient of feat (the rows no packed row
 * copies, unpadded away: zero), and gnewline [W] += the sum of the newline rows' gradients,
 * in row order. */
void host_anyres_unpack(const float *gout, uint64_t images, uint64_t stride, const int64_t *src, uint64_t n,
                        uint64_t W, float *gfeat, float *gnewline);

#endif
