# Everything runs from a local virtual environment created on first use, with pinned dependencies.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: install demo quickstart costsim test soak bench realmodel lint format clean docs

$(STAMP): pyproject.toml bench/pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c requirements.lock -e '.[dev,postgres]' -e ./bench
	touch $(STAMP)

install: $(STAMP)  ## Create .venv and install the package with pinned dependencies.

demo: $(STAMP)  ## The incident-audit benchmark on the offline reference model: tables, sensitivity grid, plots in out/.
	$(BIN)/pai-compaction bench incident --sizes 8 20 --seeds 101-103 --variants owner lowercase scope \
		--sensitivity-budgets 300 800 1500 --players silent notes --jobs 2 --out out --overwrite

quickstart: $(STAMP)  ## Six strategies on one small tool loop, side by side.
	$(BIN)/python examples/quickstart.py

costsim: $(STAMP)  ## Reasoning-retention cost policies on a cached prefix.
	$(BIN)/pai-compaction costsim

test: $(STAMP)  ## Run the test suite.
	$(BIN)/python -m pytest -q

SOAK_EXAMPLES ?= 100000

soak: $(STAMP)  ## Invariants under generated histories and fuzzed replies: SOAK_EXAMPLES per strategy.
	PAC_EXAMPLES=$(SOAK_EXAMPLES) $(BIN)/python -m pytest -q -p no:randomly tests/test_invariants.py \
		-k keeps_the_invariants --hypothesis-show-statistics

bench: $(STAMP)  ## Overhead against harness at up to 1M tokens, recall latency, memory, and the savings table.
	$(BIN)/python -m pydantic_ai_compaction_bench.perf

URL ?=
MODEL ?= openai:local

realmodel: $(STAMP)  ## Prompt contracts against an OpenAI-compatible server: make realmodel URL=http://127.0.0.1:8080/v1 MODEL=openai:NAME
	@if [ -z "$(URL)" ]; then \
		echo 'realmodel: skipped, no server given (make realmodel URL=http://127.0.0.1:8080/v1 MODEL=openai:NAME)'; \
	else \
		$(BIN)/python -m pydantic_ai_compaction_bench.contracts --base-url '$(URL)' --model '$(MODEL)' --out out/realmodel.md; \
	fi

lint: $(STAMP)  ## Ruff (lint + format check) and pyright strict.
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/pyright pydantic_ai_compaction bench/pydantic_ai_compaction_bench

DOCS_STAMP := $(VENV)/.docs-stamp

# The `docs` dependency group of pyproject.toml, read with tomllib: the pinned pip predates `pip install --group`.
$(DOCS_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['dependency-groups']['docs']))" > $(VENV)/docs-requirements.txt
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c requirements.lock -r $(VENV)/docs-requirements.txt
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)  ## The documentation site in site/ (mkdocs-material; API reference from the docstrings), strict.
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis out site
