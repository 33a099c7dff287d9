"""`statekit demo`: the end-to-end demo, writing only into a new, empty or earlier-demo directory."""

# No `from __future__ import annotations`: see statekit_cli.app (typer's start-up cost).
from pathlib import Path

import typer

from statekit_cli.common import out


def demo(
    out_dir: Path = typer.Option(Path("demo-output"), "--out", help="Directory for the demo's savepoints: "
                                 "new or empty (or an earlier demo's with --replace)."),
    replace: bool = typer.Option(False, "--replace", help="Replace an earlier demo's output in --out (only a "
                                 "directory the demo made and nothing else was added to)."),
    spark: bool = typer.Option(True, "--spark/--no-spark", help="Also query the savepoint with Spark SQL."),
) -> None:
    """Run the end-to-end demo: a live job, its savepoint checked, queried, repaired offline and restored.

    statekit never deletes what it did not create: an existing non-empty --out is refused unless it
    is an earlier demo's output (marked with a .statekit-demo file) and --replace is given.
    """
    from statekit.demo import prepare_output, run_demo

    prepare_output(out_dir, replace=replace)  # refuse before any work starts
    run_demo(out_dir, use_spark=spark, console=out(), replace=True)


def register(app: typer.Typer) -> None:
    """Add the demo command to the app."""
    app.command("demo")(demo)
