package statekit.flinktest;

import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.*;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.runtime.checkpoint.OperatorState;
import org.apache.flink.runtime.checkpoint.metadata.CheckpointMetadata;
import org.apache.flink.runtime.state.StateBackend;
import org.apache.flink.runtime.state.hashmap.HashMapStateBackend;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ArrayNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.flink.state.api.OperatorIdentifier;
import org.apache.flink.state.api.SavepointReader;
import org.apache.flink.state.api.functions.KeyedStateReaderFunction;
import org.apache.flink.state.api.runtime.SavepointLoader;
import org.apache.flink.state.rocksdb.EmbeddedRocksDBStateBackend;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.util.CloseableIterator;
import org.apache.flink.util.Collector;

import java.io.File;
import java.util.*;

/**
 * Dumps a savepoint's state as JSON lines through Flink's own State Processor API (SavepointReader)
 * and its metadata through SavepointLoader.
 *
 * <p>Args: (SAVEPOINT_DIR SPEC_JSON)+. The spec has the shape of {@link Restore}'s (an operator may
 * give "uid_hash" instead of, or next to, "uid"; "state_backend": hashmap|rocksdb picks the reader's
 * backend). Output lines, prefixed "STATE ", framed per pair by {@link Harness#runPairs}:
 * <ul>
 * <li>{"meta": {"checkpoint_id", "operators": [{"id", "uid", "parallelism", "max_parallelism",
 *     "subtasks", "has_keyed", "has_operator"}]}}</li>
 * <li>{"op", "key", "states": {name: value}, "event_timers": [...], "processing_timers": [...]} per key</li>
 * <li>{"op", "state", "mode": "list"|"union", "value"} per list/union element</li>
 * <li>{"op", "state", "mode": "broadcast", "key", "value"} per broadcast entry</li>
 * </ul>
 */
public class Dump {

    public static class Reader extends KeyedStateReaderFunction<Object, String> {
        final String op;
        final String specJson;
        transient List<State> states;
        transient List<String> names;
        Reader(String op, JsonNode spec) { this.op = op; this.specJson = spec.toString(); }

        @Override
        @SuppressWarnings({"unchecked", "rawtypes"})
        public void open(OpenContext c) throws Exception {
            states = new ArrayList<>();
            names = new ArrayList<>();
            for (JsonNode s : Ddl.M.readTree(specJson).get("states")) {
                StateDescriptor d = Restore.descriptor(s);
                names.add(d.getName());
                switch (s.get("kind").asText()) {
                    case "value": states.add(getRuntimeContext().getState((ValueStateDescriptor) d)); break;
                    case "list": states.add(getRuntimeContext().getListState((ListStateDescriptor) d)); break;
                    case "map": states.add(getRuntimeContext().getMapState((MapStateDescriptor) d)); break;
                    case "reducing": states.add(getRuntimeContext().getReducingState((ReducingStateDescriptor) d)); break;
                    default: throw new IllegalArgumentException(s.toString());
                }
            }
        }

        @Override
        public void readKey(Object key, Context ctx, Collector<String> out) throws Exception {
            ObjectNode o = Ddl.F.objectNode();
            o.put("op", op);
            o.set("key", Ddl.json(key));
            ObjectNode st = o.putObject("states");
            for (int i = 0; i < states.size(); i++) st.set(names.get(i), Restore.stateValue(states.get(i)));
            ArrayNode et = o.putArray("event_timers");
            new TreeSet<>(ctx.registeredEventTimeTimers()).forEach(et::add);
            ArrayNode pt = o.putArray("processing_timers");
            new TreeSet<>(ctx.registeredProcessingTimeTimers()).forEach(pt::add);
            out.collect(o.toString());
        }
    }

    static OperatorIdentifier ident(JsonNode op) {
        if (op.has("uid_hash")) return OperatorIdentifier.forUidHash(op.get("uid_hash").asText());
        return OperatorIdentifier.forUid(op.get("uid").asText());
    }

    static String name(JsonNode op) {
        return op.has("uid") ? op.get("uid").asText() : op.get("uid_hash").asText();
    }

