package statekit.flinktest;

import org.apache.flink.api.common.functions.FlatMapFunction;
import org.apache.flink.api.common.functions.MapFunction;
import org.apache.flink.api.common.functions.RichMapFunction;
import org.apache.flink.api.common.state.*;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.functions.KeySelector;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.runtime.state.FunctionInitializationContext;
import org.apache.flink.runtime.state.FunctionSnapshotContext;
import org.apache.flink.runtime.state.KeyedStateFunction;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ArrayNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.flink.streaming.api.checkpoint.CheckpointedFunction;
import org.apache.flink.streaming.api.datastream.BroadcastStream;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.datastream.SingleOutputStreamOperator;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.co.BroadcastProcessFunction;
import org.apache.flink.streaming.api.functions.co.KeyedBroadcastProcessFunction;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.util.Collector;

import java.io.File;
import java.util.*;

/**
 * Restores a savepoint into a real Flink 2.3.0 job built from a spec and prints what the job sees.
 *
 * <p>Args: (SAVEPOINT_DIR SPEC_JSON)+. The spec lists operators by uid:
 * <pre>
 * {"parallelism": 2, "max_parallelism": 256,            (job-wide env.setMaxParallelism; optional)
 *  "operators": [
 *   {"uid": "counter", "kind": "keyed", "key_type": "string", "parallelism": 2, "max_parallelism": 256,
 *    "states": [{"name": "count", "kind": "value", "type": "bigint"},      (optional "ttl_days": N: a TTL state)
 *               {"name": "per_kind", "kind": "map", "key_type": "string", "type": "bigint"}, ...]},
 *   {"uid": "buffer", "kind": "operator", "states": [{"name": "buffered", "kind": "list", "type": "string"},
 *                                                   {"name": "seen", "kind": "union", "type": "bigint"}]},
 *   {"uid": "rules", "kind": "broadcast", "states": [{"name": "rules", "key_type": "string", "type": "bigint"}]},
 *   {"uid": "src", "kind": "stateless"}]}
 * </pre>
 * Keyed operators are KeyedBroadcastProcessFunctions: one broadcast "tick" makes every subtask walk
 * its restored keys per state (applyToKeyedState, which also checks serializer compatibility); an
 * empty keyed input ends with the final watermark, so restored event-time timers fire (onTimer).
 * Output, one JSON object per line prefixed "STATE ": keyed values {op, subtask, key, state, value},
 * fired timers {op, key, timer, domain}, operator state {op, subtask, state, mode, values, restored},
 * broadcast state {op, subtask, state, entries}. Pairs are framed by {@link Harness#runPairs}.
 */
public class Restore {
    static final MapStateDescriptor<String, String> TICK = new MapStateDescriptor<>("statekit-harness-tick", Types.STRING, Types.STRING);

    static synchronized void emit(ObjectNode o) {
        System.out.println("STATE " + o);
        System.out.flush();
    }

    /** A state descriptor from its spec entry. */
    @SuppressWarnings({"unchecked", "rawtypes"})
    static StateDescriptor<?, ?> descriptor(JsonNode s) {
        String name = s.get("name").asText();
        String kind = s.get("kind").asText();
        TypeInformation t = Ddl.type(s.get("type").asText());
        StateDescriptor<?, ?> d;
        switch (kind) {
            case "value": d = new ValueStateDescriptor<>(name, t); break;
            case "list": case "union": d = new ListStateDescriptor<>(name, t); break;
            case "map": d = new MapStateDescriptor<>(name, Ddl.type(s.get("key_type").asText()), t); break;
            case "reducing": d = new ReducingStateDescriptor<>(name, Ddl.reducer(s.get("type").asText()), t); break;
            default: throw new IllegalArgumentException("state kind " + kind);
        }
        if (s.has("ttl_days")) {  // TTL state (its values stored as TtlValue): restored only by a TTL descriptor
            d.enableTimeToLive(StateTtlConfig.newBuilder(java.time.Duration.ofDays(s.get("ttl_days").asLong())).build());
        }
        return d;
    }

