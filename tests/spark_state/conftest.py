"""Fixtures of the Spark streaming checkpoint tests: the corpus (committed under tests/fixtures/spark) and helpers."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # spark_corpus, shared with bench/spark_streaming.py

# generator/ is the PySpark script (and model) that made the corpus, kept to regenerate it; not a test module
collect_ignore = ["generator"]
