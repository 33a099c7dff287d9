package statekit.flinksql;

import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.common.typeutils.TypeSerializer;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.runtime.checkpoint.OperatorState;
import org.apache.flink.runtime.checkpoint.metadata.CheckpointMetadata;
import org.apache.flink.runtime.state.KeyedBackendSerializationProxy;
import org.apache.flink.runtime.state.StateBackend;
import org.apache.flink.runtime.state.hashmap.HashMapStateBackend;
import org.apache.flink.runtime.state.metainfo.StateMetaInfoSnapshot;
import org.apache.flink.state.api.OperatorIdentifier;
import org.apache.flink.state.api.SavepointReader;
import org.apache.flink.state.api.functions.KeyedStateReaderFunction;
import org.apache.flink.state.api.runtime.SavepointLoader;
import org.apache.flink.state.rocksdb.EmbeddedRocksDBStateBackend;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.table.data.RowData;
import org.apache.flink.table.runtime.typeutils.InternalTypeInfo;
import org.apache.flink.table.runtime.typeutils.RowDataSerializer;
import org.apache.flink.table.types.logical.LogicalType;
import org.apache.flink.table.types.logical.RowType;
import org.apache.flink.util.CloseableIterator;
import org.apache.flink.util.Collector;

/**
 * The Java baseline of bench/flink_sql_read.py: Flink's State Processor API reads every key of one SQL
 * group aggregate ({@code readKeyedState}, the key and {@code accState} serializers restored from the
 * savepoint's own snapshots, as {@link Verify} does) and emits each key's COUNT(*), summed here.
 *
 * <p>Args: SAVEPOINT_DIR OPERATOR_ID(32 hex) BACKEND(hashmap|rocksdb). Prints
 * {@code RESULT keys=... sum=... seconds=...} (wall time from building the job to the last row).
 */
public class BenchRead {
    public static final class Counts extends KeyedStateReaderFunction<RowData, Long> {
        final TypeSerializer<?> acc;
        transient ValueState<RowData> state;
        Counts(TypeSerializer<?> acc) { this.acc = acc; }

        @Override
        @SuppressWarnings("unchecked")
        public void open(OpenContext c) {
            state = getRuntimeContext().getState(new ValueStateDescriptor<>("accState", (TypeSerializer<RowData>) acc));
        }

        @Override
        public void readKey(RowData key, Context ctx, Collector<Long> out) throws Exception {
            RowData v = state.value();
            out.collect(v == null ? 0L : v.getLong(0));
        }
    }

    public static void main(String[] args) throws Exception {
        String sp = args[0];
        long t0 = System.nanoTime();
        CheckpointMetadata md = SavepointLoader.loadSavepointMetadata(sp);
        OperatorState os = null;
        for (OperatorState o : md.getOperatorStates()) if (o.getOperatorID().toHexString().equals(args[1])) os = o;
        if (os == null) throw new IllegalArgumentException("no operator " + args[1]);
        KeyedBackendSerializationProxy<RowData> p = Verify.proxy(os);
        LogicalType[] keyTypes = Verify.types((RowDataSerializer) p.getKeySerializerSnapshot().restoreSerializer());
        TypeSerializer<?> acc = null;
        for (StateMetaInfoSnapshot m : p.getStateMetaInfoSnapshots()) {
            if (m.getName().equals("accState")) {
                acc = m.getTypeSerializerSnapshot(StateMetaInfoSnapshot.CommonSerializerKeys.VALUE_SERIALIZER).restoreSerializer();
            }
        }
        StreamExecutionEnvironment env = Jobs.env(new Configuration());
        env.setParallelism(2);
        StateBackend backend = args.length > 2 && args[2].equals("hashmap") ? new HashMapStateBackend() : new EmbeddedRocksDBStateBackend();
        SavepointReader r = SavepointReader.read(env, sp, backend);
        long keys = 0, sum = 0;
        try (CloseableIterator<Long> rows = r.readKeyedState(OperatorIdentifier.forUidHash(args[1]), new Counts(acc),
                InternalTypeInfo.of(RowType.of(keyTypes)), Types.LONG).executeAndCollect("bench read")) {
            while (rows.hasNext()) { sum += rows.next(); keys++; }
        }
        double s = (System.nanoTime() - t0) / 1e9;
        System.out.println("RESULT keys=" + keys + " sum=" + sum + " seconds=" + s);
        System.exit(0);
    }
}
