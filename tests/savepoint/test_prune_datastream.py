"""`prune_expired` on DataStream TTL state (TtlValues shown as their bytes): which entries expire, `touch`, and the
refusal without a TTL; the fixture is real Flink's (`tests/fixtures/flink/make_ttl_savepoint.py`)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from statekit.errors import InvalidArgumentError
from statekit.savepoint import Savepoint
from statekit.savepoint.prune import prune_expired

CASE = Path(__file__).resolve().parents[1] / "fixtures" / "flink" / "datastream-ttl"
WRITTEN = json.loads((CASE / "written.json").read_text())


def _stamps(path: Path) -> dict[str, tuple[int | None, int | None]]:
    """key -> (count's last access, seen['a']'s last access) from the TtlValue bytes."""
    rows = Savepoint.open(path).keyed_table("ttl-counter").to_pylist()
    return {r["key"]: (struct.unpack(">q", r["count"][:8])[0] if r["count"] else None,
                       struct.unpack(">q", dict(r["seen"])["a"][:8])[0] if r["seen"] else None) for r in rows}


def test_entries_expire_by_the_last_access_time_flink_stored(tmp_path):
    stamps = _stamps(CASE / "savepoint")
    assert all(WRITTEN["written_after_ms"] <= t <= WRITTEN["written_before_ms"] for pair in stamps.values() for t in pair)
    cut = sorted({c for c, _ in stamps.values()})
    assert len(cut) > 1  # two subtasks wrote at different milliseconds: a time between them splits the keys
    now = cut[0] + 1  # with a TTL of 1 ms: exactly the entries last accessed at cut[0] have expired
    report = prune_expired(CASE / "savepoint", tmp_path / "out", now=now, ttl="1 ms")
    gone = {k for k, (c, _) in stamps.items() if c == cut[0]}
    assert [(s.state, s.removed) for s in report.states] == [
        ("count", len(gone)), ("seen", sum(s + 1 <= now for _, s in stamps.values()))]  # Flink: last + ttl <= now
    after = _stamps(tmp_path / "out")
    assert {k for k, (c, _) in after.items() if c is None} == gone
    assert all(after[k][0] == stamps[k][0] for k in stamps if k not in gone)  # kept bytes unchanged


def test_touch_rewrites_the_last_access_of_every_kept_entry(tmp_path):
    touch = WRITTEN["written_before_ms"] + 12345
    prune_expired(CASE / "savepoint", tmp_path / "out", now=WRITTEN["written_after_ms"], ttl="36500 d", touch=touch)
    before = Savepoint.open(CASE / "savepoint").keyed_table("ttl-counter").to_pylist()
    after = {r["key"]: r for r in Savepoint.open(tmp_path / "out").keyed_table("ttl-counter").to_pylist()}
    for r in before:
        a = after[r["key"]]
        assert a["count"] == struct.pack(">q", touch) + r["count"][8:]  # the value's bytes kept, the stamp new
        assert dict(a["seen"])["a"] == struct.pack(">q", touch) + dict(r["seen"])["a"][8:]


def test_datastream_ttl_needs_the_ttl_it_was_configured_with(tmp_path):
    with pytest.raises(InvalidArgumentError, match="does not store its duration"):
        prune_expired(CASE / "savepoint", tmp_path / "out", now=WRITTEN["written_before_ms"])
    assert not (tmp_path / "out").exists()
