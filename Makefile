VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install test demo bench docs docs-check clean

install: $(STAMP)

# PyTorch too, so that tests/test_torch_wrap.py runs (pyzyme[torch]). Pinned: 2.13.0 is the
# release whose CPU-only wheel this kind of machine keeps (pip's find-links), which pip takes
# for this pin; an unpinned torch is PyPI's CUDA build, several GB for nothing here.
$(STAMP): pyproject.toml Makefile
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# the MPI extra where its wheels install (tests/test_mpi.py skips, saying why, elsewhere)
	$(PY) -m pip install --quiet -e '.[test,jax,mpi]' || $(PY) -m pip install --quiet -e '.[test,jax]'
	$(PY) -m pip install --quiet 'torch==2.13.0'
	touch $(STAMP)

# The suite as shards (tests/shards.py): short pytest processes, JOBS at a time, so that the
# code each compiles (never freed by the JIT) goes with it. JOBS=1: one at a time.
JOBS ?= 2

test: install
	$(VENV)/bin/lint-imports --no-cache
	$(PY) tests/shards.py --jobs $(JOBS)

# The demo needs pyzyme alone (numba, llvmlite, numpy): not the test extras (scipy, ziglang, ...)
# unless make install has put them there already.
DEMO_STAMP := $(VENV)/.installed-demo

$(DEMO_STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	test $(STAMP) -nt pyproject.toml || $(PY) -m pip install --quiet -e .
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(PY) -m pyzyme demo

bench: install
	$(PY) benchmarks/run_all.py

# The documentation site, built into docs/_build/html (open docs/_build/html/index.html): Sphinx
# with warnings as errors; the gallery's examples run as it builds (docs/examples/plot_*.py).
DOCS_STAMP := $(VENV)/.installed-docs

$(DOCS_STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet -e '.[docs]'
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	$(PY) -m sphinx -b html -W --keep-going -q docs docs/_build/html

# Every page of the built site loaded in headless Chromium (apt-get install chromium): it
# renders, its local assets load, the gallery's images load, the search finds "gradient".
docs-check: docs
	$(PY) docs/check_site.py docs/_build/html

clean:
	rm -rf $(VENV) build *.egg-info docs/_build docs/gallery docs/sg_execution_times.rst
