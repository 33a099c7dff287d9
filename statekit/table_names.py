"""The SQL names of a savepoint's tables: one naming rule for `statekit.sql` (DuckDB), Spark's `register()` and
Spark streaming checkpoints (`statekit.query` documents it)."""

from __future__ import annotations

import re

__all__ = ["database_name", "database_names", "table_name"]


def table_name(text: str) -> str:
    """A uid, uid hash or state name as an SQL identifier (the rule Spark's `register()` uses too).

    >>> table_name("tx-source"), table_name("Max.Count")
    ('tx_source', 'max_count')
    """
    return re.sub(r"[^a-z0-9_]", "_", text.lower())


def database_name(meta, prefix: str | None = None) -> str:
    """The database of operator `meta`: its uid (else uid hash) as an identifier, after ``<prefix>_``."""
    return table_name((f"{prefix}_" if prefix else "") + (meta.uid or meta.uid_hash))


def database_names(sp, prefix: str | None = None) -> dict[str, str]:
    """Operator uid hash -> its database: the one naming rule of `statekit.sql` and Spark's `register()`.

    An operator's database is its uid as an identifier (`table_name`); without a uid, a Flink SQL
    operator's stored name (``GroupAggregate[51]`` -> ``groupaggregate_51``, unless two operators would
    share it), else its uid hash; ``<prefix>_`` first when given.

    """
    sql_kind = getattr(sp, "job_kind", None)
    named: dict[str, str] = {}
    for meta in sp.operators:
        if meta.uid is None and meta.name and sql_kind is not None and meta.key_type is not None \
                and sql_kind(meta.identifier) == "sql":
            named[meta.uid_hash] = table_name(meta.name).strip("_")
    taken = [n for n in named.values()]
    out = {}
    for meta in sp.operators:
        alias = named.get(meta.uid_hash)
        if alias is not None and taken.count(alias) == 1:
            out[meta.uid_hash] = table_name((f"{prefix}_" if prefix else "") + alias)
        else:
            out[meta.uid_hash] = database_name(meta, prefix)
    return out
