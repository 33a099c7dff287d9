"""How the CLI prints: rows as a table, JSON or CSV; identifiers never split; plain text into pipes."""

from __future__ import annotations

import base64
import csv
import datetime as dt
import decimal
import io
import json
from typing import Any, Iterable, Sequence

from statekit.errors import InvalidKeyError, StatekitError, StateTypeError

MASK = "•••"


# -- values ---------------------------------------------------------------------------------------
def jsonable(value: Any) -> Any:
    """A Python value of state as JSON data: maps (lists of pairs) with string keys become objects."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if value and all(isinstance(p, tuple) and len(p) == 2 for p in value):  # an Arrow map
            if all(isinstance(k, str) for k, _ in value):
                return {k: jsonable(v) for k, v in value}
            return [[jsonable(k), jsonable(v)] for k, v in value]
        return [jsonable(v) for v in value]
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, (dt.date, dt.datetime, dt.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        # integral decimals (e.g. DuckDB's sums of bigints) as JSON integers; others keep every digit as text
        return int(value) if value == value.to_integral_value() else str(value)
    if isinstance(value, float) and value != value:
        return None
    return value


def cell(value: Any) -> str:
    """A value in a table cell: scalars as they are, nested values as compact JSON."""
    if value is None:
        return "null"
    if isinstance(value, str):
        return value
    if isinstance(value, (dict, list, tuple, bytes)):
        return json.dumps(jsonable(value), ensure_ascii=False, separators=(",", ":"))
    return str(jsonable(value))


def dumps(data: Any) -> str:
    """JSON text of data (made JSON-safe by jsonable), indented."""
    return json.dumps(jsonable(data), ensure_ascii=False, indent=2)


# -- tables ---------------------------------------------------------------------------------------
def emit_table(console, rows: Sequence[Sequence[str]], columns: Sequence[str], *, title: str | None = None,
               identity: Iterable[str] = ()) -> None:
    """Print `rows` (already strings) so that no cell is ever cut or split.

    In a terminal: a rich table when it fits the width, else one block of ``column: value`` lines
    per row. Into a pipe or file: plain aligned text, as wide as it needs (no wrapping, no colour).
    """
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(columns)]
    if not console.is_terminal:
        if title:
            console.print(title, markup=False)
        console.print("  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip(), markup=False)
        for r in rows:
            console.print("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip(), markup=False)
        return
    needed = sum(widths) + 3 * len(columns) + 1
    multiline = any("\n" in v for r in rows for v in r)
    if needed <= console.width and not multiline:
        from rich.table import Table

        t = Table(title=title, title_justify="left")
        keep = set(identity)
        for c, w in zip(columns, widths):
            t.add_column(c, no_wrap=True, min_width=w if c in keep else None, overflow="ignore")
        for r in rows:
            t.add_row(*r)
        console.print(t)
        return
    if title:
        console.print(f"[bold]{_escape(title)}[/]")
    label = max(len(c) for c in columns) if columns else 0
    for i, r in enumerate(rows):
        if i:
            console.print("")
        for c, v in zip(columns, r):
            console.print(f"{c.rjust(label)}: {v}", markup=False)


def emit_rows(console, rows: list[dict[str, Any]], columns: list[str], fmt: str, *, title: str | None = None,
              masked: Iterable[str] = ()) -> None:
    """Rows (dicts) in `fmt`: ``table``, ``json`` (a list of objects) or ``csv`` (nested values as JSON)."""
    hidden = set(masked)
    if fmt == "json":
        data = [{c: (MASK if c in hidden and r.get(c) is not None else r.get(c)) for c in columns} for r in rows]
        console.print(dumps(data), markup=False)
        return
    text = [[MASK if c in hidden and r.get(c) is not None else cell(r.get(c)) for c in columns] for r in rows]
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(columns)
        w.writerows([["" if r.get(c) is None else v for c, v in zip(columns, t)] for r, t in zip(rows, text)])
        console.print(buf.getvalue().rstrip("\n"), markup=False)
        return
    emit_table(console, text, columns, title=title, identity=("key", "uid", "uid_hash", "file", "path"))


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


# -- savepoint summaries --------------------------------------------------------------------------
def human_bytes(n: float) -> str:
    """A byte count for people (B, KiB, MiB, GiB)."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def summary(sp) -> dict[str, Any]:
    """The facts `inspect` prints, as data (its --json is the manifest itself)."""
    from statekit.query import statekit_files

    fmt = f"statekit v{sp.manifest.format_version}" if statekit_files(sp) else \
        type(sp).__name__.replace("Savepoint", "").lower() or "other"
    return {"path": str(sp.path), "kind": sp.kind, "checkpoint_id": sp.checkpoint_id, "job_name": sp.job_name,
            "format": fmt, "operators": len(sp.operators)}


def summary_line(sp) -> str:
    """One line describing a savepoint: path, kind, checkpoint id, job, format, operators."""
    s = summary(sp)
    return (f"{s['path']}  {s['kind']} #{s['checkpoint_id']}  job={s['job_name'] or '-'}  "
            f"format {s['format']}  {s['operators']} operator(s)")


def operator_rows(sp) -> tuple[list[list[str]], list[str]]:
    """Rows and column names listing a savepoint's operators (``kind``: what a Flink SQL operator is, else ``-``)."""
    kind_of = getattr(sp, "operator_kind", None)  # Flink savepoints know their operators' kinds
    columns = ["name", "uid", "uid hash", "parallelism", "kind", "key type", "files", "size"]
    sizes = _sizes(sp)
    rows = [[op.name or "-", op.uid or "-", op.uid_hash, f"{op.parallelism} / {op.max_parallelism}",
             _kind(kind_of, op), op.key_type or "-", str(sizes(op)[0]), human_bytes(sizes(op)[1])]
            for op in sp.operators]
    return rows, columns


