# Bifrost: two commands. `make demo` runs the staged rollout demo; `make test` runs the tests.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test lint bench install clean

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
	$(PY) -m pytest -q -p no:cacheprovider

bench: $(STAMP)
	$(PY) benchmarks/orchestration.py
	$(PY) benchmarks/judge_quality.py
	$(PY) benchmarks/judge_speed.py
	$(PY) benchmarks/report_render.py

clean:
	rm -rf $(VENV) .bifrost
