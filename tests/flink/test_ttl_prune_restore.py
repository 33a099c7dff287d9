"""Issue 24 part 2 for DataStream jobs: `prune-expired` on a real Flink savepoint with TTL state (written by Flink's
own State Processor API, `tests/fixtures/flink/make_ttl_savepoint.py`) drops what expired, and the same TTL job
restores the result: pruned state is gone, kept state is exactly Flink's."""

from __future__ import annotations

import json

import pytest

from statekit.savepoint.prune import prune_expired

from .conftest import FIXTURES

pytestmark = pytest.mark.flink

CASE = FIXTURES / "datastream-ttl"
DAY = 86_400_000
SPEC = {"parallelism": 2, "operators": [{"uid": "ttl-counter", "kind": "keyed", "key_type": "string", "states": [
    {"name": "count", "kind": "value", "type": "bigint", "ttl_days": 36500},
    {"name": "seen", "kind": "map", "key_type": "string", "type": "bigint", "ttl_days": 36500}]}]}


def test_pruned_ttl_state_restores_without_the_expired_entries(flink, tmp_path):
    written = json.loads((CASE / "written.json").read_text())
    pruned = tmp_path / "pruned"
    # `count` told a TTL of 1 day, two days later: every entry expired; `seen` (the job's 36500 days) kept
    report = prune_expired(CASE / "savepoint", pruned, now=written["written_before_ms"] + 2 * DAY,
                           ttl={"ttl-counter/count": "1 d", "*": "36500 d"})
    assert [(s.state, s.entries, s.removed) for s in report.states] == [("count", 20, 20), ("seen", 20, 0)]
    assert report.states[0].bytes_removed == 20 * 16  # each TtlValue<Long>: 8 bytes of last access, 8 of value
    before, after = flink.restore_many([(CASE / "savepoint", SPEC), (pruned, SPEC)])
    assert not isinstance(before, str) and not isinstance(after, str), (before, after)
    keys = {f"k{i}": i for i in range(20)}
    assert before.keyed["ttl-counter"] == {k: {"count": i + 1, "seen": {"a": i}} for k, i in keys.items()}
    assert after.keyed["ttl-counter"] == {k: {"seen": {"a": i}} for k, i in keys.items()}  # count starts from zero
