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

start: install
	$(VENV)/bin/decide models
	$(VENV)/bin/decide run "My card was charged twice for order A-104. Please refund the duplicate." \
		--choice "Which department should handle this?" billing technical sales \
		--noul "Does the customer ask for a refund?"

lint: install
	$(PY) -m ruff check .

test: lint
	$(PY) -m pytest

bench: install
	$(PY) benchmarks/engine.py
