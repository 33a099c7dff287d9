"""Repairs: each reads SOURCE and writes a new savepoint TARGET, only with --apply (default: a dry run)."""

# No `from __future__ import annotations`: see statekit_cli.app (typer's start-up cost).
import json as jsonlib
from pathlib import Path
from typing import List, Optional

import typer

from statekit.savepoint import edits as E
from statekit_cli.common import (
    APPLY,
    HASH,
    KEY,
    NAME,
    PLAN,
    SOURCE,
    SQL,
    TARGET,
    TO,
    UID,
    err,
    fail,
    is_checkpoint,
    open_savepoint,
    operator_id,
    out,
    plan_of,
    progress,
)

#: The command of each edit of `statekit.savepoint.edits.EDITS`, by the edit's name (`register` adds them in the
#: registry's order; an edit without a command fails there).
COMMANDS: dict = {}


def _command(edit: type):
    """Make the decorated function the CLI command of the registered edit `edit` (named as the registry names it)."""
    kind = E.kind_of(edit)
    assert kind is not None, f"{edit.__name__} is not in statekit.savepoint.edits.EDITS"

    def put(fn):
        COMMANDS[kind.name] = fn
        return fn
    return put


def run_repair(source: Path, target: Path, edits: list, apply: bool, to: Optional[str] = None,
               sql_plan: Optional[Path] = None) -> None:
    """Plan `edits`, print the plan, and write the new savepoint with --apply (one pass, one savepoint, in the
    source's format unless --to says otherwise; `sql_plan`: a Flink SQL job's compiled plan)."""
    from statekit.savepoint.output import FORMATS
    from statekit.savepoint.patch import repair

    if to is not None and to not in FORMATS:
        fail(f"--to must be statekit or flink, not {to!r}.")
    with progress("writing the new savepoint" if apply else "planning"):
        plan = repair(source, target, edits, dry_run=not apply, to=to, plan=sql_plan)  # type: ignore[arg-type]
    console = out()
    for line in getattr(plan, "noops", []):
        console.print(f"no change: {line}", markup=False)
    if not plan.changes:
        console.print(f"nothing to change: {target} not written", markup=False)
        return
    console.print(str(plan), markup=False)
    if not apply:
        err().print("dry run: nothing written; pass --apply to write the new savepoint", markup=False)


def _key(sp_path: Path, uid: Optional[str], uid_hash: Optional[str], text: str, name: Optional[str] = None,
         plan: Optional[Path] = None):
    from statekit_cli.render import parse_key

    sp = open_savepoint(sp_path, plan)
    op = operator_id(uid, uid_hash, name=name)
    return op, parse_key(text, sp.operator(op).key_type)


@_command(E.SetValue)
def set_value(
    source: Path = SOURCE, target: Path = TARGET, uid: Optional[str] = UID, uid_hash: Optional[str] = HASH, key: str = KEY,
    state: str = typer.Option(..., "--state", help="Name of the keyed state to set (with --plan on a Flink SQL "
                              "aggregate also a column of the query's result, e.g. cnt)."),
    value: str = typer.Option(..., "--value", help='The new value as JSON: 42, "text", [1,2], {"k": 1.5}, null.'),
    apply: bool = APPLY, to: Optional[str] = TO, name: Optional[str] = NAME, plan: Optional[Path] = PLAN,
    namespace: Optional[str] = typer.Option(None, "--namespace", metavar="JSON", show_default=False,
                                            help="The window of a Flink SQL window aggregate's value: its slice end "
                                                 '(epoch ms) or {"start": MS, "end": MS}.'),
) -> None:
    """Set one key's keyed state to a JSON value (a missing key gets a row; null clears the state).

    On a Flink SQL savepoint with --plan, --state may name a result column (cnt): the accumulator fields
    behind it are set; rows are merged field by field into the stored row."""
    if is_checkpoint(source):  # a Spark streaming checkpoint: the edits become a new batch (statekit_cli.spark_state)
        from statekit_cli import spark_state

        return run_repair(source, target, spark_state.set_edits(source, uid, name, key, state, value), apply, to)
    from statekit_cli.render import parse_json_value

    op, k = _key(source, uid, uid_hash, key, name, plan)
    meta = open_savepoint(source, plan).operator(op)
    if state in {s.name for s in meta.keyed_states}:
        info = meta.keyed_state(state)
        v = _json(value, "--value") if _partial(value, info.type) else \
            parse_json_value(value, info.type, f"--value for state {state!r} of {meta.display_name}")
    else:  # a result column (the library checks it against the plan and its type)
        v = _json(value, "--value")
    ns = _json(namespace, "--namespace") if namespace is not None else None
    run_repair(source, target, [E.SetValue(op, k, state, v, namespace=ns)], apply, to, plan)


