# The two commands of the README: `make demo` (the main job) and `make test` (the test suite).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: venv demo test bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

venv: $(PY)
	$(PY) -m pip install -q -e '.[test]'

demo: venv
	$(VENV)/bin/opptune demo $(DEMO_ARGS)

test: venv
	$(PY) -m pytest -q $(PYTEST_ARGS)

bench: venv
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) build *.egg-info run
