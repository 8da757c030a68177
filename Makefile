# The two commands of the README: `make demo` (the main job) and `make test` (the test suite).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The editable install picks up Python edits by itself; it is redone only when what it builds
# from changes: the package metadata (the version: src/opptune/__init__.py) or the C sources
# of the compiled extensions.
STAMP := $(VENV)/.opptune-installed
BUILD_INPUTS := pyproject.toml setup.py MANIFEST.in src/opptune/__init__.py \
	$(wildcard bench_suite/*.c bench_suite/*.h bench_suite/kernels/*.c bench_suite/kernels/*.h \
	daemon/models/*.c)

.PHONY: venv demo test bench check-arm check-arm-userland check-units clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(STAMP): $(PY) $(BUILD_INPUTS)
	$(PY) -m pip install -q -e '.[test]'
	touch $@

venv: $(STAMP)

demo: venv
	$(VENV)/bin/opptune demo $(DEMO_ARGS)

# The suite in TEST_WORKERS processes (pytest-xdist; 0 runs it in this one); most tests wait on
# the processes they start rather than compute, so more workers than cores pay. Then, alone, the
# tests marked quiet: they judge a measurement only an unloaded machine gives and skip under
# load, which the workers' own would make every time (5: none selected by PYTEST_ARGS)
# Bytecode is cached for the run (git ignores __pycache__) where the environment says
# PYTHONDONTWRITEBYTECODE (this project's machines do): the suite starts hundreds of Python
# processes (daemons, agents, opptune) on the same sources, each compiling them again, and
# each worker rewrote the asserts of every test module as it collected (8 s CPU, 3 s
# cached). One collection first caches those, which the workers, starting at once, would
# each make; its errors are the workers' to report.
TEST_WORKERS ?= 4
test: export PYTHONDONTWRITEBYTECODE =
test: venv
ifneq ($(TEST_WORKERS),0)
	$(PY) -m pytest -q --collect-only -p no:cacheprovider -m "not quiet" $(PYTEST_ARGS) \
		>/dev/null 2>&1 || true
endif
	$(PY) -m pytest -q -n $(TEST_WORKERS) -m "not quiet" $(PYTEST_ARGS)
	$(PY) -m pytest -q -m quiet $(PYTEST_ARGS) || [ $$? -eq 5 ]

# the benchmarks also compare with optuna's Bayesian optimisation (the bench extra)
$(VENV)/.opptune-bench: $(STAMP)
	$(PY) -m pip install -q -e '.[test,bench]'
	touch $@

bench: $(VENV)/.opptune-bench
	$(PY) benchmarks/run_all.py

# The agent installed as README's "On a board" says, on emulated Debian 12 ARM (root, mmdebstrap,
# qemu-user-static); the preflight says what is missing before the venv is built
ARCH ?= all
check-arm:
	$(PYTHON) tools/check_arm.py --arch $(ARCH) --preflight
	$(MAKE) -s --no-print-directory venv
	$(PY) tools/check_arm.py --arch $(ARCH) $(CHECK_ARM_ARGS)

# Only check-arm's userland (mmdebstrap: network, disk and emulated dpkg; no venv), built where
# the cache has none: .ci/run builds it so while the tests run
check-arm-userland:
	$(PYTHON) tools/check_arm.py --arch $(ARCH) --userland-only $(CHECK_ARM_ARGS)

# The units under a real systemd: Debian 12 containers booted by systemd-nspawn, installed as
# README's "Installing the units" says (root, systemd-container, mmdebstrap); the preflight
# says what is missing before the venv is built
check-units:
	$(PYTHON) tools/check_units.py --preflight
	$(MAKE) -s --no-print-directory venv
	$(PY) tools/check_units.py $(CHECK_UNITS_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info run
