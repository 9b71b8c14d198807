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

test: install
	$(PY) -m pytest -q

demo: install
	$(PY) -m pyzyme demo

bench: install
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) build *.egg-info
