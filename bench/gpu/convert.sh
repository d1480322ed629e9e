#!/usr/bin/env bash
# `1bit convert` on the GPU machine: how long --rotate (to F32) and --hadamard-q4-0 take by model
# size with numpy on the CPU and with torch on the GPU, and whether both write the same bytes
# (bench/convert_speed.py: random-weight F16 GGUFs in a Qwen3-4B-class shape). The GPU machine
# has numpy, torch and tqdm but no gguf and reaches no registry, so bring the pinned gguf wheel
# first (here, where PyPI is reachable):
#   python3 -m pip download --no-deps --only-binary=:all: -d .whl gguf==0.19.0
# then run it from the repo root there with `.whl` carried; results go to $OUT:
#   LAYERS=2,8 bash bench/gpu/convert.sh
# LAYERS: the sizes, as layer counts of the 36-layer shape (2: 1.0 B values to rotate, with the
# untied head; 8: 1.6 B; 36: 4.4 B). DEVICES=cuda times the GPU alone (for sizes where numpy
# would not finish in one call). The package runs from the working tree: nothing is installed
# but gguf.
set -euo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi -L | tee "$OUT/gpu.txt"
nproc | sed 's/^/cores: /' | tee -a "$OUT/gpu.txt"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/gguf-0.19.0-*.whl
export PYTHONPATH=/tmp/site
python3 -c 'import importlib.metadata as m, numpy, torch
print("gguf", m.version("gguf"), "numpy", numpy.__version__, "torch", torch.__version__,
      "cuda", torch.cuda.is_available())' | tee -a "$OUT/gpu.txt"
PYTHONUNBUFFERED=1 python3 bench/convert_speed.py --layers "${LAYERS:-2,8}" \
  --devices "${DEVICES:-cpu,cuda}" --work /tmp/convert-speed --json "$OUT/convert-speed.json" \
  2>&1 | tee "$OUT/convert-speed.log"
