# tabdp developer commands. `make demo` and `make test` work from a fresh clone.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test test-fast bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/tabdp demo

# Everything CI runs: the slow statistical tests and the Spark tests included; only the Spark
# re-runs of the whole frame suite (marker spark_full) are left out (CI's 30-minute budget)
test: $(STAMP)
	$(BIN)/python -m pytest -q -m "not spark_full"

# Local loop: everything but the slow statistical/numerical tests and the Spark tests (CI runs all)
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow and not spark"

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_release.py

clean:
	rm -rf $(VENV) out tabdp-demo .pytest_cache
