#!/usr/bin/env bash
# Wheels the GPU machine lacks for `import repo_lens` and the GPU tests (issue 18). Its image
# (/work/.library/device/KINDS.md: Python 3.12, x86-64) has torch, transformers, safetensors,
# tokenizers, numpy, scipy, accelerate, pandas, pyarrow, einops, jaxtyping, pytest and the rest of
# what `import transformer_lens` loads, except these four. Run here, then carry .whl (git-ignored):
#   bash bench/gpu_wheels.sh
# and begin the device command with
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo /.whl/ >> .git/info/exclude
for wheel in transformer-lens==4.3.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl "$wheel" 2>&1 | grep -v "is ignored: it is neither" || true
done
ls -la .whl
