"""`statekit offsets` and `statekit set-offsets`: where a job's Kafka sources resume, and moving one partition."""

# No `from __future__ import annotations`: see statekit_cli.app (typer's start-up cost).
from pathlib import Path
from typing import Optional

import typer

from statekit_cli.common import (
    APPLY,
    HASH,
    JSON,
    PATH,
    SOURCE,
    TARGET,
    UID,
    err,
    fail,
    open_savepoint,
    operator_id,
    out,
)


def offsets(path: Path = PATH, uid: Optional[str] = typer.Option(None, "--uid", metavar="UID", show_default=False,
                                                                 help="Only this source operator, by uid."),
            uid_hash: Optional[str] = HASH, json: bool = JSON) -> None:
    """Where each Kafka source resumes: per reader subtask its splits (topic, partition, the next offset to read,
    the stopping offset of a bounded source) and the partitions its enumerator knows."""
    from statekit.savepoint.offsets import source_offsets
    from statekit_cli.render import dumps, emit_table

    sp = open_savepoint(path)
    op = operator_id(uid, uid_hash, required=False)
    rows = source_offsets(sp, op).to_pylist()
    console = out()
    if json:
        console.print(dumps(rows), markup=False)
        return
    if not rows:
        err().print(f"{path} holds no Kafka source state", markup=False)
        return
    table = []
    for r in rows:
        where = f"subtask {r['subtask']}" if r["holder"] == "reader" else f"enumerator ({r['status']})"
        offset = "-" if r["offset"] is None else (str(r["offset"]) if r["starting"] == "offset" else r["starting"])
        stop = "-" if r["stopping_offset"] is None else str(r["stopping_offset"])
        table.append([r["operator"], r["topic"], str(r["partition"]), offset, stop, where])
    emit_table(console, table, ["operator", "topic", "partition", "offset", "stopping", "held by"],
               title="source offsets (offset: the next record to read)", identity=("operator", "topic"))


def set_offsets(
    source: Path = SOURCE, target: Path = TARGET, uid: Optional[str] = UID, uid_hash: Optional[str] = HASH,
    topic: str = typer.Option(..., "--topic", help="The Kafka topic."),
    partition: int = typer.Option(..., "--partition", min=0, help="The partition of --topic."),
    offset: Optional[int] = typer.Option(None, "--offset", min=0, help="The offset to resume from (the next record "
                                         "read is this one)."),
    shift: Optional[int] = typer.Option(None, "--shift", help="Move by this many records from where the source "
                                        "stands: +1 skips one (a poison record), -3 reads three again."),
    apply: bool = APPLY,
) -> None:
    """Move where a Kafka source resumes one partition: its reader split and its enumerator's entry, in a new Flink
    savepoint (everything else carried byte for byte)."""
    from statekit.savepoint.offsets import set_offsets as run

    if (offset is None) == (shift is None):
        fail("give exactly one of --offset N and --shift K.")
    plan = run(source, target, op=operator_id(uid, uid_hash), topic=topic, partition=partition, offset=offset,
               shift=shift, dry_run=not apply)
    out().print(str(plan), markup=False)
    if not apply:
        err().print("dry run: nothing written; pass --apply to write the new savepoint", markup=False)


def register(app: typer.Typer) -> None:
    """Add the offsets and set-offsets commands to the app."""
    app.command("offsets")(offsets)
    app.command("set-offsets")(set_offsets)
