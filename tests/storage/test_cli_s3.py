"""Every `statekit` command on URIs of a real S3 server, with ``--storage-option`` (before or after the command)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from s3_server import BUCKET
from typer.testing import CliRunner

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "flink"
EXECUTABLE = Path(sys.executable).parent / "statekit"


def run(args: list[str]):
    from statekit_cli.app import app

    result = CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


@pytest.fixture(scope="module")
def flink_uri(s3_server):
    return s3_server.upload_dir(FIXTURES / "2.3.0" / "long-hashmap-canonical" / "savepoint", "cli-s3/flink")


@pytest.fixture(scope="module")
def statekit_uri(s3_server, flink_uri):
    uri = f"s3://{BUCKET}/cli-s3/statekit"
    r = run(["convert", flink_uri, uri, *s3_server.cli_options()])
    assert r.exit_code == 0, r.output
    return uri


def test_read_commands(s3_server, flink_uri, statekit_uri):
    opts = s3_server.cli_options()
    for uri in (flink_uri, statekit_uri):
        r = run(["inspect", uri, "--json", *opts])
        assert r.exit_code == 0, r.output
        assert {o["uid"] for o in json.loads(r.stdout)["operators"]} >= {"counter"}
        r = run(["check", uri, *opts])
        assert r.exit_code == 0 and "OK" in r.stdout, r.output
        r = run(["get", uri, "--uid", "counter", "--key", "1", "--json", *opts])
        assert r.exit_code == 0 and json.loads(r.stdout)["count"] == 9, r.output
        r = run(["show", uri, "--uid", "counter", "--limit", "2", *opts])
        assert r.exit_code == 0, r.output
        r = run(["query", uri, "SELECT count(*) AS n FROM counter.keyed", "--format", "json", *opts])
        assert r.exit_code == 0 and json.loads(r.stdout)[0]["n"] == 10, r.output
    r = run(["diff", flink_uri, statekit_uri, "--uid", "counter", *opts])
    assert r.exit_code == 0, r.output


def test_options_before_the_command_and_from_the_environment(s3_server, flink_uri, monkeypatch):
    r = run([*s3_server.cli_options(), "inspect", flink_uri])
    assert r.exit_code == 0, r.output
    opts = s3_server.options()
    env = {"AWS_ACCESS_KEY_ID": opts["access_key"], "AWS_SECRET_ACCESS_KEY": opts["secret_key"],
           "AWS_ENDPOINT_URL": opts["endpoint_url"], "PATH": "/usr/bin:/bin"}
    p = subprocess.run([str(EXECUTABLE), "get", flink_uri, "--uid", "counter", "--key", "1", "--json"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0 and json.loads(p.stdout)["count"] == 9, p.stderr


def test_repairs_and_converts_write_to_s3(s3_server, statekit_uri):
    opts = s3_server.cli_options()
    base = f"s3://{BUCKET}/cli-s3/out"
    cases = {
        "set": ["set", statekit_uri, f"{base}/set", "--uid", "counter", "--key", "1", "--state", "count", "--value", "5"],
        "delete-key": ["delete-key", statekit_uri, f"{base}/del", "--uid", "counter", "--key", "1"],
        "rm-state": ["rm-state", statekit_uri, f"{base}/rm", "--uid", "counter", "--state", "sum"],
        "rename-uid": ["rename-uid", statekit_uri, f"{base}/ren", "--uid", "counter", "--new-uid", "c2"],
        "remove-operator": ["remove-operator", statekit_uri, f"{base}/rmop", "--uid", "types"],
        "set-max-parallelism": ["set-max-parallelism", statekit_uri, f"{base}/maxp", "--uid", "counter", "--max", "256"],
        "rekey": ["rekey", statekit_uri, f"{base}/rekey", "--uid", "counter", "--expr", "CASE WHEN key = 1000 THEN 1001 ELSE key END", "--engine", "local"],
    }
    for name, args in cases.items():
        dry = run([*args, *opts])
        assert dry.exit_code == 0, (name, dry.output)
        assert s3_server.keys(args[2].split(f"{BUCKET}/", 1)[1] + "/") == [], name  # a dry run writes nothing
        r = run([*args, "--apply", *opts])
        assert r.exit_code == 0, (name, r.output)
        assert run(["check", args[2], *opts]).exit_code == 0, name
    r = run(["get", f"{base}/set", "--uid", "counter", "--key", "1", "--json", *opts])
    assert json.loads(r.stdout)["count"] == 5
    r = run(["convert", "--to", "flink", f"{base}/set", f"{base}/flink", *opts])
    assert r.exit_code == 0, r.output
    r = run(["get", f"{base}/flink", "--uid", "counter", "--key", "1", "--json", *opts])
    assert json.loads(r.stdout)["count"] == 5
    again = run(["set", statekit_uri, f"{base}/set", "--uid", "counter", "--key", "1", "--state", "count",
                 "--value", "6", "--apply", *opts])
    assert again.exit_code == 2 and "already exists" in again.output


def test_errors_name_the_uri_without_credentials(s3_server, flink_uri):
    opts = s3_server.options()
    bad = ["--storage-option", f"endpoint_url={opts['endpoint_url']}", "--storage-option",
           f"access_key={opts['access_key']}", "--storage-option", "secret_key=NotTheSecretAtAll"]
    p = subprocess.run([str(EXECUTABLE), "inspect", flink_uri, *bad], capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and "StorageAccessError" in p.stderr and flink_uri in p.stderr
    assert "NotTheSecretAtAll" not in p.stderr + p.stdout and opts["access_key"] not in p.stderr + p.stdout
    r = run(["inspect", f"s3://{BUCKET}/cli-s3/nothing", *s3_server.cli_options()])
    assert r.exit_code == 2 and "not a savepoint" in r.output
    r = run(["inspect", flink_uri, "--storage-option", "novalue"])
    assert r.exit_code == 2 and "KEY=VALUE" in r.output


def test_commands_from_main_on_uris(s3_server, flink_uri, statekit_uri, tmp_path):
    """`stats`, `compat` and `repair --to` (added on main while object-storage was a branch) take URIs too."""
    opts = s3_server.cli_options()
    for uri in (flink_uri, statekit_uri):
        r = run(["stats", uri, "--json", *opts])
        assert r.exit_code == 0 and json.loads(r.stdout)["operators"], r.output
    r = run(["stats", statekit_uri, "--html", f"s3://{BUCKET}/cli-s3/report.html", *opts])
    assert r.exit_code != 0 and "local file" in r.output, r.output
    r = run(["stats", statekit_uri, "--html", tmp_path / "report.html", *opts])
    assert r.exit_code == 0 and (tmp_path / "report.html").is_file(), r.output
    r = run(["compat", flink_uri, flink_uri, *opts])
    assert r.exit_code == 0, r.output
    target = f"s3://{BUCKET}/cli-s3/flink-renamed"
    r = run(["rename-uid", flink_uri, target, "--uid", "counter", "--new-uid", "counter-2", "--apply", *opts])
    assert r.exit_code == 0, r.output
    r = run(["inspect", target, "--json", *opts])
    assert r.exit_code == 0 and "counter-2" in {o["uid"] for o in json.loads(r.stdout)["operators"]}, r.output
    r = run(["check", target, *opts])  # a Flink source gives a Flink savepoint on the store (no statekit manifest)
    assert r.exit_code == 0 and "OK" in r.stdout, r.output
    from statekit.format.storage import locate

    written = locate(target, storage_options=s3_server.options())
    assert (written / "_metadata").is_file() and not (written / "_metadata.json").exists()


def test_a_sql_jobs_plan_names_columns_of_a_savepoint_on_s3(s3_server, tmp_path):
    """``--plan`` (a local JSON file) with a SQL savepoint on the store: every read command answers as from disk."""
    case = FIXTURES / "sql" / "2.3.0" / "plan-hashmap-canonical"
    local, plan = case / "savepoint", case / "plan.json"
    uri = s3_server.upload_dir(local, "cli-s3/sql-plan")
    opts = s3_server.cli_options()
    key = json.dumps({"user_name": "bartholomew", "device": 2})
    commands = [
        ["get", "{sp}", "--uid", "25_deduplicate", "--key", key, "--plan", plan, "--json"],
        ["show", "{sp}", "--uid", "6_group-aggregate", "--logical", "--plan", plan, "--values", "--json", "--limit", "20"],
        ["query", "{sp}", "--plan", plan, "--json",
         'SELECT user_id, cnt, total FROM "12_global_window_aggregate".logical WHERE user_id = -42'],
        ["inspect", "{sp}", "--plan", plan, "--json"],
    ]
    for args in commands:
        on_disk = run([str(a).replace("{sp}", str(local)) for a in args])
        on_s3 = run([str(a).replace("{sp}", uri) for a in args] + opts)
        assert on_disk.exit_code == on_s3.exit_code == 0, (args[0], on_s3.output)
        want, got = json.loads(on_disk.stdout), json.loads(on_s3.stdout)
        if args[0] == "inspect":  # the location differs, the rest not
            want.pop("path", None), got.pop("path", None)
        assert got == want, args[0]
    assert json.loads(run(commands[0][:1] + [uri] + commands[0][2:] + opts).stdout)["deduplicate-state"]["order_id"] == 1058
    r = run(["export", uri, tmp_path / "out", "--plan", plan, "--uid", "43_join", *opts])
    assert r.exit_code == 0 and (tmp_path / "out" / "43_join" / "logical.parquet").is_file(), r.output
    assert run(["check", uri, "--plan", plan, *opts]).exit_code == 0


def test_upgrade_reads_and_writes_s3(s3_server, tmp_path):
    """`statekit upgrade` from a Flink 1.20 savepoint on the store to a Flink 2.3 savepoint on the store: the report and
    every state as the same upgrade on local disk writes them; an existing target is refused."""
    from statekit.format.storage import locate
    from statekit.savepoint import Savepoint

    pairs = FIXTURES / "upgrade"
    local = pairs / "hashmap-1.20" / "savepoint"
    source = s3_server.upload_dir(local, "cli-s3/upgrade-1.20")
    target = f"s3://{BUCKET}/cli-s3/upgrade-2.3"
    args = ["--to-flink", "2.3", "--classpath", pairs / "classes-1.20.jar", "--uid", "lists", "--json"]
    on_disk = run(["upgrade", local, tmp_path / "up", *args])
    on_s3 = run(["upgrade", source, target, *args, *s3_server.cli_options()])
    assert on_disk.exit_code == on_s3.exit_code == 0, on_s3.output
    want, got = json.loads(on_disk.stdout), json.loads(on_s3.stdout)
    assert got["target"] == target and got["source"] == source
    for doc in (want, got):
        doc.pop("source"), doc.pop("target")
    assert got == want
    written = Savepoint.open(locate(target, storage_options=s3_server.options()))
    expected = Savepoint.open(tmp_path / "up")
    assert written.flink_version == expected.flink_version and str(written.flink_version).startswith("2.3")
    for meta in expected.operators:
        if meta.key_type is not None:
            assert written.keyed_table(meta.identifier).equals(expected.keyed_table(meta.identifier)), meta.display_name
    again = run(["upgrade", source, target, *args, *s3_server.cli_options()])
    assert again.exit_code != 0 and "exists" in again.output, again.output
