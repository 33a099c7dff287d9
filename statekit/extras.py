"""Optional engines (`statekit[spark]`, `statekit[rocksdb]`, `statekit[kafka]`): a call needing a missing one names what to install."""

from __future__ import annotations

import importlib
from types import ModuleType

from statekit.errors import MissingExtraError

#: extra -> the modules it provides (what its calls import), as pyproject.toml's optional dependencies install them.
EXTRAS = {
    "spark": ("pyspark", "delta"),
    "rocksdb": ("rocksdict",),
    # set-offsets --timestamp asks a Kafka broker which offset a time is (statekit.savepoint.kafka_times)
    "kafka": ("kafka",),
}


def require(extra: str, what: str) -> None:
    """Import every module of `extra`, or raise `MissingExtraError` naming `what` needs it and the install to run."""
    for module in EXTRAS[extra]:
        _import(module, extra, what)


def _import(module: str, extra: str, what: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if exc.name is not None and exc.name.split(".")[0] != module:
            raise  # the engine is installed but broken inside: not a missing extra
        raise MissingExtraError(
            f"{what} needs the {extra!r} extra, which is not installed ({module} is missing); install it with "
            f"pip install 'statekit[{extra}]'"
        ) from None


__all__ = ["EXTRAS", "require"]
