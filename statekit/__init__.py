"""statekit: the state of stream-processing jobs as data."""

from typing import TYPE_CHECKING

from statekit.errors import StatekitError

if TYPE_CHECKING:  # imported on first use: `import statekit` stays cheap (no pyarrow, no numpy)
    from statekit.state import (
        AggregateFunction,
        AggregatingStateDescriptor,
        BroadcastStateDescriptor,
        ListStateDescriptor,
        MapStateDescriptor,
        ReduceFunction,
        ReducingStateDescriptor,
        StateTtlConfig,
        Time,
        ValueStateDescriptor,
    )
    from statekit.types import PICKLED, Types

__version__ = "0.1.0"

__all__ = [
    "PICKLED",
    "AggregateFunction",
    "AggregatingStateDescriptor",
    "BroadcastStateDescriptor",
    "ListStateDescriptor",
    "MapStateDescriptor",
    "OperatorIdentifier",
    "ReduceFunction",
    "ReducingStateDescriptor",
    "StateTtlConfig",
    "StatekitError",
    "Time",
    "Types",
    "ValueStateDescriptor",
    "sql",
]


_RUNTIME = frozenset({"StreamExecutionEnvironment", "WatermarkStrategy", "KeyedProcessFunction", "ManualClock", "RestartStrategies"})


_STATE = frozenset({"AggregateFunction", "AggregatingStateDescriptor", "BroadcastStateDescriptor", "ListStateDescriptor",
                    "MapStateDescriptor", "ReduceFunction", "ReducingStateDescriptor", "StateTtlConfig", "Time",
                    "ValueStateDescriptor"})


def sql(path, query: str, *, prefix: str | None = None, plan=None):
    """Run SQL over the savepoint at `path` on embedded DuckDB; the rows as a ``pyarrow.Table``.

    Tables are ``<uid>.keyed``, ``<uid>.timers`` and ``<uid>.<state>`` as with Spark's ``register()``
    (uid ``tx-source`` -> ``tx_source.keyed``); with ``plan=`` (a Flink SQL job's compiled plan) SQL
    operators' columns take the query's names and each also has ``<uid>.logical``. `statekit.query.sql_relation` gives the DuckDB
    relation for chaining; `statekit.query` documents the naming rule and key-group pruning.
    """
    from statekit.query import sql as run

    return run(path, query, prefix=prefix, plan=plan)


def __getattr__(name: str):
    # OperatorIdentifier is imported lazily so `import statekit` stays cheap and cycle-free.
    if name == "OperatorIdentifier":
        from statekit.identifiers import OperatorIdentifier

        return OperatorIdentifier
    if name in _STATE:
        import statekit.state

        return getattr(statekit.state, name)
    if name in ("PICKLED", "Types"):
        import statekit.types

        return getattr(statekit.types, name)
    if name in _RUNTIME:  # the embedded runtime loads only when asked for
        import statekit.runtime

        return getattr(statekit.runtime, name)
    raise AttributeError(f"module 'statekit' has no attribute {name!r}")
