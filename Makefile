VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install test demo bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# Two pytest workers (pytest-xdist), a test file each at a time: on 2 cores each compiles with
# LLVM while the other does. Every worker keeps the code it compiled (MCJIT never frees it),
# so the two together hold about what one process running every test would, plus one
# interpreter (~250 MB). JOBS=0: one process.
JOBS ?= 2

test: install
	$(PY) -m pytest -q -n $(JOBS) --dist loadfile

demo: install
	$(PY) -m pyzyme demo

bench: install
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) build *.egg-info
