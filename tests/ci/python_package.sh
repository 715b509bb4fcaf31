#!/usr/bin/env bash
# The Python package as a user installs it: a fresh virtual environment, pip install ./python
# (scikit-build-core builds the C planner into gckpt._native), then the package's tests
# against the installed copy, run from outside the checkout so that `import gckpt` is the
# installed one. With the Hugging Face stack (tools/hf_probe/.venv, made by
# tools/hf_probe/setup.sh) the tests that need torch / transformers / peft run there too.
# Needs build/gckpt-plan (README's test command builds it) to compare with the CLI.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export GCKPT_PLAN=$root/build/gckpt-plan
[ -x "$GCKPT_PLAN" ] || { echo "python_package.sh: build gckpt-plan first (cmake --build build)" >&2; exit 2; }
unset GCKPT_DATA_DIR PYTHONPATH

python3 -m venv "$tmp/venv"
start=$(date +%s)
"$tmp/venv/bin/pip" install --quiet "$root/python"
echo "python_package.sh: pip install ./python took $(( $(date +%s) - start )) s"
cd "$tmp"
"$tmp/venv/bin/python" -c 'import gckpt, sys; print("gckpt", gckpt.__version__, "from", gckpt.__file__)'
"$tmp/venv/bin/python" -m unittest discover -s "$root/python/tests" -p 'test_plan*.py'

hf=$root/tools/hf_probe/.venv/bin/python
if [ -x "$hf" ]; then
  # the installed package (same Python) on the path of the venv that has transformers
  site=$("$tmp/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  PYTHONPATH=$site "$hf" -m unittest discover -s "$root/python/tests" -v
else
  echo "python_package.sh: no tools/hf_probe/.venv: the tests that need transformers were not run (bash tools/hf_probe/setup.sh)" >&2
  exit 1
fi
