"""Every command through the installed executable and typer's runner, on savepoints from the runtime and
the writer: exit codes, --json equal to the library's answers, dry runs that write nothing, repairs that
restore into the runtime, and bad input answered with one line and nothing written."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import statekit
from statekit.demo import write_demo_savepoint
from statekit.runtime import (
    CheckpointedFunction,
    KeyedBroadcastProcessFunction,
    MapFunction,
    StreamExecutionEnvironment,
)
from statekit.savepoint import Savepoint, SavepointBuilder, check
from statekit.state.descriptors import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
from statekit.testing import tree_digest

from .conftest import run_executable, run_runner

RULES = MapStateDescriptor("rules", "string", "bigint")


class Accounts(KeyedBroadcastProcessFunction):
    """Every keyed state kind and an event-time timer per key; broadcast rules."""

    def open(self, ctx):
        self.total = ctx.get_state(ValueStateDescriptor("total", "bigint"))
        self.stats = ctx.get_state(ValueStateDescriptor("stats", "struct<n:bigint,last:bigint>"))
        self.history = ctx.get_list_state(ListStateDescriptor("history", "bigint"))
        self.by_kind = ctx.get_map_state(MapStateDescriptor("by_kind", "string", "bigint"))

    def process_element(self, value, ctx):
        key, amount = value
        self.total.update((self.total.value() or 0) + amount)
        stats = self.stats.value() or {"n": 0, "last": 0}
        self.stats.update({"n": stats["n"] + 1, "last": amount})
        self.history.add(amount)
        kind = "big" if amount > 50 else "small"
        self.by_kind.put(kind, (self.by_kind.get(kind) or 0) + 1)
        ctx.timer_service().register_event_time_timer(10_000 + amount)
        return iter(())

    def process_broadcast_element(self, value, ctx):
        ctx.get_broadcast_state(RULES).put(value[0], value[1])


class Offsets(MapFunction, CheckpointedFunction):
    """Operator list state and union list state."""

    def initialize_state(self, ctx):
        store = ctx.get_operator_state_store()
        self.items = store.get_list_state(ListStateDescriptor("items", "bigint"))
        self.union = store.get_union_list_state(ListStateDescriptor("everyone", "string"))

    def open(self, rc):
        self.index = rc.get_index_of_this_subtask()

    def map(self, value):
        return value

    def snapshot_state(self, ctx):
        self.items.update([self.index * 100 + i for i in range(3)])
        self.union.update([f"subtask-{self.index}"])


def run_job(path: Path, records, *, restore: Path | None = None) -> None:
    # A restored source resumes from its checkpointed offset (as in Flink): new input gets a new source uid.
    env = StreamExecutionEnvironment(parallelism=2, max_parallelism=128)
    rules = env.from_collection([("limit", 75)]).uid("rules-in").broadcast(RULES)
    source = "tx-source" if restore is None else "tx-source-day-2"
    stream = env.from_collection(records).uid(source).map(Offsets()).uid("offsets")
    keyed = stream.key_by(lambda v: v[0], key_type="bigint")
    keyed.connect(rules).process(Accounts()).uid("accounts")
    env.execute("accounts", final_savepoint=path, restore_from=restore, allow_non_restored_state=restore is not None)


RECORDS = [(i % 40, (i * 37) % 100) for i in range(400)]


@pytest.fixture(scope="module")
def runtime_sp(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("runtime") / "sp"
    run_job(path, RECORDS)
    return path


@pytest.fixture(scope="module")
def writer_sp(tmp_path_factory) -> Path:
    return write_demo_savepoint(tmp_path_factory.mktemp("writer") / "sp", users=300)


def _json(result) -> object:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _norm(value):
    """The library's Python values as the CLI's JSON shows them."""
    from statekit_cli.render import jsonable

    return json.loads(json.dumps(jsonable(value)))


# -- read commands ----------------------------------------------------------------------------------
def test_inspect_json_is_the_manifest(cli, runtime_sp, writer_sp):
    for path in (runtime_sp, writer_sp):
        assert _json(cli(["inspect", path, "--json"])) == Savepoint.open(path).metadata
    text = cli(["inspect", runtime_sp])
    assert text.exit_code == 0
    for word in ("accounts", "tx-source", "offsets", "struct<n:bigint,last:bigint>", "operator union"):
        assert word in text.stdout


def test_get_answers_as_the_library(cli, runtime_sp):
    sp = Savepoint.open(runtime_sp)
    assert _json(cli(["get", runtime_sp, "--uid", "accounts", "--key", "7", "--json"])) == _norm(sp.get("accounts", 7))
    one = _json(cli(["get", runtime_sp, "--uid", "accounts", "--key", "7", "--state", "stats", "--json"]))
    assert one == _norm(sp.get("accounts", 7)["stats"])
    by_hash = cli(["get", runtime_sp, "--hash", sp.operator("accounts").uid_hash, "--key", "7", "--json"])
    assert _json(by_hash) == _norm(sp.get("accounts", 7))
    both = cli(["get", runtime_sp, "--uid", "accounts", "--hash", sp.operator("accounts").uid_hash, "--key", "7"])
    neither = cli(["get", runtime_sp, "--key", "7"])
    bad_hash = cli(["get", runtime_sp, "--hash", "not-a-hash", "--key", "7"])
    for result in (both, neither, bad_hash):
        assert result.exit_code == 2 and "Traceback" not in result.output, result.output
        assert len(result.stderr.strip().splitlines()) == 1 or not result.stderr, result.output
    assert "--uid" in neither.output and "--hash" in neither.output
    missing = cli(["get", runtime_sp, "--uid", "accounts", "--key", "999"])
    assert missing.exit_code == 1 and "key not found" in missing.output


def test_show_limit_says_n_of_m_and_formats(cli, writer_sp):
    sp = Savepoint.open(writer_sp)
    result = cli(["show", writer_sp, "--uid", "accounts", "--limit", "5", "--values", "--json"])
    rows = _json(result)
    assert len(rows) == 5 and "5 of 300 rows" in result.stderr
    full = {r["key"]: r for r in _norm(sp.keyed_table("accounts").to_pylist())}
    assert all(full[r["key"]] == r for r in rows)
    csv_text = cli(["show", writer_sp, "--uid", "accounts", "--key", "user-00042", "--values", "--format", "csv"])
    assert csv_text.exit_code == 0 and csv_text.stdout.splitlines()[1].startswith("user-00042,433.5,")
    missing = cli(["show", writer_sp, "--uid", "accounts", "--key", "nobody"])
    assert missing.exit_code == 1 and "key not found" in missing.output
    masked = cli(["show", writer_sp, "--uid", "accounts", "--limit", "2"])
    assert "•••" in masked.stdout and "--values" in masked.stderr


def test_show_every_table_kind(cli, runtime_sp):
    sp = Savepoint.open(runtime_sp)
    timers = _json(cli(["show", runtime_sp, "--uid", "accounts", "--table", "timers", "--limit", "1000", "--json"]))
    assert len(timers) == sp.timers("accounts").num_rows
    union = _json(cli(["show", runtime_sp, "--uid", "offsets", "--table", "everyone", "--values", "--json"]))
    assert union == _norm(sp.union_state("offsets", "everyone").to_pylist())
    rules = _json(cli(["show", runtime_sp, "--uid", "accounts", "--table", "rules", "--values", "--json"]))
    assert rules == [{"key": "limit", "value": 75}]


def test_check_json_and_damage(cli, writer_sp, tmp_path):
    report = _json(cli(["check", writer_sp, "--json"]))
    assert report["ok"] is True and report["problems"] == []
    damaged = tmp_path / "a-damaged-savepoint-with-a-rather-long-directory-name"
    shutil.copytree(writer_sp, damaged)
    victim = sorted(damaged.glob("op-*/keyed/*.parquet"))[0]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    before = tree_digest(damaged)
    narrow = cli(["check", damaged], env={"COLUMNS": "60"})
    assert narrow.exit_code == 1
    rel = str(victim.relative_to(damaged))
    assert any(rel in line for line in narrow.stdout.splitlines())  # the full name, on one line
    as_json = json.loads(cli(["check", damaged, "--json"]).stdout)
    assert as_json["ok"] is False and as_json["problems"][0]["kind"] == "checksum_mismatch"
    assert tree_digest(damaged) == before


def test_narrow_terminal_never_splits_identifiers(writer_sp, tmp_path):
    """In a (forced) 60-column terminal a table that does not fit becomes lines per row; ids stay whole."""
    for args in (["inspect", writer_sp], ["show", writer_sp, "--uid", "accounts", "--limit", "3", "--values"]):
        result = run_executable(args, env={"COLUMNS": "60", "FORCE_COLOR": "1", "TTY_COMPATIBLE": "1"})
        assert result.exit_code == 0, result.output
        plain = re.sub(r"\x1b\[[0-9;]*m", "", result.stdout)
        if args[0] == "inspect":
            assert "14cfd403e0929194539014eaed9ae6ed" in plain and "transactions-source" in plain
        else:
            assert "user-00" in plain


def test_diff(cli, runtime_sp, tmp_path):
    same = cli(["diff", runtime_sp, runtime_sp])
    assert same.exit_code == 0 and "same" in same.stdout
    target = tmp_path / "changed"
    assert run_runner(["set", runtime_sp, target, "--uid", "accounts", "--key", "7", "--state", "total", "--value",
                       "1", "--apply"]).exit_code == 0
    assert run_runner(["delete-key", target, tmp_path / "changed2", "--uid", "accounts", "--key", "8",
                       "--apply"]).exit_code == 0
    d = cli(["diff", runtime_sp, tmp_path / "changed2", "--json"])
    assert d.exit_code == 1
    data = json.loads(d.stdout)
    acc = next(o for o in data["operators"] if o["uid"] == "accounts")
    assert (acc["keys_changed"], acc["keys_removed"], acc["keys_added"]) == (1, 1, 0)
    assert acc["examples"] == {"added": [], "removed": [8], "changed": [7]}
    from statekit.savepoint.diff import diff

    assert data == _norm(diff(runtime_sp, tmp_path / "changed2").to_json())


def test_diff_of_timers_and_operator_state_rows(cli, tmp_path):
    from statekit.state import OperatorStateInfo

    def write(path, timers, items, rates):
        with SavepointBuilder(path, checkpoint_id=1) as b:
            op = b.add_operator("timed", key_type="bigint", keyed_states=[ValueStateDescriptor("n", "bigint")])
            op.write_keyed(pa.table({"key": [1], "n": [1]}))
            op.write_timers(pa.table({"key": [1] * len(timers), "timestamp": timers, "domain": ["event"] * len(timers)}))
            ops = b.add_operator("ops")
            ops.write_list_state(OperatorStateInfo("items", "split", "bigint"), [items])
            ops.write_broadcast_state(OperatorStateInfo("rates", "broadcast", "double", key_type="string"), rates)
        return path

    a = write(tmp_path / "a", [10, 20], [1, 2], {"EUR": 1.1})
    b = write(tmp_path / "b", [10, 30], [2, 2, 3], {"EUR": 1.2, "USD": 1.0})
    shown = cli(["diff", a, b])
    assert shown.exit_code == 1, shown.output
    plain = " ".join(shown.stdout.split())
    for text in ("1 timer(s) added", "1@30 event", "1 timer(s) removed", "1@20 event",
                 "state items: 2 row(s) added", "state items: 1 row(s) removed",
                 "state rates: 1 row(s) added", "state rates: 1 row(s) changed"):  # fmt: skip
        assert text in plain, (text, shown.stdout)
    data = json.loads(cli(["diff", a, b, "--json"]).stdout)
    by_uid = {o["uid"]: o for o in data["operators"]}
    assert (by_uid["timed"]["timers_added"], by_uid["timed"]["timers_removed"]) == (1, 1)
    assert by_uid["ops"]["state_rows"] == {"items": {"added": 2, "removed": 1, "changed": 0},
                                           "rates": {"added": 1, "removed": 0, "changed": 1}}  # fmt: skip


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_export(cli, runtime_sp, tmp_path, fmt):
    out = tmp_path / f"out-{fmt}"
    result = cli(["export", runtime_sp, out, "--format", fmt])
    assert result.exit_code == 0, result.output
    sp = Savepoint.open(runtime_sp)
    if fmt == "parquet":
        assert pq.read_table(out / "accounts" / "keyed.parquet").num_rows == sp.keyed_table("accounts").num_rows
        assert pq.read_table(out / "offsets" / "items.parquet").to_pylist() == sp.list_state("offsets", "items").to_pylist()
    else:
        assert (out / "accounts" / "keyed.csv").read_text().count("\n") == sp.keyed_table("accounts").num_rows + 1
    again = cli(["export", runtime_sp, out, "--format", fmt])
    assert again.exit_code == 2 and "OutputExistsError" in again.output


# -- query on DuckDB ----------------------------------------------------------------------------------
def test_query_json_equals_statekit_sql(cli, runtime_sp):
    q = "SELECT key, total, stats.n AS n, len(history) AS h FROM accounts.keyed WHERE key IN (3, 7) ORDER BY key"
    rows = _json(cli(["query", runtime_sp, q, "--json"]))
    assert rows == _norm(statekit.sql(runtime_sp, q).to_pylist())
    sp = Savepoint.open(runtime_sp)
    assert [r["total"] for r in rows] == [sp.get("accounts", 3)["total"], sp.get("accounts", 7)["total"]]
    csv_rows = cli(["query", runtime_sp, "SELECT count(*) AS n FROM accounts.timers", "--format", "csv"])
    assert csv_rows.stdout.splitlines() == ["n", str(sp.timers("accounts").num_rows)]


def test_query_bad_sql_is_one_line_listing_the_tables(cli, runtime_sp):
    bad = cli(["query", runtime_sp, "SELECT * FROM nowhere.keyed"])
    assert bad.exit_code == 2
    assert "accounts: keyed, timers, rules" in bad.stderr and "offsets: items, everyone" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1 and "Traceback" not in bad.output


def test_query_registers_only_named_tables_and_prunes_key_groups(runtime_sp):
    from statekit.query import connect

    q = "SELECT * FROM accounts.keyed WHERE key = 7"
    con = connect(runtime_sp, q)
    views = con.execute("SELECT schema_name, view_name, sql FROM duckdb_views() WHERE NOT internal "
                        "AND schema_name <> 'main'").fetchall()
    assert [(s, v) for s, v, _ in views] == [("accounts", "keyed")]
    meta = Savepoint.open(runtime_sp).operator("accounts")
    from statekit.keygroups import assign_to_key_group

    kg = assign_to_key_group(7, meta.max_parallelism, "bigint")
    wanted = [f.path for f in meta.files_of("keyed") if f.covers(kg)]
    others = [f.path for f in meta.files_of("keyed") if not f.covers(kg)]
    assert wanted and others, "the savepoint should have several keyed files"
    assert all(p in views[0][2] for p in wanted) and not any(p in views[0][2] for p in others)
    assert con.sql(q).fetchall() == connect(runtime_sp).sql(q).fetchall()


def test_sql_relation_chains(runtime_sp):
    from statekit.query import sql_relation

    rel = sql_relation(runtime_sp, "SELECT key, total FROM accounts.keyed")
    assert rel.filter("key < 3").order("key").fetchall() == [
        (k, Savepoint.open(runtime_sp).get("accounts", k)["total"]) for k in range(3)]


# -- repairs ------------------------------------------------------------------------------------------
def test_set_dry_run_writes_nothing_then_apply_restores(cli, runtime_sp, tmp_path):
    before = tree_digest(runtime_sp)
    target = tmp_path / "fixed"
    args = ["set", runtime_sp, target, "--uid", "accounts", "--key", "7", "--state", "total", "--value", "1000000"]
    dry = cli(args)
    assert dry.exit_code == 0 and "would write" in dry.stdout and "dry run" in dry.stderr
    assert not target.exists() and not list(tmp_path.iterdir())
    applied = cli(args + ["--apply"])
    assert applied.exit_code == 0, applied.output
    assert tree_digest(runtime_sp) == before and check(target).ok
    assert Savepoint.open(target).get("accounts", 7)["total"] == 1_000_000
    # The repaired savepoint restores into the job, and the change is visible in what it does next.
    after = tmp_path / "after"
    run_job(after, [(7, 5)], restore=target)
    assert Savepoint.open(after).get("accounts", 7)["total"] == 1_000_005
    again = cli(args + ["--apply"])  # existing target: refused, untouched
    assert again.exit_code == 2 and "SavepointExistsError" in again.output
    dry_existing = cli(args)
    assert dry_existing.exit_code == 2 and "would fail" in dry_existing.output


def test_set_struct_map_and_list_values(runtime_sp, tmp_path):
    t = tmp_path / "t"
    r = run_runner(["repair", runtime_sp, t, "--plan", _plan(tmp_path, [
        {"edit": "set", "uid": "accounts", "key": 1, "state": "stats", "value": {"n": 9, "last": 3}},
        {"edit": "set", "uid": "accounts", "key": 1, "state": "by_kind", "value": {"big": 2}},
        {"edit": "set", "uid": "accounts", "key": 1000, "state": "history", "value": [1, 2]},
        {"edit": "delete-key", "uid": "accounts", "keys": [2, 3]},
        {"edit": "rm-state", "uid": "offsets", "state": "items"},
        {"edit": "rename-uid", "uid": "tx-source", "new_uid": "tx-source-v2"},
    ]), "--apply"])
    assert r.exit_code == 0, r.output
    sp = Savepoint.open(t)
    got = sp.get("accounts", 1)
    assert got["stats"] == {"n": 9, "last": 3} and got["by_kind"] == {"big": 2}
    assert sp.get("accounts", 1000) == {"total": None, "stats": None, "history": [1, 2], "by_kind": None}
    assert sp.get("accounts", 2) is None and sp.get("accounts", 3) is None
    assert 2 not in sp.timers("accounts").column("key").to_pylist()
    assert [s.name for s in sp.operator("offsets").operator_states] == ["everyone"]
    assert sp.operator("tx-source-v2").uid == "tx-source-v2"
    assert len([p for p in tmp_path.iterdir() if p.is_dir()]) == 1  # one savepoint for six edits
    assert check(t).ok


def _plan(tmp_path: Path, edits: list) -> Path:
    p = tmp_path / "plan.json"
    p.write_text(json.dumps(edits))
    return p


def test_noop_repairs_say_so_and_write_nothing(cli, runtime_sp, tmp_path):
    target = tmp_path / "same"
    for args in (["rename-uid", runtime_sp, target, "--uid", "accounts", "--new-uid", "accounts", "--apply"],
                 ["rename-uid", runtime_sp, target, "--from", "accounts", "--to", "accounts", "--apply"],
                 ["set-max-parallelism", runtime_sp, target, "--uid", "accounts", "--max", "128", "--apply"],
                 ["delete-key", runtime_sp, target, "--uid", "accounts", "--key", "12345", "--apply"]):
        result = cli(args)
        assert result.exit_code == 0, result.output
        assert "nothing to change" in result.stdout and not target.exists()


def test_rm_state_rekey_and_rescale(cli, runtime_sp, tmp_path):
    sp = Savepoint.open(runtime_sp)
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    assert cli(["rm-state", runtime_sp, a, "--uid", "accounts", "--state", "history", "--apply"]).exit_code == 0
    assert [s.name for s in Savepoint.open(a).operator("accounts").keyed_states] == ["total", "stats", "by_kind"]
    result = cli(["rekey", a, b, "--uid", "accounts", "--expr", "key + 1000", "--apply"])
    assert result.exit_code == 0, result.output
    assert Savepoint.open(b).get("accounts", 1007)["total"] == sp.get("accounts", 7)["total"]
    assert sorted(Savepoint.open(b).timers("accounts").column("key").to_pylist())[0] >= 1000
    collide = cli(["rekey", a, tmp_path / "x", "--uid", "accounts", "--expr", "key % 2", "--apply"])
    assert collide.exit_code == 1 and "DuplicateKeyError" in collide.output and not (tmp_path / "x").exists()
    assert cli(["set-max-parallelism", b, c, "--uid", "accounts", "--max", "256", "--apply"]).exit_code == 0
    assert Savepoint.open(c).operator("accounts").max_parallelism == 256 and check(c).ok


@pytest.mark.parametrize("kind", ["parquet", "csv", "jsonl"])
def test_bootstrap(cli, tmp_path, kind):
    data = pa.table({"user": ["a", "b", "c"], "amount": [1.5, -2.0, 3.25], "visits": [1, 2, 3]})
    path = tmp_path / f"in.{kind}"
    if kind == "parquet":
        pq.write_table(data, path)
    elif kind == "csv":
        import pyarrow.csv as pcsv

        pcsv.write_csv(data, path)
    else:
        path.write_text("\n".join(json.dumps(r) for r in data.to_pylist()) + "\n")
    target = tmp_path / "boot"
    args = ["bootstrap", path, target, "--uid", "balances", "--key", "user", "--state", "balance=amount:double",
            "--state", "visits", "--max-parallelism", "128"]
    dry = cli(args)
    assert dry.exit_code == 0 and "would write" in dry.stdout and not target.exists()
    assert cli(args + ["--apply"]).exit_code == 0
    sp = Savepoint.open(target)
    assert sp.get("balances", "b") == {"balance": -2.0, "visits": 2}
    assert check(target).ok


# -- bad input: exit 1 or 2, one clear line, nothing written ---------------------------------------
@pytest.mark.parametrize("args, code, words", [
    (["inspect", "{tmp}"], 2, "NotASavepointError"),
    (["get", "{sp}", "--uid", "nope", "--key", "1"], 2, "UnknownOperatorError"),
    (["get", "{sp}", "--uid", "accounts", "--key", "seven"], 2, "not an integer"),
    (["set", "{sp}", "{tmp}/t", "--uid", "accounts", "--key", "1", "--state", "total", "--value", "{{bad"], 2,
     "not JSON"),
    (["set", "{sp}", "{tmp}/t", "--uid", "accounts", "--key", "1", "--state", "total", "--value", '"text"'], 2,
     "does not fit"),
    (["set", "{sp}", "{tmp}/t", "--uid", "accounts", "--key", "1", "--state", "nope", "--value", "1"], 2,
     "UnknownStateError"),
    (["rm-state", "{sp}", "{sp}", "--uid", "accounts", "--state", "total", "--apply"], 2, "InvalidTargetError"),
    (["show", "{sp}", "--uid", "accounts", "--format", "xml"], 2, "--format"),
])
def test_bad_input(cli, runtime_sp, tmp_path, args, code, words):
    before = tree_digest(runtime_sp)
    argv = [a.format(sp=runtime_sp, tmp=tmp_path) for a in args]
    result = cli(argv, env={"COLUMNS": "60"})
    assert result.exit_code == code, result.output
    assert words in result.output and "Traceback" not in result.output
    assert len([line for line in result.stderr.splitlines() if line.strip()]) == 1, result.stderr
    assert list(tmp_path.iterdir()) == [] and tree_digest(runtime_sp) == before


def test_debug_shows_the_traceback(tmp_path):
    result = run_executable(["--debug", "inspect", tmp_path])
    assert result.exit_code != 0 and "Traceback" in result.stderr


def test_version_and_completion():
    assert run_executable(["--version"]).stdout.strip() == f"statekit {statekit.__version__}"
    # typer detects the calling shell and lets it override the one named (under `sh`, as when the suite runs
    # detached: "Shell sh not supported"); its own tests' switch makes the named shell count
    shown = run_executable(["--show-completion", "bash"], env={"_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"})
    assert shown.exit_code == 0 and "complete" in shown.stdout


def test_plain_output_into_pipes(writer_sp):
    result = run_executable(["inspect", writer_sp])
    assert "\x1b[" not in result.stdout and "│" not in result.stdout and "─" not in result.stdout


@pytest.mark.spark
def test_export_delta_then_bootstrap_from_it(spark, runtime_sp, tmp_path):
    out = tmp_path / "delta"
    result = run_runner(["export", runtime_sp, out, "--format", "delta", "--uid", "accounts"])
    assert result.exit_code == 0, result.output
    assert (out / "accounts" / "keyed" / "_delta_log").is_dir()
    target = tmp_path / "boot"
    boot = run_runner(["bootstrap", out / "accounts" / "keyed", target, "--uid", "totals", "--key", "key",
                       "--state", "total", "--max-parallelism", "128", "--apply"])
    assert boot.exit_code == 0, boot.output
    sp, src = Savepoint.open(target), Savepoint.open(runtime_sp)
    assert sp.get("totals", 7) == {"total": src.get("accounts", 7)["total"]}
    assert sp.keyed_table("totals").num_rows == src.keyed_table("accounts").num_rows


def test_get_reads_only_its_key_groups_file(cli, tmp_path):
    """With every other keyed file damaged, `get` still answers: it reads the file of the key's group only."""
    from statekit.keygroups import assign_to_key_group

    sp_path = tmp_path / "sp"
    with SavepointBuilder(sp_path, checkpoint_id=1, rows_per_file=200) as b:
        b.add_operator("counter", parallelism=2, max_parallelism=128, key_type="bigint",
                       keyed_states=[ValueStateDescriptor("count", "bigint")]
                       ).write_keyed(pa.table({"key": list(range(2000)), "count": list(range(2000))}))
    meta = Savepoint.open(sp_path).operator("counter")
    kg = assign_to_key_group(42, meta.max_parallelism, "bigint")
    files = meta.files_of("keyed")
    assert len(files) > 2
    for f in files:
        if not f.covers(kg):
            (sp_path / f.path).write_bytes(b"damaged")
    assert _json(cli(["get", sp_path, "--uid", "counter", "--key", "42", "--json"])) == {"count": 42}
    assert cli(["check", sp_path, "--quick"]).exit_code == 1
