"""Child of the leftovers tests: a savepoint write that stages a file, then waits to be SIGKILLed."""

import sys

import pyarrow as pa

from statekit.savepoint import SavepointBuilder
from statekit.state import ValueStateDescriptor

if __name__ == "__main__":
    builder = SavepointBuilder(sys.argv[1])
    op = builder.add_operator("counter", key_type="bigint", keyed_states=[ValueStateDescriptor("count", "bigint")])
    op.write_keyed(pa.table({"key": [1, 2], "count": [10, 20]}))
    (builder.staging / "partial.bin").write_bytes(b"x" * 1000)  # as a commit cut off mid-way leaves it
    print("staged", builder.staging, flush=True)
    sys.stdin.readline()
