"""statekit: the state of stream-processing jobs as data."""

from statekit.errors import StatekitError
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
]


_RUNTIME = frozenset({"StreamExecutionEnvironment", "WatermarkStrategy", "KeyedProcessFunction", "ManualClock", "RestartStrategies"})


def __getattr__(name: str):
    # OperatorIdentifier is imported lazily so `import statekit` stays cheap and cycle-free.
    if name == "OperatorIdentifier":
        from statekit.identifiers import OperatorIdentifier

        return OperatorIdentifier
    if name in _RUNTIME:  # the embedded runtime loads only when asked for
        import statekit.runtime

        return getattr(statekit.runtime, name)
    raise AttributeError(f"module 'statekit' has no attribute {name!r}")
