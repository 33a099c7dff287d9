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


def out():
    """The console for answers (stdout); plain text when stdout is not a terminal."""
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)


def err():
    """The console for errors, hints and progress (stderr)."""
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


def interactive() -> bool:
    """Whether answers go to a terminal (rich tables, colours) or to a pipe/file (plain text)."""
    return out().is_terminal


def exit_code_for(exc: BaseException) -> int:
    """2 when the arguments are at fault (wrong path, operator, key, value, option); 1 otherwise."""
    from statekit import errors as E

    usage = (E.InvalidArgumentError, E.StateTypeError, E.NotASavepointError, E.UnknownOperatorError,
             E.UnknownStateError, E.OutputExistsError)
    if isinstance(exc, E.InvalidKeyError) and not isinstance(exc, E.DuplicateKeyError):
        return EXIT_USAGE
    return EXIT_USAGE if isinstance(exc, usage) else EXIT_PROBLEMS


def error_line(exc: BaseException) -> str:
    """One line: the error's type and message (newlines folded), without a traceback."""
    message = " ".join(str(exc).split())
    return f"error: {type(exc).__name__}: {message}"


def fail(message: str, code: int = EXIT_USAGE) -> None:
    """Print one error line to stderr and exit with `code`."""
    err().print(f"[bold red]error:[/] {message}", markup=True)
    raise typer.Exit(code)


# -- options shared by several commands (one spelling everywhere) ------------------------------------
UID = typer.Option(..., "--uid", help="Operator uid (or its 32-hex uid hash with --hash).")
OPTIONAL_UID = typer.Option(None, "--uid", help="Only this operator (uid, or uid hash with --hash).")
HASH = typer.Option(False, "--hash", help="--uid is a 32-hex uid hash, not a uid.")
KEY = typer.Option(..., "--key", help="The key, parsed as the operator's key type (JSON for struct keys).")
JSON = typer.Option(False, "--json", help="Print the answer as JSON (what the library returns).")
FORMAT = typer.Option("table", "--format", help="table, json or csv.", case_sensitive=False)
APPLY = typer.Option(False, "--apply", help="Write the new savepoint (default: a dry run that writes nothing).")
SOURCE = typer.Argument(..., help="Savepoint to read (never modified).", show_default=False)
TARGET = typer.Argument(..., help="New savepoint to write (must not exist).", show_default=False)
PATH = typer.Argument(..., help="Savepoint or checkpoint directory.", show_default=False)


def operator_id(uid: str, by_hash: bool):
    """The `OperatorIdentifier` an ``--uid``/``--hash`` pair names."""
    from statekit.identifiers import OperatorIdentifier

    return OperatorIdentifier.for_uid_hash(uid) if by_hash else OperatorIdentifier.for_uid(uid)


def open_savepoint(path: Path):
    """Open a savepoint of any format statekit reads (through the generic `Savepoint.open`)."""
    from statekit.savepoint import Savepoint

    return Savepoint.open(path)


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
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    columns = [SpinnerColumn(), TextColumn("{task.description}")]
    if total is not None:
        columns += [BarColumn(), TextColumn("{task.completed:,.0f}/{task.total:,.0f}")]
    columns.append(TimeElapsedColumn())
    with Progress(*columns, console=err(), transient=True, disable=not sys.stderr.isatty()) as bar:
        yield bar, bar.add_task(description, total=total)
