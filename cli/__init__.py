"""The statekit command line (typer + rich), installed as the `statekit` command."""
