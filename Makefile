# The README's two commands: `make run` and `make test`. Both create .venv if missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test lint bench clean fault soak fuzz

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

# Bytecode for our sources, written even where PYTHONDONTWRITEBYTECODE is set: an editable
# install has none, and compiling on every start costs more than half of jobq's start-up.
.PHONY: bytecode
bytecode: $(STAMP)
	$(PY) -m compileall -q src >/dev/null

run: bytecode
	$(VENV)/bin/jobq up $(UP_ARGS)

lint: $(STAMP)
	$(PY) -m ruff check src tests bench
	$(PY) -m mypy

test: lint
	sh scripts/ensure-test-tools.sh
	$(PY) -m pytest -q

# The fault suite's long form (docs/fault.md): 400 kill rounds under sync=always, 150 under
# interval, every torn offset, more flips and Spark kills. JOBQ_FAULT_SEED replays a run.
fault: $(STAMP)
	JOBQ_FAULT_LONG=1 $(PY) -m pytest -q -p no:cacheprovider --timeout 3600 tests/fault

bench: bytecode
	$(PY) -m bench.run_all

# The long load and soak: 200 connections, 1,000,000 jobs a cycle, two cycles (~20-30 min);
# the short form is tests/load, part of `make test`. Writes bench/out/soak.md.
soak: bytecode
	$(PY) -m bench.soak $(SOAK_ARGS)

# Coverage-guided fuzzing of bytes -> parser -> dispatcher -> engine (atheris, the `fuzz`
# extra); not part of `make test`. Findings land in bench/out/fuzz-crash-*; see docs/fuzzing.md.
FUZZ_SECONDS ?= 120
fuzz: $(STAMP)
	$(PY) -m pip install -q -e '.[fuzz]'
	mkdir -p bench/out/fuzz-corpus
	$(PY) -m tests.fuzz.atheris_dispatch -max_total_time=$(FUZZ_SECONDS) \
		-artifact_prefix=bench/out/fuzz- bench/out/fuzz-corpus

clean:
	rm -rf $(VENV) .jobq .pytest_cache .mypy_cache .ruff_cache