def _json(text: str, option: str):
    from statekit.errors import InvalidArgumentError

    try:
        return jsonlib.loads(text)
    except ValueError as exc:
        raise InvalidArgumentError(f"{option} {text!r} is not JSON ({exc}); quote strings, e.g. '\"text\"'.") from None


def _partial(text: str, ddl: str) -> bool:
    """Whether `text` gives some fields of a row-valued state (merged into the stored row by the library)."""
    return ddl.startswith("struct<") and text.lstrip().startswith("{")


@_command(E.DeleteKeys)
def delete_key(
    source: Path = SOURCE, target: Path = TARGET, uid: Optional[str] = UID, uid_hash: Optional[str] = HASH,
    keys: List[str] = typer.Option(..., "--key", help="Key to delete (repeat for several)."),
    apply: bool = APPLY, to: Optional[str] = TO, name: Optional[str] = NAME,
) -> None:
    """Delete keys: all their keyed state and timers."""
    if is_checkpoint(source):  # a Spark streaming checkpoint: the edits become a new batch (statekit_cli.spark_state)
        from statekit_cli import spark_state

        return run_repair(source, target, spark_state.delete_edits(source, uid, name, keys), apply, to)
    from statekit_cli.render import parse_key

    op = operator_id(uid, uid_hash, name=name)
    key_type = open_savepoint(source).operator(op).key_type
    run_repair(source, target, [E.DeleteKeys(op, tuple(parse_key(k, key_type) for k in keys))], apply, to)


@_command(E.RemoveState)
def rm_state(
    source: Path = SOURCE, target: Path = TARGET, uid: Optional[str] = UID, uid_hash: Optional[str] = HASH,
    states: List[str] = typer.Option(..., "--state", help="State to remove (repeat for several)."),
    apply: bool = APPLY, to: Optional[str] = TO, name: Optional[str] = NAME,
) -> None:
    """Remove keyed or operator states of an operator (a restored job starts them empty)."""
    if is_checkpoint(source):  # a Spark streaming checkpoint: the edits become a new batch (statekit_cli.spark_state)
        from statekit_cli import spark_state

        return run_repair(source, target, spark_state.rm_edits(source, uid, name, states), apply, to)

    op = operator_id(uid, uid_hash, name=name)
    run_repair(source, target, [E.RemoveState(op, s) for s in states], apply, to)


