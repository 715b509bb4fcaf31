/* The host backend's ops for tensor parallelism's vocabulary-parallel ops (executor.h:
 * scratch, copy2d, embed_rows; interp_tp.c calls them). Scratch is plain heap memory, not
 * counted, as interp_tp.c's temporaries were before they went through the backend. */
#include <stdlib.h>
#include <string.h>

#include "host_num.h"
#include "host_ops.h"

static gckpt_xstatus h_scratch(gckpt_backend *be, uint64_t bytes, void **out)
{
    *out = bytes + 1 <= SIZE_MAX ? malloc((size_t)bytes + 1) : NULL;
    if (*out) return GCKPT_XS_OK;
    gckpt_seterr(&be->err, "out of host memory for %llu bytes of scratch", (unsigned long long)bytes);
    return GCKPT_XS_OOM;
}

static void h_scratch_free(gckpt_backend *be, void *p)
{
    (void)be;
    free(p);
}

static gckpt_xstatus h_copy2d(gckpt_backend *be, void *dst, uint64_t dpitch, const void *src, uint64_t spitch,
                              uint64_t width, uint64_t height)
{
    (void)be;
    for (uint64_t i = 0; i < height; i++) memcpy((char *)dst + i * dpitch, (const char *)src + i * spitch, (size_t)width);
    return GCKPT_XS_OK;
}

static gckpt_xstatus h_embed_rows(gckpt_backend *be, gckpt_xt out, gckpt_xt tab, gckpt_xt ids, uint64_t lo, uint64_t vocab)
{
    uint64_t W = ids.n ? out.n / ids.n : 0, rows = W ? tab.n / W : 0;
    if (ids.dt != GCKPT_DT_I64 || (ids.n && (out.n % ids.n || tab.n % W))) {
        gckpt_seterr(&be->err, "embedding lookup: %llu ids, %llu outputs and a table of %llu do not agree",
                     (unsigned long long)ids.n, (unsigned long long)out.n, (unsigned long long)tab.n);
        return GCKPT_XS_ERROR;
    }
    for (uint64_t k = 0; k < ids.n; k++) {
        int64_t id = ((const int64_t *)ids.p)[k];
        if (id < 0 || (uint64_t)id >= vocab) {
            gckpt_seterr(&be->err, "id %lld outside the vocabulary", (long long)id);
            return GCKPT_XS_ERROR;
        }
        bool mine = (uint64_t)id >= lo && (uint64_t)id < lo + rows;
        for (uint64_t j = 0; j < W; j++) st(&out, k * W + j, mine ? ld(&tab, ((uint64_t)id - lo) * W + j) : 0.0f);
    }
    return GCKPT_XS_OK;
}

void host_tp_ops(gckpt_backend *be)
{
    be->scratch = h_scratch;
    be->scratch_free = h_scratch_free;
    be->copy2d = h_copy2d;
    be->embed_rows = h_embed_rows;
}
