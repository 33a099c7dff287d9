"""Seeded fuzzing of savepoints with every state kind: mutated manifests and files give only typed errors,
never hang, and are never modified."""

from __future__ import annotations

import json
import os
import random
import shutil
import stat
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import fuzz_child
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from savepoint_helpers import copy_golden, write_native

from statekit.format.files import checksum
from statekit.format.manifest import MANIFEST_NAME
from statekit.testing import tree_digest

CHILD = Path(fuzz_child.__file__)
CASE_TIMEOUT = 60.0  # seconds; generous because the machine may be shared (a real hang never ends)

HOSTILE_VALUES: list[Any] = [
    None, True, False, 0, -1, 1, 127, 128, 32768, 2**31, 2**63, -(2**63) - 1, 1.5, 3.0, "", "x", "counter",
    "rocksdb", "parquet", "keyed", "timers", "operator", "broadcast", "union", "split", "value", "list",
    "binary", "bigint", "array<bigint>", "map<string,binary>", "struct<a:bigint>", "../x", "/etc/passwd",
    "a" * 300, "é" * 200, [], {}, [1], {"a": 1}, ["keyed"], "@HUGE@", "@1e400@", "@INF@", "@NAN@", "@NESTED@",
    "@SURROGATE@",
]
RAW = {'"@HUGE@"': "9" * 5000, '"@1e400@"': "1e400", '"@INF@"': "Infinity", '"@NAN@"': "NaN",
       '"@NESTED@"': '"' + "array<" * 2000 + "int" + ">" * 2000 + '"', '"@SURROGATE@"': '"\\udc80"'}


# --- mutations --------------------------------------------------------------------------------------------


def _load(sp: Path) -> dict:
    return json.loads((sp / MANIFEST_NAME).read_text())


def _save(sp: Path, m: dict) -> None:
    text = json.dumps(m)
    for a, b in RAW.items():
        text = text.replace(a, b)
    (sp / MANIFEST_NAME).write_text(text)


