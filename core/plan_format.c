/* What a plan file holds (include/gckpt/core/plan_format.h): the warnings' messages are
 * owned by the plan or plan file that holds them. */
#include "gckpt/core/plan_format.h"

#include <stdlib.h>

void gckpt_warnings_free(gckpt_warning *w, size_t *n)
{
    for (size_t i = 0; i < *n; i++) {
        free(w[i].message);
        w[i].message = NULL;
    }
    *n = 0;
}
