"""`upgrade` without a JVM: its Kryo 5 and built-in List/Map bytes equal what Flink 2.3 itself writes for the same
values, the report, the CLI, and bad input refused by name with nothing written and the source untouched."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from statekit.errors import InvalidArgumentError
from statekit.identifiers import OperatorIdentifier
from statekit.savepoint import Savepoint
from statekit.savepoint.upgrade import upgrade
from statekit.savepoint.upgrade_states import CustomKryoSerializerError, UpgradeRefusedError
from statekit_cli.app import app

PAIRS = Path(__file__).resolve().parents[1] / "fixtures" / "flink" / "upgrade"
JAVA_1 = PAIRS / "hashmap-1.20" / "savepoint"
CP_1 = [PAIRS / "classes-1.20.jar"]
UIDS = ["profiles", "lists", "simple", "history"]


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(path)).encode() + p.read_bytes())
    return h.hexdigest()


def _state(sp: Savepoint, uid: str, name: str) -> tuple[dict, bytes]:
    """{key: value bytes} of keyed state `name` of operator `uid`, and its serializer snapshot's bytes."""
    h = OperatorIdentifier.for_uid(uid).uid_hash
    meta = next(m for m in sp.operators if m.uid_hash == h)
    lay = sp.flink.layout(sp.flink.metadata.operator(h))
    snap = next(s.value_type.raw for s in lay.states if s.name == name)
    return {r["key"]: r[name] for r in sp.keyed_table(meta.identifier).to_pylist()}, snap


def test_upgraded_bytes_are_flink_2_3s_own(tmp_path):
    report = upgrade(JAVA_1, tmp_path / "up", to_flink="2.3", classpath=CP_1, uids=UIDS)
    got, want = Savepoint.open(tmp_path / "up"), Savepoint.open(PAIRS / "hashmap-2.3" / "savepoint")
    for uid, name in [("profiles", "profile"), ("lists", "recent"), ("lists", "totals"), ("simple", "simple"),
                      ("simple", "count"), ("history", "visits"), ("history", "by_tag")]:
        (g, gs), (w, ws) = _state(got, uid, name), _state(want, uid, name)
        assert g == w, (uid, name)  # every value's bytes as Flink 2.3 writes them for the same object
        assert gs == ws, (uid, name)  # and the serializer snapshot a 2.3 job declares
    actions = {(s.operator, s.state): s.action for s in report.states}
    assert actions == {("profiles", "profile"): "migrated", ("lists", "recent"): "migrated",
                       ("lists", "totals"): "migrated", ("simple", "simple"): "kept", ("simple", "count"): "kept",
                       ("history", "visits"): "migrated", ("history", "by_tag"): "migrated"}
    assert "5 state(s) migrated (300 values), 2 kept as they were, 0 dropped" in report.summary()


def test_a_plain_rewrite_carries_kryo_list_state_as_it_was(tmp_path):
    """The benchmark's baseline (write_flink, what convert --to flink runs): a ListState of a Kryo class, whose
    elements statekit does not delimit, goes back as its bytes."""
    from statekit.savepoint.flink_out import write_flink

    out = write_flink(JAVA_1, tmp_path / "same", flink_version="1.20")
    (a, sa), (b, sb) = _state(Savepoint.open(JAVA_1), "history", "visits"), _state(Savepoint.open(out), "history", "visits")
    assert a == b and sa == sb and len(a) == 60


def test_the_report_and_json_through_the_cli(tmp_path):
    res = CliRunner().invoke(app, ["upgrade", str(JAVA_1), str(tmp_path / "up"), "--to-flink", "2.3",
                                   "--classpath", str(CP_1[0]), "--uid", "lists", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["to_flink"] == "2.3" and len(doc["states"]) == 7
    recent = next(s for s in doc["states"] if s["state"] == "recent")
    assert recent["operator"] == "lists" and recent["how"] == "Kryo java.util.List -> NullableSerializer(List<string>)"
    res = CliRunner().invoke(app, ["upgrade", str(JAVA_1), str(tmp_path / "up2"), "--to-flink", "2.3",
                                   "--classpath", str(CP_1[0])])
    assert res.exit_code == 0 and res.output.startswith("upgraded "), res.output


@pytest.mark.parametrize("version, why", [("2.7", "not a version statekit writes"), ("1.20", "1.x line"),
                                          ("three", "is not a Flink version")])
def test_an_unknown_or_1x_target_version_is_refused(tmp_path, version, why):
    before = _digest(JAVA_1)
    with pytest.raises(InvalidArgumentError, match=why):
        upgrade(JAVA_1, tmp_path / "up", to_flink=version, classpath=CP_1)
    assert not (tmp_path / "up").exists() and _digest(JAVA_1) == before


def test_a_custom_kryo_serializer_state_is_refused_by_name(tmp_path):
    src = PAIRS / "custom-kryo-1.20" / "savepoint"
    before = _digest(src)
    with pytest.raises(CustomKryoSerializerError, match=r"state 'simple' of operator 'simple'.*SimpleKryoSerializer.*--drop"):
        upgrade(src, tmp_path / "up", to_flink="2.3", classpath=CP_1, uids=UIDS)
    assert not (tmp_path / "up").exists() and _digest(src) == before
    # left out, the rest migrates (Simple's registration holds no value of the other states)
    report = upgrade(src, tmp_path / "up", to_flink="2.3", classpath=CP_1, uids=UIDS, drop=["simple/simple"])
    assert {s.state: s.action for s in report.states}["simple"] == "dropped"
    # or carried as it is, on the user's word (the restore test shows Flink 2.3 then reads it with that serializer)
    report = upgrade(src, tmp_path / "kept", to_flink="2.3", classpath=CP_1, uids=UIDS, keep=["simple/simple"])
    simple = next(s for s in report.states if s.state == "simple")
    assert simple.action == "kept" and "not checked" in simple.how
    assert _digest(src) == before


def test_kryo_classes_without_the_jobs_classes_are_refused(tmp_path):
    with pytest.raises(UpgradeRefusedError, match=r"UpgradeModel\$Profile is not on a classpath.*--classpath"):
        upgrade(JAVA_1, tmp_path / "up", to_flink="2.3", uids=UIDS)
    assert not (tmp_path / "up").exists()


def test_a_scala_case_class_needs_the_pojo_the_2x_job_declares(tmp_path):
    src = PAIRS / "scala-hashmap-1.20" / "savepoint"
    with pytest.raises(UpgradeRefusedError, match=r"case class \(statekit.upgrade.Reading\).*--pojo UID/STATE"):
        upgrade(src, tmp_path / "up", to_flink="2.3", classpath=[PAIRS / "scala-classes-1.20.jar"])
    with pytest.raises(InvalidArgumentError, match="not in"):
        upgrade(src, tmp_path / "up", to_flink="2.3", pojos={"readings/nope": "x.Y"})
    assert not (tmp_path / "up").exists()


def test_an_already_2x_savepoint_is_refused(tmp_path):
    with pytest.raises(InvalidArgumentError, match="already a Flink 2"):
        upgrade(PAIRS / "hashmap-2.3" / "savepoint", tmp_path / "up", to_flink="2.3")
