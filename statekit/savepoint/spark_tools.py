"""`check`, `stats` and `diff` of Spark streaming checkpoints (the CLI's commands call these)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from statekit.errors import StatekitError
from statekit.savepoint.spark_checkpoint import SparkCheckpoint


@dataclass
class SparkCheckReport:
    """What `check_checkpoint` found: files and rows read, and one message per table that failed."""

    path: str
    batch: int
    files_checked: int = 0
    rows_checked: int = 0
    problems: list[tuple[str, str]] = field(default_factory=list)  # (operator/store, message)

    @property
    def ok(self) -> bool:
        return not self.problems


def check_checkpoint(sp: SparkCheckpoint) -> SparkCheckReport:
    """Read every table of every operator at the checkpoint's batch (checksums, records, SSTs, row decoding)."""
    report = SparkCheckReport(str(sp.path), sp.batch)
    for o in sp.spark_operators:
        for t in sp.tables(o.id):
            for p in range(o.num_partitions):
                try:
                    report.rows_checked += sp.keyed_table(o.id, store=t, partitions=[p]).num_rows
                    report.files_checked += len(sp.files_read(o.id, t, p))
                except StatekitError as exc:
                    report.problems.append((f"{o.id} ({o.name}) {t} partition {p}", str(exc)))
    return report


@dataclass
class TableStats:
    """Entries and bytes of one store or variable, per partition."""

    operator: int
    name: str
    table: str
    entries: list[int]
    bytes: list[int]

    @property
    def skew(self) -> float:
        """Largest partition's entries over the mean (1.0 = even)."""
        mean = sum(self.entries) / len(self.entries) if self.entries else 0
        return round(max(self.entries) / mean, 2) if mean else 0.0


def checkpoint_stats(sp: SparkCheckpoint) -> list[TableStats]:
    """Per operator and table: stored entries and the bytes of the files read, per state partition."""
    out = []
    for o in sp.spark_operators:
        for t in sp.tables(o.id):
            entries, sizes = [], []
            for p in range(o.num_partitions):
                entries.append(sp.keyed_table(o.id, store=t, partitions=[p]).num_rows)
                sizes.append(sum(f.stat().st_size for f in sp.files_read(o.id, t, p)))
            out.append(TableStats(o.id, o.name, t, entries, sizes))
    return out


@dataclass
class TableDiff:
    """Keys added, removed and changed in one table from A to B (keys as JSON text)."""

    operator: int
    table: str
    added: list[str]
    removed: list[str]
    changed: list[str]

    @property
    def same(self) -> bool:
        return not (self.added or self.removed or self.changed)


def diff_checkpoints(a: SparkCheckpoint, b: SparkCheckpoint) -> list[TableDiff]:
    """Per table present in both: keys added, removed and changed (a key's rows compared as a whole)."""
    out = []
    ops_b = {o.id for o in b.spark_operators}
    for o in a.spark_operators:
        if o.id not in ops_b:
            continue
        for t in a.tables(o.id):
            if t not in b.tables(o.id):
                continue
            ra, rb = _by_key(a, o.id, t), _by_key(b, o.id, t)
            out.append(TableDiff(o.id, t, sorted(set(rb) - set(ra)), sorted(set(ra) - set(rb)),
                                 sorted(k for k in set(ra) & set(rb) if ra[k] != rb[k])))
    return out


def _by_key(sp: SparkCheckpoint, op: int, table: str) -> dict[str, list[str]]:
    names = sp.shape(op, table).key.names
    out: dict[str, list[str]] = {}
    for r in sp.keyed_table(op, store=table).to_pylist():
        key = json.dumps({n: r[n] for n in names}, default=str, ensure_ascii=False)
        out.setdefault(key, []).append(json.dumps({k: v for k, v in r.items() if k not in names and k != "partition_id"},
                                                  default=str, sort_keys=True))
    return {k: sorted(v) for k, v in out.items()}


def parse_key(text: str, sp: SparkCheckpoint, op: Any) -> dict[str, Any]:
    """A key given on the command line: JSON (an object of the key's fields, or a list) or a bare value."""
    fields = sp._grouping_key(sp.spark_operator(op)).names
    try:
        value = json.loads(text)
    except ValueError:
        value = text
    if isinstance(value, dict):
        return value
    if isinstance(value, list):
        return dict(zip(fields, value))
    return {fields[0]: value} if len(fields) == 1 else dict(zip(fields, [value]))
