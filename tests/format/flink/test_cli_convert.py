"""`statekit convert` and the inspection commands on real Flink savepoints."""

from __future__ import annotations

from typer.testing import CliRunner

from statekit.savepoint import Savepoint
from statekit_cli.app import app

from .conftest import savepoint


def test_convert_command_carries_named_uids(tmp_path):
    out = tmp_path / "sp"
    res = CliRunner().invoke(app, ["convert", str(savepoint("long-hashmap-canonical")), str(out),
                                   "--uid", "counter", "--uid", "rules"])
    assert res.exit_code == 0, res.output
    sp = Savepoint.open(out)
    assert {m.uid for m in sp.operators} >= {"counter", "rules"}
    assert sp.get("counter", -1)["count"] == 4


def test_convert_command_fails_cleanly_on_bad_input(tmp_path):
    res = CliRunner().invoke(app, ["convert", str(tmp_path), str(tmp_path / "out")])
    assert res.exit_code == 2 and "NotASavepointError" in res.output
    assert not (tmp_path / "out").exists()


def test_inspect_check_show_accept_flink_savepoints():
    path = str(savepoint("string-hashmap-canonical"))
    runner = CliRunner()
    assert runner.invoke(app, ["inspect", path]).exit_code == 0
    res = runner.invoke(app, ["check", path])
    assert res.exit_code == 0 and "OK" in res.output
    res = runner.invoke(app, ["show", path, "--uid", "counter", "--key", "alice", "--values"])
    assert res.exit_code == 0 and "394" in res.output
