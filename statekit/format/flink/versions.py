"""Flink versions statekit writes for: a version line, the `_metadata` layout it restores, and the default.

One home for "which Flink restores what": Flink 1.18-1.20 read `_metadata` up to version 4 (no operator
names or uids in it), 2.0 up to 5 (names and uids), 2.1-2.3 up to 6 (a new channel-state handle
layout, never used by savepoints). The state streams statekit writes are the same for every line; the
serializer snapshots they carry are not: a line restores only the snapshot classes its jars have, at
versions up to the one it writes (`snapshot_table`, generated from every line's jars), so
`check_serializers` refuses a target that lacks one (a `Set` serializer of Flink 2.x written for 1.20, a
1.x-only serializer written for 2.x). Reading needs none of this: every metadata version 3-6 is read as is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Iterator

from statekit.errors import FlinkVersionMismatchError, UnknownFlinkVersionError
from statekit.format.flink.snapshot_table import LINES, SNAPSHOTS

if TYPE_CHECKING:
    from statekit.format.flink.serializers import FlinkType

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
            raise UnknownFlinkVersionError(
                f"Flink {self.line} is not a version statekit writes savepoints for; supported: "
                f"{', '.join(METADATA_VERSION_OF)} (give a line such as 1.20 or 2.3, or a release such as 1.20.5).",
                tuple(METADATA_VERSION_OF),
            )

    @classmethod
    def parse(cls, text: "str | FlinkVersion") -> "FlinkVersion":
        """A version line from "1.20", "1.20.5" or a `FlinkVersion`; anything else is refused, naming the lines."""
        if isinstance(text, FlinkVersion):
            return text
        m = _LINE.fullmatch(str(text).strip())
        if m is None:
            raise UnknownFlinkVersionError(
                f"{text!r} is not a Flink version; give a line such as 1.20 or 2.3 (supported: "
                f"{', '.join(METADATA_VERSION_OF)}).",
                tuple(METADATA_VERSION_OF),
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
            raise UnknownFlinkVersionError(
                f"Flink metadata version {version} is not one statekit writes (4, 5, 6); it comes from a Flink "
                f"statekit does not write for (supported: {', '.join(METADATA_VERSION_OF)}).",
                tuple(METADATA_VERSION_OF),
            )
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


def _span(lines: list[str]) -> str:
    """Lines as people read them: "2.0-2.3" for a run of consecutive lines, else "1.18, 2.3"."""
    at = [LINES.index(line) for line in lines]
    if len(lines) > 1 and at == list(range(at[0], at[0] + len(at))):
        return f"{lines[0]}-{lines[-1]}"
    return ", ".join(lines)


def serializer_problems(version: FlinkVersion, t: "FlinkType") -> Iterator[str]:
    """Why Flink `version` cannot restore serializer `t` (or a serializer nested in it); nothing when it can.

    Only classes of `snapshot_table` are judged: a user's own serializer, or one of a Flink module the table
    does not scan (SQL, Avro, Scala, PyFlink), is taken as the job provides it.
    """
    row = SNAPSHOTS.get(t.snapshot_class)
    if row is not None:
        have = row[LINES.index(version.line)] if version.line in LINES else None
        short = t.snapshot_class.rsplit(".", 1)[-1]
        if have is None:
            lines = [line for line, v in zip(LINES, row) if v is not None]
            yield (f"serializer {short} ({t.snapshot_class}) exists only in Flink {_span(lines)}; "
                   f"Flink {version.line} has no such class")
        elif 0 < have < t.version:
            newer = [line for line, v in zip(LINES, row) if v is not None and v >= t.version]
            by = f"written by Flink {_span(newer)}" if newer else "newer than any Flink statekit writes for"
            yield (f"serializer {short} has snapshot version {t.version}, {by}; Flink {version.line} reads it up "
                   f"to version {have}")
    for child in t.children:
        yield from serializer_problems(version, child)


def check_serializers(version: FlinkVersion, serializers: Iterable[tuple[str, "FlinkType"]]) -> None:
    """Refuse (`FlinkVersionMismatchError`, every part named) a write for `version` that would carry serializers
    it cannot restore; `serializers` are (what, e.g. "operator counter, state 'tags'", serializer) pairs."""
    pairs = list(serializers)
    problems = tuple(f"{what}: {why}" for what, t in pairs for why in dict.fromkeys(serializer_problems(version, t)))
    if not problems:
        return
    fits = [line for line in METADATA_VERSION_OF
            if all(next(serializer_problems(FlinkVersion.parse(line), t), None) is None for _, t in pairs)]
    advice = (f"write for a Flink that has them (flink_version= / --flink-version {' or '.join(fits)})"
              if fits else "no Flink line statekit writes for has every one of them")
    raise FlinkVersionMismatchError(
        f"Flink {version.line} cannot restore this savepoint: " + "; ".join(problems) + f". Nothing was "
        f"written; {advice}, or migrate those states to serializers Flink {version.line} has.",
        problems,
    )
