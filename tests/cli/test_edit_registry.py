"""The registry of repair edits holds the library, the JSON plan and the CLI together: every edit is reachable from
all three under one name, and a plan entry plans exactly what its single-edit command plans."""

from __future__ import annotations

import json
import typing
from pathlib import Path

import pyarrow as pa
import pytest

from statekit.savepoint import SavepointBuilder, patch
from statekit.savepoint import edits as E
from statekit.state import ListStateDescriptor, ValueStateDescriptor

from .conftest import run_runner

#: One use of each edit: the single command's options and the same edit as a plan entry (the drift guard: a new
#: edit without a line here fails `test_each_edit_plans_the_same_from_its_command_and_from_a_plan`).
SAMPLES = {
    "set": (["--uid", "counter", "--key", "3", "--state", "count", "--value", "99"],
            {"uid": "counter", "key": 3, "state": "count", "value": 99}),
    "delete-key": (["--uid", "counter", "--key", "3", "--key", "5"], {"uid": "counter", "keys": [3, 5]}),
    "rm-state": (["--uid", "counter", "--state", "seen"], {"uid": "counter", "state": "seen"}),
    "rekey": (["--uid", "counter", "--expr", "key + 100"], {"uid": "counter", "expr": "key + 100"}),
    "rename-uid": (["--uid", "counter", "--new-uid", "tally"], {"uid": "counter", "new_uid": "tally"}),
    "remove-operator": (["--uid", "counter"], {"uid": "counter"}),
    "set-max-parallelism": (["--uid", "counter", "--max", "256"], {"uid": "counter", "max": 256}),
}


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("registry") / "sp"
    table = pa.table({"key": pa.array(range(10), pa.int64()), "count": pa.array(range(100, 110), pa.int64()),
                      "seen": pa.array([["a"]] * 10, pa.list_(pa.string()))})
    with SavepointBuilder(path, checkpoint_id=1, job_name="registry") as b:
        b.add_operator("counter", parallelism=2, max_parallelism=128, key_type="bigint",
                       keyed_states=[ValueStateDescriptor("count", "bigint"), ListStateDescriptor("seen", "string")]
                       ).write_keyed(table)
    return path


def test_library_plan_and_cli_name_the_same_edits() -> None:
    from statekit_cli.app import app
    from statekit_cli.repair import COMMANDS

    classes = {k.edit for k in E.EDITS.values()}
    assert set(typing.get_args(E.Edit)) == classes  # the library's Edit type
    assert set(patch.PLANNERS) == classes  # the library plans each
    assert all(E.kind_of(k.edit) is k for k in E.EDITS.values()) and E.kind_of(E.RemoveOperator("x")).name == \
        "remove-operator" and E.kind_of(object()) is None
    assert {c.__name__ for c in classes} <= set(patch.__all__)
    assert set(COMMANDS) == set(E.EDITS)  # the CLI has a command for each
    registered = [c.name for c in app.registered_commands]
    assert [n for n in registered if n in E.EDITS] == list(E.EDITS)
    assert len({k.name for k in E.EDITS.values()}) == len(E.EDITS) and all(k.help for k in E.EDITS.values())
    help_text = run_runner(["repair", "--help"]).stdout
    for kind in E.EDITS.values():  # the plan's schema as `repair --help` gives it
        assert kind.plan_entry.replace(" ", "") in help_text.replace(" ", "").replace("│", "").replace("\n", "")
        assert kind.plan_entry.startswith(f'{{"edit": "{kind.name}"')


@pytest.mark.parametrize("name", list(E.EDITS))
def test_each_edit_plans_the_same_from_its_command_and_from_a_plan(name, source, tmp_path) -> None:
    args, entry = SAMPLES[name]
    target = tmp_path / "out"
    single = run_runner([name, source, target, *args])
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps([{"edit": name, **entry}]))
    planned = run_runner(["repair", source, target, "--plan", plan])
    assert single.exit_code == planned.exit_code == 0, single.output + planned.output
    assert single.stdout == planned.stdout and f"would write {target}" in single.stdout, single.stdout
    assert not target.exists()


def test_a_plan_names_an_unknown_edit_and_a_missing_field(source, tmp_path) -> None:
    plan = tmp_path / "plan.json"
    for entries, words in (([{"edit": "sett", "uid": "counter"}], 'edit 1 has unknown "edit": \'sett\''),
                           ([{"edit": ["set"], "uid": "counter"}], 'edit 1 has unknown "edit": [\'set\']'),
                           ([{"edit": "set-max-parallelism", "uid": "counter"}], "edit 1 (set-max-parallelism) "
                                                                                 "lacks the field 'max'")):
        plan.write_text(json.dumps(entries))
        result = run_runner(["repair", source, tmp_path / "out", "--plan", plan])
        assert result.exit_code == 2 and words in result.output, result.output
