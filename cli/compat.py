"""`statekit compat OLD NEW`: will the job that wrote NEW restore OLD's state? Exit 1 when Flink's restore would fail."""

# No `from __future__ import annotations`: see statekit_cli.app (typer's start-up cost).
from pathlib import Path

import typer

from statekit_cli.common import EXIT_PROBLEMS, JSON, out


def compat(
    old: Path = typer.Argument(..., help="Savepoint whose state is to be restored.", show_default=False),
    new: Path = typer.Argument(..., help="A savepoint or checkpoint of the new job version (e.g. its first "
                               "checkpoint, with no input).", show_default=False),
    json: bool = JSON,
) -> None:
    """For every operator and state: whether the new job restores the old state (operator missing, state added
    or removed, kind, key type or serializer changed and whether Flink migrates it, max parallelism changed),
    with the statekit command that fixes each finding. Exit 1 when the restore would fail."""
    from statekit.savepoint.compat import compat as run
    from statekit_cli.render import dumps, emit_table

    report = run(old, new)
    console = out()
    if json:
        console.print(dumps(report.to_json()), markup=False)
    else:
        verdict = "restores" if report.restores else "FAILS to restore"
        console.print(f"the job of {report.new} {verdict} the state of {report.old}", markup=False)
        rows = [[f.operator, f.state or "-", f.change, "fails" if f.fails else "ok", f.detail, f.fix or "-"]
                for f in report.findings]
        if rows:
            emit_table(console, rows, ["operator", "state", "change", "restore", "detail", "fix"], title="findings",
                       identity=("operator", "state"))
    if not report.restores:
        raise typer.Exit(EXIT_PROBLEMS)


def register(app: typer.Typer) -> None:
    """Add the compat command to the app."""
    app.command("compat")(compat)