@_command(E.RenameOperator)
def rename_uid(
    source: Path = SOURCE, target: Path = TARGET, uid: Optional[str] = UID, uid_hash: Optional[str] = HASH,
    new_uid: Optional[str] = typer.Option(None, "--new-uid", metavar="UID", help="The new uid.", show_default=False),
    new_hash: Optional[str] = typer.Option(None, "--new-hash", metavar="HASH", show_default=False,
                                           help="The new uid hash (32 hex characters), instead of --new-uid."),
    old_alias: Optional[str] = typer.Option(None, "--from", hidden=True, help="Old spelling of --uid."),
    to: Optional[str] = typer.Option(
        None, "--to", metavar="statekit|flink", show_default=False,
        help="Format of the new savepoint; default: the source's. (Without --new-uid/--new-hash, the old spelling "
             "of --new-uid.)"),
    apply: bool = APPLY, name: Optional[str] = NAME,
) -> None:
    """Give an operator a new uid (the library's change_operator_identifier); its state is carried over
    unchanged (files hard-linked). The operator is --uid OLD or --hash OLDHASH; the new one --new-uid NEW
    or --new-hash NEWHASH."""
    if old_alias is not None:  # `--from OLD --to NEW`, the spelling before --uid/--new-uid
        if uid is not None or uid_hash is not None:
            fail("give the operator by --uid or --hash (--from is their old spelling), not both.")
        uid = old_alias
    if to is not None and new_uid is None and new_hash is None:  # `--to NEW`: the spelling before --new-uid
        new_uid, to = to, None
    old = operator_id(uid, uid_hash, name=name)
    new = operator_id(new_uid, new_hash, uid_option="--new-uid", hash_option="--new-hash")
    run_repair(source, target, [E.RenameOperator(old, new)], apply, to)


@_command(E.RemoveOperator)
def remove_operator(source: Path = SOURCE, target: Path = TARGET, uid: Optional[str] = UID, uid_hash: Optional[str] = HASH,
                    apply: bool = APPLY, to: Optional[str] = TO) -> None:
    """Drop an operator and all its state."""
    run_repair(source, target, [E.RemoveOperator(operator_id(uid, uid_hash))], apply, to)


@_command(E.SetMaxParallelism)
def set_max_parallelism(
    source: Path = SOURCE, target: Path = TARGET, uid: Optional[str] = UID, uid_hash: Optional[str] = HASH,
    max_parallelism: int = typer.Option(..., "--max", help="New max parallelism (1..32768)."),
    apply: bool = APPLY, to: Optional[str] = TO, name: Optional[str] = NAME,
) -> None:
    """Re-hash an operator's keyed state and timers into a new max parallelism."""
    run_repair(source, target, [E.SetMaxParallelism(operator_id(uid, uid_hash, name=name), max_parallelism)], apply, to)


LOCAL_REKEY_LIMIT = 2 << 30  # keyed bytes on disk above which `auto` re-keys with Spark


@_command(E.Rekey)
def rekey(
    source: Path = SOURCE, target: Path = TARGET, uid: Optional[str] = UID, uid_hash: Optional[str] = HASH,
    expr: str = typer.Option(..., "--expr", help="SQL over the column key giving the new key, e.g. upper(key)."),
    engine: str = typer.Option("auto", "--engine", help="auto (local unless the state is over 2 GiB), local, spark."),
    apply: bool = APPLY, to: Optional[str] = TO,
) -> None:
    """Replace every key by a SQL expression of it; state and timers move to the new keys' key groups.

    Two keys with state becoming one key is refused (naming both); merge their state first.
    """
    op = operator_id(uid, uid_hash)
    sp = open_savepoint(source)
    meta = sp.operator(op)
    if engine not in ("auto", "local", "spark"):
        fail(f"--engine must be auto, local or spark, not {engine!r}.")
    if engine == "spark" or (engine == "auto" and sum(f.bytes for f in meta.files) > LOCAL_REKEY_LIMIT):
        _rekey_spark(source, target, sp, meta, expr, apply, to)
        return
    import pyarrow as pa

    from statekit.query import key_mapping

    with progress("evaluating the new keys"):
        keys = [sp.keyed_table(op).column("key")]
        timers = sp.timers(op)
        if timers.num_rows:
            keys.append(timers.column("key"))
        mapping = key_mapping(pa.chunked_array([c for k in keys for c in k.chunks], keys[0].type), expr)
    run_repair(source, target, [E.Rekey(op, mapping)], apply, to)


