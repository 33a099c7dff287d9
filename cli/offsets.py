"""`statekit offsets` and `statekit set-offsets`: where a job's sources resume (Kafka, files), and moving a Kafka partition
or a file source's reader."""

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
    """Where each source resumes: per reader subtask its splits (Kafka: topic, partition, the next offset to read, the
    stopping offset of a bounded source; files: the path, the split's bytes, the reader's position) and what its
    enumerator keeps (Kafka's partitions; the file source's pending splits and processed paths)."""
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
        err().print(f"{path} holds no source state (no SourceReaderState splits, no source enumerator)", markup=False)
        return
    table = []
    for r in rows:
        where = f"subtask {r['subtask']}" if r["holder"] == "reader" else f"enumerator ({r['status']})"
        table.append([r["operator"], r["source"], *_split_cells(r), where])
    emit_table(console, table, ["operator", "source", "split", "offset", "until", "held by"],
               title="source offsets (kafka: the next offset to read; file: the reader's position in the split)",
               identity=("operator", "split"))


def _split_cells(r: dict) -> list:
    """split, offset, until: ``topic/partition``, the next offset (or its marker), the stopping offset; for a file,
    its path, the reader's position (``+N`` records after a byte offset), the split's byte range."""
    if r["source"] == "kafka":
        offset = "-" if r["offset"] is None else (str(r["offset"]) if r["starting"] == "offset" else r["starting"])
        stop = "-" if r["stopping_offset"] is None else str(r["stopping_offset"])
        return [f"{r['topic']}/{r['partition']}", offset, stop]
    if r["source"] == "file":
        if r["position"] is None:
            at = "-" if r["offset"] is None else "start"
        else:
            at = (f"byte {r['position']} " if r["position"] >= 0 else "") + f"+{r['records_to_skip']} records"
        span = "-" if r["length"] is None else f"bytes {r['offset']}-{r['offset'] + r['length']}"
        return [r["path"], at, span]
    return ["(not decoded)", "-", "-"]


def set_offsets(
    source: Path = SOURCE, target: Path = TARGET, uid: Optional[str] = UID, uid_hash: Optional[str] = HASH,
    topic: Optional[str] = typer.Option(None, "--topic", help="Kafka: the topic."),
    partition: Optional[int] = typer.Option(None, "--partition", min=0, help="Kafka: the partition of --topic."),
    path: Optional[str] = typer.Option(None, "--path", help="File source: the file (as `statekit offsets` shows it, "
                                       "or a local path)."),
    offset: Optional[int] = typer.Option(None, "--offset", min=0, help="The offset to resume from (the next record "
                                         "read is this one)."),
    shift: Optional[int] = typer.Option(None, "--shift", help="Move by this many records from where the source "
                                        "stands: +1 skips one (a poison record), -3 reads three again."),
    records: Optional[int] = typer.Option(None, "--records", min=0, help="File source: resume --path this many "
                                          "records after its split's start."),
    skip_file: bool = typer.Option(False, "--skip-file", help="File source: drop --path (its reader split and pending "
                                   "split); a monitoring source counts it as processed and never reads it."),
    reread: bool = typer.Option(False, "--reread", help="File source: take the processed --path off the "
                                "enumerator's list, so a monitoring source reads it again from its start."),
    timestamp: Optional[str] = typer.Option(None, "--timestamp", metavar="T", help="Resume at the first record at or "
                                            "after this time (epoch milliseconds or ISO-8601, e.g. "
                                            "2026-12-04T10:00:00Z; the partition's end when there is none); the "
                                            "broker resolves it, so --bootstrap-servers is needed."),
    bootstrap_servers: Optional[str] = typer.Option(None, "--bootstrap-servers", metavar="HOST:PORT[,...]",
                                                    help="The Kafka broker(s) that resolve --timestamp."),
    kafka_property: Optional[list[str]] = typer.Option(None, "--kafka-property", metavar="KEY=VALUE",
                                                       help="A Kafka client property for --bootstrap-servers "
                                                       "(security.protocol=SSL, sasl.mechanism=...); repeatable."),
    apply: bool = APPLY,
) -> None:
    """Move where a source resumes, in a new Flink savepoint (everything else carried byte for byte): a Kafka
    partition (--topic, --partition: its reader split and its enumerator's entry) or a file (--path: its reader's
    position, or the file skipped or read again)."""
    from statekit.savepoint.offsets import set_file_offsets
    from statekit.savepoint.offsets import set_offsets as run

    if path is not None:
        if topic is not None or partition is not None or offset is not None or timestamp is not None:
            fail("--path edits a file source: give --records N, --shift K, --skip-file or --reread with it, not "
                 "--topic/--partition/--offset/--timestamp.")
        _report(set_file_offsets(source, target, op=operator_id(uid, uid_hash), path=path, records=records,
                                 shift=shift, skip_file=skip_file, reread=reread, dry_run=not apply), apply)
        return
    if topic is None or partition is None or records is not None or skip_file or reread:
        fail("give --topic T --partition P for a Kafka source (or --path for a file source's --records, --skip-file, "
             "--reread).")
    if sum(x is not None for x in (offset, shift, timestamp)) != 1:
        fail("give exactly one of --offset N, --shift K and --timestamp T.")
    config = {}
    for prop in kafka_property or []:
        key, eq, value = prop.partition("=")
        if not eq or not key:
            fail(f"--kafka-property takes KEY=VALUE; got one without '=' (key {key!r}).")
        config[key.strip()] = value
    _report(run(source, target, op=operator_id(uid, uid_hash), topic=topic, partition=partition, offset=offset,
                shift=shift, timestamp=timestamp, bootstrap_servers=bootstrap_servers, kafka_config=config,
                dry_run=not apply), apply)


def _report(plan: object, apply: bool) -> None:
    out().print(str(plan), markup=False)
    if not apply:
        err().print("dry run: nothing written; pass --apply to write the new savepoint", markup=False)


def register(app: typer.Typer) -> None:
    """Add the offsets and set-offsets commands to the app."""
    app.command("offsets")(offsets)
    app.command("set-offsets")(set_offsets)
