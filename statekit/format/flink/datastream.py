"""DataStream jobs (Java/Scala types from serializer snapshots): the `JobKind` whose tables are the keyed layout as stored.

Boundary: keys and values are already decoded by `keyed` from their serializers; this kind adds
the DataStream key-group hash (`statekit.keygroups`) and the stored key bytes for one-key lookups.
"""

from __future__ import annotations

from typing import Any

from statekit.errors import StatekitError
from statekit.format.flink.keyed import KeyedLayout, KeyedResult, state_ddl
from statekit.format.flink.values import encode_key
from statekit.keygroups import assign_to_key_group
from statekit.state.descriptors import StateInfo

__all__ = ["KIND"]


class DataStreamKind:
    """Java/Scala DataStream operators (and any operator no other kind claims)."""

    name = "datastream"

    def key_ddl(self, lay: KeyedLayout) -> str:
        return lay.key_type.ddl()

    def states(self, lay: KeyedLayout, declared: dict[str, str]) -> tuple[StateInfo, ...]:
        return tuple(StateInfo(s.name, s.keyed_kind or "value", state_ddl(s)) for s in lay.states)

    def decode(self, result: KeyedResult, lay: KeyedLayout, declared: dict[str, str], where: str) -> KeyedResult:
        return result

    def key_value(self, key: Any, lay: KeyedLayout) -> Any:
        return key

    def key_group(self, key: Any, lay: KeyedLayout, max_parallelism: int) -> int | None:
        if lay.key_type.kind in ("pojo", "row", "binary"):  # their hashCode is user code
            return None
        if lay.key_type.kind == "avro":
            from statekit.format.flink import avro_out  # here: only Avro keys need it

            try:  # Avro's own record hash, as the generated key class computes it
                return int(avro_out.key_groups([key], lay.key_type.avro, lay.key_type.type_class, max_parallelism)[0])
            except (StatekitError, AttributeError, TypeError, ValueError):
                return None  # a hash statekit cannot compute (or a key of the wrong shape): every key group
        return assign_to_key_group(key, max_parallelism, lay.key_type.ddl())

    def key_groups(self, keys: list[Any], lay: KeyedLayout, max_parallelism: int) -> list[int] | None:
        return None  # `check` hashes these keys by their declared type (`statekit.format.keyed.compute_key_groups`)

    def key_bytes(self, key: Any, lay: KeyedLayout) -> bytes | None:
        if lay.key_type.kind == "avro":
            return None  # matched on the decoded key, not its bytes
        return encode_key(lay.key_type, key)

    def operator_kind(self, name: str, lay: KeyedLayout | None) -> str | None:
        return None

    def unsupported(self, lay: KeyedLayout) -> list[str]:
        return []


KIND = DataStreamKind()
