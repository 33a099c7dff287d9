# Set-up is part of every target: a fresh machine needs only Python 3.11, Java 17 and `make`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: demo test test-all bench

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	rm -f $(VENV)/.installed-* && touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/statekit demo --out demo-output

test: $(STAMP)
	$(PY) -m pytest tests statekit

test-all: $(STAMP)
	$(PY) -m pytest tests statekit -m ''

bench: $(STAMP)
	for b in bench/*.py; do $(PY) $$b || exit 1; done
