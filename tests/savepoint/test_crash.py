"""SIGKILL at every file-system step of a savepoint write and of each repair: the target is absent or
complete, the source byte-identical, and a retry succeeds."""

from __future__ import annotations

import random
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import crash_child
import pytest
from savepoint_helpers import copy_golden, write_native

from statekit.savepoint import Savepoint, check
from statekit.testing import tree_digest

CHILD = Path(crash_child.__file__)
OPERATIONS = ["build", "rename-uid", "remove-operator", "set-max-parallelism", "rename-native"]


@dataclass
class Tally:
    kill_points: int = 0
    killed: int = 0
    absent: int = 0
    complete: int = 0
    partial_visible: list[str] = field(default_factory=list)
    source_modified: list[int] = field(default_factory=list)
    failed_retries: list[str] = field(default_factory=list)
    leftover_staging: int = 0

    def line(self, op: str) -> str:
        return (f"{op}: kill points {self.kill_points} (killed {self.killed}; target absent {self.absent}, "
                f"complete {self.complete}) / partial visible {len(self.partial_visible)} / source modified "
                f"{len(self.source_modified)} / failed retries {len(self.failed_retries)} / staging dirs left by "
                f"kills {self.leftover_staging}")


def _content(path: Path) -> dict:
    m = Savepoint.open(path).manifest.to_json()
    m.pop("created_at")
    return m


def _source(op: str, scratch: Path) -> Path:
    if op == "rename-native":
        return write_native(scratch / "src", scratch / "native-work")
    return copy_golden(scratch / "src")


def run_kill_points(op: str, scratch: Path, points: str) -> Tally:
    """Kill `op` at the chosen steps (``"all"`` or ``"sample"``); check each outcome."""
    src = _source(op, scratch)
    before = tree_digest(src)
    prefix = scratch / "out"
    child = subprocess.Popen([sys.executable, str(CHILD), op, str(src), str(prefix)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    tally = Tally()
    try:
        def ask(k: int) -> tuple[str, str]:
            child.stdin.write(f"{k}\n")
            child.stdin.flush()
            answer = child.stdout.readline().split()
            assert answer and int(answer[0]) == k, f"the crash child died: {answer}"
            return answer[1], answer[2]

        outcome, steps = ask(0)
        assert outcome == "done", "the write fails without any kill"
        reference = _content(Path(f"{prefix}-0"))
        assert check(Path(f"{prefix}-0")).ok
        n = int(steps)
        ks = list(range(1, n + 2))
        if points == "sample":  # the first and last steps, and a seeded sample between them
            ks = sorted({1, n, n + 1} | set(random.Random(op).sample(range(2, n), min(4, n - 2))))
        for k in ks:
            outcome, _ = ask(k)
            tally.kill_points += 1
            assert outcome in ("killed", "done"), f"step {k}: the write failed instead of being killed"
            tally.killed += outcome == "killed"
            if tree_digest(src) != before:
                tally.source_modified.append(k)
            target = Path(f"{prefix}-{k}")
            tally.leftover_staging += sum(1 for p in scratch.iterdir() if p.name.startswith(f".{target.name}.inprogress"))
            if target.exists():
                tally.complete += 1
                report = check(target)
                if not report.ok or _content(target) != reference:
                    tally.partial_visible.append(f"step {k}: {report}")
                continue
            tally.absent += 1
            try:  # a retry (same target, the killed attempt's leftovers still there) succeeds
                crash_child.run(op, src, target)
                assert check(target).ok and _content(target) == reference
            except Exception as exc:  # noqa: BLE001 - collected and asserted below
                tally.failed_retries.append(f"step {k}: {type(exc).__name__}: {exc}")
    finally:
        child.stdin.close()
        child.wait(timeout=60)
    assert tree_digest(src) == before
    return tally


def _assert_clean(op: str, tally: Tally) -> None:
    print(tally.line(op))
    assert tally.kill_points and tally.killed
    assert tally.partial_visible == [], tally.partial_visible
    assert tally.source_modified == [], tally.source_modified
    assert tally.failed_retries == [], tally.failed_retries


@pytest.mark.parametrize("op", OPERATIONS)
def test_killed_writes_sampled(scratch, op):
    _assert_clean(op, run_kill_points(op, scratch, "sample"))


@pytest.mark.slow
@pytest.mark.parametrize("op", OPERATIONS)
def test_killed_writes_at_every_step(scratch, op):
    _assert_clean(op, run_kill_points(op, scratch, "all"))
