# The two quick-start commands are `make start` and `make test` (see README.md).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install start test lint bench

# A virtual environment with the project and its test tools; llama-cpp-python builds from
# source the first time (a few minutes; pip caches the wheel afterwards).
install: $(STAMP)

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# The embedded default: SQLite under the data directory, an in-process worker, 127.0.0.1:8000.
start: install
	$(VENV)/bin/decide serve

lint: install
	$(PY) -m ruff check .

test: lint
	$(PY) -m pytest

bench: install
	$(PY) benchmarks/engine.py
