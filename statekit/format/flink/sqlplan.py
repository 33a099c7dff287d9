"""A Flink SQL job's compiled plan (``COMPILE PLAN``'s JSON): its stateful ExecNodes, their uids, column names and types.

Boundary: this module reads the plan only (no savepoint): which ExecNodes keep keyed state, the uid
each gets when the job runs from the plan (``<id>_<transformation>``,
`../shared/flink/sql/SQL-FORMAT.md` §1), the names and types of their key columns and inputs, and
the names their results take on the way to a sink (through projections that only reference or
cast a column). Matching a plan to a savepoint is `statekit.format.flink.sqlnames`.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

from statekit.errors import InvalidArgumentError

__all__ = ["EVALUATED", "Column", "Plan", "PlanNode", "STATEFUL", "load_plan", "plain_ref", "short_table", "type_root"]

#: ExecNode type stem -> the SQL operator kind statekit names it by (`statekit.format.flink.sql.operator_kind`)
STATEFUL = {
    "group-aggregate": "group aggregate",
    "global-group-aggregate": "group aggregate",
    "incremental-group-aggregate": "group aggregate",
    "global-window-aggregate": "window TVF aggregate",
    "window-aggregate": "window TVF aggregate",
    "group-window-aggregate": "legacy group window aggregate",
    "deduplicate": "deduplication",
    "join": "regular join",
}
#: nodes a row passes unchanged on its way to a sink (same fields, same order)
_PASS = {"exchange", "timestamp-inserter", "drop-update-before", "mini-batch-assigner", "watermark-assigner"}
_ROOTS = [  # type text prefix -> Flink LogicalTypeRoot (longest prefixes first where they overlap)
    ("TIMESTAMP_LTZ", "TIMESTAMP_WITH_LOCAL_TIME_ZONE"), ("TIMESTAMP WITH LOCAL TIME ZONE", "TIMESTAMP_WITH_LOCAL_TIME_ZONE"),
    ("VARCHAR", "VARCHAR"), ("STRING", "VARCHAR"), ("CHAR", "CHAR"), ("BOOLEAN", "BOOLEAN"),
    ("TINYINT", "TINYINT"), ("SMALLINT", "SMALLINT"), ("INTEGER", "INTEGER"), ("INT", "INTEGER"),
    ("BIGINT", "BIGINT"), ("FLOAT", "FLOAT"), ("DOUBLE", "DOUBLE"), ("DECIMAL", "DECIMAL"),
    ("DATE", "DATE"), ("TIME", "TIME_WITHOUT_TIME_ZONE"), ("VARBINARY", "VARBINARY"), ("BYTES", "VARBINARY"),
    ("BINARY", "BINARY"), ("ARRAY", "ARRAY"), ("MULTISET", "MULTISET"), ("MAP", "MAP"), ("ROW", "ROW"),
    ("RAW", "RAW"), ("NULL", "NULL"),
]


@dataclass(frozen=True)
class Column:
    """One column of a plan's row type: its name, its type as the plan writes it, and that type's root."""

    name: str
    type: str
    root: str
    precision: int | None = None


def type_root(t: Any) -> tuple[str, int | None]:
    """(Flink LogicalTypeRoot, precision) of a plan type, given as text (``TIMESTAMP(3) WITH LOCAL TIME ZONE``) or JSON.

    >>> type_root("TIMESTAMP(3) WITH LOCAL TIME ZONE")
    ('TIMESTAMP_WITH_LOCAL_TIME_ZONE', 3)
    >>> type_root("VARCHAR(2147483647)")
    ('VARCHAR', None)
    """
    if isinstance(t, dict):
        kind = str(t.get("type", ""))
        if kind in ("TIMESTAMP_WITH_LOCAL_TIME_ZONE", "TIMESTAMP_WITHOUT_TIME_ZONE"):
            return kind, t.get("precision")
        return type_root(kind)
    text = str(t).strip().upper()
    if text.startswith("TIMESTAMP"):
        m = re.match(r"TIMESTAMP(?:_LTZ)?(?:\((\d+)\))?", text)
        prec = int(m.group(1)) if m and m.group(1) else (6 if "(" not in text.split()[0] else None)
        ltz = "LOCAL TIME ZONE" in text or text.startswith("TIMESTAMP_LTZ")
        return ("TIMESTAMP_WITH_LOCAL_TIME_ZONE" if ltz else "TIMESTAMP_WITHOUT_TIME_ZONE"), prec
    if text.startswith("INTERVAL"):  # INTERVAL YEAR(2) TO MONTH is written INTERVAL MONTH, DAY TO SECOND(3) SECOND(3)
        unit = text.split("(")[0].split()
        return ("INTERVAL_YEAR_MONTH" if {"YEAR", "MONTH"} & set(unit) else "INTERVAL_DAY_TIME"), None
    for prefix, root in _ROOTS:
        if text.startswith(prefix) and not text[len(prefix):len(prefix) + 1].isalpha():
            return root, None
    return text.split("(")[0].split("<")[0], None


def _split_top(text: str) -> list[str]:
    """The comma-separated parts of `text` outside brackets and backticks."""
    parts: list[str] = []
    cur: list[str] = []
    depth, tick = 0, False
    for ch in text:
        if ch == "`":
            tick = not tick
        elif not tick and ch in "<(":
            depth += 1
        elif not tick and ch in ">)":
            depth -= 1
        if ch == "," and depth == 0 and not tick:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        parts.append("".join(cur))
    return [p.strip() for p in parts]


def row_columns(t: Any, where: str) -> list[Column]:
    """The fields of a plan's ROW type (text ``ROW<`a` BIGINT, ...>`` or JSON ``{"type": "ROW", "fields": [...]}``)."""
    if isinstance(t, dict) and t.get("type") == "ROW":
        out = []
        for f in t.get("fields", []):
            root, prec = type_root(f.get("fieldType"))
            out.append(Column(str(f["name"]), json.dumps(f.get("fieldType")), root, prec))
        return out
    text = str(t).strip()
    if not (text.startswith("ROW<") and text.endswith(">")):
        raise InvalidArgumentError(f"{where}: row type {text[:80]!r} is not a ROW<...>; is this a compiled plan "
                                   "(COMPILE PLAN) of a Flink SQL job?")
    out = []
    for part in _split_top(text[4:-1]):
        m = re.match(r"^`((?:[^`]|``)*)`\s+(.*)$", part, re.S) or re.match(r"^(\S+)\s+(.*)$", part, re.S)
        if not m:
            raise InvalidArgumentError(f"{where}: cannot read field {part!r} of a plan row type")
        root, prec = type_root(m.group(2))
        out.append(Column(m.group(1).replace("``", "`"), m.group(2), root, prec))
    return out