    /** The JSON of a keyed state's current value (empty list/map = null, as "not set"). */
    @SuppressWarnings({"unchecked", "rawtypes"})
    static JsonNode stateValue(State st) throws Exception {
        if (st instanceof ValueState) return Ddl.json(((ValueState) st).value());
        if (st instanceof ReducingState) return Ddl.json(((ReducingState) st).get());
        if (st instanceof ListState) {
            Iterable it = (Iterable) ((ListState) st).get();
            ArrayNode a = Ddl.F.arrayNode();
            if (it != null) for (Object x : it) a.add(Ddl.json(x));
            return a.isEmpty() ? Ddl.F.nullNode() : a;
        }
        if (st instanceof MapState) {
            TreeMap<String, JsonNode> m = new TreeMap<>();
            for (Object o : ((MapState) st).entries()) {
                Map.Entry e = (Map.Entry) o;
                m.put(Ddl.keyString(e.getKey()), Ddl.json(e.getValue()));
            }
            ObjectNode n = Ddl.F.objectNode();
            m.forEach(n::set);
            return m.isEmpty() ? Ddl.F.nullNode() : n;
        }
        throw new IllegalArgumentException("state " + st);
    }

    public static class KeyedDump extends KeyedBroadcastProcessFunction<Object, Object, String, String> {
        final String op;
        final String specJson;
        KeyedDump(String op, JsonNode spec) { this.op = op; this.specJson = spec.toString(); }

        @Override
        @SuppressWarnings({"unchecked", "rawtypes"})
        public void processBroadcastElement(String tick, Context ctx, Collector<String> out) throws Exception {
            int sub = getRuntimeContext().getTaskInfo().getIndexOfThisSubtask();
            for (JsonNode s : Ddl.M.readTree(specJson).get("states")) {
                StateDescriptor d = descriptor(s);
                ctx.applyToKeyedState(d, (KeyedStateFunction<Object, State>) (key, st) -> {
                    ObjectNode o = Ddl.F.objectNode();
                    o.put("op", op);
                    o.put("subtask", sub);
                    o.set("key", Ddl.json(key));
                    o.put("state", d.getName());
                    o.set("value", stateValue(st));
                    emit(o);
                });
            }
        }

        @Override public void processElement(Object v, ReadOnlyContext ctx, Collector<String> out) {}

        @Override
        public void onTimer(long ts, OnTimerContext ctx, Collector<String> out) {
            ObjectNode o = Ddl.F.objectNode();
            o.put("op", op);
            o.set("key", Ddl.json(ctx.getCurrentKey()));
            o.put("timer", ts);
            o.put("domain", ctx.timeDomain().name().toLowerCase(Locale.ROOT).replace("_time", ""));
            emit(o);
        }
    }

    /** Operator list / union state: printed as restored, in initializeState. */
    public static class OperatorDump extends RichMapFunction<String, String> implements CheckpointedFunction {
        final String op;
        final String specJson;
        OperatorDump(String op, JsonNode spec) { this.op = op; this.specJson = spec.toString(); }
        @Override public String map(String v) { return v; }
        @Override public void snapshotState(FunctionSnapshotContext c) {}

        @Override
        @SuppressWarnings({"unchecked", "rawtypes"})
        public void initializeState(FunctionInitializationContext c) throws Exception {
            for (JsonNode s : Ddl.M.readTree(specJson).get("states")) {
                ListStateDescriptor d = (ListStateDescriptor) descriptor(s);
                boolean union = s.get("kind").asText().equals("union");
                ListState st = union ? c.getOperatorStateStore().getUnionListState(d) : c.getOperatorStateStore().getListState(d);
                ArrayNode a = Ddl.F.arrayNode();
                for (Object x : (Iterable) st.get()) a.add(Ddl.json(x));
                ObjectNode o = Ddl.F.objectNode();
                o.put("op", op);
                o.put("subtask", getRuntimeContext().getTaskInfo().getIndexOfThisSubtask());
                o.put("state", d.getName());
                o.put("mode", union ? "union" : "list");
                o.set("values", a);
                o.put("restored", c.isRestored());
                emit(o);
            }
        }
    }

    public static class BroadcastDump extends BroadcastProcessFunction<String, String, String> {
        final String op;
        final String specJson;
        BroadcastDump(String op, JsonNode spec) { this.op = op; this.specJson = spec.toString(); }
        @Override public void processElement(String v, ReadOnlyContext ctx, Collector<String> out) {}

        @Override
        @SuppressWarnings({"unchecked", "rawtypes"})
        public void processBroadcastElement(String tick, Context ctx, Collector<String> out) throws Exception {
            for (JsonNode s : Ddl.M.readTree(specJson).get("states")) {
                MapStateDescriptor d = new MapStateDescriptor<>(s.get("name").asText(),
                        Ddl.type(s.get("key_type").asText()), Ddl.type(s.get("type").asText()));
                TreeMap<String, JsonNode> m = new TreeMap<>();
                for (Object e : ctx.getBroadcastState(d).entries()) {
                    Map.Entry en = (Map.Entry) e;
                    m.put(Ddl.keyString(en.getKey()), Ddl.json(en.getValue()));
                }
                ObjectNode entries = Ddl.F.objectNode();
                m.forEach(entries::set);
                ObjectNode o = Ddl.F.objectNode();
                o.put("op", op);
                o.put("subtask", getRuntimeContext().getTaskInfo().getIndexOfThisSubtask());
                o.put("state", d.getName());
                o.set("entries", entries);
                emit(o);
            }
        }
    }

