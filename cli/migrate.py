"""`statekit migrate-sql`: a Flink SQL job's state carried across a query change into the new job's layout."""

# No `from __future__ import annotations`: see statekit_cli.app (typer's start-up cost).
from pathlib import Path
from typing import Optional

import typer

from statekit_cli.common import APPLY, SOURCE, TARGET, err, out, progress


def migrate_sql(
    source: Path = SOURCE, target: Path = TARGET,
    plan: Path = typer.Option(..., "--plan", metavar="NEW_PLAN.JSON", show_default=False,
                              help="The new job's compiled plan (COMPILE PLAN's JSON), which the new job runs from."),
    template: Path = typer.Option(..., "--template", metavar="NEW_TEMPLATE", show_default=False,
                                  help="A savepoint the new job took (its operator ids and serializers); its keyed "
                                       "SQL state is replaced."),
    old_plan: Optional[Path] = typer.Option(None, "--old-plan", metavar="OLD_PLAN.JSON", show_default=False,
                                            help="The old job's compiled plan: accumulators carried call by call, "
                                                 "rows column by column; without it only unchanged states carry."),
    apply: bool = APPLY,
) -> None:
    """Carry the state of every SQL operator whose keys are unchanged into the new query's layout (aggregate calls
    added start empty, removed ones are dropped, columns added to kept rows are NULL, operator ids follow the new
    plan); refuses, with the reason per operator, what cannot be carried (keys, window or DISTINCT calls changed)."""
    from statekit.savepoint.sql_migrate import migrate_sql as migrate

    with progress("writing the new savepoint" if apply else "planning"):
        report = migrate(source, target, plan=plan, template=template, old_plan=old_plan, dry_run=not apply)
    out().print(str(report), markup=False)
    if not apply:
        err().print("dry run: nothing written; pass --apply to write the new savepoint", markup=False)


def register(app: typer.Typer) -> None:
    """Add migrate-sql to the app."""
    app.command("migrate-sql")(migrate_sql)
