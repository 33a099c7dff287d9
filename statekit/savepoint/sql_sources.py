"""A SQL job's source operators matched across a query change by the table they scan, their operator state carried by `migrate-sql`.

Boundary: the non-keyed half of `sql_migrate`. A source's operator state (its readers' splits and
offsets) and its coordinator's state (a new-style source's split enumerator) say how far the old job
read; the template was taken at another point of the input, so keeping its sources' state would read
records twice or skip them. Operators are matched through the compiled plans: a plan-mode uid is
``<ExecNode id>_<transformation>``, and a ``table-source-scan`` node names its table
(``scanTableSource.table.identifier``); an old and a new source operator are paired when they scan the
same table with the same transformation. Their state is carried as the old job wrote it (files
hard-linked, `flink_repair.carried`) under the new operator's identity.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from statekit.format.flink.sqlplan import short_table

__all__ = ["SourceCarry", "plan_sources"]

_UID = re.compile(r"^(\d+)_(.+)$")


@dataclass
class SourceCarry:
    """One source operator of the new job and the old one whose operator state it gets."""

    table: str
    transformation: str
    old: Any  # OperatorMetadata of the old savepoint
    new: Any  # OperatorMetadata of the template
    states: tuple[str, ...]
    coordinator: bool

    def __str__(self) -> str:
        what = [f"operator state ({', '.join(self.states)})"] if self.states else []
        what += ["its split enumerator (coordinator state)"] if self.coordinator else []
        moved = "" if self.old.uid_hash == self.new.uid_hash else f"; operator id {self.old.uid_hash} -> {self.new.uid_hash}"
        return (f"source {self.new.display_name} (table {self.table}) <- {self.old.display_name}: "
                f"{' and '.join(what)} carried: it continues where the old job stopped reading{moved}")


def _scans(sp: Any) -> dict[str, tuple[str, str]]:
    """Uid hash -> (table identifier, transformation) of every operator of `sp` that a table scan of its plan made."""
    plan = sp.plan
    out: dict[str, tuple[str, str]] = {}
    if plan is None:
        return out
    for m in sp.operators:
        hit = _UID.match(m.uid or "")
        node = plan.nodes.get(int(hit.group(1))) if hit else None
        if hit is not None and node is not None and node.scanned_table:
            out[m.uid_hash] = (node.scanned_table, hit.group(2))
    return out


def plan_sources(old_sp: Any, tmpl: Any, keyed_sql: set[str]) -> tuple[list[SourceCarry], list[str]]:
    """Which new source operators get the old job's operator state, and (as report lines) what is not carried
    and why. `keyed_sql`: the old SQL operators with keyed state (their operator state is `sql_migrate`'s note).
    """
    from statekit.savepoint.flink_out import coordinator_states
    from statekit.savepoint.flink_repair import carried

    old_coord, new_coord = coordinator_states(old_sp), coordinator_states(tmpl)
    with_state = [m for m in old_sp.operators if m.uid_hash not in keyed_sql and m.key_type is None
                  and (m.operator_states or m.uid_hash in old_coord)]
    if not with_state:
        return [], []
    shown = lambda m: f"{m.display_name}: its operator state ({', '.join(s.name for s in m.operator_states) or 'coordinator'})"  # noqa: E731
    if old_sp.plan is None:
        return [], [f"{shown(m)} is not carried: without the old job's plan (--old-plan) statekit cannot tell which "
                    "table it read; the new job's comes from the template" for m in with_state]
    old_scans, new_scans = _scans(old_sp), _scans(tmpl)
    by_scan: dict[tuple[str, str], list[Any]] = {}
    for m in tmpl.operators:
        if m.uid_hash in new_scans:
            by_scan.setdefault(new_scans[m.uid_hash], []).append(m)
    carries: list[SourceCarry] = []
    notes: list[str] = []
    taken: set[str] = set()
    for m in with_state:
        scan = old_scans.get(m.uid_hash)
        if scan is None:
            notes.append(f"{shown(m)} is not carried: it is no table scan of the old plan; the new job's comes "
                         "from the template")
            continue
        table, how = short_table(scan[0]), scan[1]
        cands = [n for n in by_scan.get(scan, []) if n.uid_hash not in taken]
        if len(cands) != 1:
            why = "the new job does not read that table" if not cands else \
                f"the new job scans it {len(cands)} times ({', '.join(n.display_name for n in cands)})"
            notes.append(f"{shown(m)} (table {table}) is not carried: {why}")
            continue
        new = cands[0]
        names, tnames = sorted(s.name for s in m.operator_states), sorted(s.name for s in new.operator_states)
        if tnames and names != tnames:
            notes.append(f"{shown(m)} (table {table}) is not carried: the new job's source keeps other operator "
                         f"state ({', '.join(tnames)}), so the table's connector changed")
        elif (m.uid_hash in old_coord) != (new.uid_hash in new_coord):
            notes.append(f"{shown(m)} (table {table}) is not carried: only one of the two sources has a split "
                         "enumerator, so the table's connector changed")
        elif m.max_parallelism != new.max_parallelism:
            notes.append(f"{shown(m)} (table {table}) is not carried: its max parallelism {m.max_parallelism} is "
                         f"not the new job's {new.max_parallelism}")
        elif carried(old_sp, m, uid=new.uid, uid_hash=new.uid_hash, name=new.name) is None:
            notes.append(f"{shown(m)} (table {table}) is not carried: its state handles are not a canonical "
                         "savepoint's (raw or native streams)")
        else:
            taken.add(new.uid_hash)
            carries.append(SourceCarry(table, how, m, new, tuple(names), m.uid_hash in old_coord))
    return carries, notes
