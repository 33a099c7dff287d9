"""SQL over a savepoint on embedded DuckDB (`statekit.sql`): the databases and tables of Spark's `register()`.

Each operator is a database (schema) named after its uid - lower-cased, every character other
than a letter, digit or ``_`` replaced by ``_``, prefixed with ``<prefix>_`` when a prefix is
given; operators without a uid use their uid hash - so uid ``tx-source`` is ``tx_source``. It holds
``keyed`` and ``timers`` for keyed operators and one table per operator state (named by the same
rule), and ``logical`` for a Flink SQL operator of a savepoint opened with its job's compiled plan
(`Savepoint.logical_table`). Only the tables a query names are registered. Keyed and timer tables of statekit
savepoints are the savepoint's own Parquet files, read in place after their size and checksum
are verified; a filter ``key = c``, ``key IN (...)`` (or an ``OR`` of those) on a table of a
simple ``SELECT ... FROM t WHERE ...`` registers only the files of those keys' key groups, as
Spark's pruning rule does. Other formats (native RocksDB checkpoints, Flink savepoints) are read
as Arrow through `Savepoint`'s tables.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Iterable

import pyarrow as pa

from statekit.errors import InvalidArgumentError
from statekit.table_names import database_name, database_names, table_name

__all__ = ["QueryError", "connect", "database_name", "database_names", "sql", "sql_relation", "table_name", "tables"]


class QueryError(InvalidArgumentError):
    """The SQL does not parse or does not run over this savepoint (the message lists its tables)."""


def tables(sp, prefix: str | None = None) -> dict[str, dict[str, tuple[Any, str, str | None]]]:
    """Database -> table -> (operator metadata, table kind, state name) for every table of `sp`."""
    if hasattr(sp, "sql_tables"):  # a Spark streaming checkpoint names its own (statekit.savepoint.spark_checkpoint)
        return sp.sql_tables(prefix)  # type: ignore[no-any-return]
    out: dict[str, dict[str, tuple[Any, str, str | None]]] = {}
    dbs = database_names(sp, prefix)
    for meta in sp.operators:
        names: dict[str, tuple[Any, str, str | None]] = {}
        if meta.key_type is not None:
            names["keyed"] = (meta, "keyed", None)
            names["timers"] = (meta, "timers", None)
            if sp.has_logical_table(meta.identifier):
                names["logical"] = (meta, "logical", None)
        for s in meta.operator_states:
            names[table_name(s.name)] = (meta, s.redistribution, s.name)
        out[dbs[meta.uid_hash]] = names
    return out


def connect(path, query: str | None = None, *, prefix: str | None = None, connection=None, plan=None):
    """A DuckDB connection with the savepoint's tables registered (only those `query` names, if given)."""
    return _connect(path, query, prefix, connection, plan)[0]


def _connect(path, query: str | None, prefix: str | None, connection, plan=None):
    import duckdb

    from statekit.savepoint import Savepoint

    if hasattr(path, "operators") and plan is not None:
        raise InvalidArgumentError("give plan= to Savepoint.open, or a path with plan=, not an opened savepoint and a plan.")
    sp = path if hasattr(path, "operators") else Savepoint.open(path, plan=plan)
    con = connection if connection is not None else duckdb.connect()
    catalog = tables(sp, prefix)
    wanted, prunes = _analyse(con, query, catalog, sp) if query is not None else (None, {})
    for db, names in catalog.items():
        for name, (meta, kind, state) in names.items():
            if wanted is not None and (db, name) not in wanted:
                continue
            con.execute(f'CREATE SCHEMA IF NOT EXISTS "{db}"')
            _register(con, sp, f'"{db}"."{name}"', meta, kind, state, prunes.get((db, name)))
    return con, catalog


def sql_relation(path, query: str, *, prefix: str | None = None, connection=None, plan=None):
    """The DuckDB relation of `query` over the savepoint at `path` (for chaining: ``.filter``, ``.df()``...)."""
    import duckdb

    con, catalog = _connect(path, query, prefix, connection, plan)
    try:
        return con.sql(query)
    except duckdb.Error as exc:
        raise _query_error(exc, catalog) from None


