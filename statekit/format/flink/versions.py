"""Flink versions statekit writes for: a version line, the `_metadata` layout it restores, and the default.

One home for "which Flink restores what": Flink 1.18-1.20 read `_metadata` up to version 4 (no operator
names or uids in it), 2.0 up to 5 (names and uids), 2.1-2.3 up to 6 (a new channel-state handle
layout, never used by savepoints). Everything else statekit writes (state streams, serializer
snapshots carried from the source) is the same for every line it supports, so a target version only
chooses the metadata layout. Reading needs none of this: every metadata version 3-6 is read as is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from statekit.errors import InvalidArgumentError

#: version line -> the newest `_metadata` version that line reads (and the one it writes)
METADATA_VERSION_OF: dict[str, int] = {
    "1.18": 4, "1.19": 4, "1.20": 4,
    "2.0": 5,
    "2.1": 6, "2.2": 6, "2.3": 6,
}
NEWEST = "2.3"
_LINE = re.compile(r"(\d+)\.(\d+)(?:\.\d+)?")


@dataclass(frozen=True, order=True)
class FlinkVersion:
    """A Flink version line statekit writes savepoints for, e.g. ``FlinkVersion.parse("1.20.5")`` -> 1.20.

    >>> FlinkVersion.parse("1.20").metadata_version
    4
    >>> FlinkVersion.parse("2.3.0").line
    '2.3'
    """

    major: int
    minor: int

    def __post_init__(self) -> None:
        if self.line not in METADATA_VERSION_OF:
            raise InvalidArgumentError(
                f"Flink {self.line} is not a version statekit writes savepoints for; supported: "
                f"{', '.join(METADATA_VERSION_OF)} (give a line such as 1.20 or 2.3, or a release such as 1.20.5)."
            )

    @classmethod
    def parse(cls, text: "str | FlinkVersion") -> "FlinkVersion":
        """A version line from "1.20", "1.20.5" or a `FlinkVersion`; anything else is refused, naming the lines."""
        if isinstance(text, FlinkVersion):
            return text
        m = _LINE.fullmatch(str(text).strip())
        if m is None:
            raise InvalidArgumentError(
                f"{text!r} is not a Flink version; give a line such as 1.20 or 2.3 (supported: "
                f"{', '.join(METADATA_VERSION_OF)})."
            )
        return cls(int(m.group(1)), int(m.group(2)))

    @classmethod
    def newest(cls) -> "FlinkVersion":
        """The newest line statekit writes for: the default of a new bootstrap."""
        return cls.parse(NEWEST)

    @classmethod
    def for_metadata_version(cls, version: int) -> "FlinkVersion":
        """The newest line that writes `_metadata` `version` (what a savepoint of that version goes back as).

        Versions 3 and 4 (Flink 1.11-1.20) are written as 4, which every 1.16+ Flink reads.
        """
        lines = [line for line, v in METADATA_VERSION_OF.items() if v == max(version, 4)]
        if not lines:
            raise InvalidArgumentError(f"Flink metadata version {version} is not one statekit writes (4, 5, 6).")
        return cls.parse(lines[-1])

    @property
    def line(self) -> str:
        return f"{self.major}.{self.minor}"

    @property
    def metadata_version(self) -> int:
        """The `_metadata` version written for this line."""
        return METADATA_VERSION_OF[self.line]

    def describe(self) -> str:
        """How a written savepoint is named in summaries, e.g. "Flink 1.20 (_metadata v4)"."""
        return f"Flink {self.line} (_metadata v{self.metadata_version})"

    def __str__(self) -> str:
        return self.line
