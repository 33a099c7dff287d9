"""The job graph: transformations (one per operator) and the edges that partition elements between them."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from statekit.errors import InvalidArgumentError
from statekit.identifiers import OperatorIdentifier, generated_uid_hash
from statekit.keygroups import check_max_parallelism, check_parallelism


class OutputTag:
    """Names a side output (PyFlink's ``OutputTag``): e.g. the late elements of a window."""

    def __init__(self, tag_id: str, type_info: Any = None) -> None:
        if not isinstance(tag_id, str) or not tag_id:
            raise InvalidArgumentError(f"an OutputTag needs a non-empty string id, got {tag_id!r}")
        self.tag_id = tag_id
        self.type_info = type_info

    def __repr__(self) -> str:
        return f"OutputTag({self.tag_id!r})"


@dataclass(eq=False)
class Edge:
    """An input of a transformation: where elements come from and how they are partitioned.

    ``partition`` is ``"forward"`` (same subtask; becomes ``"rebalance"`` when parallelisms
    differ), ``"rebalance"`` (round robin), ``"hash"`` (by key group of ``key_selector``) or
    ``"broadcast"`` (every element to every subtask).
    """

    source: "Transformation"
    partition: str = "forward"
    key_selector: Any = None
    key_type: Any = None
    input_index: int = 0
    side: str | None = None  # the tag id of a side output (late window data) instead of the main output


_ids = itertools.count()


@dataclass(eq=False)
class Transformation:
    """One operator of the job as declared: its function, inputs, parallelism, uid and options."""

    kind: str
    name: str
    function: Any
    inputs: list[Edge]
    operator_class: type
    env: Any
    keyed: bool = False
    key_type: Any = None
    options: dict[str, Any] = field(default_factory=dict)
    parallelism: int | None = None
    max_parallelism: int | None = None
    uid: str | None = None
    explicit_id: OperatorIdentifier | None = None  # set_uid_hash(): wins over the uid's hash
    default_parallelism: int | None = None  # sources and collect sinks are non-parallel by default
    id: int = field(default_factory=lambda: next(_ids))
    position: int = 0
    shared: dict[str, Any] = field(default_factory=dict)  # facts all subtasks agree on (inferred key type)

    @property
    def identifier(self) -> OperatorIdentifier:
        """The operator's identity in checkpoints and savepoints, by one rule (Flink's).

        An explicit hash (``set_uid_hash(h)``) wins, with or without a uid: the operator is written
        under ``h`` and restored from ``h``; the uid then only names it for people and must still be
        unique. Else the uid's hash (``uid(x)``); else a hash of the operator's place in the job graph.
        """
        if self.explicit_id is not None:
            return self.explicit_id
        if self.uid is not None:
            return OperatorIdentifier.for_uid(self.uid)
        # Like Flink's generated hashes: from the operator's place in the topology (its position,
        # kind and inputs), not from its display name, so renaming an operator keeps its state.
        inputs = ",".join(f"{e.source.position}:{e.partition}:{e.input_index}" for e in self.inputs)
        return OperatorIdentifier.for_uid_hash(generated_uid_hash(str(self.position), self.kind, inputs))

    @property
    def uid_hash(self) -> str:
        """The hash of `identifier` (32 hex characters)."""
        return self.identifier.uid_hash

    def effective_parallelism(self, env_parallelism: int) -> int:
        p = self.parallelism or self.default_parallelism or env_parallelism
        return check_parallelism(p, self.max_parallelism)

    def set_uid(self, uid: str) -> None:
        if not isinstance(uid, str) or not uid:
            raise InvalidArgumentError(f"uid must be a non-empty string, got {uid!r}")
        for t in self.env._transformations:
            if t is not self and t.uid == uid:
                raise InvalidArgumentError(f"uid {uid!r} is used by two operators ({t.name!r}, {self.name!r}); uids must be unique")
        self.uid = uid

    def set_parallelism(self, parallelism: int) -> None:
        if self.options.get("non_parallel") and parallelism != 1:
            raise InvalidArgumentError(f"{self.name!r} is a non-parallel operator; its parallelism must be 1")
        self.parallelism = check_parallelism(parallelism, self.max_parallelism)

    def set_max_parallelism(self, max_parallelism: int) -> None:
        self.max_parallelism = check_max_parallelism(max_parallelism)
