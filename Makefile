# Bifrost: two commands. `make demo` runs the staged rollout demo; `make test` runs the tests.
# `make test-fast` runs, in about a minute, every test that needs no Temporal dev server (docs/testing.md).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PYTEST := $(PY) -m pytest -q -p no:cacheprovider
# pytest-xdist workers for `make test`; each starts its own dev servers. They mostly wait on timers and the
# servers, so more workers than cores pays (measured on 2 cores in docs/testing.md). 0 runs in one process.
TEST_WORKERS ?= 4

.PHONY: demo test test-fast lint bench install clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/bifrost demo

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

test: lint
	$(PYTEST) -n $(TEST_WORKERS) --dist load

# No lint, no dev server, no browser: the unit tests and the ones that start a process or component of their own.
test-fast: $(STAMP)
	$(PYTEST) -n 2 -m "not server and not ui"

bench: $(STAMP)
	$(PY) benchmarks/orchestration.py
	$(PY) benchmarks/judge_quality.py
	$(PY) benchmarks/judge_speed.py
	$(PY) benchmarks/report_render.py

clean:
	rm -rf $(VENV) .bifrost
