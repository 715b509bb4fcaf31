/* check_layers_cases: the executor includes the planner (a violation), core and its own
 * private header (allowed). */
#include "gckpt/core/plan_read.h"
#include "gckpt/planner/plan.h"
#include "interp.h"
#include <stdio.h>
