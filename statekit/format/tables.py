"""Tables read from files: Parquet, CSV, JSON lines (one file or a directory of one kind) or a Delta table."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa

from statekit.errors import InvalidArgumentError, SourceError

__all__ = ["read_table"]


def read_table(path: str | os.PathLike) -> pa.Table:
    """A table from a Parquet, CSV or JSON-lines file, a directory of such files, or a Delta table."""
    import pyarrow.dataset as ds

    p = Path(path)
    if not p.exists():
        raise InvalidArgumentError(f"{p} does not exist; give a Parquet, CSV or JSON-lines file or a Delta table.")
    if (p / "_delta_log").is_dir():
        from statekit.format.delta import delta_snapshot

        snap = delta_snapshot(p)
        parts = []
        for f in snap.files:
            t = ds.dataset(str(f.path), format="parquet").to_table()
            for col, value in f.partition_values.items():
                t = t.append_column(col, pa.array([value] * t.num_rows))
            parts.append(t)
        if not parts:
            raise SourceError(f"{p}: the Delta table has no data files.")
        return pa.concat_tables(parts, promote_options="default")
    files = sorted(f for f in p.rglob("*") if f.is_file() and not f.name.startswith((".", "_"))) if p.is_dir() else [p]
    suffixes = {f.suffix.lower() for f in files}
    if suffixes <= {".parquet", ".pq"}:
        fmt = "parquet"
    elif suffixes <= {".csv"}:
        fmt = "csv"
    elif suffixes <= {".json", ".jsonl", ".ndjson"}:
        fmt = "json"
    else:
        raise InvalidArgumentError(f"{p}: files of type(s) {sorted(suffixes)}; give .parquet, .csv or .jsonl files "
                                   "(one kind) or a Delta table.")
    try:
        if fmt == "json":
            import pyarrow.json as pj

            return pa.concat_tables([pj.read_json(f) for f in files], promote_options="default")
        return ds.dataset([str(f) for f in files], format=fmt).to_table()
    except (pa.ArrowInvalid, OSError) as exc:
        raise SourceError(f"{p}: not readable as {fmt} ({exc}).") from None
