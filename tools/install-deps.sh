#!/usr/bin/env bash
# Installs what gckpt needs to build and test on Debian 12 (run as root).
# cmake, a C compiler, cJSON, CMocka, OpenBLAS (the host executor), gnuplot (plots).
# The CUDA toolkit is optional: with nvcc on PATH the CUDA executor is built too.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
  cmake make gcc libc6-dev libcjson-dev libcmocka-dev libopenblas-dev gnuplot-nox >/dev/null
echo "gckpt dependencies installed"
