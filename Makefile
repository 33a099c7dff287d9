# Set-up is part of every target: a fresh machine needs only Python 3.11, Java 17 and `make`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: demo lint test test-quick test-versions test-extended bench

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# setuptools' notes about editable installs are for packagers, not for someone running make
	PYTHONWARNINGS=ignore $(PY) -m pip install -q -e '.[dev]'
	rm -f $(VENV)/.installed-* && touch $(STAMP)

# --replace writes over an earlier demo's output only (marked, nothing else added); anything else
# at demo-output is refused, never deleted.
demo: $(STAMP)
	$(VENV)/bin/statekit demo --out demo-output --replace
	@echo "The statekit command is $(VENV)/bin/statekit (or: . $(VENV)/bin/activate; statekit --help)"

# Lint and type habits, configured in pyproject.toml: ruff (imports, docstrings) and mypy over statekit
# and tests/typing. mypy's cache (.mypy_cache) makes a re-run after a small change take seconds.
lint: $(STAMP)
	$(VENV)/bin/ruff check statekit cli tests bench
	$(VENV)/bin/mypy

# The whole suite, `slow` failure-injection runs included, after lint; the Flink lines between the
# 1.20, 2.0 and 2.3 boundaries (`every_version`: four more JVM builds) run in `make test-versions`.
test: lint
	$(PY) -m pytest tests statekit -m 'not every_version and not extended'

# Real-Flink restores and Spark reads of the Flink lines 1.18, 1.19, 2.1 and 2.2 (what `make test` leaves out).
test-versions: $(STAMP)
	$(PY) -m pytest tests -m every_version

# Heavier real-engine cases beyond each acceptance point's core (`extended`): the ten-minute fuzz run, the file-source restore,
# SQL restores of more corpus cases, every table of the SQL types fixture through Spark, Spark reads of every
# corpus case on S3, every Spark streaming checkpoint repartitioned both ways and restarted by Spark.
test-extended: $(STAMP)
	$(PY) -m pytest tests -m extended

# Everything but the suites marked `slow` (pytest's default, see pyproject.toml), after lint.
test-quick: lint
	$(PY) -m pytest tests statekit

bench: $(STAMP)
	for b in bench/*.py; do $(PY) $$b || exit 1; done
