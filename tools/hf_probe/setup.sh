#!/usr/bin/env bash
# Creates tools/hf_probe/.venv with the pinned torch + transformers (PyPI only).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
py="${PYTHON:-python3}"
if [ ! -x "$here/.venv/bin/python" ]; then
  "$py" -m venv "$here/.venv"
fi
"$here/.venv/bin/python" -m pip install --upgrade --quiet pip
"$here/.venv/bin/python" -m pip install -r "$here/requirements.txt"
"$here/.venv/bin/python" -m pip install --no-deps -r "$here/requirements-loss.txt"
"$here/.venv/bin/python" -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
