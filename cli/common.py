"""What every `statekit` command shares: consoles, exit codes, error lines, the common options."""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Optional

import typer

# Exit codes: 0 ok; 1 the answer is "problems found" / "not found" / a refused repair; 2 bad usage.
EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE = 0, 1, 2

# Set per invocation by the app's callback (the runner and the executable alike).
STATE: dict[str, Any] = {"debug": False}


#: Environment variables with which rich treats a pipe as a terminal (colours, tables).
_FORCE_TERMINAL = ("FORCE_COLOR", "FORCE_TERMINAL", "TTY_COMPATIBLE", "TTY_INTERACTIVE")


class PlainConsole:
    """What the commands use of a rich `Console`, for a stream that is not a terminal: plain text, without
    styles, emoji codes or wrapping - and without importing rich (a quarter of the start-up of a one-key
    `statekit get` into a pipe). As with rich, text is markup unless ``markup=False``: its tags are
    dropped (``[bold]1. ran[/] ...`` prints ``1. ran ...``), so a caller never needs to know which
    console it was given."""

    is_terminal = False

    def __init__(self, stream) -> None:
        self._stream = stream

    @property
    def width(self) -> int:
        try:
            return int(os.environ.get("COLUMNS", "80"))
        except ValueError:
            return 80

    def print(self, *objects: Any, markup: Optional[bool] = None, style: Any = None, end: str = "\n",
              **_: Any) -> None:
        text = " ".join(str(o) for o in objects)
        if markup is not False and "[" in text:
            text = plain_text(text)
        try:
            self._stream.write(text + end)
            self._stream.flush()
        except BrokenPipeError:  # the reader went away (`statekit show ... | head`): stop quietly
            os.dup2(os.open(os.devnull, os.O_WRONLY), self._stream.fileno())
            raise typer.Exit(EXIT_OK) from None


def plain_text(markup: str) -> str:
    """The text of rich console markup without its tags (escaped brackets, ``\\[``, kept as text)."""
    from rich.markup import render  # only for text that has brackets: rich is not imported otherwise

    return render(markup).plain


def _console(stream, stderr: bool):
    if not stream.isatty() and not any(os.environ.get(v) for v in _FORCE_TERMINAL):
        return PlainConsole(stream)
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=True)


def out():
    """The console for answers (stdout); plain text when stdout is not a terminal."""
    return _console(sys.stdout, False)


def err():
    """The console for errors, hints and progress (stderr); plain text when stderr is not a terminal."""
    return _console(sys.stderr, True)


def interactive() -> bool:
    """Whether answers go to a terminal (rich tables, colours) or to a pipe/file (plain text)."""
    return out().is_terminal


def exit_code_for(exc: BaseException) -> int:
    """2 when the arguments are at fault (wrong path, operator, key, value, option); 1 otherwise."""
    from statekit import errors as E

    usage = (E.InvalidArgumentError, E.StateTypeError, E.NotASavepointError, E.UnknownOperatorError,
             E.UnknownStateError, E.OutputExistsError, E.NoSourceStateError, E.UnknownPartitionError)
    if isinstance(exc, E.InvalidKeyError) and not isinstance(exc, E.DuplicateKeyError):
        return EXIT_USAGE
    return EXIT_USAGE if isinstance(exc, usage) else EXIT_PROBLEMS


def error_line(exc: BaseException) -> str:
    """One line: the error's type and message (newlines folded), without a traceback."""
    message = " ".join(str(exc).split())
    if STATE.get("storage_options") or "://" in message:  # never a credential on stderr
        from statekit.format.storage import redact

        message = redact(message)
    return f"error: {type(exc).__name__}: {message}"


def fail(message: str, code: int = EXIT_USAGE) -> None:
    """Print one error line to stderr and exit with `code`."""
    console = err()
    if console.is_terminal:
        from rich.markup import escape

        console.print(f"[bold red]error:[/] {escape(message)}", markup=True)
    else:
        console.print(f"error: {message}", markup=False)
    raise typer.Exit(code)


# -- options shared by several commands (one spelling everywhere) ------------------------------------
UID = typer.Option(None, "--uid", metavar="UID", show_default=False,
                   help="The operator's uid (or give its uid hash with --hash).")
OPTIONAL_UID = typer.Option(None, "--uid", metavar="UID", help="Only this operator, by uid (or by uid hash with --hash).",
                            show_default=False)
HASH = typer.Option(None, "--hash", metavar="HASH", show_default=False,
                    help="The operator's uid hash (32 hex characters), instead of --uid.")
NAME = typer.Option(None, "--name", metavar="NAME", show_default=False,
                    help="The operator's name as stored in the savepoint (e.g. GroupAggregate[51] of a SQL job "
                         "without uids), instead of --uid or --hash.")
PLAN = typer.Option(None, "--plan", metavar="PLAN.JSON", show_default=False,
                    help="A Flink SQL job's compiled plan (COMPILE PLAN's JSON): columns in the query's names, "
                         "and a logical table per SQL operator.")
SQL = typer.Option(None, "--sql", metavar="JOB.SQL", show_default=False,
                   help="A Flink SQL job's statements (CREATE TABLE ... and its INSERTs), compiled to its plan by "
                        "Flink's planner (needs a JDK 17+ and Maven; cached), instead of --plan.")