@dataclass
class PlanNode:
    """One ExecNode of the plan: id, type stem (``group-aggregate``), its JSON, inputs and outputs by id."""

    id: int
    stem: str
    spec: dict[str, Any]
    inputs: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)

    @property
    def uid(self) -> str:
        """The uid the planner gives this node's transformation when the job runs from the plan (default format)."""
        return f"{self.id}_{self.stem}"

    @property
    def kind(self) -> str | None:
        return STATEFUL.get(self.stem)

    @property
    def scanned_table(self) -> str:
        """The identifier of the table a ``table-source-scan`` node reads (```cat`.`db`.`t```), else ""."""
        if self.stem != "table-source-scan":
            return ""
        return str(self.spec.get("scanTableSource", {}).get("table", {}).get("identifier", ""))


def short_table(identifier: str) -> str:
    """A table identifier's last part, unquoted (```cat`.`db`.`orders``` -> ``orders``)."""
    return identifier.rsplit(".", 1)[-1].strip("`")


@dataclass
class Plan:
    """A compiled plan: its nodes by id and where it came from."""

    source: str
    flink_version: str
    nodes: dict[int, PlanNode]

    @property
    def stateful(self) -> list[PlanNode]:
        """The nodes that keep keyed state, in id order."""
        return [n for n in sorted(self.nodes.values(), key=lambda n: n.id) if n.kind is not None]

    def output(self, node: PlanNode) -> list[Column]:
        """The node's output row."""
        return row_columns(node.spec.get("outputType"), f"{self.source} node {node.id}")

    def input(self, node: PlanNode, i: int = 0) -> list[Column]:
        """The row of the node's `i`-th input."""
        if i >= len(node.inputs):
            raise InvalidArgumentError(f"{self.source}: node {node.id} ({node.stem}) has no input {i}")
        return self.output(self.nodes[node.inputs[i]])

    def source_table(self, node: PlanNode, i: int) -> str | None:
        """The table the node's `i`-th input reads, following single-input nodes up to a table scan; None if ambiguous."""
        cur = self.nodes.get(node.inputs[i]) if i < len(node.inputs) else None
        while cur is not None:
            if cur.stem == "table-source-scan":
                return short_table(cur.scanned_table) or None
            if len(cur.inputs) != 1:
                return None
            cur = self.nodes.get(cur.inputs[0])
        return None

    def sink_columns(self, node: PlanNode) -> list[tuple[str, dict]]:
        """The node's results as the query's sink receives them: (name, expression over the node's output row).

        Follows the node's only consumer through nodes that pass rows unchanged and projections
        (``Calc``) whose expressions statekit evaluates (references, casts, CASE, comparisons,
        arithmetic: what the planner writes when it reduces AVG to SUM0 / COUNT), and takes the sink
        table's column names at the end; stops (keeping the columns so far) at anything else.
        Expressions are the plan's own RexNode JSON with ``INPUT_REF`` indexes into the node's output.
        """
        cols = [(c.name, {"kind": "INPUT_REF", "inputIndex": i, "type": c.type}) for i, c in enumerate(self.output(node))]
        cur = node
        while len(cur.outputs) == 1:
            nxt = self.nodes[cur.outputs[0]]
            if nxt.stem in _PASS:
                cur = nxt
                continue
            if nxt.stem == "calc":
                exprs = [_substitute(e, cols) for e in nxt.spec.get("projection") or []]
                if not exprs or any(e is None for e in exprs):
                    break
                cols = [(c.name, e) for c, e in zip(self.output(nxt), exprs) if e is not None]
                cur = nxt
                continue
            if nxt.stem == "sink":
                schema = nxt.spec.get("dynamicTableSink", {}).get("table", {}).get("resolvedTable", {}) \
                    .get("schema", {}).get("columns", [])
                physical = [c for c in schema if c.get("kind", "PHYSICAL") == "PHYSICAL"]
                if len(physical) == len(cols):
                    cols = [(str(c["name"]), e) for c, (_, e) in zip(physical, cols)]
            break
        return cols

    def sink_names(self, node: PlanNode) -> list[tuple[str, int, str | None]]:
        """Of `sink_columns`, those that are a column of the node's output, maybe cast: (name, index, cast type)."""
        out = []
        for name, e in self.sink_columns(node):
            ref = plain_ref(e)
            if ref is not None:
                out.append((name, *ref))
        return out