def sql(path: str | os.PathLike, query: str, *, prefix: str | None = None, plan=None) -> pa.Table:
    """Run `query` over the savepoint at `path` on embedded DuckDB and return the rows as Arrow.

    ``plan``: a Flink SQL job's compiled plan (`statekit.savepoint.Savepoint.open`): key columns and
    rows take the query's names, and each SQL operator also has a ``logical`` table.

    Examples
    --------
    >>> sql("sp-1", "SELECT count(*) AS n FROM counter.keyed WHERE count > 10")   # doctest: +SKIP
    pyarrow.Table
    n: int64
    """
    import duckdb

    # The connection is closed before returning: DuckDB's threads and the Arrow tables registered
    # in it go now, on this thread, not whenever the interpreter collects it (statekit.format.arrow_memory).
    with duckdb.connect() as con:
        rel = sql_relation(path, query, prefix=prefix, connection=con, plan=plan)
        if rel is None:  # a statement without result (e.g. SET)
            return pa.table({})
        try:
            result = rel.to_arrow_table() if hasattr(rel, "to_arrow_table") else rel.arrow()
            return result.read_all() if isinstance(result, pa.RecordBatchReader) else result
        except duckdb.Error as exc:
            raise _query_error(exc, None) from None  # a runtime error: the tables were found


def _query_error(exc: Exception, catalog) -> QueryError:
    message = " ".join(str(exc).split()).rstrip(".")
    if catalog is None:
        return QueryError(f"the query does not run: {message}.")
    listed = "; ".join(f"{db}: {', '.join(names)}" for db, names in catalog.items())
    return QueryError(f"the query does not run: {message}. The savepoint's tables are {listed} (database = the "
                      "uid lower-cased, characters other than a-z, 0-9, _ as _).")


# -- registration ---------------------------------------------------------------------------------
def _register(con, sp, qualified: str, meta, kind: str, state: str | None, keys: list | None) -> None:
    if kind in ("keyed", "timers"):
        files = meta.files_of(kind) if hasattr(meta, "files_of") and not getattr(meta, "is_native", False) else None
        if files is not None and statekit_files(sp):
            _register_parquet(con, sp, qualified, meta, kind, files, keys)
            return
        table = _arrow_keyed(sp, meta, kind, keys)
    elif kind == "spark-state":
        table = sp.keyed_table(meta.uid, store=state)
    elif kind == "logical":
        table = sp.logical_table(meta.identifier)
    elif kind == "broadcast":
        table = sp.broadcast_state(meta.identifier, state)
    elif kind == "union":
        table = sp.union_state(meta.identifier, state)
    else:
        table = sp.list_state(meta.identifier, state)
    _register_arrow(con, qualified, table)


def statekit_files(sp) -> bool:
    """Whether `sp` is a local statekit savepoint (whose keyed and timer tables are Parquet files DuckDB reads in
    place); other formats (Flink's) and savepoints on object storage are read through the `Savepoint` API as Arrow."""
    from statekit.format.storage import is_remote
    from statekit.savepoint.reader import Savepoint

    return type(sp) is Savepoint and not is_remote(sp.path)


def _register_arrow(con, qualified: str, table: pa.Table) -> None:
    view = "__statekit_" + re.sub(r"[^a-z0-9_]", "_", qualified.lower())
    con.register(view, table)
    con.execute(f"CREATE OR REPLACE VIEW {qualified} AS SELECT * FROM {view}")


def _register_parquet(con, sp, qualified: str, meta, kind: str, files, keys: list | None) -> None:
    from statekit.format import keyed as K
    from statekit.format.files import read_verified_bytes
    from statekit.keygroups import assign_to_key_group

    if keys is not None and not meta.stored_key_groups:  # stored key groups: user-code hashes, read every file
        groups = {assign_to_key_group(k, meta.max_parallelism, meta.key_type) for k in keys}
        files = [f for f in files if any(f.covers(g) for g in groups)]
    schema = (K.keyed_schema(meta.key_type, meta.keyed_states, namespace_type=meta.namespace_type)
              if kind == "keyed" else K.timers_schema(meta.key_type, namespace_type=meta.namespace_type))
    columns = ", ".join(f'"{f.name}"' for f in schema if f.name != "key_group")
    if not files:
        _register_arrow(con, qualified, schema.empty_table().drop_columns(["key_group"]))
        return
    paths = []
    for entry in files:
        read_verified_bytes(sp.path, entry)  # size and checksum against the manifest before DuckDB reads it
        paths.append(str((Path(sp.path) / entry.path).resolve()))
    listed = ", ".join("'" + p.replace("'", "''") + "'" for p in paths)
    con.execute(f"CREATE OR REPLACE VIEW {qualified} AS SELECT {columns} FROM read_parquet([{listed}])")


