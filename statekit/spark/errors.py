"""Turns statekit errors raised inside Spark's Python workers back into typed errors on the driver."""

from __future__ import annotations

import re
from typing import Any

import statekit.errors as _errors

__all__ = ["install_error_translation", "statekit_error_from"]

# The last line of a Python traceback a worker sends back: "statekit.errors.Name: message".
_WORKER_ERROR = re.compile(r"statekit\.errors\.([A-Za-z_][A-Za-z0-9_]*): ([^\n]*)")
_classes: dict[tuple[type, type], type] = {}
_installed = False


def _hybrid(error_cls: type, captured_cls: type) -> type[BaseException]:
    """A class that is both the statekit error and the PySpark exception it arrived in.

    Code that catches `ChecksumMismatchError` and code that catches PySpark's exceptions both
    keep working.
    """
    key = (error_cls, captured_cls)
    if key not in _classes:

        def __str__(self: Any) -> str:
            return self.statekit_message

        _classes[key] = type(error_cls.__name__, (error_cls, captured_cls), {"__str__": __str__})
        _classes[key].__module__ = "statekit.errors"
    return _classes[key]


def statekit_error_from(exc: BaseException) -> BaseException | None:
    """The typed statekit error named in a Spark exception's Python traceback, or None.

    Parameters
    ----------
    exc
        An exception converted by PySpark from the JVM (``PythonException``,
        ``AnalysisException``, ...).
    """
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001 - a broken __str__ just means "not ours"
        return None
    matches = _WORKER_ERROR.findall(text)
    if not matches:
        return None
    name, message = matches[-1]  # the innermost error is the one the worker raised
    error_cls = getattr(_errors, name, None)
    if not (isinstance(error_cls, type) and issubclass(error_cls, _errors.StatekitError)):
        return None
    from pyspark.errors.exceptions.captured import CapturedException, UnknownException

    base = type(exc)
    if issubclass(base, UnknownException) or not issubclass(base, CapturedException):
        # PySpark re-raises "unknown" JVM errors as raw Py4J errors; ours must not look unknown.
        base = CapturedException
    hybrid = _hybrid(error_cls, base)
    out = hybrid.__new__(hybrid)
    out.__dict__.update(getattr(exc, "__dict__", {}))
    out.args = (message,)
    setattr(out, "statekit_message", message)  # an attribute of the hybrid class, made at runtime
    return out


def install_error_translation() -> None:
    """Wrap PySpark's JVM-exception conversion so statekit errors surface with their own type.

    Idempotent. Failures inside Spark tasks and data source planning reach the driver as
    ``PythonException``/``AnalysisException`` carrying the worker's traceback; this finds a
    statekit error in that traceback and raises it as that type (still an instance of the PySpark
    exception, so existing handlers keep working).
    """
    global _installed
    if _installed:
        return
    from pyspark.errors.exceptions import captured

    original = captured.convert_exception

    def convert_exception(e: Any) -> Any:
        converted = original(e)
        translated = statekit_error_from(converted)
        if translated is None and isinstance(converted, captured.UnknownException):
            return converted
        return translated if translated is not None else converted

    captured.convert_exception = convert_exception
    _installed = True
