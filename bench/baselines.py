"""Baselines the benchmarks compare against: a plain dict counting loop and a raw rocksdict get/put loop."""

from __future__ import annotations

import struct
import time
from pathlib import Path

from rocksdict import Options, Rdict, WriteOptions


def dict_loop(keys: list[str]) -> float:
    """Seconds for counting `keys` in a plain dict (the practical ceiling of a Python engine)."""
    d: dict[str, int] = {}
    t0 = time.perf_counter()
    for k in keys:
        d[k] = d.get(k, 0) + 1
    return time.perf_counter() - t0


def rocksdict_loop(directory: Path, keys: list[str]) -> float:
    """Seconds for the same counting as a raw rocksdict get + put per key (raw mode, WAL off)."""
    db = Rdict(str(directory), Options(raw_mode=True))
    wo = WriteOptions()
    wo.disable_wal = True
    db.set_write_options(wo)
    pack, unpack = struct.Struct(">q").pack, struct.Struct(">q").unpack
    get, put = db.get, db.put
    t0 = time.perf_counter()
    for k in keys:
        kb = k.encode()
        raw = get(kb)
        put(kb, pack((0 if raw is None else unpack(raw)[0]) + 1))
    elapsed = time.perf_counter() - t0
    db.close()
    return elapsed
