#!/usr/bin/env bash
# `1bit serve` on the cpu route alone vs with every layer on two `1bit rpc-worker`s on loopback
# (standing in for two hosts), prompt and decode tok/s, a fresh serve per config and round,
# interleaved (`1bit bench`). Results: bench/results/rpc-cpu.json; the table goes to
# docs/multi-host.md. Stops the workers however it ends.
set -euo pipefail
cd "$(dirname "$0")/.."
ONEBIT=.venv/bin/1bit
MODEL=${MODEL:-SmolLM2-135M-Instruct-1bit}
P1=${P1:-50152}; P2=${P2:-50153}
pids=()
cleanup() { for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
trap 'exit 143' TERM INT HUP
for p in "$P1" "$P2"; do
  $ONEBIT rpc-worker --device cpu --threads 1 --port "$p" 2>/dev/null &
  pids+=($!)
done
for _ in $(seq 100); do $ONEBIT devices --rpc "127.0.0.1:$P1,127.0.0.1:$P2" >/dev/null 2>&1 && break; sleep 0.1; done
# In the background and waited for, so a stop of this script stops it too.
$ONEBIT bench -m "$MODEL" --config "local=--device cpu" \
  --config "rpc=--device cpu --rpc 127.0.0.1:$P1,127.0.0.1:$P2" \
  --rounds "${ROUNDS:-3}" --prompt-reps "${PROMPT_REPS:-2}" --decode-reps "${DECODE_REPS:-1}" \
  --decode-tokens 128 --json bench/results/rpc-cpu.json &
pids+=($!)
wait "${pids[-1]}"
