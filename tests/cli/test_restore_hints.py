"""A state type mismatch on restore: no restarts, the operator named by uid, and the migration it offers works."""

from __future__ import annotations

import pytest

from statekit.errors import RestoreError
from statekit.runtime import KeyedProcessFunction, RestartStrategies, StreamExecutionEnvironment
from statekit.savepoint import Savepoint
from statekit.state import ValueStateDescriptor

from .conftest import run_executable


class Count(KeyedProcessFunction):
    def __init__(self, type_: str) -> None:
        self.type = type_

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", self.type))

    def process_element(self, value, ctx):
        self.count.update(1 if self.type == "bigint" else "one")
        return iter(())


def run(type_: str, out, *, restore=None, source: str = "numbers", attempts: int = 0) -> int:
    env = StreamExecutionEnvironment(parallelism=1)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(attempts, 0))
    env.from_collection([1, 2, 3]).uid(source).key_by(lambda v: v, key_type="bigint").process(Count(type_)).uid("counter")
    return env.execute("count", final_savepoint=out, restore_from=restore, allow_non_restored_state=True).restarts


def test_type_mismatch_is_not_retried_and_names_the_migration(tmp_path):
    run("bigint", tmp_path / "sp")
    with pytest.raises(RestoreError) as info:
        run("string", tmp_path / "sp2", restore=tmp_path / "sp", source="more", attempts=3)
    message = str(info.value)
    assert "operator uid 'counter'" in message and "statekit rm-state" in message
    assert "restart" not in message.replace("Restarting will not help", "")
    assert not (tmp_path / "sp2").exists()
    # The offered migration: drop the state offline, then the job restores.
    result = run_executable(["rm-state", tmp_path / "sp", tmp_path / "migrated", "--uid", "counter", "--state", "count",
                             "--apply"])
    assert result.exit_code == 0, result.output
    assert run("string", tmp_path / "sp3", restore=tmp_path / "migrated", source="more") == 0
    assert Savepoint.open(tmp_path / "sp3").get("counter", 2) == {"count": "one"}
