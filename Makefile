# The README's two commands: `make run` and `make test`. Both create .venv if missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test lint bench clean fault soak fuzz

$(STAMP): pyproject.toml setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	JOBQ_COMPILE=0 $(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

# Then the hot path is compiled in place (setup.py, mypyc; jobq.build lists the modules),
# with the venv's mypy, as `make lint` type-checks; anything failing leaves pure Python and
# one warning line. An edit of a hot module compiles it again.
HOT_MODULES := $(shell sed -n 's/^    "\(jobq\.[a-z_.]*\)",$$/\1/p' src/jobq/build.py)
HOT_SOURCES := $(patsubst %,src/%.py,$(subst .,/,$(HOT_MODULES)))
COMPILED := $(VENV)/.compiled

$(COMPILED): $(STAMP) $(HOT_SOURCES)
	$(PY) setup.py -q build_ext --inplace
	touch $(COMPILED)

# Bytecode for our sources, written even where PYTHONDONTWRITEBYTECODE is set: an editable
# install has none, and compiling on every start costs more than half of jobq's start-up.
.PHONY: bytecode
bytecode: $(COMPILED)
	$(PY) -m compileall -q src >/dev/null

run: bytecode
	$(VENV)/bin/jobq up $(UP_ARGS)

lint: $(COMPILED)
	$(PY) -m ruff check src tests bench
	$(PY) -m mypy

# The suite runs on the compiled hot path; then the engine, protocol and replay property
# tests again on the pure-Python modules (JOBQ_PURE_PYTHON=1), so that both stay correct.
PURE_TESTS := $(addprefix tests/engine/test_,deadlines.py deadlines_compaction.py joblist.py \
	queues.py replay_decode.py replay_indexes.py replay_property.py add_runs.py memory.py \
	ready_replay.py) \
	$(addprefix tests/cmdlog/test_,runs.py fast_paths.py) \
	$(addprefix tests/server/test_,protocol_fuzz.py server_fuzz.py extension_fuzz.py \
	clean_replay.py) tests/golden

# Bytecode for the tests too: they start jobq and their helpers (tests.fault.injector...)
# in hundreds of subprocesses, each of which would otherwise compile what it imports.
test: lint bytecode
	sh scripts/ensure-test-tools.sh
	$(PY) -m compileall -q tests >/dev/null
	$(PY) -m pytest -q
	JOBQ_PURE_PYTHON=1 $(PY) -m pytest -q $(PURE_TESTS)

# The fault suite's long form (docs/fault.md): 400 kill rounds under sync=always, 150 under
# interval, every torn offset, more flips and Spark kills, a power cut at every fsync of a
# recording. JOBQ_FAULT_SEED replays a run.
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
