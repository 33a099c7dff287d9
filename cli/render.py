"""Rich renderings of savepoint metadata, rows and check reports for the CLI."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from statekit.errors import StateTypeError
from statekit.savepoint import CheckReport, Savepoint


def summary_line(sp: Savepoint) -> str:
    return (
        f"[bold]{sp.path}[/]  {sp.kind} #{sp.checkpoint_id}  job={sp.job_name or '-'}  "
        f"format v{sp.manifest.format_version}  {len(sp.operators)} operator(s)"
    )


def human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def operators_table(sp: Savepoint) -> Table:
    t = Table(title="operators")
    for col in ("uid", "uid hash", "parallelism", "key type", "files", "size"):
        t.add_column(col, overflow="fold", no_wrap=col == "uid hash")
    for op in sp.operators:
        t.add_row(op.uid or "-", op.uid_hash, f"{op.parallelism} / {op.max_parallelism}",
                  op.key_type or "-", str(len(op.files)), human_bytes(op.total_bytes))
    return t


def states_table(sp: Savepoint) -> Table:
    t = Table(title="states")
    for col in ("operator", "state", "kind", "type"):
        t.add_column(col, overflow="fold")
    for op in sp.operators:
        for s in op.keyed_states:
            t.add_row(op.display_name, s.name, f"keyed {s.kind}", s.type + (" (pickled)" if s.pickled else ""))
        for s in op.operator_states:
            shape = f"map<{s.key_type},{s.type}>" if s.redistribution == "broadcast" else f"list<{s.type}>"
            t.add_row(op.display_name, s.name, f"operator {s.redistribution}", shape)
    return t


def rows_table(rows: list[dict[str, Any]], columns: list[str], masked: set[str], *, title: str) -> Table:
    t = Table(title=title)
    for c in columns:
        t.add_column(c)
    for r in rows:
        t.add_row(*("•••" if c in masked and r.get(c) is not None else repr(r.get(c)) for c in columns))
    return t


def problems_table(report: CheckReport) -> Table:
    t = Table(title=f"{report.path}: {len(report.problems)} problem(s)")
    for c in ("kind", "file", "problem"):
        t.add_column(c)
    for p in report.problems:
        t.add_row(p.kind, p.path, p.message)
    return t


def parse_key(text: str, key_type: str | None) -> Any:
    """Parse a key given on the command line as the operator's key type."""
    if key_type in ("bigint", "int", "smallint", "tinyint"):
        try:
            return int(text)
        except ValueError:
            raise StateTypeError(f"key {text!r} is not an integer, but the key type is {key_type}.") from None
    if key_type in ("double", "float"):
        return float(text)
    if key_type == "boolean":
        return text.lower() in ("true", "1", "yes")
    if key_type == "string":
        return text
    raise StateTypeError(f"--key supports primitive key types; this operator's key type is {key_type}.")
