"""Serializer snapshot classes of each Flink line and the version each writes (generated; do not edit).

Made by `tests/fixtures/flink/make_snapshot_table.py` from the jars of every line's test harness build
(flink-core, flink-runtime, flink-streaming-java, the RocksDB backend, the State Processor API): per class,
the version `getCurrentVersion()` gives in LINES order; None where the line has no such class, 0 where it
cannot say. Classes of other Flink modules (SQL, Avro, Scala, PyFlink) and user classes are not listed.
"""

LINES: tuple[str, ...] = ('1.18', '1.19', '1.20', '2.0', '2.1', '2.2', '2.3')

#: snapshot class -> the version each line in LINES writes it with (None: the line lacks it)
SNAPSHOTS: dict[str, tuple[int | None, ...]] = {
    "org.apache.flink.api.common.typeutils.SingleThreadAccessCheckingTypeSerializer$SingleThreadAccessCheckingTypeSerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.api.common.typeutils.base.BigDecSerializer$BigDecSerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.api.common.typeutils.base.BigIntSerializer$BigIntSerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.api.common.typeutils.base.BitmapSerializer$BitmapSerializerSnapshot":
        (None, None, None, None, None, None, 3),
    "org.apache.flink.api.common.typeutils.base.BooleanSerializer$BooleanSerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.api.common.typeutils.base.BooleanValueSerializer$BooleanValueSerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.api.common.typeutils.base.ByteSerializer$ByteSerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.api.common.typeutils.base.ByteValueSerializer$ByteValueSerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.api.common.typeutils.base.CharSerializer$CharSerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.api.common.typeutils.base.CharValueSerializer$CharValueSerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.api.common.typeutils.base.DateSerializer$DateSerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.api.common.typeutils.base.DoubleSerializer$DoubleSerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.api.common.typeutils.base.DoubleValueSerializer$DoubleValueSerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.api.common.typeutils.base.EnumSerializer$EnumSerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.api.common.typeutils.base.FloatSerializer$FloatSerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.api.common.typeutils.base.FloatValueSerializer$FloatValueSerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.api.common.typeutils.base.GenericArraySerializerConfigSnapshot":
        (2, 2, 2, None, None, None, None),
    "org.apache.flink.api.common.typeutils.base.GenericArraySerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.api.common.typeutils.base.InstantSerializer$InstantSerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.api.common.typeutils.base.IntSerializer$IntSerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.api.common.typeutils.base.IntValueSerializer$IntValueSerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.api.common.typeutils.base.ListSerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.api.common.typeutils.base.LocalDateSerializer$LocalDateSerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.api.common.typeutils.base.LocalDateTimeSerializer$LocalDateTimeSerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.api.common.typeutils.base.LocalTimeSerializer$LocalTimeSerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.api.common.typeutils.base.LongSerializer$LongSerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.api.common.typeutils.base.LongValueSerializer$LongValueSerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.api.common.typeutils.base.MapSerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.api.common.typeutils.base.NullValueSerializer$NullValueSerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.api.common.typeutils.base.SetSerializerSnapshot":
        (None, None, None, 3, 3, 3, 3),
    "org.apache.flink.api.common.typeutils.base.ShortSerializer$ShortSerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.api.common.typeutils.base.ShortValueSerializer$ShortValueSerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.api.common.typeutils.base.SqlDateSerializer$SqlDateSerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.api.common.typeutils.base.SqlTimeSerializer$SqlTimeSerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.api.common.typeutils.base.SqlTimestampSerializer$SqlTimestampSerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.api.common.typeutils.base.StringSerializer$StringSerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.api.common.typeutils.base.StringValueSerializer$StringValueSerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.api.common.typeutils.base.VariantSerializer$VariantSerializerSnapshot":
        (None, None, None, None, 3, 3, 3),
    "org.apache.flink.api.common.typeutils.base.VoidSerializer$VoidSerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.api.common.typeutils.base.array.BooleanPrimitiveArraySerializer$BooleanPrimitiveArraySerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.api.common.typeutils.base.array.BytePrimitiveArraySerializer$BytePrimitiveArraySerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.api.common.typeutils.base.array.CharPrimitiveArraySerializer$CharPrimitiveArraySerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.api.common.typeutils.base.array.DoublePrimitiveArraySerializer$DoublePrimitiveArraySerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.api.common.typeutils.base.array.FloatPrimitiveArraySerializer$FloatPrimitiveArraySerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.api.common.typeutils.base.array.IntPrimitiveArraySerializer$IntPrimitiveArraySerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.api.common.typeutils.base.array.LongPrimitiveArraySerializer$LongPrimitiveArraySerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.api.common.typeutils.base.array.ShortPrimitiveArraySerializer$ShortPrimitiveArraySerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.api.common.typeutils.base.array.StringArraySerializer$StringArraySerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.api.java.typeutils.runtime.CopyableValueSerializer$CopyableValueSerializerSnapshot":
        (2, 2, 2, 2, 2, 2, 2),
    "org.apache.flink.api.java.typeutils.runtime.EitherSerializerSnapshot":
        (2, 2, 2, None, None, None, None),
    "org.apache.flink.api.java.typeutils.runtime.JavaEitherSerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.api.java.typeutils.runtime.NullableSerializer$NullableSerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.api.java.typeutils.runtime.PojoSerializerSnapshot":
        (2, 2, 2, 2, 2, 2, 2),
    "org.apache.flink.api.java.typeutils.runtime.RowSerializer$RowSerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.api.java.typeutils.runtime.Tuple0SerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.api.java.typeutils.runtime.TupleSerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.api.java.typeutils.runtime.ValueSerializer$ValueSerializerSnapshot":
        (2, 2, 2, 2, 2, 2, 2),
    "org.apache.flink.api.java.typeutils.runtime.kryo.KryoSerializerSnapshot":
        (2, 2, 2, 2, 2, 2, 2),
    "org.apache.flink.queryablestate.client.VoidNamespaceSerializer$VoidNamespaceSerializerSnapshot":
        (0, 0, 0, 0, 0, 0, 0),
    "org.apache.flink.runtime.state.ArrayListSerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.runtime.state.JavaSerializer$JavaSerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.runtime.state.VoidNamespaceSerializer$VoidNamespaceSerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.runtime.state.ttl.TtlAwareSerializerSnapshot":
        (None, None, None, 1, 1, 1, 1),
    "org.apache.flink.runtime.state.ttl.TtlStateFactory$TtlSerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.runtime.state.v2.ttl.TtlStateFactory$TtlSerializerSnapshot":
        (None, None, None, 3, 3, 3, 3),
    "org.apache.flink.streaming.api.datastream.CoGroupedStreams$UnionSerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.streaming.api.functions.sink.TwoPhaseCommitSinkFunction$StateSerializerSnapshot":
        (3, 3, 3, None, None, None, None),
    "org.apache.flink.streaming.api.functions.sink.legacy.TwoPhaseCommitSinkFunction$StateSerializerSnapshot":
        (None, None, None, 3, 3, 3, 3),
    "org.apache.flink.streaming.api.operators.TimerSerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.streaming.api.operators.co.IntervalJoinOperator$BufferEntrySerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.streaming.api.windowing.windows.GlobalWindow$Serializer$GlobalWindowSerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.streaming.api.windowing.windows.TimeWindow$Serializer$TimeWindowSerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
    "org.apache.flink.streaming.runtime.streamrecord.StreamElementSerializer$StreamElementSerializerSnapshot":
        (3, 3, 3, 3, 3, 3, 3),
}
