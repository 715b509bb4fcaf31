/* The checkpointed layers of each tower (gckpt/core/towers.h): the one layer-mode rule
 * (step.h's cursor, HF's i % every_n == 0) applied at the layers' module-order indices. */
#include "gckpt/core/towers.h"

#include "gckpt/core/step.h"

uint64_t gckpt_tower_module_index(const uint64_t *towers, size_t t, uint64_t layer)
{
    uint64_t k = layer;
    for (size_t i = 0; i < t; i++) k += towers[i];
    return k;
}

size_t gckpt_tower_checkpointed(uint32_t every_n, const uint64_t *towers, size_t t, uint64_t *out, size_t max)
{
    size_t n = 0;
    if (!every_n) return 0;
    gckpt_mode_cursor c = gckpt_mode_cursor_at(every_n, false, gckpt_tower_module_index(towers, t, 0));
    for (uint64_t i = 0; i < towers[t]; i++, gckpt_mode_cursor_up(&c)) {
        if (gckpt_mode_cursor_mode(&c) == GCKPT_LAYER_PLAIN) continue;
        if (n < max) out[n] = i;
        n++;
    }
    return n;
}
