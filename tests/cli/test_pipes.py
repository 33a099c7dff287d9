"""Every `statekit` command through a real pipe prints plain text (no rich markup, no ANSI escapes), and
styled text through a terminal (a pseudo-terminal): what `make demo > log` and CI logs show."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from statekit.demo import write_demo_savepoint

from .conftest import EXECUTABLE

FLINK = Path(__file__).resolve().parents[1] / "fixtures" / "flink" / "2.3.0" / "long-hashmap-canonical" / "savepoint"
PAIRS = Path(__file__).resolve().parents[1] / "fixtures" / "flink" / "upgrade"
KAFKA = Path(__file__).resolve().parents[1] / "fixtures" / "flink" / "kafka" / "kafka-source-2p"
SQL_TTL = Path(__file__).resolve().parents[1] / "fixtures" / "flink" / "sql" / "2.3.0" / "default-hashmap-canonical-ttl" / "savepoint"
MIGRATE = Path(__file__).resolve().parents[1] / "fixtures" / "flink" / "sql" / "migrate"
SPARK = Path(__file__).resolve().parents[1] / "fixtures" / "spark" / "4.1.0" / "agg-hdfs" / "checkpoint"

#: rich markup tags (`[bold]`, `[/]`, `[bold red]`, `[dim]`...) and ANSI escape sequences.
MARKUP = re.compile(r"\[/[a-z ]*\]|\[(bold|dim|italic|red|green|yellow|blue|cyan|magenta|reverse|link)[^\]]*\]")
ANSI = "\x1b["

#: Environment variables that make rich treat a pipe as a terminal: a CI runner may set them.
FORCING = ("FORCE_COLOR", "FORCE_TERMINAL", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "CLICOLOR_FORCE")


def piped(args: list, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in FORCING}
    env.update(COLUMNS="200", TERM="xterm-256color")  # a terminal type that has colours: only the pipe is plain
    return subprocess.run([str(EXECUTABLE), *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, env=env, cwd=cwd, timeout=300)


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("pipes")
    write_demo_savepoint(root / "sp", users=300)
    pq.write_table(pa.table({"user": ["a", "b"], "amount": [1, 2]}), root / "data.parquet")
    (root / "plan.json").write_text(json.dumps([{"edit": "rm-state", "uid": "accounts", "state": "recent"},
                                                {"edit": "set-max-parallelism", "uid": "accounts", "max": 256}]))
    return root


#: command -> invocations (each run in the module's work directory, which holds sp, data.parquet, plan.json).
#: Answers, dry runs, writes, "not found" and errors: every kind of line a command prints.
CASES: dict[str, list[list]] = {
    "inspect": [["inspect", "sp"], ["inspect", FLINK], ["inspect", "missing"], ["inspect", SPARK]],
    "show": [["show", "sp", "--uid", "accounts", "--limit", "3"], ["show", "sp", "--uid", "accounts", "--key", "nobody"],
             ["show", FLINK, "--uid", "counter", "--limit", "3", "--values"], ["show", SPARK, "--values", "--limit", "3"]],
    "get": [["get", "sp", "--uid", "accounts", "--key", "user-00042"], ["get", FLINK, "--uid", "counter", "--key", "-1"],
            ["get", "sp", "--uid", "accounts", "--key", "nobody"], ["get", SPARK, "--key", '{"k": "a", "n": 1}']],
    "check": [["check", "sp"], ["check", FLINK], ["check", "sp", "--quick"], ["check", SPARK]],
    "diff": [["diff", "sp", "sp"], ["diff", "sp", FLINK], ["diff", SPARK, SPARK, "--batch", "0"]],
    "export": [["export", "sp", "exported", "--format", "csv"]],
    "query": [["query", "sp", "SELECT key, balance FROM accounts.keyed ORDER BY key LIMIT 3"],
              ["query", "sp", "SELECT nothing FROM nowhere"]],
    "set": [["set", "sp", "set-out", "--uid", "accounts", "--key", "user-00001", "--state", "balance", "--value", "5"],
            ["set", "sp", "set-out", "--uid", "accounts", "--key", "user-00001", "--state", "balance", "--value", "5",
             "--apply"]],
    "delete-key": [["delete-key", "sp", "del-out", "--uid", "accounts", "--key", "user-00001"]],
    "rm-state": [["rm-state", "sp", "rm-out", "--uid", "accounts", "--state", "recent"],
                 ["rm-state", "sp", "rm-out", "--uid", "accounts", "--state", "nope"]],
    "rekey": [["rekey", "sp", "rekey-out", "--uid", "accounts", "--expr", "upper(key)", "--engine", "local"]],
    "rename-uid": [["rename-uid", "sp", "ren-out", "--uid", "accounts", "--new-uid", "accounts-v2", "--apply"],
                   ["rename-uid", "sp", "ren-out-2", "--uid", "accounts", "--new-uid", "accounts"]],
    "remove-operator": [["remove-operator", "sp", "rmop-out", "--uid", "rules"]],
    "set-max-parallelism": [["set-max-parallelism", "sp", "smp-out", "--uid", "accounts", "--max", "256"]],
    "repair": [["repair", "sp", "plan-out", "--plan", "plan.json"]],
    "bootstrap": [["bootstrap", "data.parquet", "boot-out", "--uid", "u", "--key", "user", "--state",
                   "amount=amount", "--max-parallelism", "128", "--apply"]],
    "demo": [["demo", "--no-spark", "--out", "demo-out"], ["demo", "--no-spark", "--out", "sp"]],
    "convert": [["convert", FLINK, "conv-out", "--uid", "counter"]],
    "upgrade": [["upgrade", PAIRS / "hashmap-1.20" / "savepoint", "up-out", "--to-flink", "2.3", "--classpath",
                 PAIRS / "classes-1.20.jar", "--uid", "profiles"],
                ["upgrade", PAIRS / "hashmap-1.20" / "savepoint", "up-out-2", "--to-flink", "2.3"]],
    "clean": [["clean", "."]],
    "stats": [["stats", SPARK], ["stats", "sp", "--top", "3", "-p", "3"], ["stats", FLINK, "--top", "2"], ["stats", "sp", "-p", "999"]],
    "compat": [["compat", FLINK, FLINK], ["compat", "sp", FLINK], ["compat", "sp", "missing"]],
    "offsets": [["offsets", KAFKA], ["offsets", "sp"], ["offsets", KAFKA, "--uid", "emit"]],
    "set-offsets": [["set-offsets", KAFKA, "so-out", "--uid", "kafka-source", "--topic", "events", "--partition", "0",
                     "--shift", "+1"],
                    ["set-offsets", KAFKA, "so-out", "--uid", "kafka-source", "--topic", "events", "--partition", "0",
                     "--offset", "9", "--apply"],
                    ["set-offsets", KAFKA, "so-out-2", "--uid", "kafka-source", "--topic", "events", "--partition",
                     "7", "--shift", "1"]],
    "prune-expired": [["prune-expired", SQL_TTL, "pe-out", "--now", "2026-12-05T06:37:59.839Z", "--ttl", "1 d"],
                      ["prune-expired", SQL_TTL, "pe-out", "--now", "2026-12-05T06:37:59.839Z", "--ttl", "1 d", "--apply"],
                      ["prune-expired", SQL_TTL, "pe-out-2", "--now", "2026-12-04", "--ttl", "1 d"]],  # no time zone
    "migrate-sql": [["migrate-sql", MIGRATE / "base" / "savepoint", "mig-out", "--plan", MIGRATE / "agg_added" / "plan.json",
                     "--template", MIGRATE / "agg_added" / "savepoint", "--old-plan", MIGRATE / "base" / "plan.json"],
                    ["migrate-sql", MIGRATE / "base" / "savepoint", "mig-out", "--plan",
                     MIGRATE / "keys_changed" / "plan.json", "--template", MIGRATE / "keys_changed" / "savepoint"]],
    "repartition": [["repartition", SPARK, "sp-spark-3", "--partitions", "3"],
                    ["repartition", SPARK, "sp-spark-3", "--partitions", "3"]],  # the second is refused: it exists
}
GENERAL = [[], ["--help"], ["inspect", "--help"], ["inspect", "sp", "--no-such-option"], ["no-such-command"]]


def test_every_command_has_a_case() -> None:
    from statekit_cli.app import app

    names = {c.name or c.callback.__name__.replace("_", "-") for c in app.registered_commands}
    assert names == set(CASES), "a new command needs its invocations in CASES"


@pytest.mark.parametrize("command", sorted(CASES))
def test_piped_output_is_plain(work, command) -> None:
    for args in CASES[command]:
        result = piped(args, work)
        for stream, text in (("stdout", result.stdout), ("stderr", result.stderr)):
            assert ANSI not in text, f"statekit {args}: ANSI escapes on {stream}:\n{text}"
            assert not MARKUP.search(text), f"statekit {args}: markup on {stream}:\n{text}"
        assert result.stdout or result.stderr, f"statekit {args} printed nothing"
        assert "Traceback" not in result.stderr, result.stderr


def test_demo_into_a_pipe_prints_its_steps_plainly(work) -> None:
    result = piped(["demo", "--no-spark", "--out", "demo-plain"], work)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [line.split(" ")[0] for line in lines] == ["1.", "2.", "3.", "5.", "6."], result.stdout
    assert lines[0].startswith("1. ran the accounts job") and lines[-1].endswith("OK")


@pytest.mark.parametrize("args", GENERAL, ids=lambda a: " ".join(a) or "no-args")
def test_help_and_usage_errors_are_plain(work, args) -> None:
    result = piped(args, work)
    for text in (result.stdout, result.stderr):
        assert ANSI not in text and not MARKUP.search(text), text


def in_terminal(args: list, cwd: Path) -> str:
    """What `statekit args` writes to a pseudo-terminal (stdout and stderr both)."""
    leader, follower = pty.openpty()
    env = {**{k: v for k, v in os.environ.items() if k not in FORCING}, "COLUMNS": "200", "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen([str(EXECUTABLE), *map(str, args)], stdout=follower, stderr=follower, cwd=cwd, env=env)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    proc.wait(timeout=300)
    return b"".join(chunks).decode()


def test_a_terminal_gets_styles(work) -> None:
    """The same output through a terminal is styled: the plain text above is the pipe's, not a lost style."""
    demo = in_terminal(["demo", "--no-spark", "--out", "demo-tty"], work)
    assert ANSI in demo and "1. ran" in demo and not MARKUP.search(demo), demo
    error = in_terminal(["get", "sp", "--key", "user-00001"], work)  # no --uid: a usage error, in bold red
    assert ANSI in error and "error" in error, error
