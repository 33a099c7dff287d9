"""Savepoint transforms: rename a uid, remove an operator, change max parallelism; sources stay untouched."""

from __future__ import annotations

from pathlib import Path

import pytest

from statekit.demo import write_demo_savepoint
from statekit.errors import (
    InvalidArgumentError,
    InvalidTargetError,
    ParallelismError,
    UnknownOperatorError,
)
from statekit.identifiers import OperatorIdentifier
from statekit.keygroups import assign_key_groups
from statekit.savepoint import Savepoint, check
from statekit.savepoint.transforms import change_operator_identifier, remove_operator, with_max_parallelism
from statekit.testing import tree_digest


@pytest.fixture()
def source(tmp_path) -> Path:
    return write_demo_savepoint(tmp_path / "src", users=300)


def test_rename_carries_state_and_leaves_source(source, tmp_path):
    before = tree_digest(source)
    plan = change_operator_identifier(source, tmp_path / "out", "accounts", "accounts-v2")
    assert plan.written and "accounts-v2" in str(plan)
    out = Savepoint.open(tmp_path / "out")
    src = Savepoint.open(source)
    assert out.keyed_table("accounts-v2").equals(src.keyed_table("accounts"))
    assert out.timers("accounts-v2").equals(src.timers("accounts"))
    assert out.broadcast_state("rules", "limits").equals(src.broadcast_state("rules", "limits"))
    assert out.list_state("transactions-source", "offsets").equals(src.list_state("transactions-source", "offsets"))
    with pytest.raises(UnknownOperatorError):
        out.operator("accounts")
    assert check(tmp_path / "out").ok
    assert tree_digest(source) == before


def test_rename_by_hash_and_refuses_existing_uid(source, tmp_path):
    ident = OperatorIdentifier.for_uid_hash(OperatorIdentifier.for_uid("accounts").uid_hash)
    change_operator_identifier(source, tmp_path / "out", ident, "acc")
    assert Savepoint.open(tmp_path / "out").operator("acc").uid == "acc"
    with pytest.raises(InvalidArgumentError, match="already exists"):
        change_operator_identifier(source, tmp_path / "out2", "accounts", "rules")
    assert not (tmp_path / "out2").exists()


def test_dry_run_writes_nothing(source, tmp_path):
    plan = remove_operator(source, tmp_path / "out", "rules", dry_run=True)
    assert not plan.written and "remove operator rules" in str(plan)
    assert not (tmp_path / "out").exists()


def test_remove_operator(source, tmp_path):
    remove_operator(source, tmp_path / "out", "rules")
    out = Savepoint.open(tmp_path / "out")
    assert [op.uid for op in out.operators] == ["accounts", "transactions-source"]
    assert check(tmp_path / "out").ok


def test_change_max_parallelism_rehashes_key_groups(source, tmp_path):
    with_max_parallelism(source, tmp_path / "out", "accounts", 1024)
    out = Savepoint.open(tmp_path / "out")
    meta = out.operator("accounts")
    assert meta.max_parallelism == 1024
    table = out.keyed_table("accounts", with_key_group=True)
    expected = assign_key_groups(table.column("key"), 1024, "string")
    assert table.column("key_group").to_numpy().tolist() == expected.tolist()
    assert out.keyed_table("accounts").sort_by("key").equals(Savepoint.open(source).keyed_table("accounts").sort_by("key"))
    assert out.timers("accounts").num_rows == 3
    assert check(tmp_path / "out").ok


def test_bad_transform_inputs(source, tmp_path):
    with pytest.raises(ParallelismError):
        with_max_parallelism(source, tmp_path / "o1", "accounts", 40000)
    with pytest.raises(UnknownOperatorError, match="accounts"):
        remove_operator(source, tmp_path / "o2", "nope")
    with pytest.raises(InvalidTargetError, match="source itself"):
        remove_operator(source, source, "rules")
    assert not (tmp_path / "o1").exists() and not (tmp_path / "o2").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
