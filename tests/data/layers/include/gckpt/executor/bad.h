/* check_layers_cases: a public executor header includes the planner's (a violation). */
#include "gckpt/planner/plan_read.h"
