"""The StatekitError tree: every failure a user can cause, with a message naming the fault and the fix."""

from __future__ import annotations


class StatekitError(Exception):
    """Base of every error statekit raises on purpose."""


# --- arguments and types -------------------------------------------------------------------------


class InvalidArgumentError(StatekitError, ValueError):
    """An argument is out of range or malformed."""


class PlanMismatchError(InvalidArgumentError):
    """A Flink SQL job's compiled plan does not describe the savepoint's job (other operators, key types or states)."""


class TemplateHasStateError(InvalidArgumentError):
    """A bootstrap template (a savepoint of the job taken with no input) already holds state where the bootstrap
    would write; replacing it needs ``replace=True`` (``--replace``)."""


class AmbiguousEditError(InvalidArgumentError):
    """An edit of a SQL query's result whose accumulator fields cannot be changed consistently (AVG's sum and count,
    a COUNT DISTINCT's map, a RAW accumulator); the message names the fields behind it."""


class SqlCompileError(InvalidArgumentError):
    """A Flink SQL job's statements (``--sql``) do not compile with Flink's planner; the message carries the planner's."""


class ParallelismError(InvalidArgumentError):
    """Parallelism or max parallelism outside Flink's bounds."""


class UnknownFlinkVersionError(InvalidArgumentError):
    """A Flink version statekit does not write savepoints for; ``supported`` lists the lines it does."""

    def __init__(self, message: str, supported: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.supported = supported


class FlinkVersionMismatchError(InvalidArgumentError):
    """A write targets a Flink version that cannot restore what would be written; ``problems`` names each part."""

    def __init__(self, message: str, problems: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.problems = problems


class StateTypeError(StatekitError, TypeError):
    """A type declaration is invalid, or a value does not fit its declared type."""


class InvalidKeyError(StatekitError, ValueError):
    """A key is null, of the wrong type, or duplicated."""


class NullKeyError(InvalidKeyError):
    """A key is null (None); Flink forbids null keys."""


class KeyTypeMismatchError(InvalidKeyError):
    """Two savepoints key an operator by different types, so their rows cannot be matched (diff)."""


class DuplicateKeyError(InvalidKeyError):
    """The same key (and namespace) appears twice in a keyed table."""


# --- state access --------------------------------------------------------------------------------


class InvalidMergeError(StatekitError, ValueError):
    """A merge of colliding keys (rekey ``merge=``) returned null, dropped a state or gave a value of the wrong type."""


class StateAccessError(StatekitError, RuntimeError):
    """State used where it is not allowed (keyed state outside a keyed context, late registration)."""


class UntrustedPickleError(StatekitError):
    """Pickled state was met but the caller did not say it trusts it."""


# --- savepoints ----------------------------------------------------------------------------------


class SavepointError(StatekitError):
    """Base of savepoint format and I/O errors."""


class NotASavepointError(SavepointError, FileNotFoundError):
    """The path holds no valid `_metadata.json`."""


class CorruptSavepointError(SavepointError):
    """A savepoint file is damaged: truncated, unparsable, or disagreeing with the manifest."""


class ChecksumMismatchError(CorruptSavepointError):
    """A file's checksum differs from the one the manifest recorded."""


class SchemaMismatchError(CorruptSavepointError):
    """A file's columns or types disagree with the manifest."""


class UnsupportedFormatError(SavepointError):
    """Unknown format, major version or feature."""


class UnsafePathError(SavepointError):
    """A manifest path escapes the savepoint directory."""


class OutputExistsError(StatekitError, FileExistsError):
    """An output path already exists (and holds something); statekit never overwrites what it did not create."""


class SavepointExistsError(SavepointError, OutputExistsError):
    """The target of a write already exists; savepoints are never overwritten."""


class InvalidTargetError(SavepointError, InvalidArgumentError):
    """The target of a write cannot be used: inside (or equal to) its source, under a file, at a symlink."""


class UnreadableOutputError(SavepointError, InvalidArgumentError):
    """A write refused before anything is published: its reader would refuse what it was asked to write."""


class SavepointWriteError(SavepointError):
    """The file system refused a write (permissions, read-only, I/O error); nothing was published."""


class StorageFullError(SavepointWriteError):
    """The disk or quota filled up during a write; the partial output was removed, the source is untouched."""


class StorageError(SavepointError):
    """A remote filesystem (S3, GCS, Azure, HDFS) refused or failed a request; the message names the URI (never a credential)."""


class StorageNotFoundError(StorageError, FileNotFoundError):
    """The object, prefix or bucket named by a URI does not exist."""


class StorageAccessError(StorageError, PermissionError):
    """Wrong credentials, or credentials without the permission to read or write that URI."""


class StorageUnavailableError(StorageError):
    """The storage service cannot be reached or kept failing (500/503, connection refused) after bounded retries."""


class UnknownOperatorError(SavepointError, LookupError):
    """No operator with that uid or uid hash in the savepoint."""


class UnknownStateError(SavepointError, LookupError):
    """The operator has no state with that name."""


class NoSourceStateError(SavepointError, LookupError):
    """The operator holds no source state statekit decodes (no Kafka or file reader splits, no enumerator state)."""


class UnknownPartitionError(SavepointError, LookupError):
    """A source's state (or its broker) holds no split of that topic and partition, or of that file."""


class BrokerRequiredError(InvalidArgumentError):
    """A timestamp was given for a Kafka source without a broker to resolve it (split state holds offsets only)."""


class BrokerError(StatekitError, RuntimeError):
    """The Kafka broker asked to resolve a timestamp did not answer, or refused the request."""


class UntrustedPicklePayloadError(UntrustedPickleError, SavepointError):
    """A savepoint column holds pickled values and the reader was not told to trust them."""


# --- runtime -------------------------------------------------------------------------------------


class JobError(StatekitError, RuntimeError):
    """A job failed and could not be recovered (restart attempts exhausted, bad topology)."""


class CheckpointStorageInUseError(JobError):
    """Another running job holds the checkpoint storage directory (each job needs its own)."""


class RestoreError(StatekitError):
    """A savepoint cannot be restored into this job (unmatched state, parallelism above max)."""


class SourceError(StatekitError, ValueError):
    """A job's input cannot be read: not a Delta table, a Delta feature not supported, a damaged log."""


class PlannerUnavailableError(StatekitError, RuntimeError):
    """Compiling a SQL job's plan needs a JDK 17+ and Maven (Flink's planner), and one is missing; pass the plan instead."""


class MissingExtraError(StatekitError, ImportError):
    """A call needs an optional engine that is not installed (`statekit[spark]`, `statekit[rocksdb]`)."""


class MigrationRefusedError(StatekitError):
    """A query change whose state cannot be carried into the new job (keys, window or DISTINCT calls changed)."""


__all__ = [name for name, obj in globals().items() if isinstance(obj, type) and issubclass(obj, StatekitError)]
