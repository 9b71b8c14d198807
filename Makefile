VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install test demo bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,jax]'
	touch $(STAMP)

# The suite as shards (tests/shards.py): short pytest processes, JOBS at a time, so that the
# code each compiles (never freed by the JIT) goes with it. JOBS=1: one at a time.
JOBS ?= 2

test: install
	$(VENV)/bin/lint-imports --no-cache
	$(PY) tests/shards.py --jobs $(JOBS)

demo: install
	$(PY) -m pyzyme demo

bench: install
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) build *.egg-info