def _rekey_spark(source: Path, target: Path, sp, meta, expr: str, apply: bool, to: Optional[str]) -> None:
    from statekit.errors import SavepointExistsError

    if target.exists():
        raise SavepointExistsError(f"{target} already exists; savepoints are never overwritten, so this repair would "
                                   "fail. Choose a new target path.")
    from statekit.savepoint.output import describe, output_format
    from statekit.savepoint.transforms import require_hashed_key_groups

    require_hashed_key_groups(meta, "a re-key")
    fmt = output_format(sp, to)
    console = out()
    console.print(f"re-key operator {meta.display_name} with Spark: new key = {expr}", markup=False)
    if not apply:
        console.print(f"would write {target} as a {describe(fmt, sp)} from {source}", markup=False)
        err().print("dry run: nothing written; pass --apply to write the new savepoint", markup=False)
        return
    from statekit_cli.common import quiet_jvm

    with progress("re-keying with Spark"):
        with quiet_jvm():
            from statekit.spark import SavepointWriter, spark_session

            spark = spark_session()
        SavepointWriter.from_existing_savepoint(spark, str(source)).rekey(meta.identifier, expr).write(
            str(target), format=fmt)
    console.print(f"wrote {target} as a {describe(fmt, sp)} from {source}", markup=False)


def repair_plan(
    source: Path = SOURCE, target: Path = TARGET,
    plan: Path = typer.Option(..., "--plan", help="JSON file: a list of edits (see the command's help)."),
    apply: bool = APPLY, to: Optional[str] = TO,
    sql_plan: Optional[Path] = typer.Option(None, "--sql-plan", metavar="PLAN.JSON", show_default=False,
                                            help="A Flink SQL job's compiled plan: set edits may name result columns."),
) -> None:
    """Several repairs in one pass, writing one savepoint (--plan: a JSON list of edits).

    The plan is a JSON list of edits:

    {EDITS}

    An operator may be named by "hash": H (its uid hash) or "name": N (its stored name, e.g. GroupAggregate[51])
    instead of "uid", and a new uid by "new_hash". A set edit of a Flink SQL window aggregate gives the window as
    "namespace"; with --sql-plan its "state" may be a column of the query's result (cnt).
    """
    from statekit.errors import InvalidArgumentError

    try:
        items = jsonlib.loads(plan.read_text())
    except (OSError, ValueError) as exc:
        raise InvalidArgumentError(f"--plan {plan}: not a readable JSON file ({exc}).") from None
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise InvalidArgumentError(f"--plan {plan}: expected a JSON list of objects, one per edit.")
    if is_checkpoint(source):  # a Spark streaming checkpoint (statekit_cli.spark_state)
        from statekit_cli import spark_state

        return run_repair(source, target, spark_state.plan_edits(source, items, plan), apply, to)
    sp = open_savepoint(source, sql_plan)
    edits = []
    for i, item in enumerate(items):
        kind = item.get("edit")
        entry = E.EDITS.get(kind) if isinstance(kind, str) else None
        if entry is None:
            raise InvalidArgumentError(f"--plan {plan}: edit {i + 1} has unknown \"edit\": {kind!r}.")
        try:
            edits.append(entry.from_plan(_PlanEntry(item, sp, i)))
        except KeyError as exc:
            raise InvalidArgumentError(f"--plan {plan}: edit {i + 1} ({kind}) lacks the field {exc}.") from None
    run_repair(source, target, edits, apply, to, sql_plan)


# The plan's entries come from the registry, so `repair --help` lists every edit a plan takes.
repair_plan.__doc__ = (repair_plan.__doc__ or "").replace("{EDITS}", "\n    | ".join(
    " | ".join(k.plan_entry for k in list(E.EDITS.values())[i:i + 2]) for i in range(0, len(E.EDITS), 2)))


