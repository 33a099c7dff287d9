"""Helpers shared by the savepoint tests and their child processes: tree digests, test savepoints."""

from __future__ import annotations

import shutil
from pathlib import Path

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "v1"
KAFKA = Path(__file__).resolve().parent.parent / "fixtures" / "flink" / "kafka" / "kafka-source-2p"


def copy_golden(target: Path) -> Path:
    """A private copy of the golden savepoint (every state kind) at `target`."""
    shutil.copytree(GOLDEN, target)
    return target


def write_native(path: Path, work: Path, *, keys: int = 200) -> Path:
    """A savepoint whose operator 'native' keeps its keyed state as a native RocksDB checkpoint (two subtasks)."""
    import pyarrow as pa

    from statekit.backends.rocksdb import RocksDBKeyedStateBackend
    from statekit.keygroups import KeyGroupRange, assign_to_key_group
    from statekit.runtime import ManualClock
    from statekit.savepoint import SavepointBuilder
    from statekit.state import ListStateDescriptor, ValueStateDescriptor

    count, tags = ValueStateDescriptor("count", "bigint"), ListStateDescriptor("tags", "string")
    with SavepointBuilder(path, checkpoint_id=5) as b:
        op = b.add_operator("native", parallelism=2, max_parallelism=128, key_type="string",
                            keyed_states=[count, tags])
        for subtask, kgs in enumerate([KeyGroupRange(0, 63), KeyGroupRange(64, 127)]):
            backend = RocksDBKeyedStateBackend(key_type=pa.string(), max_parallelism=128, clock=ManualClock(1_000),
                                               directory=work / f"db-{subtask}", key_group_range=kgs)
            c, t = backend.get_state(count), backend.get_state(tags)
            for i in range(keys):
                key = f"k{i}"
                kg = assign_to_key_group(key, 128, pa.string())
                if kgs.start <= kg <= kgs.end:
                    backend.set_current_key(key, kg)
                    backend.set_current_namespace(None)
                    c.update(i)
                    t.add_all([f"t{i}"])
            snap = backend.snapshot(1, native=True, target_dir=work / f"chk-{subtask}")
            op.write_native_keyed(subtask, snap.native_dir, kgs, list(snap.native_files))
            backend.close()
    return path


def filed_kafka(target: Path) -> Path:
    """The Kafka-source fixture at `target` with its reader state moved into files next to `_metadata` (as a
    larger source state is; the fixture's is inline) and the operator's record re-spliced, so that a rewrite
    carries files."""
    from dataclasses import replace

    from statekit.format.flink.metadata import StreamHandle, read_metadata
    from statekit.format.flink.sources import operator_record

    md = read_metadata(KAFKA)
    fop = next(o for o in md.operators if o.uid == "kafka-source")
    target.mkdir()
    subtasks = []
    for st in fop.subtasks:
        h = st.managed_operator
        assert h is not None and h.delegate.data is not None
        name = f"op-state-{st.index}"
        (target / name).write_bytes(h.delegate.data)
        subtasks.append(replace(st, managed_operator=replace(h, delegate=StreamHandle("relative", name, h.delegate.size))))
    data, (start, end) = (KAFKA / "_metadata").read_bytes(), fop.span
    (target / "_metadata").write_bytes(data[:start] + operator_record(replace(fop, subtasks=tuple(subtasks)), md.version)
                                       + data[end:])
    return target
