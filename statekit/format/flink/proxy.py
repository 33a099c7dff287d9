"""The backend serialization proxies at the head of Flink state streams: state meta infos with their serializer snapshots.

Boundary: parses `KeyedBackendSerializationProxy` (keyed streams, the meta stream of native
RocksDB handles) and `OperatorBackendSerializationProxy` (operator-state streams) into
`StateMeta` records; `serializers` turns the snapshots into types. Section 3.2-3.3 and 4 of
`../shared/flink/FORMAT.md`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from statekit.errors import CorruptSavepointError, UnsupportedFormatError
from statekit.format.flink.binary import DataInput
from statekit.format.flink.serializers import ROWDATA_SNAPSHOT, FlinkType, read_top_level, without_ttl
from statekit.state.descriptors import StateKind

PROXY_VERSION = 6
#: StateMetaInfoSnapshot.BackendStateType ordinals
BACKEND_STATE_TYPES = ("KEY_VALUE", "OPERATOR", "BROADCAST", "PRIORITY_QUEUE", "KEY_VALUE_V2")
KEYED_KINDS: dict[str, StateKind] = {"VALUE": "value", "LIST": "list", "MAP": "map", "REDUCING": "reducing",
               "AGGREGATING": "aggregating"}
TIMER_PREFIX = "_timer_state/"
EVENT_TIMER_PREFIX = "_timer_state/event_"
PROCESSING_TIMER_PREFIX = "_timer_state/processing_"


@dataclass(frozen=True)
class StateMeta:
    """One state's meta info; its index in the proxy's list is its state id in the keyed stream."""

    name: str
    backend_type: str
    options: dict[str, str] = field(hash=False)
    serializers: dict[str, FlinkType] = field(hash=False)
    raw: bytes = b""  # the meta info's exact bytes, for writers

    @property
    def keyed_kind(self) -> StateKind | None:
        """value | list | map | reducing | aggregating for keyed states, None for timers and operator state."""
        kind = self.options.get("KEYED_STATE_TYPE")
        return KEYED_KINDS.get(kind) if kind else None

    @property
    def is_timer(self) -> bool:
        return self.backend_type == "PRIORITY_QUEUE" and self.name.startswith(TIMER_PREFIX)

    @property
    def timer_domain(self) -> str:
        return "event" if self.name.startswith(EVENT_TIMER_PREFIX) else "processing"

    @property
    def value_type(self) -> FlinkType:
        return self.serializers["VALUE_SERIALIZER"]


@dataclass(frozen=True)
class KeyedProxy:
    """The header of a keyed state stream: key serializer and the states it holds."""
    compressed: bool
    key_type: FlinkType
    states: tuple[StateMeta, ...]
    end: int  # offset of the first byte after the proxy


@dataclass(frozen=True)
class OperatorProxy:
    """The header of an operator state stream: its list/union and broadcast states."""
    compressed: bool
    states: tuple[StateMeta, ...]  # list/union states, then broadcast states
    end: int


def _version(inp: DataInput, what: str) -> None:
    v = inp.i32(f"the {what} version")
    if v != PROXY_VERSION:
        raise UnsupportedFormatError(
            f"{inp.where}: {what} version {v} is not supported; statekit reads version {PROXY_VERSION} "
            "(Flink 1.8 and later). Take a new savepoint with a recent Flink."
        )


def read_keyed_proxy(inp: DataInput) -> KeyedProxy:
    """Read the header of a keyed state stream: compression flag, key serializer and state metas."""
    _version(inp, "keyed backend proxy")
    compressed = inp.bool("the compression flag")
    key_type = read_top_level(inp, "the key serializer")
    n = inp.i16("the number of keyed states")
    if n < 0:
        raise inp.fail(f"the keyed backend proxy lists {n} states")
    states = tuple(_meta(inp) for _ in range(n))
    if key_type.snapshot_class != ROWDATA_SNAPSHOT:  # TTL values are shown unwrapped for SQL state only
        states = tuple(replace(m, serializers={k: without_ttl(v) for k, v in m.serializers.items()}) for m in states)
    return KeyedProxy(compressed, key_type, states, inp.pos)


def read_operator_proxy(inp: DataInput) -> OperatorProxy:
    """Read the header of an operator state stream: compression flag and state metas."""
    _version(inp, "operator backend proxy")
    compressed = inp.bool("the compression flag")
    states: list[StateMeta] = []
    for what in ("list states", "broadcast states"):
        n = inp.i16(f"the number of {what}")
        if n < 0:
            raise inp.fail(f"the operator backend proxy lists {n} {what}")
        states.extend(_meta(inp) for _ in range(n))
    return OperatorProxy(compressed, tuple(states), inp.pos)


def _meta(inp: DataInput) -> StateMeta:
    start = inp.pos
    name = inp.utf("a state name")
    t = inp.i32(f"the backend state type of {name!r}")
    if not 0 <= t < len(BACKEND_STATE_TYPES):
        inp.pos -= 4
        raise inp.fail(f"state {name!r} has unknown backend state type {t}")
    options = {}
    for _ in range(inp.count(f"the option count of {name!r}", limit=1024)):
        k = inp.utf(f"an option key of {name!r}")
        options[k] = inp.utf(f"option {k} of {name!r}")
    serializers: dict[str, FlinkType] = {}
    for _ in range(inp.count(f"the serializer count of {name!r}", limit=64)):
        k = inp.utf(f"a serializer key of {name!r}")
        try:
            serializers[k] = read_top_level(inp, f"{k} of state {name!r}")
        except CorruptSavepointError:
            unknown = [s.snapshot_class for s in serializers.values() if s.kind == "binary" and s.type_class is None]
            if unknown:  # most likely an unknown serializer whose snapshot has a payload statekit cannot size
                raise UnsupportedFormatError(
                    f"{inp.where}: cannot parse the serializer snapshot {unknown[-1]} of state {name!r}; statekit "
                    "knows Flink's built-in, POJO, Tuple, Row, Kryo and Avro serializers."
                ) from None
            raise
    backend = BACKEND_STATE_TYPES[t]
    need = ("KEY_SERIALIZER", "VALUE_SERIALIZER") if backend == "BROADCAST" else ("VALUE_SERIALIZER",)
    missing = [k for k in need if k not in serializers]
    if missing:
        raise inp.fail(f"state {name!r} lacks its {', '.join(missing)}")
    return StateMeta(name, backend, options, serializers, bytes(inp.data[start : inp.pos]))


def read_meta_info(inp: DataInput) -> StateMeta:
    """One `StateMetaInfoSnapshot` on its own (as statekit's manifest carries them for writing back to Flink)."""
    return _meta(inp)
