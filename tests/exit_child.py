"""Work that ends a process right after native threads were busy: ``python exit_child.py WORKLOAD ARG...``.

`tests/test_clean_exit.py` runs these in fresh interpreters many times and requires exit code 0;
`bench/exit_race.py` runs them with statekit's old memory pattern to count the aborts it caused.

- ``reads SP``: point reads of many files from 16 threads (Parquet pre-buffering on Arrow's pools).
- ``flink CORPUS SP [mapped]``: Flink savepoints (canonical and native RocksDB) read from threads, then SQL
  over a Flink and a statekit savepoint on DuckDB (DuckDB's threads scanning Arrow tables); ``mapped``:
  every canonical state file read through a memory mapping in small batches on threads, the mapped
  bytes still referenced at exit.
- ``savepoint SP``: writes the statekit savepoint of many small files that the other workloads read.
- ``rocksdb OUT RUNTIME_TESTS``: a RocksDB job with checkpoints ending in a final savepoint.
- ``buffers SP python|arrow``: the bare pattern, without statekit: every Parquet file under SP read
  by 8 threads from memory, held as Python bytes (what statekit did) or in Arrow's own memory.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path


def _threads(fn, args_list) -> None:
    start = threading.Barrier(len(args_list))  # all at once: the end of the work is the end of the process

    def run(args):
        start.wait()
        fn(*args)

    threads = [threading.Thread(target=run, args=(a,)) for a in args_list]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def reads(sp_path: str) -> None:
    from statekit.savepoint import Savepoint

    sp = Savepoint.open(sp_path)
    keys = [f"user-{i:06d}" for i in range(0, 60_000, 2_500)]
    _threads(sp.get, [("accounts", k) for k in keys])
    print(sp.get("accounts", "user-000042")["balance"])


def flink(corpus: str, sp_path: str, mode: str = "copied") -> None:
    import statekit
    from statekit.savepoint import Savepoint

    root = Path(corpus)
    cases = ["long-rocksdb-canonical", "string-rocksdb-native", "string-hashmap-canonical-snappy"]
    if mode == "mapped":
        from statekit.format.flink import files, reader

        files.MAP_MIN_BYTES = 0
        reader.BATCH_BYTES = 1024  # many batches, decoded on threads as a large read's are
        cases = ["long-rocksdb-canonical", "string-rocksdb-native", "string-hashmap-canonical", "tuple2-hashmap-canonical"]
        h = Savepoint.open(root / cases[2] / "savepoint").flink.metadata.operators
        state = next(st.managed_keyed for op in h for st in op.subtasks if st.managed_keyed is not None)
        global _MAPPED  # a mapping alive while the interpreter exits
        _MAPPED = files.StateFiles(root / cases[2] / "savepoint").range_array(state.delegate, 0, 16)
    sps = [Savepoint.open(root / c / "savepoint") for c in cases]
    ops = ["counter"] if mode != "mapped" else ["counter", "types", "buffer"]
    _threads(lambda sp: [sp.keyed_table(o) for o in ops], [(sp,) for sp in sps])
    rows = statekit.sql(root / cases[1] / "savepoint", "SELECT count(*) AS n FROM counter.keyed").column("n")[0].as_py()
    total = statekit.sql(sp_path, "SELECT count(*) AS n FROM accounts.keyed WHERE balance >= 0").column("n")[0].as_py()
    print(rows, total)


def rocksdb(out: str, runtime_tests: str) -> None:
    sys.path.insert(0, runtime_tests)
    from jobs import build, events

    from statekit.runtime import EmbeddedRocksDBStateBackend, StreamExecutionEnvironment
    from statekit.savepoint import Savepoint

    target = Path(out)
    env = StreamExecutionEnvironment(parallelism=2, state_backend=EmbeddedRocksDBStateBackend(True))
    env.enable_checkpointing(every_records=300)
    env.get_checkpoint_config().set_checkpoint_storage_dir(target / "chk")
    build(env, events(2000)).add_sink(lambda v: None)
    env.execute("rocks", final_savepoint=target / "sp")
    print(Savepoint.open(target / "sp").keyed_table("sum").num_rows)


def buffers(sp_path: str, memory: str) -> None:
    import os

    import pyarrow as pa
    import pyarrow.parquet as pq

    files = sorted(str(p) for p in Path(sp_path).rglob("*.parquet"))[:40]

    def load(path: str) -> pa.Buffer:
        with open(path, "rb") as f:
            if memory == "python":
                return pa.py_buffer(f.read())
            buf = pa.allocate_buffer(os.path.getsize(path))
            f.readinto(memoryview(buf).cast("B"))
            return buf

    def work(i: int) -> None:
        for path in files[i::8]:
            pq.read_table(pa.BufferReader(load(path)), filters=[("key_group", "=", 5)])

    _threads(work, [(i,) for i in range(8)])
    print(len(files))


def savepoint(sp_path: str) -> None:
    import pyarrow as pa

    from statekit.savepoint import SavepointBuilder
    from statekit.state import ValueStateDescriptor

    n = 60_000
    with SavepointBuilder(Path(sp_path), rows_per_file=1_000) as b:
        op = b.add_operator("accounts", parallelism=1, max_parallelism=128, key_type="string",
                            keyed_states=[ValueStateDescriptor("balance", "double")])
        op.write_keyed(pa.table({"key": [f"user-{i:06d}" for i in range(n)], "balance": [float(i) for i in range(n)]}))


WORKLOADS = {"savepoint": savepoint, "reads": reads, "flink": flink, "rocksdb": rocksdb, "buffers": buffers}

if __name__ == "__main__":
    WORKLOADS[sys.argv[1]](*sys.argv[2:])
