# Everything runs from a local virtual environment created on first use, with pinned dependencies.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: install demo test lint format clean

$(STAMP): pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c requirements.lock -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)  ## Create .venv and install the package with pinned dependencies.

demo: $(STAMP)  ## Run the offline demo.
	$(BIN)/python examples/quickstart.py

test: $(STAMP)  ## Run the test suite.
	$(BIN)/python -m pytest -q

lint: $(STAMP)  ## Ruff (lint + format check) and pyright strict.
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/pyright pydantic_ai_compaction

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
