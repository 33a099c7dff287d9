"""`statekit upgrade`: a Flink 1.x savepoint rewritten as a Flink 2.x savepoint the 2.x build of the job restores."""

# No `from __future__ import annotations`: see statekit_cli.app (typer's start-up cost).
import os
from pathlib import Path
from typing import List

import typer

from statekit_cli import common


def _pairs(items: List[str]) -> dict:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise typer.BadParameter(f"--pojo takes UID/STATE=CLASS, not {item!r}.")
        out[key] = value
    return out


def upgrade(
    source: Path = typer.Argument(..., help="The Flink 1.x savepoint (canonical; it is never modified)."),
    target: Path = typer.Argument(..., help="The new Flink 2.x savepoint; must not exist."),
    to_flink: str = typer.Option(..., "--to-flink", help="The Flink 2.x line to restore it (2.0-2.3, e.g. 2.3)."),
    classpath: List[str] = typer.Option(
        [], "--classpath", help="The 1.x job's jar or classes directory (repeatable, or ':'-separated): the fields of "
                                "Kryo-serialized classes and of Scala case classes."),
    target_classpath: List[str] = typer.Option(
        [], "--target-classpath", help="The 2.x job's jar or classes directory: the POJOs named with --pojo."),
    pojo: List[str] = typer.Option(
        [], "--pojo", help="UID/STATE=CLASS: the POJO the 2.x job declares for a Scala case class state (repeatable)."),
    drop: List[str] = typer.Option([], "--drop", help="UID/STATE to leave out of the 2.x savepoint (repeatable)."),
    keep: List[str] = typer.Option(
        [], "--keep", help="UID/STATE to carry unchanged, unchecked (e.g. your own Kryo serializer's state that you "
                           "know Kryo 5 reads the same); repeatable."),
    uid: List[str] = typer.Option([], "--uid", help="Operator uid to name in the report (matched by its hash); repeatable."),
    json_out: bool = common.JSON,
) -> None:
    """Upgrade a Flink 1.x savepoint to Flink 2.x: Kryo 2 values re-encoded as Kryo 5 (or as 2.x's built-in
    List/Map serializers), Scala Options and case classes as what the 2.x job declares; other state kept as it
    was. A state that cannot be migrated is refused by name and nothing is written."""
    from statekit.savepoint.upgrade import upgrade as run

    def split(items: List[str]) -> list:
        return [p for item in items for p in item.split(os.pathsep) if p]

    report = run(source, target, to_flink=to_flink, classpath=split(classpath),
                 target_classpath=split(target_classpath), pojos=_pairs(pojo), drop=drop, keep=keep, uids=uid)
    if json_out:
        common.out().print(report.to_json(), markup=False, highlight=False, soft_wrap=True)
        return
    common.out().print(report.summary(), markup=False)
    for s in report.states:
        detail = f" ({s.how})" if s.how else ""
        common.out().print(f"  {s.action:8} {s.operator}/{s.state}: {s.serializer_from}{detail}", markup=False)


def register(app: typer.Typer) -> None:
    """Add the upgrade command to the app."""
    app.command(name="upgrade")(upgrade)
