"""Coercion of the command-line values of statekit's commands without pydantic (a fast start)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, List

# typer 0.2x coerces every value through a pydantic TypeAdapter; building the first one imports
# pydantic, about 0.14 s of CPU in each run of a command that otherwise needs ~0.3 s. Every
# parameter statekit declares is a str, an int (perhaps with a minimum), a Path, a bool or a list
# of str: those are coerced here as typer coerces them (the same values, errors as BadParameter,
# the same path checks through typer's own `coerce_cli_path`). A parameter of any other type, or
# a typer without these internals, keeps typer's own coercion: correct either way, only slower.
try:
    from typer._click.exceptions import BadParameter
    from typer._coercion import RuntimeParam
    from typer._param_types import coerce_cli_path
    from typer.core import _TyperParameter
except ImportError:  # another typer: nothing to do
    RuntimeParam = None  # type: ignore[assignment,misc]

_SIMPLE = (str, int, bool, Path, List[str], list[str])
#: a path argument of this form is a URI of a remote store, kept whole (pathlib would fold its "//")
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def light_coercion(params) -> None:
    """Give each parameter in `params` of a simple type a coercion that needs no pydantic."""
    if RuntimeParam is None:
        return
    for p in params:
        if not isinstance(p, _TyperParameter) or getattr(p, "_runtime_param", "absent") is not None:
            continue
        desc = p.type_descriptor
        info = desc.parameter_info
        if desc.annotation not in _SIMPLE or desc.is_file or info.parser is not None or \
                getattr(info, "click_type", None) is not None or info.max is not None or info.clamp:
            continue
        p._runtime_param = _Plain(parameter_info=info, annotation=desc.annotation)


if RuntimeParam is not None:

    @dataclass(frozen=True)
    class _Plain(RuntimeParam):  # type: ignore[misc,valid-type]
        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            t = self.annotation
            if t in (List[str], list[str]):
                return [_text(v) for v in value]
            if t is str:
                return _text(value)
            if t is bool:
                return _bool(value, param, ctx)
            if t is int:
                return _int(value, self.parameter_info.min, param, ctx)
            if isinstance(value, (str, bytes)) and _URI.match(os.fsdecode(value)):
                from statekit_cli.common import location  # a URI (s3://...): a StoragePath, not a local path

                return location(os.fsdecode(value))
            path = value if isinstance(value, Path) else Path(os.fsdecode(value))
            return coerce_cli_path(path, self.parameter_info, path_type=Path, param=param, ctx=ctx)


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _bool(value: Any, param: Any, ctx: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("", "0", "false", "f", "no", "n", "off"):
        return False
    if text in ("1", "true", "t", "yes", "y", "on"):
        return True
    raise BadParameter(f"{value!r} is not a valid boolean.", ctx=ctx, param=param)


def _int(value: Any, minimum: Any, param: Any, ctx: Any) -> int:
    if isinstance(value, bool):
        raise BadParameter("Input should be a valid integer", ctx=ctx, param=param)
    if isinstance(value, int):
        number = value
    else:
        try:
            number = int(str(value).strip(), 10)
        except ValueError:
            raise BadParameter(f"{value!r} is not a valid integer.", ctx=ctx, param=param) from None
    if minimum is not None and number < minimum:
        raise BadParameter(f"{number} is not in the range x>={minimum}.", ctx=ctx, param=param)
    return number