    static <T> SingleOutputStreamOperator<T> place(SingleOutputStreamOperator<T> s, JsonNode op) {
        s = s.uid(op.get("uid").asText()).name(op.get("uid").asText());
        if (op.has("parallelism")) s = s.setParallelism(op.get("parallelism").asInt());
        if (op.has("max_parallelism")) s = s.setMaxParallelism(op.get("max_parallelism").asInt());
        return s;
    }

    @SuppressWarnings({"unchecked", "rawtypes"})
    static void runOne(String savepointDir, String specFile) throws Exception {
        String savepoint = S3.uri(savepointDir);  // a local directory or a URI (s3://... with S3.configure)
        JsonNode spec = Ddl.M.readTree(new File(specFile));
        int parallelism = spec.has("parallelism") ? spec.get("parallelism").asInt() : 2;

        Configuration conf = new Configuration();
        conf.setString("rest.bind-address", "127.0.0.1");
        conf.setString("rest.address", "127.0.0.1");
        conf.setString("rest.bind-port", "0");
        conf.setString("execution.state-recovery.path", savepoint);
        conf.setString("execution.savepoint.path", savepoint);  // its name before Flink 1.20
        conf.setString("restart-strategy.type", "none");
        if (spec.has("state_backend")) conf.setString("state.backend.type", spec.get("state_backend").asText());
        S3.configure(conf);
        StreamExecutionEnvironment env = StreamExecutionEnvironment.createLocalEnvironment(parallelism, conf);
        if (spec.has("max_parallelism")) env.setMaxParallelism(spec.get("max_parallelism").asInt());

        int n = 0;
        for (JsonNode op : spec.get("operators")) {
            String uid = op.get("uid").asText();
            String kind = op.get("kind").asText();
            n++;
            DataStream<String> tick = env.fromData("tick").uid("statekit-harness-tick-" + n).name("tick " + uid);
            switch (kind) {
                case "keyed": {
                    TypeInformation kt = Ddl.type(op.get("key_type").asText());
                    DataStream<Object> keys = env.fromSequence(0, 0).uid("statekit-harness-keys-" + n)
                            .flatMap((FlatMapFunction<Long, Object>) (x, c) -> {}).returns(kt).uid("statekit-harness-nokeys-" + n);
                    BroadcastStream<String> b = tick.broadcast(TICK);
                    place(keys.keyBy((KeySelector<Object, Object>) k -> k, kt).connect(b)
                            .process(new KeyedDump(uid, op), Types.STRING), op)
                            .sinkTo(new DiscardingSink<>()).uid("statekit-harness-sink-" + n);
                    break;
                }
                case "operator":
                    place(tick.map(new OperatorDump(uid, op)).returns(Types.STRING), op)
                            .sinkTo(new DiscardingSink<>()).uid("statekit-harness-sink-" + n);
                    break;
                case "broadcast": {
                    List<MapStateDescriptor<?, ?>> ds = new ArrayList<>();
                    for (JsonNode s : op.get("states"))
                        ds.add(new MapStateDescriptor<>(s.get("name").asText(), Ddl.type(s.get("key_type").asText()), Ddl.type(s.get("type").asText())));
                    BroadcastStream<String> b = tick.broadcast(ds.toArray(new MapStateDescriptor[0]));
                    DataStream<String> none = env.fromData("x").uid("statekit-harness-none-" + n).filter(x -> false);
                    place(none.connect(b).process(new BroadcastDump(uid, op), Types.STRING), op)
                            .sinkTo(new DiscardingSink<>()).uid("statekit-harness-sink-" + n);
                    break;
                }
                case "stateless":
                    place(tick.map((MapFunction<String, String>) v -> v).returns(Types.STRING), op)
                            .sinkTo(new DiscardingSink<>()).uid("statekit-harness-sink-" + n);
                    break;
                default: throw new IllegalArgumentException("operator kind " + kind);
            }
        }
        env.execute("statekit-restore-harness");
    }

    /** Args: (SAVEPOINT_DIR SPEC_JSON)+ - one job per pair, run one after the other in this JVM. */
    public static void main(String[] args) throws Exception {
        System.exit(Harness.runPairs(args, Restore::runOne));
    }
}