class _PlanEntry:
    """One edit of a --plan file for `statekit.savepoint.edits.EditKind.from_plan` (`PlanItem`): its operator,
    keys and values parsed against the savepoint as the single-edit commands parse their options."""

    def __init__(self, item: dict, sp, index: int) -> None:
        self.item, self.sp, self.index = item, sp, index
        self.op = None
        self.meta = None

    def __getitem__(self, field: str):
        return self.item[field]

    def get(self, field: str, default=None):
        return self.item.get(field, default)

    def operator(self):
        item = self.item
        self.op = item["name"] if isinstance(item.get("name"), str) else _plan_operator(item, "uid", "hash", "from")
        self.meta = self.sp.operator(self.op)
        return self.op

    def new_operator(self):
        return _plan_operator(self.item, "new_uid", "new_hash", "to")

    def key(self, value):
        from statekit_cli.render import parse_key

        return parse_key(value if isinstance(value, str) else jsonlib.dumps(value), self.meta.key_type)

    def value(self, state: str, value):
        from statekit_cli.render import parse_json_value

        if state not in {s.name for s in self.meta.keyed_states}:
            return value  # a result column of a SQL aggregate (the library checks it against the plan)
        info = self.meta.keyed_state(state)
        text = jsonlib.dumps(value)
        if _partial(text, info.type):
            return value
        return parse_json_value(text, info.type, f"edit {self.index + 1}: state {info.name!r}")

    def key_mapping(self, expr: str):
        import pyarrow as pa

        from statekit.query import key_mapping

        keys = self.sp.keyed_table(self.op).column("key")
        return key_mapping(pa.chunked_array(keys.chunks, keys.type), expr)


def _plan_operator(item: dict, uid_field: str, hash_field: str, old_field: str):
    """The operator an edit of a plan names: by uid or uid hash (``"hash": true`` beside a "uid" holding
    the hash, and "from"/"to" for rename-uid, are the spellings of earlier versions)."""
    from statekit.errors import InvalidArgumentError
    from statekit.identifiers import OperatorIdentifier

    uid, uid_hash = item.get(uid_field, item.get(old_field)), item.get(hash_field)
    if uid_hash is True:
        uid, uid_hash = None, uid
    elif uid_hash is False:
        uid_hash = None
    if (uid is None) == (uid_hash is None):
        raise InvalidArgumentError(f"an edit names its operator by exactly one of \"{uid_field}\" and "
                                   f"\"{hash_field}\"; got {_json_text(item)}.")
    for value in (uid, uid_hash):
        if value is not None and not isinstance(value, str):
            raise InvalidArgumentError(f"\"{uid_field}\"/\"{hash_field}\" must be text; got {_json_text(item)}.")
    return OperatorIdentifier.for_uid_hash(uid_hash) if uid_hash is not None else OperatorIdentifier.for_uid(uid)


def _json_text(item: dict) -> str:
    return jsonlib.dumps(item, ensure_ascii=False)[:200]


