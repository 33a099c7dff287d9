"""`statekit convert`: a real Flink savepoint (or retained checkpoint) rewritten as a statekit savepoint."""

from __future__ import annotations

from pathlib import Path
from typing import List

import typer
from rich.console import Console

from statekit.errors import StatekitError


def convert(
    source: Path = typer.Argument(..., help="Flink savepoint or chk-N directory (binary _metadata)."),
    out: Path = typer.Argument(..., help="The new statekit savepoint; must not exist."),
    uid: List[str] = typer.Option([], "--uid", help="Operator uid to carry (matched by its hash); repeatable."),
) -> None:
    """Convert a Flink savepoint into statekit's format, so that every statekit writer applies to it."""
    from statekit.savepoint import Savepoint
    from statekit.savepoint.convert import convert_to_statekit

    try:
        path = convert_to_statekit(source, out, uids=uid)
        sp = Savepoint.open(path)
    except StatekitError as exc:
        Console(stderr=True).print(f"[bold red]error:[/] {type(exc).__name__}: {exc}", highlight=False)
        raise typer.Exit(code=2)
    ops = ", ".join(m.uid or m.uid_hash for m in sp.operators)
    Console().print(f"[green]converted[/] {source} -> {path}: {len(sp.operators)} operator(s): {ops}")


def register(app: typer.Typer) -> None:
    app.command(name="convert")(convert)
