"""A real PyFlink job that restores a savepoint and writes every restored Python state and fired timer as JSON lines.

Run by `test_pyflink_restore.py` with an interpreter that has `apache-flink` (never statekit's venv):

    python pyflink_restore_job.py SAVEPOINT OUT_FILE MAX_PARALLELISM KEY [KEY ...]

The job declares the states of `tests/fixtures/flink/make_pyflink.py`'s Counter (same uid, names and
types), reads the KEYs from a bounded collection and, per key, writes one line with each state's
restored value; at the end of input the watermark jumps to the end of time, so every restored event
timer fires and writes ``{"key": ..., "timer": ts}``. Nothing is updated.
"""

from __future__ import annotations

import json
import os
import sys


def main(savepoint: str, out: str, max_parallelism: int, keys: list[str]) -> None:
    from pyflink.common import Configuration, Row, Types
    from pyflink.datastream import KeyedProcessFunction, StreamExecutionEnvironment
    from pyflink.datastream.state import (
        ListStateDescriptor,
        MapStateDescriptor,
        ReducingStateDescriptor,
        ValueStateDescriptor,
    )

    conf = Configuration()
    conf.set_string("python.executable", sys.executable)
    conf.set_string("python.client.executable", sys.executable)
    conf.set_string("state.backend.type", "hashmap")
    conf.set_string("restart-strategy.type", "none")
    conf.set_string("pipeline.max-parallelism", str(max_parallelism))
    conf.set_string("execution.state-recovery.path", savepoint)
    conf.set_string("rest.bind-port", "0")
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(1)

    def plain(v):
        if isinstance(v, Row):
            return {k: plain(x) for k, x in v.as_dict().items()}
        if isinstance(v, (bytes, bytearray)):
            return bytes(v).hex()
        if isinstance(v, (tuple, list)):
            return [plain(x) for x in v]
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return v

    class Reader(KeyedProcessFunction):
        def open(self, ctx):
            g = ctx.get_state
            self.values = {
                "count": g(ValueStateDescriptor("count", Types.LONG())),
                "avg": g(ValueStateDescriptor("avg", Types.DOUBLE())),
                "even": g(ValueStateDescriptor("even", Types.BOOLEAN())),
                "last_kind": g(ValueStateDescriptor("last_kind", Types.STRING())),
                "small": g(ValueStateDescriptor("small", Types.INT())),
                "raw": g(ValueStateDescriptor("raw", Types.PRIMITIVE_ARRAY(Types.BYTE()))),
                "pair": g(ValueStateDescriptor("pair", Types.TUPLE([Types.STRING(), Types.LONG()]))),
                "last_row": g(ValueStateDescriptor(
                    "last_row", Types.ROW_NAMED(["kind", "value"], [Types.STRING(), Types.LONG()]))),
                "obj": g(ValueStateDescriptor("obj", Types.PICKLED_BYTE_ARRAY())),
            }
            self.recent = ctx.get_list_state(ListStateDescriptor("recent", Types.STRING()))
            self.per_kind = ctx.get_map_state(MapStateDescriptor("per_kind", Types.STRING(), Types.LONG()))
            self.sum = ctx.get_reducing_state(ReducingStateDescriptor("sum", lambda a, b: a + b, Types.LONG()))

        def process_element(self, key, ctx):
            row = {"key": key}
            for name, st in self.values.items():
                row[name] = plain(st.value())
            recent = self.recent.get()
            row["recent"] = list(recent or []) or None  # PyFlink gives [] for no state
            row["per_kind"] = {k: v for k, v in self.per_kind.items()} or None
            row["sum"] = self.sum.get()
            with open(out, "a", encoding="utf-8") as f:
                f.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")
            yield key

        def on_timer(self, timestamp, ctx):
            with open(out, "a", encoding="utf-8") as f:
                f.write(json.dumps({"key": ctx.get_current_key(), "timer": timestamp}, ensure_ascii=False) + "\n")
            yield from ()

    (env.from_collection(keys, type_info=Types.STRING()).uid("keys")
        .key_by(lambda k: k, key_type=Types.STRING())
        .process(Reader(), output_type=Types.STRING()).uid("counter").name("Counter")
        .print().uid("sink-out"))
    env.execute("statekit-pyflink-restore")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:])
    os._exit(0)  # PyFlink's gateway threads can keep the interpreter alive
