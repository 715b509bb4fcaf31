#!/usr/bin/env bash
# Builds gckpt with AddressSanitizer + UndefinedBehaviorSanitizer (-DGCKPT_SANITIZE=ON:
# every UB check aborts) in build-asan/ and runs the whole CTest suite with
# LeakSanitizer on. Any sanitizer report fails a test, and so the script.
#   tests/ci/sanitize.sh            clang when installed (its UBSan also checks float
#                                   to integer conversions), else gcc
#   CC=gcc tests/ci/sanitize.sh     a given compiler
#   SANITIZE_CUDA=1 tests/ci/sanitize.sh   keep the CUDA backend when nvcc is found (by
#                                   default it is left out: ASan needs special options
#                                   with the CUDA runtime, and no test here needs a GPU)
# Bounded: about 8 minutes on 2 cores (build and tests), the build killed after 10, the tests after 15.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ -z "${CC:-}" ]; then
  if command -v clang >/dev/null && echo 'int main(void){return 0;}' |
     clang -x c -fsanitize=address,undefined -o /dev/null - 2>/dev/null; then CC=clang; else CC=gcc; fi
fi
start=$(date +%s)
cuda=(-DCMAKE_CUDA_COMPILER=NOTFOUND)
if [ -n "${SANITIZE_CUDA:-}" ]; then cuda=(); fi
cmake -S . -B build-asan -DGCKPT_SANITIZE=ON -DCMAKE_C_COMPILER="$CC" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${cuda[@]}" >/dev/null
timeout 600 cmake --build build-asan -j2 >/dev/null
export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1:detect_invalid_pointer_pairs=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export LSAN_OPTIONS=report_objects=1
timeout 900 ctest --test-dir build-asan --output-on-failure -j2 --timeout 240 -LE docs
echo "sanitize.sh: ASan+UBSan+LSan ($CC): all tests passed in $(( $(date +%s) - start )) s"
