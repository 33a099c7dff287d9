"""Decoding and encoding Avro state values as flink-avro writes them: statekit's column-by-column bulk decoder against its per-record Python loop.

The values are the `account` ValueState of the real Flink 2.3.0 Avro fixture (a SpecificRecord of
18 fields: strings, enum, decimal, date, timestamps, uuid, nullable string, array, map, nullable
record, fixed, bytes, numbers, a three-branch union), replicated to N values and encoded with
`avro_out` (which writes the fixture back byte for byte). Measured, min of 3:

* bulk: `avro_values.bulk` over all N values (numpy per field, Arrow out)
* per-record: the plain Python loop `avro_values.reader` + `to_arrow` (the baseline)
* encode: `avro_out.encode_column` of the Arrow column (numpy and Arrow kernels per field), and the
  per-record `avro_out.encode` loop

    python bench/flink_avro.py [--values N]

The machine is shared: numbers move with load, which is printed with them.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pyarrow as pa
from common import best, load  # bench/ is on sys.path when run as a script

from statekit.format.flink import avro_out, avro_values
from statekit.format.flink.binary import DataInput
from statekit.savepoint import Savepoint

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "flink" / "avro" / "hashmap-canonical" / "savepoint"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--values", type=int, default=200_000)
    n = ap.parse_args().values
    sp = Savepoint.open(FIXTURE)
    t = sp.flink.layout(sp.flink_operator("avro-state")).states
    schema = next(s for s in t if s.name == "account").value_type.avro
    column = sp.keyed_table("avro-state").column("account").combine_chunks()
    column = pa.concat_arrays([column] * (n // len(column) + 1)).slice(0, n)
    encoded = avro_out.encode(column, schema)
    buf = np.frombuffer(b"".join(encoded), np.uint8)
    lengths = np.array([len(b) for b in encoded], np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    print(f"{n} Avro values, {len(buf) / n:.0f} B each, load {load()}")

    t_bulk, (arr, ends) = best(lambda: avro_values.bulk(schema, buf, starts))
    assert np.array_equal(ends, starts + lengths)
    reader = avro_values.reader(schema)
    mv = buf.data

    def per_record() -> pa.Array:
        return avro_values.to_arrow([reader(DataInput(mv, "bench", pos=s)) for s in starts.tolist()], schema)

    t_loop, arr2 = best(per_record, repeat=1 if n > 500_000 else 3)
    assert arr.equals(arr2)
    t_enc, col = best(lambda: avro_out.encode_column(arr, schema))
    assert np.array_equal(col.lengths, lengths) and np.array_equal(col.data, buf)
    t_enc1, _ = best(lambda: avro_out.encode(arr, schema), repeat=1)
    for what, secs in (("bulk decode", t_bulk), ("per-record decode (Python loop)", t_loop),
                       ("bulk encode", t_enc), ("per-record encode (Python loop)", t_enc1)):
        print(f"{what:34s} {secs:7.3f} s  {n / secs / 1e3:8.0f} k values/s")
    print(f"bulk / per-record speed-up: {t_loop / t_bulk:.1f}x   (load {load()})")


if __name__ == "__main__":
    main()
