#include "gckpt/core/dtype.h"

const char *const gckpt_dtype_names[GCKPT_NDT] = {"bool", "uint8", "int8", "nf4", "bf16", "fp16", "fp32", "int64", "int32"};
