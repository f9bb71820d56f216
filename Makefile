# Developer entry points. Every target that needs tools runs scripts/bootstrap.sh first, which
# installs what is missing (apt, venv, pip, npm) and returns at once when nothing changed.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

VENV := .venv
BIN := $(VENV)/bin
PYTHON := $(BIN)/python
STATE_DIR ?= .state/devcluster

# Wall-clock budget for the whole pytest run (CI allows 90 minutes for all of .ci/run).
TEST_BUDGET_S ?= 3000
# The chaos soak (tests/soak): bounded in `make test`, long in `make soak`.
TEST_SOAK_OPS ?= 200
SOAK_OPS ?= 1000
SOAK_SEED ?= 1
PYTEST_ARGS ?=
# The suite runs in TEST_WORKERS processes (pytest-xdist), each with devclusters of its own instance
# (tests/conftest.py: its own loopback ranges and ports): on a 2-core machine three take about 15
# minutes of pytest where one took 33. TEST_WORKERS=0 runs it in this process, one test at a time.
TEST_WORKERS ?= 3

# Type-checked with --strict (setup.cfg [mypy]): the whole package, and the devcluster's pure modules
# (STRICT_DEVCLUSTER; its own distribution under devcluster/). Only those that exist are passed.
STRICT_PACKAGES := gpuworkspace_spawner
STRICT_DEVCLUSTER := $(wildcard $(foreach m,addresses selectors patching tables jsonpath rbac faults resources errors podsecurity protobody satokens saadmission,devcluster/gpuworkspace_devcluster/$(m).py))
MYPY_TARGETS := $(wildcard $(STRICT_PACKAGES)) $(STRICT_DEVCLUSTER)

BENCHMARKS := $(sort $(wildcard tests/benchmarks/bench_*.py))

.PHONY: help venv test soak lint bench docs demo clean

help:
	@echo "make demo   set everything up, then start devcluster + mock OIDC + JupyterHub on :8000"
	@echo "make test   set everything up, lint, then run the test suite (what CI runs via .ci/run)"
	@echo "make soak   the chaos soak at SOAK_OPS=1000 operations (make test runs it at 200)"
	@echo "make lint   ruff check, ruff format --check, import-linter contracts, mypy on the pure core"
	@echo "make bench  run every tests/benchmarks/bench_*.py, then print one Markdown table of them all"
	@echo "make docs   build the Sphinx docs into docs/_build/html (warnings are errors)"
	@echo "make venv   only set up: apt packages, .venv, pip install -e .[...] -e ./devcluster, npm ci"
	@echo "make clean  remove build outputs and caches (keeps .venv, node_modules and .state)"

venv:
	@bash scripts/bootstrap.sh

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache
	cd devcluster && ../$(BIN)/lint-imports --no-cache
	$(BIN)/mypy $(MYPY_TARGETS)

test: lint
	cd jupyterlab-extension && node_modules/.bin/jest --ci
	timeout --signal=INT --kill-after=60 $(TEST_BUDGET_S) \
		env GPUWS_SOAK_OPS=$(TEST_SOAK_OPS) GPUWS_SOAK_SEED=$(SOAK_SEED) \
		$(BIN)/pytest -p no:cacheprovider -q -m "not bench" --durations=10 \
		-n $(TEST_WORKERS) --dist loadscope $(PYTEST_ARGS) tests/

# Prints the counts (operations, faults, failed spawns and their reasons, disks, attachments, orphans).
soak: venv
	env GPUWS_SOAK_OPS=$(SOAK_OPS) GPUWS_SOAK_SEED=$(SOAK_SEED) \
		$(BIN)/pytest -p no:cacheprovider -q -s -m soak $(PYTEST_ARGS) tests/soak

# Every benchmark prints its own table and appends its headline rows to $GPUWS_BENCH_ROWS; then
# tests/benchmarks/report.py prints them as one Markdown table (docs/reference/benchmarks.md).
# BENCHMARKS="tests/benchmarks/bench_culler.py" runs a subset; BENCH_REPORT=docs/reference/benchmarks.md
# also writes the page; BENCH_LOCK=/tmp/gpuws-devcluster.lock runs each benchmark under flock
# (one devcluster per machine); BENCH_ROWS=FILE keeps the rows (JSON lines) instead of a temporary file.
BENCH_REPORT ?=
BENCH_ROWS ?=
BENCH_LOCK ?=
BENCH_COMMAND = make bench$(if $(filter command line,$(origin BENCHMARKS)), BENCHMARKS='$(BENCHMARKS)')$(if \
	$(BENCH_LOCK), BENCH_LOCK=$(BENCH_LOCK))$(if $(BENCH_REPORT), BENCH_REPORT=$(BENCH_REPORT))
bench: venv
	@if [ -z "$(BENCHMARKS)" ]; then echo "bench: no tests/benchmarks/bench_*.py yet"; exit 0; fi; \
	if [ -n "$(BENCH_ROWS)" ]; then rows="$(BENCH_ROWS)"; : > "$$rows"; \
	else rows=$$(mktemp -t gpuws-bench-rows.XXXXXX); trap 'rm -f "$$rows"' EXIT; fi; \
	rc=0; names=""; \
	for f in $(BENCHMARKS); do \
		mod=$$(basename "$$f" .py); names="$$names $$mod"; \
		echo "== $$mod"; \
		GPUWS_BENCH_ROWS="$$rows" $(if $(BENCH_LOCK),flock $(BENCH_LOCK)) $(PYTHON) -m tests.benchmarks.$$mod \
			|| { rc=$$?; echo "bench: $$mod exited with $$rc"; }; \
	done; \
	echo; echo "== all benchmarks"; \
	$(PYTHON) -m tests.benchmarks.report "$$rows" --expected $$names \
		--command "$(BENCH_COMMAND)" $(if $(BENCH_REPORT),--write $(BENCH_REPORT)); \
	exit $$rc

docs: venv
	$(BIN)/sphinx-build -W --keep-going -q -b html docs docs/_build/html
	@echo "docs: open docs/_build/html/index.html"

# The devcluster, the mock OIDC provider and JupyterHub, in the foreground until Ctrl-C
# (hub_config/demo.py; docs/tutorial/demo.md). DEMO_ARGS passes options, e.g. DEMO_ARGS="--port 8010".
DEMO_ARGS ?=
demo: venv
	$(PYTHON) hub_config/demo.py --state-dir $(STATE_DIR) $(DEMO_ARGS)

clean:
	rm -rf build dist docs/_build .mypy_cache .ruff_cache .pytest_cache .import_linter_cache *.egg-info \
		devcluster/build devcluster/dist
	find . -path ./.venv -prune -o -path ./node_modules -prune -o -name __pycache__ -type d -print0 | xargs -0 rm -rf
