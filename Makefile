# Two entry points for a fresh machine: `make demo` and `make test`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup model demo test test-threads test-gevent lint bench

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -e '.[test,local]'
	touch $(STAMP)

setup: $(STAMP)

model: setup
	$(BIN)/python -m runtime.local_model fetch

demo: model
	$(BIN)/firstgate run examples/chat.yml --input query="Name three colours of the rainbow."

test-threads: model
	FIRSTGATE_E2E_REQUIRED=1 $(BIN)/python -m pytest -q tests

test-gevent: model
	FIRSTGATE_GEVENT=1 $(BIN)/python tests/run_gevent.py -q tests/integration

test: lint test-threads test-gevent

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: model
	$(BIN)/python -m bench.run_all
