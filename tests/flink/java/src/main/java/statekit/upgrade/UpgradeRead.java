package statekit.upgrade;

import org.apache.flink.api.common.functions.FlatMapFunction;
import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.state.MapState;
import org.apache.flink.api.common.state.MapStateDescriptor;
import org.apache.flink.api.common.state.StateDescriptor;
import org.apache.flink.api.common.state.State;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.runtime.state.KeyedStateFunction;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.flink.streaming.api.datastream.BroadcastStream;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.co.KeyedBroadcastProcessFunction;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.util.Collector;

import java.io.File;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.util.*;

/**
 * The 2.x side of the upgrade pairs: restores a savepoint into the job's operators (the same uids and state
 * declarations as {@link UpgradeWrite}, compiled against this build's Flink) and prints what each holds.
 *
 * <p>Args: (SAVEPOINT_DIR SPEC_JSON)+, one restore per pair in this JVM. Spec: {"operators": [uid, ...],
 * "state_backend": "hashmap"}; the operators not listed are left out of the job (allowNonRestoredState).
 * Output per pair: "BEGIN i", lines "STATE {op, key, state, value}", then "END i" or "ERROR i &lt;json text&gt;".
 */
public class UpgradeRead {
    static final MapStateDescriptor<String, String> TICK = new MapStateDescriptor<>("upgrade-tick", Types.STRING, Types.STRING);

    static synchronized void emit(ObjectNode o) {
        System.out.println("STATE " + o);
        System.out.flush();
    }

    /** On the tick, walks every restored key of each declared state and prints its value. */
    public static class Dump extends KeyedBroadcastProcessFunction<String, Integer, String, String> {
        final String uid;
        Dump(String uid) { this.uid = uid; }

        @Override
        @SuppressWarnings({"unchecked", "rawtypes"})
        public void processBroadcastElement(String tick, Context ctx, Collector<String> out) throws Exception {
            for (Map.Entry<String, TypeInformation<?>> e : UpgradeModel.allStates().get(uid).entrySet()) {
                boolean list = UpgradeModel.LIST_STATES.contains(e.getKey());
                boolean map = UpgradeModel.MAP_STATES.contains(e.getKey());
                StateDescriptor d = list ? new ListStateDescriptor(e.getKey(), e.getValue())
                        : map ? new MapStateDescriptor(e.getKey(), Types.STRING, e.getValue())
                        : new ValueStateDescriptor(e.getKey(), e.getValue());
                ctx.applyToKeyedState(d, (KeyedStateFunction<String, State>) (key, st) -> {
                    ObjectNode o = UpgradeModel.F.objectNode();
                    o.put("op", uid);
                    o.put("key", key);
                    o.put("state", e.getKey());
                    Object v;
                    if (list) {
                        List<Object> l = new ArrayList<>();
                        for (Object x : (Iterable) ((ListState) st).get()) l.add(x);
                        v = l;
                    } else if (map) {
                        Map<Object, Object> m = new HashMap<>();
                        for (Object x : (Iterable) ((MapState) st).entries()) {
                            Map.Entry en = (Map.Entry) x;
                            m.put(en.getKey(), en.getValue());
                        }
                        v = m;
                    } else {
                        v = ((ValueState) st).value();
                    }
                    o.set("value", UpgradeModel.json(v));
                    emit(o);
                });
            }
        }

        @Override public void processElement(Integer v, ReadOnlyContext ctx, Collector<String> out) {}
    }

    static void runOne(String savepointDir, String specFile) throws Exception {
        String savepoint = new File(savepointDir).getAbsoluteFile().toURI().toString();
        JsonNode spec = UpgradeModel.M.readTree(new File(specFile));
        Configuration conf = new Configuration();
        conf.setString("rest.bind-address", "127.0.0.1");
        conf.setString("rest.address", "127.0.0.1");
        conf.setString("rest.bind-port", "0");
        conf.setString("execution.state-recovery.path", savepoint);
        conf.setString("execution.savepoint.path", savepoint);  // its name before Flink 1.20
        conf.setString("execution.state-recovery.ignore-unclaimed-state", "true");
        conf.setString("execution.savepoint.ignore-unclaimed-state", "true");
        conf.setString("restart-strategy.type", "none");
        conf.setString("state.backend.type", spec.has("state_backend") ? spec.get("state_backend").asText() : "hashmap");
        StreamExecutionEnvironment env = StreamExecutionEnvironment.createLocalEnvironment(UpgradeModel.PARALLELISM, conf);
        env.setMaxParallelism(UpgradeModel.MAX_PARALLELISM);
        int n = 0;
        for (JsonNode u : spec.get("operators")) {
            String uid = u.asText();
            n++;
            BroadcastStream<String> tick = env.fromData("tick").uid("upgrade-tick-" + n).broadcast(TICK);
            DataStream<Integer> none = env.fromSequence(0, 0).uid("upgrade-keys-" + n)
                    .flatMap((FlatMapFunction<Long, Integer>) (x, c) -> {}).returns(Types.INT).uid("upgrade-nokeys-" + n);
            none.keyBy(UpgradeModel::key, Types.STRING).connect(tick).process(new Dump(uid), Types.STRING)
                    .uid(uid).name(uid).sinkTo(new DiscardingSink<>()).uid("upgrade-sink-" + n);
        }
        env.execute("statekit-upgrade-read");
    }

    public static void main(String[] args) {
        int failed = 0;
        for (int i = 0; i < args.length / 2; i++) {
            System.out.println("BEGIN " + i);
            try {
                runOne(args[2 * i], args[2 * i + 1]);
                System.out.println("END " + i);
            } catch (Throwable t) {
                failed++;
                StringBuilder causes = new StringBuilder();
                for (Throwable c = t; c != null; c = c.getCause()) causes.append(c).append("\n");
                StringWriter sw = new StringWriter();
                t.printStackTrace(new PrintWriter(sw));
                System.err.println(sw);
                System.out.println("ERROR " + i + " " + UpgradeModel.F.textNode(causes.toString()));
            }
            System.out.flush();
        }
        System.exit(failed == 0 ? 0 : 1);
    }
}
