"""`statekit convert`: a real Flink savepoint rewritten as a statekit savepoint, or any savepoint written as a Flink one (`--to flink`)."""

# No `from __future__ import annotations`: see statekit_cli.app (typer's start-up cost).
from pathlib import Path
from typing import List, Optional

import typer

from statekit.errors import StatekitError
from statekit_cli import common


def convert(
    source: Path = typer.Argument(..., help="Flink savepoint or chk-N directory; with --to flink, any savepoint."),
    out: Path = typer.Argument(..., help="The new savepoint; must not exist."),
    to: str = typer.Option("statekit", "--to", help="Output format: statekit (default) or flink (canonical Flink)."),
    flink_version: Optional[str] = typer.Option(
        None, "--flink-version",
        help="With --to flink: the Flink version to restore it (1.18-2.3, e.g. 1.20); default: the version the "
             "state came from, else the newest."),
    uid: List[str] = typer.Option([], "--uid", help="Operator uid to carry (matched by its hash); repeatable."),
    max_parallelism: Optional[int] = typer.Option(
        None, "--max-parallelism",
        help="With --to flink: max parallelism of every operator (stateless ones too), keyed state re-hashed."),
) -> None:
    """Convert a Flink savepoint into statekit's format (every statekit writer then applies), or with
    `--to flink` write any savepoint as a canonical Flink savepoint that a Flink job restores (serializers
    read from Flink are reused; other state maps its types to Flink's serializers)."""
    from statekit.savepoint import Savepoint

    try:
        if to == "flink":
            from statekit.format.flink.metadata import read_metadata
            from statekit.format.flink.versions import FlinkVersion
            from statekit.savepoint.flink_out import write_flink

            if uid:
                raise typer.BadParameter("--uid applies to conversions into statekit's format; Flink stores uid hashes.")
            path = write_flink(source, out, max_parallelism=max_parallelism, flink_version=flink_version)
            # the operators from `_metadata` alone: opening the Flink savepoint would load Flink's whole reader
            md = read_metadata(path)
            names = [op.verified_uid or op.operator_id for op in md.operators]
            written = FlinkVersion.parse(flink_version) if flink_version else FlinkVersion.for_metadata_version(md.version)
            to = f"flink: {written.describe()}"
        elif to == "statekit":
            from statekit.savepoint.convert import convert_to_statekit

            if max_parallelism is not None:
                raise typer.BadParameter("--max-parallelism applies with --to flink; use set-max-parallelism here.")
            if flink_version is not None:
                raise typer.BadParameter("--flink-version applies with --to flink.")
            path = convert_to_statekit(source, out, uids=uid)
            names = [m.uid or m.uid_hash for m in Savepoint.open(path).operators]
        else:
            raise typer.BadParameter(f"--to must be 'statekit' or 'flink', not {to!r}.")
    except StatekitError as exc:
        common.err().print(f"error: {type(exc).__name__}: {exc}", markup=False)
        raise typer.Exit(code=common.EXIT_USAGE)
    common.out().print(f"converted {source} -> {path} ({to}): {len(names)} operator(s): {', '.join(names)}",
                       markup=False)


def register(app: typer.Typer) -> None:
    """Add the convert command to the app."""
    app.command(name="convert")(convert)