#: the RexNode calls `sink_columns` follows (statekit.format.flink.sqllogical evaluates them)
EVALUATED = {"$CAST$1", "$CASE$1", "$=$1", "$<>$1", "$/$1", "$*$1", "$+$1", "$-$1", "$IS NULL$1", "$IS NOT NULL$1"}


def _substitute(e: dict, cols: list[tuple[str, dict]]) -> dict | None:
    """Expression `e` over `cols`' expressions (INPUT_REF i -> cols[i]); None where it calls what statekit does not evaluate."""
    kind = e.get("kind")
    if kind == "INPUT_REF":
        i = int(e.get("inputIndex", -1))
        return cols[i][1] if 0 <= i < len(cols) else None
    if kind == "LITERAL":
        return e
    if kind == "CALL" and e.get("internalName") in EVALUATED:
        ops = [_substitute(o, cols) for o in e.get("operands", [])]
        return None if any(o is None for o in ops) else {**e, "operands": ops}
    return None


def plain_ref(e: dict) -> tuple[int, str | None] | None:
    """(index, cast type or None) when `e` is an output column, or a cast of one; else None."""
    if e.get("kind") == "INPUT_REF":
        return int(e["inputIndex"]), None
    ops = e.get("operands") or []
    if e.get("internalName") == "$CAST$1" and len(ops) == 1 and ops[0].get("kind") == "INPUT_REF":
        t = e.get("type")
        return int(ops[0]["inputIndex"]), t if isinstance(t, str) else json.dumps(t)
    return None


def _stem(node_type: str) -> str:
    """``stream-exec-group-aggregate_1`` -> ``group-aggregate``."""
    t = re.sub(r"_\d+$", "", node_type)
    return t[len("stream-exec-"):] if t.startswith("stream-exec-") else t


def load_plan(plan: str | os.PathLike[str] | dict) -> Plan:
    """A compiled plan from its JSON file (or the parsed JSON); refuses what is not one, naming the file."""
    if isinstance(plan, dict):
        data, source = plan, "the plan"
    else:
        from statekit.format.storage import as_path

        p = as_path(plan)  # a local file, or a URI / StoragePath on object storage (read in one GET)
        source = str(p)
        try:
            data = json.loads(p.read_text("utf-8"))
        except FileNotFoundError:  # StorageNotFoundError too
            raise InvalidArgumentError(f"plan {p} does not exist; pass the JSON file COMPILE PLAN wrote for the job.") from None
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidArgumentError(f"plan {p} is not JSON ({exc}); pass the file COMPILE PLAN wrote for the job.") from None
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list) or not isinstance(data.get("edges"), list):
        raise InvalidArgumentError(f"{source} is not a Flink compiled plan (no 'nodes' and 'edges'); pass the JSON file "
                                   "COMPILE PLAN (or CompiledPlan.writeToFile) wrote for the job.")
    nodes: dict[int, PlanNode] = {}
    for n in data["nodes"]:
        try:
            nodes[int(n["id"])] = PlanNode(int(n["id"]), _stem(str(n["type"])), n)
        except (KeyError, TypeError, ValueError):
            raise InvalidArgumentError(f"{source}: a node without an id or type ({str(n)[:80]}); the plan is damaged") from None
    for e in data["edges"]:
        try:
            s, t = int(e["source"]), int(e["target"])
            nodes[t].inputs.append(s)
            nodes[s].outputs.append(t)
        except (KeyError, TypeError, ValueError):
            raise InvalidArgumentError(f"{source}: edge {str(e)[:80]} names a node the plan does not have") from None
    return Plan(source, str(data.get("flinkVersion", "")), nodes)
