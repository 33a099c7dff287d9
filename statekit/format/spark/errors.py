"""Typed errors of Spark checkpoints: each names the file at fault and what to do."""

from __future__ import annotations

from statekit.errors import (
    ChecksumMismatchError,
    CorruptSavepointError,
    InvalidArgumentError,
    SavepointError,
    UnsupportedFormatError,
)


class SparkCheckpointError(SavepointError):
    """A Spark streaming checkpoint cannot be used as asked."""


class UnsupportedStateFormatError(SparkCheckpointError, UnsupportedFormatError):
    """A state format version, schema version, codec or encoding statekit does not decode (named in the message)."""


class TruncatedStateFileError(SparkCheckpointError, CorruptSavepointError):
    """A delta, snapshot or changelog file ends before its end marker."""


class MissingStateFileError(SparkCheckpointError, CorruptSavepointError):
    """A file the requested version needs (a delta, changelog, zip or SST) is not in the checkpoint."""


class StateChecksumMismatchError(SparkCheckpointError, ChecksumMismatchError):
    """A state file does not match its Spark ``<file>.crc`` side file (CRC32C or size)."""


class RunningQueryError(SparkCheckpointError):
    """The checkpoint's query is running (or stopped inside a batch): rewriting it now would lose data."""


class UnknownBatchError(SparkCheckpointError, InvalidArgumentError):
    """The asked batch was never committed in this checkpoint."""