def _arrow_keyed(sp, meta, kind: str, keys: list | None) -> pa.Table:
    from statekit.keygroups import KeyGroupRange, assign_to_key_group

    if kind == "timers":
        table = sp.timers(meta.identifier)
        return table.drop_columns(["key_group"]) if "key_group" in table.column_names else table
    if keys is None or meta.stored_key_groups:  # stored key groups come from user code: no pruning by key
        return sp.keyed_table(meta.identifier, with_key_group=False)
    if keys and isinstance(keys[0], dict):  # a Flink SQL key row: its own key-group hash (None: not computable)
        found = [sp.key_group_of(meta.identifier, k) for k in keys]
        if any(g is None for g in found):
            return sp.keyed_table(meta.identifier, with_key_group=False)
        groups = set(found)
    else:
        groups = {assign_to_key_group(k, meta.max_parallelism, meta.key_type) for k in keys}
    parts = []
    for g in sorted(groups):
        parts.append(sp.keyed_table(meta.identifier, key_groups=KeyGroupRange(g, g), with_key_group=False))
    return pa.concat_tables(parts) if parts else sp.keyed_table(meta.identifier, with_key_group=False).slice(0, 0)


# -- which tables a query names, and which keys it filters on ---------------------------------------
def _analyse(con, query: str, catalog, sp=None) -> tuple[set | None, dict]:
    """(the (database, table) pairs `query` names, {pair: keys it is restricted to}); None if unparsable."""
    try:
        tree = json.loads(con.execute("SELECT json_serialize_sql(?)", [query]).fetchone()[0])
    except Exception:  # noqa: BLE001 - DuckDB itself reports the error when the query runs
        return None, {}
    if tree.get("error"):
        return None, {}
    refs: list[dict] = []
    selects: list[dict] = []
    _walk(tree, refs, selects)
    named = [((r.get("schema_name") or "").lower(), (r.get("table_name") or "").lower()) for r in refs]
    wanted = {n for n in named if n[0] in catalog and n[1] in catalog[n[0]]}
    prunes: dict = {}
    for node in selects:
        ref = node.get("from_table") or {}
        if ref.get("type") != "BASE_TABLE" or node.get("where_clause") is None:
            continue
        pair = ((ref.get("schema_name") or "").lower(), (ref.get("table_name") or "").lower())
        if pair not in wanted or named.count(pair) != 1 or pair[1] not in ("keyed", "timers"):
            continue
        meta = catalog[pair[0]][pair[1]][0]
        qualifiers = {"", pair[1], (ref.get("alias") or "").lower()}
        if meta.key_type and meta.key_type.startswith("struct<") and hasattr(sp, "key_group_of"):
            keys = _row_key_constants(node["where_clause"], qualifiers, meta.key_type)
        else:
            keys = _key_constants(node["where_clause"], qualifiers, meta.key_type)
        if keys is not None:
            prunes[pair] = keys
    return wanted, prunes


def _row_key_constants(where: dict, qualifiers: set, key_type: str) -> list | None:
    """SQL key rows a WHERE clause restricts a struct ``key`` to: ``key.<field> = constant`` for every field of
    the key (top-level conjuncts; one field may be ``IN (...)``), as ``{field: value}`` dicts; else None."""
    from statekit.types import parse_ddl

    struct = parse_ddl(key_type)
    fields = {f.name.lower(): f for f in struct}
    found: dict[str, list] = {}
    for conjunct in _conjuncts(where):
        for name, f in fields.items():
            if name in found:
                continue
            vals = _disjunct_keys(conjunct, qualifiers, _ddl_of(f.type), field=name)
            if vals is not None:
                found[name] = vals
    if set(found) != set(fields) or sum(len(v) > 1 for v in found.values()) > 1:
        return None
    out: list[dict] = [{}]
    for name, f in fields.items():
        out = [{**o, f.name: v} for o in out for v in found[name]]
    return out


def _ddl_of(t: pa.DataType) -> str | None:
    from statekit.types import to_ddl

    try:
        return to_ddl(t)
    except Exception:  # noqa: BLE001 - a type no constant is compared with: no pruning
        return None


def _walk(node: Any, refs: list, selects: list) -> None:
    if isinstance(node, dict):
        if node.get("type") == "BASE_TABLE":
            refs.append(node)
        if node.get("type") == "SELECT_NODE":
            selects.append(node)
        for v in node.values():
            _walk(v, refs, selects)
    elif isinstance(node, list):
        for v in node:
            _walk(v, refs, selects)


def _key_constants(where: dict, qualifiers: set, key_type: str | None) -> list | None:
    """Keys a WHERE clause restricts ``key`` to (from one top-level conjunct), or None."""
    for conjunct in _conjuncts(where):
        keys = _disjunct_keys(conjunct, qualifiers, key_type)
        if keys is not None:
            return keys
    return None


