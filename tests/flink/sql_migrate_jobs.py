"""Versions of a Flink SQL job for the migrate-sql tests: their statements, the Python model of their results, and
real Flink 2.3.0 runs of them (`sql/SqlMigrate.java`, built in the private generator copy of `sql_restore`).

Every version reads the SQL corpus input (`Model.java`'s orders, batches 1 and 2) and runs from its compiled plan.
`.venv/bin/python tests/flink/sql_migrate_jobs.py [VERSION ...]` (JDK 17 + Maven; set STATEKIT_FLINKBUILD as for
the other Flink tests) regenerates the committed fixtures under tests/fixtures/flink/sql/migrate/ (all versions, or
the named ones): per version its compiled plan and its savepoint after batch 1 -- the old job's state for `base` and
`win_base`, the template of the new job for the others (migrate-sql replaces every keyed SQL state in it) -- plus
the input rows (input.json) the model reads.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import sql_restore  # noqa: E402

FIXTURES = HERE.parent / "fixtures" / "flink" / "sql" / "migrate"

AGG_BASE = "SELECT user_name, COUNT(*), SUM(amount) FROM orders GROUP BY user_name"
LAST = ("SELECT {cols} FROM (\n  SELECT *, ROW_NUMBER() OVER (PARTITION BY user_name, device ORDER BY ts DESC) AS rn "
        "FROM orders)\nWHERE rn = 1")
LAST_COLS = "order_id, user_name, device, amount"
LAST_SINK = "order_id BIGINT, user_name STRING, device BIGINT, amount BIGINT"

WIN = ("INSERT INTO win_out SELECT user_id, COUNT(*), SUM(amount){extra}\n"
       "FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(ts), INTERVAL '{size}' SECOND))\nGROUP BY user_id, window_start, window_end")
WM_DELAY = 15_000
JOIN = ("INSERT INTO join_out SELECT o.order_id, o.user_name, p.pay_method{cols}\n"
        "FROM orders o JOIN payments p ON o.order_id = p.order_id")
JOIN_SINK = "order_id BIGINT, user_name STRING, pay_method STRING"

# name -> (sink DDL columns per sink, INSERT statements in job order)
VERSIONS: dict[str, tuple[dict[str, str], list[str]]] = {
    "base": ({"agg_out": "user_name STRING, cnt BIGINT, total BIGINT", "last_out": LAST_SINK},
             [f"INSERT INTO agg_out {AGG_BASE}", f"INSERT INTO last_out {LAST.format(cols=LAST_COLS)}"]),
    # an aggregate call added to the group aggregate
    "agg_added": ({"agg_out": "user_name STRING, cnt BIGINT, total BIGINT, top BIGINT", "last_out": LAST_SINK},
                  ["INSERT INTO agg_out SELECT user_name, COUNT(*), SUM(amount), MAX(amount) FROM orders GROUP BY user_name",
                   f"INSERT INTO last_out {LAST.format(cols=LAST_COLS)}"]),
    # one removed
    "agg_removed": ({"agg_out": "user_name STRING, cnt BIGINT", "last_out": LAST_SINK},
                    ["INSERT INTO agg_out SELECT user_name, COUNT(*) FROM orders GROUP BY user_name",
                     f"INSERT INTO last_out {LAST.format(cols=LAST_COLS)}"]),
    # a column added to the deduplicated row
    "dedup_column": ({"agg_out": "user_name STRING, cnt BIGINT, total BIGINT",
                      "last_out": LAST_SINK + ", kind STRING"},
                     [f"INSERT INTO agg_out {AGG_BASE}", f"INSERT INTO last_out {LAST.format(cols=LAST_COLS + ', kind')}"]),
    # the same queries in the other order: other ExecNode ids, so other uids and operator ids
    "reordered": ({"last_out": LAST_SINK, "agg_out": "user_name STRING, cnt BIGINT, total BIGINT"},
                  [f"INSERT INTO last_out {LAST.format(cols=LAST_COLS)}", f"INSERT INTO agg_out {AGG_BASE}"]),
    # GROUP BY keys changed: refused
    "keys_changed": ({"agg_out": "user_name STRING, device BIGINT, cnt BIGINT, total BIGINT", "last_out": LAST_SINK},
                     ["INSERT INTO agg_out SELECT user_name, device, COUNT(*), SUM(amount) FROM orders "
                      "GROUP BY user_name, device",
                      f"INSERT INTO last_out {LAST.format(cols=LAST_COLS)}"]),
    # a DISTINCT added: refused
    "distinct_added": ({"agg_out": "user_name STRING, cnt BIGINT, total BIGINT, kinds BIGINT", "last_out": LAST_SINK},
                       ["INSERT INTO agg_out SELECT user_name, COUNT(*), SUM(amount), COUNT(DISTINCT kind) FROM orders "
                        "GROUP BY user_name",
                        f"INSERT INTO last_out {LAST.format(cols=LAST_COLS)}"]),
    # a window TVF aggregate, and the same with another window size: refused
    "win_base": ({"win_out": "user_id BIGINT, cnt BIGINT, total BIGINT"}, [WIN.format(size=10, extra="")]),
    "win_changed": ({"win_out": "user_id BIGINT, cnt BIGINT, total BIGINT"}, [WIN.format(size=20, extra="")]),
    # an aggregate call added to the window aggregate: its pending windows carried, the added MAX empty
    "win_added": ({"win_out": "user_id BIGINT, cnt BIGINT, total BIGINT, top BIGINT"},
                  [WIN.format(size=10, extra=", MAX(amount)")]),
    # a regular join, and the same with a column added to its left rows
    "join_base": ({"join_out": JOIN_SINK}, [JOIN.format(cols="")]),
    "join_column": ({"join_out": JOIN_SINK + ", amount BIGINT"}, [JOIN.format(cols=", o.amount")]),
}


# -- the model -----------------------------------------------------------------------------------------------------
def _s(v: Any) -> str:
    return "null" if v is None else str(v)


def row(*fields: Any) -> str:
    """A materialized row as the corpus sinks render it (``Row.toString`` without its kind)."""
    return "[" + ", ".join(_s(f) for f in fields) + "]"


def _agg(orders: list[dict]) -> dict[Any, dict]:
    out: dict[Any, dict] = {}
    for o in orders:
        a = out.setdefault(o["user_name"], {"cnt": 0, "total": None, "top": None})
        a["cnt"] += 1
        if o["amount"] is not None:
            a["total"] = o["amount"] if a["total"] is None else a["total"] + o["amount"]
            a["top"] = o["amount"] if a["top"] is None else max(a["top"], o["amount"])
    return out


def _last(orders: list[dict]) -> dict[Any, dict]:
    out: dict[Any, dict] = {}
    for o in orders:
        k = (o["user_name"], o["device"])
        if k not in out or out[k]["ts"] <= o["ts"]:
            out[k] = o
    return out


def join_rows(version: str, orders: list[dict], payments: list[dict]) -> list[str]:
    """The rows of the join of `version` over these orders and payments."""
    out = []
    for o in orders:
        for p in payments:
            if o["order_id"] == p["order_id"]:
                extra = [o["amount"]] if version == "join_column" else []
                out.append(row(o["order_id"], o["user_name"], p["pay_method"], *extra))
    return sorted(out)


def results(version: str, orders: list[dict], *, carried: dict[Any, dict] | None = None,
            carried_last: dict[Any, dict] | None = None, payments: list[dict] | None = None) -> dict[str, list[str]]:
    """The materialized sinks of `version` after `orders`; `carried`: group accumulators the job starts from (a
    migrated state: counts and totals of the old job, the added MAX empty), `carried_last`: kept rows it starts from."""
    agg = {k: dict(v) for k, v in (carried or {}).items()}
    for k, v in _agg(orders).items():
        a = agg.setdefault(k, {"cnt": 0, "total": None, "top": None})
        a["cnt"] += v["cnt"]
        for f, op in (("total", lambda x, y: x + y), ("top", max)):
            if v[f] is not None:
                a[f] = v[f] if a[f] is None else op(a[f], v[f])
    last = dict(carried_last or {})
    for k, o in _last(orders).items():
        if k not in last or last[k]["ts"] <= o["ts"]:
            last[k] = o
    if version.startswith("win"):
        size = 1000 * (20 if version == "win_changed" else 10)
        wm = max(o["ts"] for o in orders) - WM_DELAY
        wins: dict[Any, list[dict]] = {}
        for o in orders:
            wins.setdefault((o["user_id"], o["ts"] - o["ts"] % size), []).append(o)
        fired = [(k, v) for k, v in wins.items() if k[1] + size - 1 <= wm]
        return {"win_out": sorted(row(k[0], len(v), _total(v), *([_top(v)] if version == "win_added" else []))
                                  for k, v in fired)}
    if version.startswith("join"):
        return {"join_out": join_rows(version, orders, payments or [])}
    if version == "distinct_added":
        kinds: dict[Any, set] = {}
        for o in orders:
            kinds.setdefault(o["user_name"], set()).update([o["kind"]] if o["kind"] is not None else [])
        return {"agg_out": sorted(row(k, a["cnt"], a["total"], len(kinds[k])) for k, a in _agg(orders).items()),
                "last_out": results("base", orders)["last_out"]}
    cols = {"agg_added": ("cnt", "total", "top"), "agg_removed": ("cnt",)}.get(version, ("cnt", "total"))
    if version == "keys_changed":
        agg_rows = []
        for (name, device), v in _agg_by_device(orders).items():
            agg_rows.append(row(name, device, v["cnt"], v["total"]))
    else:
        agg_rows = [row(k, *(a[c] for c in cols)) for k, a in agg.items()]
    with_kind = version == "dedup_column"
    last_rows = [row(o["order_id"], o["user_name"], o["device"], o["amount"], *([o.get("kind")] if with_kind else []))
                 for o in last.values()]
    return {"agg_out": sorted(agg_rows), "last_out": sorted(last_rows)}


def _total(orders: list[dict]) -> int | None:
    amounts = [o["amount"] for o in orders if o["amount"] is not None]
    return sum(amounts) if amounts else None


def _top(orders: list[dict]) -> int | None:
    amounts = [o["amount"] for o in orders if o["amount"] is not None]
    return max(amounts) if amounts else None


def _agg_by_device(orders: list[dict]) -> dict[Any, dict]:
    out: dict[Any, dict] = {}
    for o in orders:
        out.setdefault((o["user_name"], o["device"]), []).append(o)
    return {k: _agg(v)[k[0]] for k, v in out.items()}


def migrated_start(new: str, orders1: list[dict]) -> tuple[dict, dict]:
    """What the new job holds after migrate-sql of the base job's batch-1 state: the group accumulators (an added
    MAX empty) and the kept rows (an added column NULL)."""
    agg = {k: {**v, "top": None} for k, v in _agg(orders1).items()}
    last = {k: ({**o, "kind": None} if new == "dedup_column" else o) for k, o in _last(orders1).items()}
    return agg, last


def expected_after_migration(new: str, inp: dict[str, list[dict]]) -> tuple[dict, dict]:
    """(what the new job's sinks would hold from the migrated state, the model's sinks after batch 2 on top of it)
    for the new version `new` of a migration from `base` (or `join_base` for the join versions)."""
    if new == "win_added":  # insert-only: batch 2 emits every window still pending at the savepoint, and new ones
        wm1 = max(o["ts"] for o in inp["orders1"]) - WM_DELAY
        wins: dict[Any, list[dict]] = {}
        for b in (1, 2):
            for o in inp[f"orders{b}"]:
                wins.setdefault((o["user_id"], o["ts"] - o["ts"] % 10_000), []).append({**o, "batch": b})
        return ({"win_out": []}, {"win_out": sorted(
            row(k[0], len(v), _total(v), _top([o for o in v if o["batch"] == 2]))
            for k, v in wins.items() if not k[1] + 10_000 - 1 <= wm1)})
    if new.startswith("join"):
        old_orders = [{**o, "amount": None} for o in inp["orders1"]]  # carried left rows: the added column NULL
        pays = inp["payments1"] + inp["payments2"]
        return ({"join_out": join_rows(new, old_orders, inp["payments1"])},
                {"join_out": join_rows(new, old_orders + inp["orders2"], pays)})
    agg, last = migrated_start(new, inp["orders1"])
    return (results(new, [], carried=agg, carried_last=last),
            results(new, inp["orders2"], carried=agg, carried_last=last))


def input_rows(work: Path) -> dict[str, list[dict]]:
    """The corpus input (orders of batches 1 and 2), as Model.java makes it."""
    got = run([{"action": "input"}], work)
    return json.loads(got[0].read_text())


# -- real Flink ----------------------------------------------------------------------------------------------------
def run(tasks: list[dict[str, Any]], work: Path) -> list[Path]:
    """Run the tasks of `SqlMigrate.java` in one JVM; returns each task's output path."""
    gen = sql_restore.build()
    work.mkdir(parents=True, exist_ok=True)
    outs = []
    spec = []
    for i, t in enumerate(tasks):
        out = work / f"task-{i}" if t["action"] == "make" else work / f"task-{i}.json"
        outs.append(Path(t.get("out", out)))
        spec.append({**t, "out": str(outs[-1])})
    (work / "migrate-tasks.json").write_text(json.dumps(spec))
    env = dict(os.environ, FLINKBUILD_DIR=str(sql_restore.WORK / "build"), SKIP_BUILD="1", JAVA_OPTS="-Xmx1g")
    done = subprocess.run(["bash", str(gen / "run.sh"), "SqlMigrate", str(work / "migrate-tasks.json")], env=env,
                          capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"SqlMigrate failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return outs


def restore_task(version: str, savepoint: Path, plan: Path) -> dict[str, Any]:
    sinks, _ = VERSIONS[version]
    return {"action": "restore", "savepoint": str(Path(savepoint).resolve()), "plan": str(Path(plan).resolve()),
            "sinks": sinks}


def restored(path: Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text())


def apply_changelog(start: dict[str, list[str]], changelog: dict[str, list[str]]) -> tuple[dict, dict]:
    """`start` with the changelog applied; retractions of rows not there are returned apart."""
    out, missing = {}, {}
    for sink, rows in start.items():
        table = list(rows)
        for change in changelog.get(sink, []):
            r = change[2:]
            if change.startswith("+"):
                table.append(r)
            elif r in table:
                table.remove(r)
            else:
                missing.setdefault(sink, []).append(change)
        out[sink] = sorted(table)
    return out, missing


def make_fixtures(dest: Path = FIXTURES, names: list[str] | None = None) -> None:
    """Regenerate the committed fixtures (`names`: only those versions) with real Flink, one JVM per version
    (about 30 s each on an idle machine)."""
    work = Path(os.environ.get("TMPDIR", "/tmp")) / "statekit-sql-migrate-make"
    shutil.rmtree(work, ignore_errors=True)
    inp = input_rows(work)
    names = names or list(VERSIONS)
    for name in names:
        sinks, inserts = VERSIONS[name]
        # one JVM per version: the planner numbers ExecNodes (and so the uids) from a JVM-wide counter, so a plan
        # compiled after another would get other uids than the same job compiled on its own
        run([{"action": "make", "sinks": sinks, "inserts": inserts,
              "expect": results(name, inp["orders1"], payments=inp["payments1"]),
              "out": str(work / name)}], work / f"jvm-{name}")
    dest.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.rmtree(dest / name, ignore_errors=True)
        shutil.copytree(work / name, dest / name)
        for p in (dest / name).rglob("*"):
            p.chmod(0o755 if p.is_dir() else 0o644)
    (dest / "input.json").write_text(json.dumps(inp))
    (dest / "versions.json").write_text(json.dumps(VERSIONS, indent=1))


if __name__ == "__main__":
    make_fixtures(names=sys.argv[1:] or None)


def input_rows_cached() -> dict[str, list[dict]]:
    """The committed input rows (made with the fixtures from Model.java)."""
    return json.loads((FIXTURES / "input.json").read_text())