KEY = typer.Option(..., "--key", help="The key, parsed as the operator's key type (JSON for struct keys).")
JSON = typer.Option(False, "--json", help="Print the answer as JSON (what the library returns).")
FORMAT = typer.Option("table", "--format", help="table, json or csv.", case_sensitive=False)
APPLY = typer.Option(False, "--apply", help="Write the new savepoint (default: a dry run that writes nothing).")
SOURCE = typer.Argument(..., help="Savepoint to read (never modified).", show_default=False)
TARGET = typer.Argument(..., help="New savepoint to write (must not exist).", show_default=False)
TO = typer.Option(None, "--to", metavar="statekit|flink", show_default=False,
                  help="Format of the new savepoint; default: the source's (a Flink savepoint gives a Flink savepoint).")
PATH = typer.Argument(..., help="Savepoint or checkpoint directory.", show_default=False)


def operator_id(uid: Optional[str], uid_hash: Optional[str], *, required: bool = True,
                uid_option: str = "--uid", hash_option: str = "--hash", name: Optional[str] = None):
    """The `OperatorIdentifier` named by ``--uid UID`` or ``--hash HASH``, or the stored name of ``--name NAME``
    (which the library resolves; exactly one of them; none gives None when not `required`). A malformed hash
    is an `InvalidArgumentError` (exit 2)."""
    from statekit.identifiers import OperatorIdentifier

    if sum(x is not None for x in (uid, uid_hash, name)) > 1:
        fail(f"name the operator by {uid_option}, by {hash_option} or by --name, not two of them.")
    if name is not None:
        return name
    if uid is None and uid_hash is None:
        if required:
            fail(f"name the operator: {uid_option} UID, or {hash_option} HASH (its 32-hex uid hash).")
        return None
    return OperatorIdentifier.for_uid_hash(uid_hash) if uid_hash is not None else OperatorIdentifier.for_uid(uid)


def plan_of(plan: Optional[Path], sql: Optional[Path]) -> Optional[Path]:
    """The compiled plan named by ``--plan`` or, compiled from the job's statements, by ``--sql`` (one of them)."""
    if sql is None:
        return plan
    if plan is not None:
        fail("give the SQL job's --plan or its --sql, not both.")
    from statekit.format.flink.sqlcompile import compiled_plan_path

    return compiled_plan_path(sql)


def open_savepoint(path: Path, plan: Optional[Path] = None):
    """Open a savepoint of any format statekit reads (through the generic `Savepoint.open`); a path or a URI, with
    a SQL job's plan."""
    from statekit.savepoint import Savepoint

    return Savepoint.open(path, plan=plan)


def take_storage_options(args: list[str]) -> list[str]:
    """`args` without its ``--storage-option KEY=VALUE`` pairs (allowed before or after the command), which go to
    ``STATE["storage_options"]`` for every URI of this invocation (`location`)."""
    rest: list[str] = []
    items: list[str] = []
    it = iter(args)
    for a in it:
        if a == "--":
            rest.append(a)
            rest.extend(it)
            break
        if a == "--storage-option":
            value = next(it, None)
            if value is None:
                fail("--storage-option needs KEY=VALUE, e.g. --storage-option endpoint_url=http://127.0.0.1:9000.")
            items.append(str(value))
        elif a.startswith("--storage-option="):
            items.append(a.partition("=")[2])
        else:
            rest.append(a)
    if items:
        from statekit.errors import StatekitError
        from statekit.format.storage import parse_storage_options

        try:
            STATE["storage_options"] = parse_storage_options(items)
        except StatekitError as exc:
            fail(str(exc))
    else:
        STATE["storage_options"] = {}
    return rest


def location(uri: str):
    """A URI argument (``s3://bucket/sp``) as a `StoragePath` with this invocation's ``--storage-option``s."""
    from statekit.format.storage import locate

    return locate(uri, storage_options=STATE.get("storage_options") or None)


def check_format(fmt: str, allowed: tuple[str, ...] = ("table", "json", "csv")) -> str:
    """Return fmt lower-cased, or exit with a usage error naming the allowed formats."""
    fmt = fmt.lower()
    if fmt not in allowed:
        fail(f"--format must be one of {', '.join(allowed)}, not {fmt!r}.")
    return fmt


def debug_enabled() -> bool:
    """Whether tracebacks are shown (--debug or STATEKIT_DEBUG=1)."""
    return bool(STATE.get("debug")) or os.environ.get("STATEKIT_DEBUG") == "1"


@contextmanager
def progress(description: str, total: Optional[float] = None):
    """A transient rich progress display on stderr for work that can take seconds; yields (progress, task).

    Silent when stderr is not a terminal (pipes, files, the test runner).
    """
    if not sys.stderr.isatty():
        yield _NoProgress(), 0
        return
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    columns = [SpinnerColumn(), TextColumn("{task.description}")]
    if total is not None:
        columns += [BarColumn(), TextColumn("{task.completed:,.0f}/{task.total:,.0f}")]
    columns.append(TimeElapsedColumn())
    with Progress(*columns, console=err(), transient=True) as bar:
        yield bar, bar.add_task(description, total=total)


class _NoProgress:
    """The progress display where there is none to show (stderr is not a terminal)."""

    def update(self, task: int, **_: Any) -> None:
        pass

    def advance(self, task: int, advance: float = 1) -> None:
        pass


def quiet_jvm():
    """Without --debug, Ivy and JVM start-up logs stay out of the output (`quiet_jvm_start`)."""
    from statekit.spark.session import quiet_jvm_start

    return quiet_jvm_start(not debug_enabled())


def is_checkpoint(path: Path) -> bool:
    """Whether `path` is a local Spark streaming checkpoint (cheap: two files looked at)."""
    from statekit.format.spark.layout import is_spark_checkpoint

    text = str(path)
    return "://" not in text and is_spark_checkpoint(Path(text))