def bootstrap(
    data: Path = typer.Argument(..., help="Parquet, CSV or JSON-lines file (or a directory of them), or a Delta "
                                "table.", show_default=False),
    target: Path = TARGET,
    uid: str = typer.Option(..., "--uid", help="Uid of the operator to create (with --template: the SQL operator "
                            "to fill, its uid or name)."),
    key: Optional[str] = typer.Option(None, "--key", help="Column holding the key (not with --template)."),
    key_type: Optional[str] = typer.Option(None, "--key-type", help="Key type (DDL, e.g. bigint); default: the column's."),
    states: Optional[List[str]] = typer.Option(None, "--state", help="NAME=COLUMN[:TYPE]: a value state from a column "
                                               "(repeat for several)."),
    max_parallelism: Optional[int] = typer.Option(None, "--max-parallelism", help="Max parallelism of the operator "
                                                  "(1..32768)."),
    parallelism: int = typer.Option(1, "--parallelism", help="Parallelism recorded for the operator."),
    template: Optional[Path] = typer.Option(None, "--template", metavar="SAVEPOINT", show_default=False,
                                            help="A SQL job's savepoint taken with no input: bootstrap its --uid "
                                                 "operator (group aggregate, keep-first dedup) from DATA, the "
                                                 "operator's input rows (needs --plan or --sql)."),
    plan: Optional[Path] = PLAN, sql: Optional[Path] = SQL,
    replace: bool = typer.Option(False, "--replace", help="With --template: replace the operator's state if the "
                                 "template holds some."),
    apply: bool = APPLY,
) -> None:
    """Create a savepoint with one keyed operator whose value states come from a table's columns; with --template,
    fill a Flink SQL job's group aggregate (or keep-first deduplication) with the query's state over DATA."""
    if template is not None:
        from statekit.savepoint.sql_bootstrap import bootstrap_sql

        if key is not None or states or max_parallelism is not None:
            fail("--key, --state and --max-parallelism describe a new operator; with --template the plan says them.")
        with progress("writing the savepoint" if apply else "computing the state"):
            report = bootstrap_sql(data, template, target, operator=uid, plan=plan_of(plan, sql), replace=replace,
                                   dry_run=not apply)
        out().print(str(report), markup=False)
        if not apply:
            err().print("dry run: nothing written; pass --apply to write the new savepoint", markup=False)
        return
    if key is None or not states or max_parallelism is None:
        fail("name the new operator's --key, its --state columns and its --max-parallelism (or fill a SQL job's "
             "template: --template SAVEPOINT --plan PLAN.JSON).")
    from statekit.bootstrap import bootstrap_columns, parse_state_spec, read_table

    assert key is not None and max_parallelism is not None  # fail() above exits
    specs = [parse_state_spec(s) for s in states or []]
    with progress("reading the input"):
        table = read_table(data)
    with progress("planning" if not apply else "writing the savepoint"):
        result = bootstrap_columns(table, target, uid=uid, key=key, key_type=key_type, states=specs,
                                   max_parallelism=max_parallelism, parallelism=parallelism, dry_run=not apply,
                                   source=str(data))
    out().print(result, markup=False)
    if not apply:
        err().print("dry run: nothing written; pass --apply to write the new savepoint", markup=False)


def prune_expired(
    source: Path = SOURCE, target: Path = TARGET,
    now: str = typer.Option(..., "--now", metavar="TIME", help="The time to judge expiry at: epoch milliseconds or "
                            "ISO-8601 (2026-12-04T12:00:00Z)."),
    ttl: Optional[str] = typer.Option(None, "--ttl", metavar="DURATION", show_default=False,
                                      help="The states' time to live ('1 d', '36 h', '500 ms'): the job's "
                                           "table.exec.state.ttl or StateTtlConfig; default: the plan's."),
    operators: Optional[List[str]] = typer.Option(None, "--operator", metavar="UID|NAME", show_default=False,
                                                  help="Only this operator (repeat for several); default: all."),
    touch: Optional[str] = typer.Option(None, "--touch", metavar="TIME", show_default=False,
                                        help="Set the last access time of every kept entry to TIME."),
    plan: Optional[Path] = PLAN, apply: bool = APPLY,
) -> None:
    """Drop every state entry whose TTL expired at --now (value states and map entries), reporting per operator
    and state the entries and bytes removed."""
    from statekit.savepoint.prune import prune_expired as prune

    with progress("writing the new savepoint" if apply else "planning"):
        report = prune(source, target, now=now, ttl=ttl, operators=operators or None, touch=touch, plan=plan,
                       dry_run=not apply)
    out().print(str(report), markup=False)
    if not apply:
        err().print("dry run: nothing written; pass --apply to write the new savepoint", markup=False)


def register(app: typer.Typer) -> None:
    """Add the repair commands (one per edit of the registry: set, delete-key, rm-state, rekey, ...; then repair,
    bootstrap and prune-expired) to the app."""
    for name in E.EDITS:
        app.command(name)(COMMANDS[name])
    app.command("repair")(repair_plan)
    app.command("bootstrap")(bootstrap)
    app.command("prune-expired")(prune_expired)


