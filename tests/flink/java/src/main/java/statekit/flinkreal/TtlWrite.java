package statekit.flinkreal;

import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.MapState;
import org.apache.flink.api.common.state.MapStateDescriptor;
import org.apache.flink.api.common.state.StateTtlConfig;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.runtime.state.hashmap.HashMapStateBackend;
import org.apache.flink.state.api.OperatorIdentifier;
import org.apache.flink.state.api.OperatorTransformation;
import org.apache.flink.state.api.SavepointWriter;
import org.apache.flink.state.api.StateBootstrapTransformation;
import org.apache.flink.state.api.functions.KeyedStateBootstrapFunction;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;

import java.nio.file.*;

/**
 * A DataStream savepoint with TTL state, written by Flink's own State Processor API: operator uid
 * "ttl-counter", keyed by String "k0".."k{N-1}", ValueState&lt;Long&gt; "count" = index + 1 and
 * MapState&lt;String, Long&gt; "seen" = {"a": index}, both with a TTL of 36500 days (so they never expire
 * for Flink while tests run; statekit's prune-expired is told a shorter one), HashMap backend, max
 * parallelism 128, parallelism 2. Every value is stored as Flink's TtlValue (value, last access = the
 * wall-clock time it was written).
 *
 * <p>Args: OUT_DIR [N=20]
 */
public class TtlWrite {
    public static final long TTL_DAYS = 36500;

    static StateTtlConfig ttl() {
        return StateTtlConfig.newBuilder(java.time.Duration.ofDays(TTL_DAYS)).build();
    }

    public static class Boot extends KeyedStateBootstrapFunction<String, Integer> {
        transient ValueState<Long> count;
        transient MapState<String, Long> seen;

        @Override public void open(OpenContext c) {
            ValueStateDescriptor<Long> cd = new ValueStateDescriptor<>("count", Types.LONG);
            cd.enableTimeToLive(ttl());
            MapStateDescriptor<String, Long> sd = new MapStateDescriptor<>("seen", Types.STRING, Types.LONG);
            sd.enableTimeToLive(ttl());
            count = getRuntimeContext().getState(cd);
            seen = getRuntimeContext().getMapState(sd);
        }

        @Override public void processElement(Integer i, Context ctx) throws Exception {
            count.update(i + 1L);
            seen.put("a", (long) i);
        }
    }

    public static void main(String[] args) throws Exception {
        Path out = Paths.get(args[0]).toAbsolutePath();
        int n = args.length > 1 ? Integer.parseInt(args[1]) : 20;
        Configuration conf = new Configuration();
        conf.setString("execution.checkpointing.data-inline-threshold", "0b");
        conf.setString("rest.bind-address", "127.0.0.1");
        conf.setString("rest.address", "127.0.0.1");
        conf.setString("rest.bind-port", "0");
        StreamExecutionEnvironment env = StreamExecutionEnvironment.createLocalEnvironment(Model.PARALLELISM, conf);

        DataStream<Integer> rows = env.fromSequence(0, n - 1).map(Long::intValue).returns(Types.INT);
        StateBootstrapTransformation<Integer> t = OperatorTransformation.bootstrapWith(rows)
                .keyBy(i -> "k" + i, Types.STRING)
                .transform(new Boot());
        Path dest = out.resolve("savepoint");
        Util.deleteTree(dest);
        long before = System.currentTimeMillis();
        SavepointWriter.newSavepoint(env, new HashMapStateBackend(), Model.MAX_PARALLELISM)
                .withOperator(OperatorIdentifier.forUid("ttl-counter"), t)
                .write(dest.toUri().toString());
        env.execute("statekit-ttl-write");
        System.out.println("WRITTEN " + before + " " + System.currentTimeMillis());
        System.exit(0);
    }
}
