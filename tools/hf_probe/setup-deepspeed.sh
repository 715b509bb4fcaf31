#!/usr/bin/env bash
# Adds the optional DeepSpeed stack (requirements-deepspeed.txt) to tools/hf_probe/.venv.
# DeepSpeed 0.19.8 ships as an sdist: it is built here without its CUDA/C++ ops
# (DS_BUILD_OPS=0). At first use deepspeed.init_distributed JIT-compiles its CPU
# communication op (deepspeed_shm_comm_op) with g++ and ninja (a few seconds, cached in
# ~/.cache/torch_extensions); the probe runs it once before measuring.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
[ -x "$here/.venv/bin/python" ] || "$here/setup.sh"
pip="$here/.venv/bin/python -m pip"
$pip install $(grep -v -E '^(#|$|deepspeed==)' "$here/requirements-deepspeed.txt")
DS_BUILD_OPS=0 $pip install --no-deps --no-build-isolation "$(grep -E '^deepspeed==' "$here/requirements-deepspeed.txt")"
command -v g++ >/dev/null || { echo "setup-deepspeed.sh: g++ is needed for DeepSpeed's JIT-built ops" >&2; exit 1; }
DS_ACCELERATOR=cpu "$here/.venv/bin/python" -c 'import deepspeed; print("deepspeed", deepspeed.__version__)'