def _conjuncts(node: dict) -> Iterable[dict]:
    if node.get("type") == "CONJUNCTION_AND":
        for c in node.get("children", []):
            yield from _conjuncts(c)
    else:
        yield node


def _disjunct_keys(node: dict, qualifiers: set, key_type: str | None, field: str | None = None) -> list | None:
    if node.get("type") == "CONJUNCTION_OR":
        out: list = []
        for c in node.get("children", []):
            keys = _disjunct_keys(c, qualifiers, key_type, field)
            if keys is None:
                return None
            out += keys
        return out
    if node.get("type") == "COMPARE_EQUAL":
        left, right = node.get("left"), node.get("right")
        if _is_key(right, qualifiers, field):
            left, right = right, left
        if _is_key(left, qualifiers, field):
            value = _constant(right, key_type)
            return None if value is None else value
    if node.get("type") == "COMPARE_IN":
        children = node.get("children", [])
        if children and _is_key(children[0], qualifiers, field):
            out = []
            for c in children[1:]:
                value = _constant(c, key_type)
                if value is None:
                    return None
                out += value
            return out
    return None


def _is_key(node: Any, qualifiers: set, field: str | None = None) -> bool:
    """Whether `node` is the column ``key`` (or, given `field`, ``key.<field>`` of a struct key), maybe qualified."""
    if not isinstance(node, dict) or node.get("class") != "COLUMN_REF":
        return False
    names = [n.lower() for n in node.get("column_names", [])]
    if field is not None:
        if names[-2:] != ["key", field]:
            return False
        names = names[:-1]
    return names[-1:] == ["key"] and (len(names) == 1 or (len(names) == 2 and names[0] in qualifiers))


_INTEGER_TYPES = {"bigint", "int", "integer", "smallint", "tinyint"}


def _constant(node: Any, key_type: str | None) -> list | None:
    """The key(s) a constant stands for, as the key type (both zeros for a float 0), or None."""
    negate = False
    if isinstance(node, dict) and node.get("class") == "FUNCTION" and node.get("function_name") == "-" \
            and len(node.get("children", [])) == 1:
        negate, node = True, node["children"][0]
    if not isinstance(node, dict) or node.get("class") != "CONSTANT":
        return None
    literal = node.get("value") or node.get("literal") or {}
    kind = str(literal.get("kind") or literal.get("type", {}).get("id") or "").upper()
    text = literal.get("text") if "text" in literal else literal.get("value")
    if text is None or key_type is None:
        return None
    t = key_type.lower()
    try:
        if t in _INTEGER_TYPES and kind in ("INTEGER", "BIGINT", "HUGEINT", "SMALLINT", "TINYINT", "UBIGINT"):
            return [-int(text) if negate else int(text)]
        if t in ("double", "float") and kind in ("INTEGER", "BIGINT", "HUGEINT", "NUMERIC", "DOUBLE", "DECIMAL", "FLOAT"):
            value = -float(text) if negate else float(text)
            return [0.0, -0.0] if value == 0 else [value]
        if t == "string" and kind in ("STRING", "VARCHAR") and not negate:
            return [str(text)]
        if t == "boolean" and kind == "BOOLEAN" and not negate:
            return [str(text).lower() in ("true", "1")]
    except (TypeError, ValueError):
        return None
    return None


def key_mapping(keys: pa.Array | pa.ChunkedArray, expression: str) -> pa.Table:
    """``key``, ``new_key``: each distinct key and `expression` (SQL over the column ``key``) evaluated on it.

    >>> key_mapping(pa.array(["a", "b", "a"]), "upper(key)").sort_by("key").to_pylist()
    [{'key': 'a', 'new_key': 'A'}, {'key': 'b', 'new_key': 'B'}]
    """
    import duckdb

    distinct = pa.table({"key": pa.chunked_array([keys]) if isinstance(keys, pa.Array) else keys}) \
        .group_by("key", use_threads=False).aggregate([])
    with duckdb.connect() as con:  # closed here, not at interpreter exit (statekit.format.arrow_memory)
        con.register("statekit_keys", distinct)
        try:
            result = con.sql(f"SELECT key, ({expression}) AS new_key FROM statekit_keys")
            table = result.to_arrow_table() if hasattr(result, "to_arrow_table") else result.arrow()
            table = table.read_all() if isinstance(table, pa.RecordBatchReader) else table
        except duckdb.Error as exc:
            raise QueryError(f"the key expression {expression!r} does not run on DuckDB: {' '.join(str(exc).split())}. "
                             "It is SQL over the column key, e.g. upper(key) or key % 1000.") from None
    return table.cast(pa.schema([pa.field("key", distinct.schema.field("key").type), table.schema.field("new_key")]))
