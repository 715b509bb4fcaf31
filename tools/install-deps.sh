#!/usr/bin/env bash
# Installs what gckpt needs to build and test on Debian 12 (run as root).
# cmake, a C compiler, cJSON, CMocka, libcurl (gckpt-plan's Hub model ids), OpenBLAS (the
# host executor), gnuplot (plots);
# clang with its sanitizer/libFuzzer runtime and valgrind for the hardening checks;
# OpenMPI (gckpt-run runs a multi-rank plan as `mpirun -np N gckpt-run ...`); python3 for the
# docs tests (tools/mdlint.py, tools/docs_examples.py: standard library only) and, with its
# headers, venv and pip, the Python package (python/: pip install ./python builds it);
# chromium for the dashboard's tests (tests/dash: headless, on the generated pages), with
# DejaVu named (fontconfig would take any of several fonts; the screenshots use this one).
# The CUDA toolkit is optional: with nvcc on PATH the CUDA executor is built too.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
  cmake make gcc libc6-dev libcjson-dev libcmocka-dev libcurl4-openssl-dev libopenblas-dev gnuplot-nox python3 \
  python3-dev python3-venv python3-pip \
  clang libclang-rt-14-dev valgrind openmpi-bin libopenmpi-dev chromium fonts-dejavu-core >/dev/null
echo "gckpt dependencies installed"
