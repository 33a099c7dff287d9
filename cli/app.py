"""The `statekit` command: inspect, query, check and repair savepoints from the shell."""

# No `from __future__ import annotations` here: typer reads the commands' signatures with
# typing.get_type_hints, which compiles every string annotation - ~0.1 s of each run's start-up.
import importlib
import os
import sys
from typing import Optional

import typer
from typer.core import TyperGroup
from typer.exceptions import TyperException

from statekit_cli.common import (
    EXIT_PROBLEMS,
    STATE,
    debug_enabled,
    err,
    error_line,
    exit_code_for,
    take_storage_options,
)
from statekit_cli.params import light_coercion

# One line per command module. A module either defines `register(app)` or decorates
# `statekit_cli.app.app` itself; both are imported here, after `app` exists.
COMMAND_MODULES = (
    "statekit_cli.read",     # inspect, show, get, check, diff, export
    "statekit_cli.query",    # query (DuckDB, or Spark with --engine spark)
    "statekit_cli.repair",   # set, delete-key, rm-state, rekey, rename-uid, remove-operator, ..., bootstrap
    "statekit_cli.demo",     # demo
    "statekit_cli.convert",  # convert (Flink savepoints into statekit's format)
    "statekit_cli.upgrade",  # upgrade (Flink 1.x savepoints to 2.x)
    "statekit_cli.compat",   # compat (will the new job version restore the old state?)
    "statekit_cli.stats",    # stats (where the bytes are: operators, states, subtasks, key groups, largest keys)
    "statekit_cli.offsets",  # offsets, set-offsets (where Kafka sources resume; moving one partition)
    "statekit_cli.clean",    # clean (leftovers of killed writers and jobs)
    "statekit_cli.migrate",  # migrate-sql (a Flink SQL job's state across a query change)
    "statekit_cli.spark_state",  # repartition (Spark streaming checkpoints; their read commands are hooked in read)
)


class StatekitGroup(TyperGroup):
    """Runs a command; a failure becomes one error line and an exit code (the traceback with --debug)."""

    def list_commands(self, ctx) -> list[str]:
        return list(self.commands)  # in registration order, grouped by module

    def parse_args(self, ctx, args):
        light_coercion(self.get_params(ctx))
        return super().parse_args(ctx, take_storage_options(list(args)))

    def get_command(self, ctx, cmd_name):
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            light_coercion(command.get_params(ctx))
        return command

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, TyperException):
            raise
        except Exception as exc:  # noqa: BLE001 - every failure ends in one line unless --debug
            if debug_enabled():
                raise
            from statekit.errors import StatekitError

            if isinstance(exc, StatekitError):
                err().print(error_line(exc), markup=False)
                raise typer.Exit(exit_code_for(exc)) from None
            err().print(f"{error_line(exc)} (unexpected; run with --debug for the traceback)", markup=False)
            raise typer.Exit(EXIT_PROBLEMS) from None


app = typer.Typer(
    name="statekit",
    cls=StatekitGroup,
    help=(
        "The state of stream-processing jobs as data: inspect, query, check and repair savepoints.\n\n"
        "Operators are named by --uid UID (or by their uid hash, --hash HASH); keys by --key, parsed as the "
        "operator's key type. Repairs read SOURCE and write a new TARGET, and only with --apply.\n\n"
        "Exit codes: 0 ok; 1 problems found, not found, or a repair refused; 2 bad usage."
    ),
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        import statekit

        typer.echo(f"statekit {statekit.__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks and Spark/Ivy logs."),
    storage_option: Optional[list[str]] = typer.Option(
        None, "--storage-option", metavar="KEY=VALUE",
        help="Credentials or endpoint for URI arguments (s3://, gs://, abfs://, hdfs://), e.g. endpoint_url=http://"
             "127.0.0.1:9000, access_key=..., secret_key=..., region=..., profile=...; repeatable, and allowed after "
             "the command too. Without them, the store's usual configuration (AWS_* variables, ~/.aws) applies."),
    version: Optional[bool] = typer.Option(None, "--version", callback=_version, is_eager=True,
                                           help="Print the version and exit."),
) -> None:
    STATE["debug"] = debug


for _name in COMMAND_MODULES:
    _module = importlib.import_module(_name)
    if hasattr(_module, "register"):
        _module.register(app)


def main() -> None:
    """Entry point of the `statekit` console script."""
    only_invoked_command(sys.argv[1:])
    app()


def only_invoked_command(argv: list[str]) -> None:
    """Keep only the command `argv` invokes, when it names one: typer builds a click command (signature,
    types, options) for every registered command at each start, ~0.04 s that a one-shot process
    spends for nothing. Without a known command name (`--help`, a typo, shell completion) all stay."""
    if any(v.startswith("_STATEKIT_COMPLETE") for v in os.environ):
        return
    values = {i + 1 for i, a in enumerate(argv) if a == "--storage-option"}  # the one group option taking a value
    name = next((a for i, a in enumerate(argv) if not a.startswith("-") and i not in values), None)
    keep = [c for c in app.registered_commands if (c.name or c.callback.__name__.replace("_", "-")) == name]
    if keep:
        app.registered_commands = keep


if __name__ == "__main__":
    main()