    @SuppressWarnings({"unchecked", "rawtypes"})
    static void runOne(String savepointDir, String specFile) throws Exception {
        String sp = new File(savepointDir).getAbsoluteFile().toURI().toString();
        JsonNode spec = Ddl.M.readTree(new File(specFile));
        String backendName = spec.has("state_backend") ? spec.get("state_backend").asText() : "hashmap";

        CheckpointMetadata md = SavepointLoader.loadSavepointMetadata(sp);
        ObjectNode meta = Ddl.F.objectNode();
        meta.put("checkpoint_id", md.getCheckpointId());
        ArrayNode mops = meta.putArray("operators");
        for (OperatorState os : md.getOperatorStates()) {
            ObjectNode m = mops.addObject();
            m.put("id", os.getOperatorID().toHexString());
            m.put("uid", os.getOperatorUid().orElse(null));
            m.put("parallelism", os.getParallelism());
            m.put("max_parallelism", os.getMaxParallelism());
            m.put("subtasks", os.getStates().size());
            m.put("has_keyed", os.getStates().stream().anyMatch(s -> !s.getManagedKeyedState().isEmpty()));
            m.put("has_operator", os.getStates().stream().anyMatch(s -> !s.getManagedOperatorState().isEmpty()));
        }
        ObjectNode top = Ddl.F.objectNode();
        top.set("meta", meta);
        Restore.emit(top);

        Configuration conf = new Configuration();
        conf.setString("rest.bind-address", "127.0.0.1");
        conf.setString("rest.address", "127.0.0.1");
        conf.setString("rest.bind-port", "0");
        StreamExecutionEnvironment env = StreamExecutionEnvironment.createLocalEnvironment(
                spec.has("parallelism") ? spec.get("parallelism").asInt() : 2, conf);
        StateBackend backend = backendName.equals("rocksdb") ? new EmbeddedRocksDBStateBackend() : new HashMapStateBackend();
        SavepointReader r = SavepointReader.read(env, sp, backend);

        List<DataStream<String>> streams = new ArrayList<>();
        for (JsonNode op : spec.get("operators")) {
            String kind = op.get("kind").asText();
            String opName = name(op);
            if (kind.equals("keyed")) {
                TypeInformation kt = Ddl.type(op.get("key_type").asText());
                streams.add(r.readKeyedState(ident(op), new Reader(opName, op), kt, Types.STRING));
            } else if (kind.equals("operator")) {
                for (JsonNode s : op.get("states")) {
                    String st = s.get("name").asText();
                    boolean union = s.get("kind").asText().equals("union");
                    TypeInformation t = Ddl.type(s.get("type").asText());
                    DataStream<Object> d = union ? r.readUnionState(ident(op), st, t) : r.readListState(ident(op), st, t);
                    String mode = union ? "union" : "list";
                    streams.add(d.map(v -> {
                        ObjectNode o = Ddl.F.objectNode();
                        o.put("op", opName); o.put("state", st); o.put("mode", mode); o.set("value", Ddl.json(v));
                        return o.toString();
                    }).returns(Types.STRING));
                }
            } else if (kind.equals("broadcast")) {
                for (JsonNode s : op.get("states")) {
                    String st = s.get("name").asText();
                    DataStream<org.apache.flink.api.java.tuple.Tuple2<Object, Object>> d = r.readBroadcastState(ident(op), st,
                            Ddl.type(s.get("key_type").asText()), Ddl.type(s.get("type").asText()));
                    streams.add(d.map(t -> {
                        ObjectNode o = Ddl.F.objectNode();
                        o.put("op", opName); o.put("state", st); o.put("mode", "broadcast");
                        o.set("key", Ddl.json(t.f0)); o.set("value", Ddl.json(t.f1));
                        return o.toString();
                    }).returns(Types.STRING));
                }
            }
        }
        if (!streams.isEmpty()) {
            DataStream<String> all = streams.get(0);
            for (int i = 1; i < streams.size(); i++) all = all.union(streams.get(i));
            try (CloseableIterator<String> it = all.executeAndCollect("statekit-dump")) {
                while (it.hasNext()) {
                    String line = it.next();
                    if (line != null) Restore.emit((ObjectNode) Ddl.M.readTree(line));  // SPA emits null for keys without output
                }
            }
        }
    }

    /** Args: (SAVEPOINT_DIR SPEC_JSON)+ - each pair read in turn in this JVM. */
    public static void main(String[] args) throws Exception {
        System.exit(Harness.runPairs(args, Dump::runOne));
    }
}
