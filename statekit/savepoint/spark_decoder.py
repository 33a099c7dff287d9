"""The helper process of `statekit.savepoint.spark_helper`: a request in, a partition's table out as a memfd."""

from __future__ import annotations

import json
import os
import socket
import sys

import pyarrow as pa

from statekit.savepoint.spark_checkpoint import SparkCheckpoint
from statekit.savepoint.spark_helper import MESSAGE


def serve(fd: int) -> None:
    """The helper's loop: a request in, a memfd with the table out, until the caller's end closes."""
    # what a partition's decoding imports lazily, imported before saying ready: the first request costs no more
    # than the others (the caller waits for the helper's last partition)
    import cramjam  # noqa: F401
    import pyarrow.compute  # noqa: F401

    import statekit.format.spark.vector  # noqa: F401

    sock = socket.socket(fileno=fd)
    sock.send(b'{"ready": true}')
    while msg := sock.recv(MESSAGE):
        req = json.loads(msg)
        try:
            # opened anew for each request, never kept: a checkpoint written again at the same path and batch (a query
            # started over) is read as it is now, as the caller reads it
            sp = SparkCheckpoint.open(req["path"], batch=req["batch"])
            table = sp.keyed_table(req["op"], store=req["store"], partitions=[req["partition"]])
            out = os.memfd_create("statekit-partition")
        except Exception as exc:  # noqa: BLE001 - the caller decodes the partition itself and names the fault
            sock.send(json.dumps({"error": type(exc).__name__}).encode())
            continue
        try:
            with pa.OSFile(f"/proc/self/fd/{out}", "wb") as f, pa.ipc.new_file(f, table.schema) as w:
                w.write_table(table)
            del table
            socket.send_fds(sock, [b'{"ok": true}'], [out])
        except OSError:
            sock.send(b'{"error": "OSError"}')
        finally:
            os.close(out)


if __name__ == "__main__":
    serve(int(sys.argv[1]))
