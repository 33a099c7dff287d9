package statekit.flinksql;

import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.java.functions.KeySelector;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.runtime.state.hashmap.HashMapStateBackend;
import org.apache.flink.state.api.OperatorIdentifier;
import org.apache.flink.state.api.OperatorTransformation;
import org.apache.flink.state.api.SavepointWriter;
import org.apache.flink.state.api.StateBootstrapTransformation;
import org.apache.flink.state.api.functions.KeyedStateBootstrapFunction;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.table.data.GenericRowData;
import org.apache.flink.table.data.RowData;
import org.apache.flink.table.data.binary.BinaryRowData;
import org.apache.flink.table.data.writer.BinaryRowWriter;
import org.apache.flink.table.runtime.typeutils.InternalTypeInfo;
import org.apache.flink.table.types.logical.BigIntType;
import org.apache.flink.table.types.logical.RowType;

import java.nio.file.*;

/**
 * The Java State Processor API's bootstrap of a SQL group aggregate's keyed state (bench/flink_sql_write.py's
 * baseline): for ids 0..N-1 (BenchJob's input: one row per id, amount = id % 1000) the accState of
 * {@code SELECT id, COUNT(*), SUM(amount), MAX(amount) ... GROUP BY id}, i.e. RowData(count1 BIGINT NOT NULL,
 * sum BIGINT, max BIGINT) under a BinaryRowData key (RowDataSerializer), written by SavepointWriter with the
 * operator's uid. Prints RESULT seconds=... (the whole job, MiniCluster start included).
 *
 * <p>Args: OUT N UID MAX_PARALLELISM PARALLELISM
 */
public class BenchBootstrap {
    static final RowType KEY = RowType.of(new BigIntType());
    static final RowType ACC = RowType.of(new BigIntType(false), new BigIntType(), new BigIntType());

    /** The SQL operator's key: a BinaryRowData of the id (so the key group is BinaryRowData.hashCode's). */
    static final class Key implements KeySelector<Long, RowData> {
        @Override public RowData getKey(Long id) {
            BinaryRowData row = new BinaryRowData(1);
            BinaryRowWriter w = new BinaryRowWriter(row);
            w.writeLong(0, id);
            w.complete();
            return row;
        }
    }

    static final class Acc extends KeyedStateBootstrapFunction<RowData, Long> {
        ValueState<RowData> acc;
        @Override public void open(OpenContext ctx) {
            acc = getRuntimeContext().getState(new ValueStateDescriptor<>("accState", InternalTypeInfo.of(ACC)));
        }
        @Override public void processElement(Long id, Context ctx) throws Exception {
            long amount = id % 1000;
            acc.update(GenericRowData.of(1L, amount, amount));
        }
    }

    public static void main(String[] args) throws Exception {
        long t0 = System.nanoTime();
        Path out = Paths.get(args[0]).toAbsolutePath();
        long n = Long.parseLong(args[1]);
        String uid = args[2];
        int maxp = Integer.parseInt(args[3]);
        int par = Integer.parseInt(args[4]);
        Util.deleteTree(out);
        Configuration conf = new Configuration();
        conf.setString("rest.bind-address", "127.0.0.1");
        conf.setString("rest.bind-port", "0");
        StreamExecutionEnvironment env = StreamExecutionEnvironment.createLocalEnvironment(par, conf);
        DataStream<Long> ids = env.fromSequence(0, n - 1);
        StateBootstrapTransformation<Long> t = OperatorTransformation.bootstrapWith(ids)
                .keyBy(new Key(), InternalTypeInfo.of(KEY)).transform(new Acc());
        SavepointWriter.newSavepoint(env, new HashMapStateBackend(), maxp)
                .withOperator(OperatorIdentifier.forUid(uid), t)
                .write(out.toUri().toString());
        env.execute("statekit-bench-sql-bootstrap");
        System.out.printf("RESULT seconds=%.2f keys=%d%n", (System.nanoTime() - t0) / 1e9, n);
        System.exit(0);
    }
}
