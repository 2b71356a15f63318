# Everything runs from a local virtual environment created on first use, with pinned dependencies.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
PIP := python -m pip --quiet --disable-pip-version-check
# `--group dev` (PEP 735 dependency groups) needs pip >= 25.1; a new venv starts with the interpreter's bundled pip.
PIP_VERSION ?= 26.3
# The lowest pydantic-ai-slim this library supports: what requirements.lock pins, with pydantic-ai-harness.
LOWEST_SLIM ?= 2.62.0

.PHONY: install demo quickstart costsim test test-newest wheel-check soak bench realmodel lint format lock clean docs

$(STAMP): pyproject.toml bench/pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/$(PIP) install 'pip==$(PIP_VERSION)'
	$(BIN)/$(PIP) install -c requirements.lock -e '.[harness,postgres,testing]' --group dev -e ./bench
	touch $(STAMP)

install: $(STAMP)  ## Create .venv and install the package, its extras, the dev group and the bench, pinned.

demo: $(STAMP)  ## The incident-audit benchmark on the offline reference model: tables, sensitivity grid, plots in out/.
	$(BIN)/pai-compaction bench incident --sizes 8 20 --seeds 101-103 --variants owner lowercase scope \
		--sensitivity-budgets 300 800 1500 --players silent notes --jobs 2 --out out --overwrite

quickstart: $(STAMP)  ## Six strategies on one small tool loop, side by side.
	$(BIN)/python examples/quickstart.py

costsim: $(STAMP)  ## Reasoning-retention cost policies on a cached prefix.
	$(BIN)/pai-compaction costsim

test: $(STAMP)  ## Run the test suite (lowest supported pydantic-ai-slim, with harness).
	$(BIN)/python -m pytest -q

test-newest:  ## The suite on the newest pydantic-ai-slim on the registry, without harness (in .venv-newest).
	PYTHON=$(PYTHON) PIP_VERSION=$(PIP_VERSION) bash .ci/newest.sh test

wheel-check:  ## Build the wheel, install it next to the newest pydantic-ai-slim, run a Fork agent (in .venv-wheel).
	PYTHON=$(PYTHON) PIP_VERSION=$(PIP_VERSION) bash .ci/newest.sh wheel

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

# The `docs` dependency group of pyproject.toml (PEP 735).
$(DOCS_STAMP): $(STAMP) pyproject.toml
	$(BIN)/$(PIP) install -c requirements.lock --group docs
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)  ## The documentation site in site/ (mkdocs-material; API reference from the docstrings), strict.
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

lock:  ## Regenerate requirements.lock: LOWEST_SLIM with harness, everything else resolved anew.
	rm -rf $(VENV)-lock
	$(PYTHON) -m venv $(VENV)-lock
	$(VENV)-lock/bin/$(PIP) install 'pip==$(PIP_VERSION)'
	$(VENV)-lock/bin/$(PIP) install -e '.[harness,postgres,testing]' --group dev -e ./bench \
		'pydantic-ai-slim==$(LOWEST_SLIM)'
	$(VENV)-lock/bin/python -m pip freeze --exclude-editable > requirements.lock
	rm -rf $(VENV)-lock

clean:
	rm -rf $(VENV) $(VENV)-newest $(VENV)-wheel .pytest_cache .ruff_cache .hypothesis out dist site
