"""State descriptors, TTL and the reduce/aggregate function interfaces."""

from statekit.state.descriptors import (
    AggregatingStateDescriptor,
    BroadcastStateDescriptor,
    KeyedStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    OperatorStateInfo,
    ReducingStateDescriptor,
    StateInfo,
    StateTtlConfig,
    Time,
    ValueStateDescriptor,
    operator_list_info,
)
from statekit.state.functions import AggregateFunction, ReduceFunction

__all__ = [
    "AggregateFunction",
    "AggregatingStateDescriptor",
    "BroadcastStateDescriptor",
    "KeyedStateDescriptor",
    "ListStateDescriptor",
    "MapStateDescriptor",
    "OperatorStateInfo",
    "ReduceFunction",
    "ReducingStateDescriptor",
    "StateInfo",
    "StateTtlConfig",
    "Time",
    "ValueStateDescriptor",
    "operator_list_info",
]
from statekit.state.handles import (  # noqa: E402,F401
    AggregatingState,
    BroadcastState,
    ListState,
    MapState,
    ReadOnlyBroadcastState,
    ReducingState,
    State,
    ValueState,
)