def _nodes(obj: Any, path: tuple = ()) -> list[tuple]:
    out = [path]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _nodes(v, path + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _nodes(v, path + (i,))
    return out


def _parent(m: dict, path: tuple):
    node = m
    for p in path[:-1]:
        node = node[p]
    return node


def mutate_manifest_value(rng: random.Random, sp: Path) -> str:
    m = _load(sp)
    path = rng.choice([p for p in _nodes(m) if p])
    parent, key = _parent(m, path), path[-1]
    action = rng.choice(["set", "set", "set", "delete", "duplicate", "swap"])
    if action == "delete":
        del parent[key]
    elif action == "duplicate" and isinstance(parent, list):
        parent.insert(key, json.loads(json.dumps(parent[key])))
    elif action == "swap" and isinstance(parent, list) and len(parent) > 1:
        j = rng.randrange(len(parent))
        parent[key], parent[j] = parent[j], parent[key]
    else:
        action = "set"
        parent[key] = rng.choice(HOSTILE_VALUES)
    _save(sp, m)
    return f"manifest {action} {'/'.join(map(str, path))}"


def mutate_manifest_bytes(rng: random.Random, sp: Path) -> str:
    data = bytearray((sp / MANIFEST_NAME).read_bytes())
    kind = rng.choice(["truncate", "flip", "insert"])
    i = rng.randrange(len(data))
    if kind == "truncate":
        del data[i:]
    elif kind == "flip":
        data[i] ^= 1 << rng.randrange(8)
    else:
        data[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
    (sp / MANIFEST_NAME).write_bytes(bytes(data))
    return f"manifest bytes {kind} at {i}"


def _inside(sp: Path, rel: Any) -> bool:
    """Whether `rel` names a file inside `sp`: the fuzzer itself must never touch anything else (a mutated
    manifest may name /etc/passwd)."""
    if not isinstance(rel, str) or not rel or "\x00" in rel or os.path.isabs(rel) or ".." in rel.split("/"):
        return False
    root = os.path.realpath(sp)
    return os.path.realpath(os.path.join(root, rel)).startswith(root + os.sep)


def _pick_file(rng: random.Random, m: dict, sp: Path) -> dict:
    """A listed file that is still a regular file (an earlier mutation may have made it a FIFO)."""
    entries = [f for op in m["operators"] for f in op["files"]]
    regular = [f for f in entries if isinstance(f, dict) and _inside(sp, f.get("path"))
               and os.path.isfile(sp / f["path"]) and not os.path.islink(sp / f["path"])]
    if not regular:
        raise LookupError("no regular file left to mutate")
    return rng.choice(regular)


def _fix_entry(sp: Path, entry: dict) -> None:
    """Make the manifest's size and checksum match the (mutated) file, so deeper layers are reached."""
    data = (sp / entry["path"]).read_bytes()
    entry.update(bytes=len(data), checksum=checksum(data))


def mutate_file(rng: random.Random, sp: Path) -> str:
    m = _load(sp)
    entry = _pick_file(rng, m, sp)
    f = sp / entry["path"]
    kind = rng.choice(["truncate", "flip", "flip-fixed", "swap-fixed", "delete", "fifo", "char-device",
                       "directory", "symlink-outside", "symlink-loop", "symlink-inside", "empty-fixed",
                       "extra-file", "garbage-fixed"])
    data = f.read_bytes()
    if kind == "truncate":
        f.write_bytes(data[: rng.randrange(max(len(data), 1))])
    elif kind in ("flip", "flip-fixed"):
        b = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
        f.write_bytes(bytes(b))
    elif kind == "swap-fixed":
        other = _pick_file(rng, m, sp)
        f.write_bytes((sp / other["path"]).read_bytes())
    elif kind == "delete":
        f.unlink()
    elif kind == "fifo":
        f.unlink()
        os.mkfifo(f)
    elif kind == "char-device":
        f.unlink()
        os.mknod(f, stat.S_IFCHR | 0o600, os.makedev(1, 5))  # /dev/zero's numbers
    elif kind == "directory":
        f.unlink()
        f.mkdir()
        (f / "inside").write_bytes(data)
    elif kind == "symlink-outside":
        outside = sp.parent / f"outside-{rng.randrange(1 << 30)}"
        outside.write_bytes(data)
        f.unlink()
        f.symlink_to(outside)
    elif kind == "symlink-loop":
        f.unlink()
        f.symlink_to(f.name)
    elif kind == "symlink-inside":
        other = _pick_file(rng, m, sp)
        f.unlink()
        f.symlink_to(os.path.relpath(sp / other["path"], f.parent))
    elif kind == "empty-fixed":
        f.write_bytes(b"")
    elif kind == "extra-file":
        (f.parent / "unlisted.parquet").write_bytes(data)
    elif kind == "garbage-fixed":
        f.write_bytes(bytes(rng.randrange(256) for _ in range(rng.randint(1, 2048))))
    if kind.endswith("-fixed"):
        _fix_entry(sp, entry)
        _save(sp, m)
    return f"file {kind} {entry['path']}"


def mutate_parquet(rng: random.Random, sp: Path) -> str:
    """Rewrite a listed Parquet file with damaged rows or columns, manifest size/checksum fixed up."""
    m = _load(sp)
    entry = _pick_file(rng, m, sp)
    if entry.get("table") == "rocksdb":
        return mutate_file(rng, sp)
    f = sp / entry["path"]
    table = pq.read_table(f)
    kind = rng.choice(["null-column", "drop-column", "rename-column", "reverse-rows", "duplicate-rows",
                       "cast-string", "shift-ints", "empty", "bad-domain"])
    col = rng.randrange(table.num_columns)
    name = table.column_names[col]
    if kind == "null-column":
        table = table.set_column(col, pa.field(name, table.schema.field(col).type, nullable=True),
                                 pa.nulls(table.num_rows, table.schema.field(col).type))
    elif kind == "drop-column":
        table = table.remove_column(col)
    elif kind == "rename-column":
        table = table.rename_columns([c if i != col else c + "_x" for i, c in enumerate(table.column_names)])
    elif kind == "reverse-rows":
        table = table.take(pa.array(range(table.num_rows - 1, -1, -1), pa.int64()))
    elif kind == "duplicate-rows":
        table = pa.concat_tables([table, table])
    elif kind == "cast-string":
        table = table.set_column(col, name, pa.array([str(v) for v in table.column(col).to_pylist()]))
    elif kind == "shift-ints":
        ints = [i for i, t in enumerate(table.schema.types) if pa.types.is_integer(t)]
        if ints:
            col = rng.choice(ints)
            name = table.column_names[col]
            shifted = [None if v is None else v + rng.choice([1, -1, 1 << 20]) for v in table.column(col).to_pylist()]
            try:
                table = table.set_column(col, name, pa.array(shifted, table.schema.field(col).type))
            except (pa.ArrowInvalid, OverflowError):
                pass
    elif kind == "empty":
        table = table.slice(0, 0)
    elif kind == "bad-domain" and "domain" in table.column_names:
        i = table.column_names.index("domain")
        table = table.set_column(i, "domain", pa.array(["weekly"] * table.num_rows, pa.string()))
    f.unlink()
    pq.write_table(table, f)
    _fix_entry(sp, entry)
    if rng.random() < 0.5:
        entry["rows"] = table.num_rows
    _save(sp, m)
    return f"parquet {kind} {name} {entry['path']}"


MUTATIONS: list[Callable[[random.Random, Path], str]] = [
    mutate_manifest_value, mutate_manifest_value, mutate_manifest_bytes, mutate_file, mutate_file, mutate_parquet,
]


# --- the test ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> list[Path]:
    base = tmp_path_factory.mktemp("fuzz-pristine")
    return [copy_golden(base / "golden"), write_native(base / "native", base / "native-work")]


def fuzz(pristine: list[Path], work: Path, *, seed: int, budget_s: float, max_cases: int) -> Counter:
    """Mutate copies of the pristine savepoints until the budget is spent; returns outcome counts."""
    rng = random.Random(seed)
    warm = work / "warm"
    child = subprocess.Popen([sys.executable, str(CHILD), str(CASE_TIMEOUT), str(pristine[0]), str(warm)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    counts: Counter = Counter()
    failures: list[str] = []
    start = time.monotonic()
    try:
        for case in range(max_cases):
            if time.monotonic() - start > budget_s:
                break
            case_dir = work / f"case-{case}"
            sp = case_dir / "sp"
            shutil.copytree(rng.choice(pristine), sp, symlinks=True)
            applied = []
            for _ in range(rng.choice([1, 1, 1, 2, 3])):
                try:
                    applied.append(rng.choice(MUTATIONS)(rng, sp))
                except (ValueError, LookupError, TypeError, AttributeError, OSError, pa.ArrowException):
                    applied.append("skipped (an earlier mutation left nothing to mutate this way)")
            before = tree_digest(sp)
            child.stdin.write(f"{sp}\t{case_dir / 'scratch'}\n")
            child.stdin.flush()
            line = child.stdout.readline()
            assert line, "the fuzz child died"
            answer = json.loads(line)
            counts["tried"] += 1
            counts[answer["outcome"]] += 1
            if tree_digest(sp) != before:
                counts["modified"] += 1
                failures.append(f"case {case} ({applied}): the input savepoint was modified")
            if answer["outcome"] in ("untyped", "hang"):
                failures.append(f"case {case} ({applied}): {answer['outcome']}: {answer['errors']}")
            shutil.rmtree(case_dir, ignore_errors=True)
    finally:
        child.stdin.close()
        child.wait(timeout=120)
    counts["typed"] += 0
    print(f"fuzz seed {seed}: mutations tried {counts['tried']} / typed {counts['typed']} / untyped "
          f"{counts['untyped']} / hangs {counts['hang']} / no error {counts['ok']} / inputs modified "
          f"{counts['modified']}")
    for f in failures[:30]:
        print("  ", f)
    assert not failures, "\n".join(failures[:30])
    return counts


def test_fuzz_savepoints(pristine, tmp_path):
    counts = fuzz(pristine, tmp_path, seed=int(os.environ.get("STATEKIT_FUZZ_SEED", "20261124")), budget_s=50,
                  max_cases=400)
    assert counts["tried"] >= 20 and counts["typed"] > 0


@pytest.mark.extended  # ten minutes of budget; make test keeps the 50-second run above with the same mutations
def test_fuzz_savepoints_long(pristine, tmp_path):
    counts = fuzz(pristine, tmp_path, seed=7, budget_s=600, max_cases=5000)
    assert counts["tried"] >= 200
