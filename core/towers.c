/* The checkpointed layers of each tower (gckpt/core/towers.h): the one layer-mode rule
 * (step.h's cursor, HF's i % every_n == 0) applied at the layers' module-order indices. */
#include "gckpt/core/towers.h"

#include <string.h>

#include "gckpt/core/step.h"

uint64_t gckpt_tower_module_index(const uint64_t *towers, size_t t, uint64_t layer)
{
    uint64_t k = layer;
    for (size_t i = 0; i < t; i++) k += towers[i];
    return k;
}

const char *const gckpt_ckpt_towers_names[GCKPT_NCKPT_TOWERS] = {"all", "text", "vision"};

int gckpt_ckpt_towers_from(const char *s)
{
    for (int i = 0; s && i < GCKPT_NCKPT_TOWERS; i++)
        if (!strcmp(s, gckpt_ckpt_towers_names[i])) return i;
    return -1;
}

/* the tower a text / vision choice keeps (all: none singled out) */
static size_t chosen(uint8_t which) { return which == GCKPT_CKPT_TOWERS_TEXT ? 1 : 0; }

size_t gckpt_tower_checkpointed(uint32_t every_n, uint8_t which, const uint64_t *towers, size_t t, uint64_t *out,
                                size_t max)
{
    size_t n = 0;
    if (!every_n || (which != GCKPT_CKPT_TOWERS_ALL && t != chosen(which))) return 0;
    /* all: the module-order index; a chosen tower counts from its own layer 0 */
    uint64_t first = which == GCKPT_CKPT_TOWERS_ALL ? gckpt_tower_module_index(towers, t, 0) : 0;
    gckpt_mode_cursor c = gckpt_mode_cursor_at(every_n, false, first);
    for (uint64_t i = 0; i < towers[t]; i++, gckpt_mode_cursor_up(&c)) {
        if (gckpt_mode_cursor_mode(&c) == GCKPT_LAYER_PLAIN) continue;
        if (n < max) out[n] = i;
        n++;
    }
    return n;
}

uint64_t gckpt_towers_counted(uint8_t which, const uint64_t *towers)
{
    return which == GCKPT_CKPT_TOWERS_ALL ? towers[0] + towers[1] : towers[chosen(which)];
}
