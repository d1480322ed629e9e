# Two commands for a fresh clone: `make serve` and `make test`. Both set up .venv/ first.
VENV   := .venv
STAMP  := $(VENV)/.setup-done
PORT   ?= 8000
MODEL  ?= SmolLM2-135M-Instruct-1bit

.PHONY: setup serve test lint release bench-overhead laya-model laya-eval clean

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt lemonade_onebit/pins.json scripts/setup.sh
	bash scripts/setup.sh
	@touch $@

serve: setup
	$(VENV)/bin/1bit serve -m $(MODEL) --port $(PORT)

test: setup
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS)

# The guards CI runs before the tests: lint, type check, import contracts (no cycle, the layers).
lint: setup
	$(VENV)/bin/ruff check lemonade_onebit tests bench scripts
	$(VENV)/bin/mypy
	$(VENV)/bin/python scripts/check_imports.py
	$(VENV)/bin/1bit pins sync --check

bench-overhead: setup
	$(VENV)/bin/python bench/overhead.py $(BENCH_ARGS)

# The Laya classifier: rebuild the data set and retrain the shipped model (deterministic).
laya-model: setup
	$(VENV)/bin/python data/laya/build.py
	$(VENV)/bin/python -m lemonade_onebit.laya.train

laya-eval: setup
	$(VENV)/bin/1bit route --eval data/laya/eval.json

# sdist and wheel of this commit, byte-reproducible, with SHA256SUMS and changes.json, in
# dist/release/<tag>/; nothing is uploaded.
release: setup
	$(VENV)/bin/python scripts/release.py

clean:
	rm -rf $(VENV)
