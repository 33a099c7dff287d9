"""The README's Flink compatibility table is exactly what tests/flink/compat_table.py renders from the recorded results."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _table():
    spec = importlib.util.spec_from_file_location("compat_table", ROOT / "tests" / "flink" / "compat_table.py")
    assert spec is not None and spec.loader is not None
    if "compat_table" not in sys.modules:  # dataclasses look their module up there
        module = importlib.util.module_from_spec(spec)
        sys.modules["compat_table"] = module
        spec.loader.exec_module(module)
    return sys.modules["compat_table"]


def test_readme_table_agrees_with_the_recorded_results():
    table = _table()
    text = table.README.read_text()
    assert table.update_readme(text, table.render(table.load())) == text, (
        "README.md's compatibility table differs from tests/flink/compat_results.json: run "
        "python tests/flink/compat_table.py")


def test_every_corpus_line_has_recorded_reads():
    """A Flink line with a corpus but no recorded read outcome would show as untested: record again."""
    table = _table()
    fixtures = ROOT / "tests" / "fixtures" / "flink"
    lines = {".".join(p.name.split(".")[:2]) for p in fixtures.iterdir() if re.fullmatch(r"\d+\.\d+\.\d+", p.name)}
    recorded = {r.line for r in table.load() if r.op == "read"}
    assert lines <= recorded, f"no recorded reads for Flink {sorted(lines - recorded)}"


def test_a_failed_or_missing_cell_is_shown_as_such():
    table = _table()
    records = [table.Record("t::a", "1.20", "read", "rocksdb", "native savepoint", "passed"),
               table.Record("t::b", "1.20", "read", "rocksdb", "native savepoint", "failed"),
               table.Record("t::c", "2.0", "write", "hashmap", "canonical savepoint", "passed")]
    rendered = table.render(records)
    row_120 = next(r for r in rendered.splitlines() if r.startswith("| 1.20 |"))
    row_20 = next(r for r in rendered.splitlines() if r.startswith("| 2.0 |"))
    assert "❌ 1/2 failed" in row_120 and row_120.endswith("see upgrade |")
    assert "✅ 1" in row_20 and row_20.count("—") == len(table.COLUMNS) - 1 and row_20.endswith("n/a |")
