# The two quick-start commands are `make start` and `make test` (see README.md).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install start test unit lint bench gpu-check

# Python may write its bytecode caches (`__pycache__`, git-ignored) even where the environment
# says not to (PYTHONDONTWRITEBYTECODE, set on some hosts): without them every process the
# suite starts (each pytest worker, every `decide serve`, `decide worker` and runner child)
# compiles the project's modules again, and pytest rewrites every test module again. Importing
# the worker's, the embedded service's and the runner's modules took 1.5 s without them and
# 1.25 s with them (2 cores, 2026-12-06).
unexport PYTHONDONTWRITEBYTECODE

# A virtual environment with the whole service (the `server` extra) and the test tools.
# llama-cpp-python is built from source for a portable CPU baseline by ops/build-llama.sh (a few
# minutes the first time; the wheel is cached per baseline in ~/.cache/decide/wheels), never for
# the build host's CPU.
install: $(STAMP)

$(STAMP): pyproject.toml ops/build-llama.sh
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	ops/build-llama.sh $(PY)
	$(PY) -m pip install --quiet -e '.[server,test]'
	touch $(STAMP)

# The embedded default: SQLite under the data directory, an in-process worker, 127.0.0.1:8000,
# with keys on: the first start writes one fresh key to KEYS_FILE and prints it once.
KEYS_FILE ?= $(or $(XDG_DATA_HOME),$(HOME)/.local/share)/decide/api_keys
start: install
	$(VENV)/bin/decide keys ensure $(KEYS_FILE)
	DECIDE_API_KEYS_FILE=$(KEYS_FILE) $(VENV)/bin/decide serve

# ruff, then the dependency rules of pyproject.toml's [tool.importlinter] (README, "Layout")
lint: install
	$(PY) -m ruff check .
	$(PY) -m tests.support.lint_imports

# Stops at once, naming what to install, where a tool or service the tests use is missing.
# The suite runs in TEST_PROCESSES processes (pytest-xdist), each test file whole in one of
# them (its module's servers started once); every test makes its own databases, ports and
# folders, so they are independent. The files go out in the order tests/conftest.py gives
# them (longest first, by the seconds tests/file_seconds.json records); xdist would otherwise
# re-sort them by their test counts.
# The few that measure a latency against a bound (the `serial` marker) run after the others,
# alone, so that what they time is the service; only the files that mark one are collected
# for them (collecting all 150 files took 3.4 s more).
TEST_PROCESSES ?= 3
SERIAL_FILES = $(sort $(shell grep -rl --include='test_*.py' 'pytest.mark.serial' tests))
test: lint
	$(PY) -m tests.preflight
	$(PY) -m pytest -n $(TEST_PROCESSES) --dist loadfile --no-loadscope-reorder -m "not serial"
	$(PY) -m pytest -m serial $(SERIAL_FILES)

# The in-process tiers alone (tests/unit and tests/app, pytest's `unit` and `app` markers):
# seconds, for while you work.
unit: install
	$(PY) -m pytest tests/unit tests/app -q -n 2

bench: install
	$(PY) benchmarks/engine.py

# On a CUDA host: the CUDA variant of llama-cpp-python (ops/build-llama.sh with DECIDE_GPU=cuda,
# cached like the CPU builds) in a virtual environment of its own, then the same measurements
# on the GPU and on the CPU cores, as one table and gpu_check.json (README, "Running on a GPU").
GPU_VENV ?= .venv-gpu
gpu-check:
	test -x $(GPU_VENV)/bin/python || python3 -m venv $(GPU_VENV)
	$(GPU_VENV)/bin/python -m pip install --quiet --upgrade pip
	DECIDE_GPU=cuda ops/build-llama.sh $(GPU_VENV)/bin/python
	$(GPU_VENV)/bin/python -m pip install --quiet -e '.[server]'
	$(GPU_VENV)/bin/python benchmarks/gpu_check.py --json gpu_check.json
