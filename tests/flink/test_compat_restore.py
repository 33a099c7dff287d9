"""Issue 25 part 3: `compat OLD NEW` agrees with real Flink 2.3.0 restores. OLD is the corpus savepoint; each NEW is the
savepoint of a new job version (the corpus job with one change), written with that version's serializers (the
corpus's own snapshots for what did not change, Flink's serializers for the new types); the truth is a real restore of
OLD into that job version (all in one JVM). The Kryo <-> POJO pairs are two savepoints Flink wrote of the same POJO
class, once with its KryoSerializer and once with its PojoSerializer (tests/fixtures/flink/kryo-pojo)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from statekit.format.flink.serializers_out import FlinkPojo
from statekit.savepoint import Savepoint, SavepointBuilder
from statekit.savepoint.compat import compat
from statekit.savepoint.convert import convert_to_statekit
from statekit.savepoint.flink_out import write_flink
from statekit.savepoint.transforms import link_operator, remove_operator, with_max_parallelism
from statekit.state.descriptors import StateInfo
from statekit.types import parse_ddl
from statekit_cli.app import app

from .conftest import CORPUS
from .test_kit_repairs_restore import _spec

pytestmark = pytest.mark.flink

OLD = CORPUS / "long-hashmap-canonical" / "savepoint"
VALUE_POJO = "statekit.flinkreal.Model$ValuePojo"


def _dummy(t: pa.DataType):
    """A non-null value of `t` (the new job's state needs one key to be listed with its serializer)."""
    if pa.types.is_struct(t):
        return {f.name: _dummy(f.type) for f in t}
    if pa.types.is_list(t):
        return [_dummy(t.value_type)]
    if pa.types.is_map(t):
        return [(_dummy(t.key_type), _dummy(t.item_type))]
    if pa.types.is_string(t):
        return "x"
    if pa.types.is_boolean(t):
        return True
    if pa.types.is_binary(t):
        return b"x"
    if pa.types.is_floating(t):
        return 1.5
    return 1


def _retyped(sk: Path, out: Path, op: str, changes: dict[str, tuple[str, str] | None], hints=None) -> Path:
    """The new job version's savepoint: `op` of the statekit savepoint `sk` with states retyped or added (name ->
    (kind, DDL)) or dropped (None); what did not change keeps the corpus's serializer snapshots."""
    sp = Savepoint.open(sk)
    staged = out.with_name(out.name + "-sk")
    with SavepointBuilder(staged, checkpoint_id=sp.checkpoint_id) as b:
        for m in sp.operators:
            if m.uid != op:
                link_operator(b, sp, m, m.identifier)
                continue
            states = [s for s in m.keyed_states if s.name not in changes]
            states += [StateInfo(n, kind, ddl) for n, c in changes.items() if c is not None for kind, ddl in [c]]
            kept = {s.name for s in m.keyed_states if s.name not in changes}
            assert m.flink is not None
            fl = type(m.flink)(m.flink.key, tuple((n, r) for n, r in m.flink.states if n in kept), m.flink.timers,
                               m.flink.operator_states, m.flink.flink_version)
            w = b.add_operator(m.identifier, name=m.name, parallelism=m.parallelism, max_parallelism=m.max_parallelism,
                               key_type=m.key_type, keyed_states=states, flink=fl)
            cols: dict = {"key": pa.array([0], parse_ddl(m.key_type))}
            for s in states:
                col_t = parse_ddl(s.type)
                cols[s.name] = pa.array([_dummy(col_t)], col_t)
            w.write_keyed(pa.table(cols))
    write_flink(staged, out, types=hints)
    return out


def _old_pojo(sk: Path, out: Path, fields: str, names: tuple[str, ...]) -> Path:
    """The corpus with `types.v_pojo` as an older `ValuePojo` had it: only the fields `names` (DDL `fields`), written
    with those values; everything else as the corpus holds it."""
    sp = Savepoint.open(sk)
    staged = out.with_name(out.name + "-sk")
    with SavepointBuilder(staged, checkpoint_id=sp.checkpoint_id) as b:
        for m in sp.operators:
            if m.uid != "types":
                link_operator(b, sp, m, m.identifier)
                continue
            assert m.flink is not None
            fl = type(m.flink)(m.flink.key, tuple((n, r) for n, r in m.flink.states if n != "v_pojo"), m.flink.timers,
                               m.flink.operator_states, m.flink.flink_version)
            states = [s if s.name != "v_pojo" else StateInfo("v_pojo", "value", fields) for s in m.keyed_states]
            w = b.add_operator(m.identifier, name=m.name, parallelism=m.parallelism, max_parallelism=m.max_parallelism,
                               key_type=m.key_type, keyed_states=states, flink=fl)
            t = sp.keyed_table(m.identifier)
            old = t.column("v_pojo").to_pylist()
            t = t.set_column(t.schema.get_field_index("v_pojo"), "v_pojo", pa.array(
                [{n: (v[n] if n in v else 7) for n in names} if v else None for v in old], parse_ddl(fields)))
            w.write_keyed(t)
    write_flink(staged, out, types={"types": {"v_pojo": FlinkPojo(VALUE_POJO, names)}})
    return out


def _pairs(tmp: Path) -> list[tuple[str, Path, dict]]:
    sk = convert_to_statekit(OLD, tmp / "old-sk", include_stateless=True)
    base = _spec()
    counter = base["operators"][0]

    def spec(fn) -> dict:
        s = copy.deepcopy(base)
        fn(s)
        return s

    def states(s: dict, uid: str) -> list:
        return next(o for o in s["operators"] if o["uid"] == uid)["states"]

    def retype(s: dict, uid: str, name: str, **kw) -> None:
        for st in states(s, uid):
            if st["name"] == name:
                st.update(kw)

    out = []
    out.append(("same job", OLD, base))
    out.append(("stateful uid removed", remove_operator(OLD, tmp / "no-buffer", "buffer").target,
                spec(lambda s: s["operators"].remove(next(o for o in s["operators"] if o["uid"] == "buffer")))))
    out.append(("stateless uid removed", remove_operator(OLD, tmp / "no-src", "src").target,
                spec(lambda s: s["operators"].remove(next(o for o in s["operators"] if o["uid"] == "src")))))
    out.append(("state added", _retyped(sk, tmp / "added", "counter", {"extra": ("value", "bigint")}),
                spec(lambda s: states(s, "counter").append({"name": "extra", "kind": "value", "type": "bigint"}))))
    out.append(("state removed", _retyped(sk, tmp / "removed", "counter", {"recent": None}),
                spec(lambda s: states(s, "counter").remove(next(x for x in states(s, "counter")
                                                                 if x["name"] == "recent")))))
    out.append(("Long -> String", _retyped(sk, tmp / "l2s", "counter", {"count": ("value", "string")}),
                spec(lambda s: retype(s, "counter", "count", type="string"))))
    out.append(("list -> value", _retyped(sk, tmp / "l2v", "counter", {"recent": ("value", "string")}),
                spec(lambda s: retype(s, "counter", "recent", kind="value"))))
    out.append(("Integer -> Long", _retyped(sk, tmp / "i2l", "types", {"v_int": ("value", "bigint")}),
                spec(lambda s: retype(s, "types", "v_int", type="bigint"))))
    out.append(("map value Long -> String", _retyped(sk, tmp / "map", "counter",
                                                     {"per_kind": ("map", "map<string,string>")}),
                spec(lambda s: retype(s, "counter", "per_kind", type="string"))))
    out.append(("Row field added", _retyped(sk, tmp / "row3", "types",
                                            {"v_row": ("value", "struct<kind:string,value:bigint,n:int>")}),
                spec(lambda s: retype(s, "types", "v_row", type="struct<kind:string,value:bigint,n:int>"))))
    out.append(("POJO -> Row", _retyped(sk, tmp / "pojo2row", "types",
                                        {"v_pojo": ("value", "struct<label:string,total:bigint>")}),
                spec(lambda s: retype(s, "types", "v_pojo", type="struct<label:string,total:bigint>"))))
    out.append(("Row -> POJO", _retyped(sk, tmp / "row2pojo", "types",
                                        {"v_row": ("value", "struct<label:string,total:bigint>")},
                                        hints={"types": {"v_row": FlinkPojo(VALUE_POJO, ("label", "total"))}}),
                spec(lambda s: retype(s, "types", "v_row", type=f"pojo<{VALUE_POJO}>"))))
    rekeyed = write_flink(OLD, tmp / "rekeyed", rekey={"counter": lambda k: str(k)}, key_types={"counter": "string"})
    out.append(("key type Long -> String", rekeyed, spec(lambda s: s["operators"][0].update(key_type="string"))))
    out.append(("max parallelism 128 -> 256", with_max_parallelism(OLD, tmp / "mp", "counter", 256).target,
                spec(lambda s: s["operators"][0].update(max_parallelism=256))))
    assert counter is base["operators"][0]
    return out


def _old_pairs(tmp: Path) -> list[tuple[str, Path, dict]]:
    """Pairs whose OLD is an older job's savepoint and NEW the corpus (the job as it is now)."""
    sk = convert_to_statekit(OLD, tmp / "old-sk2", include_stateless=True)
    base = _spec()
    return [
        ("POJO field added", _old_pojo(sk, tmp / "pojo-label", "struct<label:string>", ("label",)), base),
        ("POJO field removed", _old_pojo(sk, tmp / "pojo-extra", "struct<extra:int,label:string,total:bigint>",
                                         ("extra", "label", "total")), base),
        ("POJO field type changed", _old_pojo(sk, tmp / "pojo-int", "struct<label:string,total:int>",
                                              ("label", "total")), base),
    ]


KRYO_POJO = Path(__file__).resolve().parents[1] / "fixtures" / "flink" / "kryo-pojo"


def _kryo_pojo_pairs() -> list[tuple[str, Path, Path, dict]]:
    """`ValuePojo` state written by Flink with its KryoSerializer (a generic type, as with ``enableForceKryo()``) and
    with its PojoSerializer (tests/fixtures/flink/kryo-pojo, `KryoPojoWrite`), restored into the other version."""
    def job(t: str) -> dict:
        return {"parallelism": 2, "operators": [{"uid": "pojo-state", "kind": "keyed", "key_type": "bigint",
                                                 "states": [{"name": "v", "kind": "value", "type": t}]}]}

    kryo, pojo = KRYO_POJO / "kryo", KRYO_POJO / "pojo"
    return [("Kryo -> POJO", kryo, pojo, job(f"pojo<{VALUE_POJO}>")),
            ("POJO -> Kryo", pojo, kryo, job(f"generic<{VALUE_POJO}>")),
            ("Kryo -> Kryo (same class)", kryo, kryo, job(f"generic<{VALUE_POJO}>"))]


def _cause(failure: str) -> str:
    """The root cause of a Flink failure (the harness reports the cause chain, one exception per line)."""
    return [ln for ln in failure.splitlines() if ln.strip()][-1][:400]


#: words the root cause of a failed restore has, per kind of finding compat gives for it
REASONS = {"operator-missing": ("allowNonRestoredState", "Cannot map"), "max-parallelism-changed": ("parallelism",),
           "key-type-changed": ("key serializer", "incompatible", "Incompatible"),
           "kind-changed": ("incompatible", "Incompatible", "type"),
           "serializer-incompatible": ("incompatible", "Incompatible", "migrat")}


def test_compat_agrees_with_real_restores(flink, tmp_path):
    pairs = [(name, OLD, new, job) for name, new, job in _pairs(tmp_path)]
    pairs += [(name, old, OLD, job) for name, old, job in _old_pairs(tmp_path)]
    pairs += _kryo_pojo_pairs()
    truth = flink.restore_many([(old, job) for _, old, _, job in pairs])
    table = []
    for (name, old, new, _), real in zip(pairs, truth):
        report = compat(old, new)
        restored = not isinstance(real, str)
        table.append((name, restored, report.restores, [f.change for f in report.findings if f.fails],
                      "" if restored else _cause(real)))
    print(json.dumps(table, indent=1))
    for name, restored, predicted, fails, why in table:
        assert predicted == restored, (name, restored, fails, why)
        if fails:  # and Flink failed for the reason compat gives
            assert any(w in why for w in REASONS[fails[0]]), (name, fails, why)
    assert len(table) >= 12 and sum(1 for t in table if not t[1]) >= 6  # failing and restoring pairs both
    by_name = {t[0]: t for t in table}
    assert not by_name["Kryo -> POJO"][1] and not by_name["POJO -> Kryo"][1] and by_name["Kryo -> Kryo (same class)"][1]
    restored_kryo = truth[[p[0] for p in pairs].index("Kryo -> Kryo (same class)")]
    assert not isinstance(restored_kryo, str)
    assert restored_kryo.keyed["pojo-state"] == {k: {"v": {"label": f"v-{k}", "total": 10 * k}} for k in range(10)}
    migrated = compat(next(p[1] for p in pairs if p[0] == "POJO field added"), OLD)
    assert [f.change for f in migrated.findings] == ["serializer-migrated"] and migrated.restores


def test_compat_cli_exit_codes_and_fixes(tmp_path):
    r = CliRunner().invoke(app, ["compat", str(OLD), str(OLD)])
    assert r.exit_code == 0 and "restores" in r.output
    new = with_max_parallelism(OLD, tmp_path / "mp", "counter", 256).target
    r = CliRunner().invoke(app, ["compat", str(OLD), str(new), "--json"])
    assert r.exit_code == 1
    doc = json.loads(r.output)
    (f,) = [f for f in doc["findings"] if f["fails"]]
    assert f["change"] == "max-parallelism-changed" and "set-max-parallelism" in f["fix"] and "--max 256" in f["fix"]