def _sizes(sp):
    """Files and bytes of an operator: the manifest's, or for a Flink savepoint the state streams `_metadata` lists."""
    from statekit.savepoint.kinds import is_flink_source

    if not is_flink_source(sp):
        return lambda op: (len(op.files), op.total_bytes)
    from statekit.savepoint.stats_flink import stored_sizes

    return lambda op: stored_sizes(sp, op)


def _kind(kind_of, op) -> str:
    if kind_of is None or op.key_type is None:
        return "-"
    try:
        return kind_of(op.identifier) or "-"
    except StatekitError as exc:  # an operator statekit cannot read is listed, not fatal here
        return f"unsupported ({type(exc).__name__})"


def state_rows(sp) -> tuple[list[list[str]], list[str]]:
    """Rows and column names listing every state of every operator."""
    rows = []
    for op in sp.operators:
        for s in op.keyed_states:
            rows.append([op.display_name, s.name, f"keyed {s.kind}", s.type + (" (pickled)" if s.pickled else "")])
        for s in op.operator_states:
            shape = f"map<{s.key_type},{s.type}>" if s.redistribution == "broadcast" else f"list<{s.type}>"
            rows.append([op.display_name, s.name, f"operator {s.redistribution}", shape])
    return rows, ["operator", "state", "kind", "type"]


def problem_rows(report) -> tuple[list[list[str]], list[str]]:
    """Rows and column names of a check report's problems."""
    return [[p.kind, p.path, p.message] for p in report.problems], ["kind", "file", "problem"]


# -- parsing command-line values ------------------------------------------------------------------
def parse_key(text: str, key_type: str | None) -> Any:
    """Parse a key given on the command line as the operator's key type.

    >>> parse_key("42", "bigint"), parse_key("a b", "string"), parse_key('{"a": 1, "b": "x"}', "struct<a:int,b:string>")
    (42, 'a b', (1, 'x'))
    """
    if key_type is None:
        raise InvalidKeyError("this operator has no keyed state, so it has no keys; drop --key.")
    t = key_type.strip().lower()
    if t in ("bigint", "int", "smallint", "tinyint", "integer", "long", "short", "byte"):
        try:
            return int(text, 10)
        except ValueError:
            raise InvalidKeyError(f"key {text!r} is not an integer, but the operator's key type is {key_type}.") from None
    if t in ("double", "float", "real"):
        try:
            return float(text)
        except ValueError:
            raise InvalidKeyError(f"key {text!r} is not a number, but the operator's key type is {key_type}.") from None
    if t == "boolean":
        if text.lower() not in ("true", "false"):
            raise InvalidKeyError(f"key {text!r} is not true or false, but the operator's key type is boolean.")
        return text.lower() == "true"
    if t == "string":
        return text
    if t.startswith("struct<"):
        import pyarrow as pa

        from statekit.types import parse_ddl

        arrow = parse_ddl(key_type)
        if arrow.num_fields == 1 and not text.lstrip().startswith(("{", "[")):  # a one-column key (SQL): its value
            from statekit.types import to_ddl

            return (parse_key(text, to_ddl(arrow.field(0).type)),)
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidKeyError(f"key {text!r} is not JSON ({exc.msg}); give a struct key as a JSON object, e.g. "
                                  f"{json.dumps({f.name: None for f in arrow})}.") from None
        if isinstance(data, list):
            data = dict(zip([f.name for f in arrow], data))
        if not isinstance(data, dict) or set(data) != {f.name for f in arrow}:
            raise InvalidKeyError(f"key {text!r} does not name the fields of the key type {key_type}.")
        try:
            value = pa.array([data], arrow)[0].as_py()
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError) as exc:
            raise InvalidKeyError(f"key {text!r} does not fit the key type {key_type} ({exc}).") from None
        return tuple(value.values())
    raise InvalidKeyError(f"--key does not parse keys of type {key_type}; use statekit.sql or the library.")


def parse_json_value(text: str, ddl: str, what: str) -> Any:
    """A state value given as JSON, checked against its declared type; maps may be objects or pairs."""
    import pyarrow as pa

    from statekit.types import parse_ddl

    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise StateTypeError(f"{what}: {text!r} is not JSON ({exc.msg}); quote strings, e.g. '\"text\"'.") from None
    arrow = parse_ddl(ddl)
    data = _maps_as_pairs(data, arrow)
    try:
        return pa.array([data], arrow)[0].as_py()
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError, ValueError) as exc:
        raise StateTypeError(f"{what}: {text} does not fit the declared type {ddl} ({exc}).") from None


def _maps_as_pairs(data: Any, arrow) -> Any:
    import pyarrow as pa

    if data is None:
        return None
    if pa.types.is_map(arrow):
        items = data.items() if isinstance(data, dict) else data
        out = []
        for k, v in items:
            if isinstance(k, str) and (pa.types.is_integer(arrow.key_type) or pa.types.is_floating(arrow.key_type)):
                try:
                    k = json.loads(k)
                except json.JSONDecodeError:
                    pass
            out.append((k, _maps_as_pairs(v, arrow.item_type)))
        return out
    if pa.types.is_list(arrow) or pa.types.is_large_list(arrow):
        return [_maps_as_pairs(v, arrow.value_type) for v in data] if isinstance(data, list) else data
    if pa.types.is_struct(arrow) and isinstance(data, dict):
        return {f.name: _maps_as_pairs(data.get(f.name), f.type) for f in arrow}
    return data
