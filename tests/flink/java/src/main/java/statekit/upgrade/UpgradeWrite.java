package statekit.upgrade;

import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.state.MapState;
import org.apache.flink.api.common.state.MapStateDescriptor;
import org.apache.flink.api.common.state.State;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.core.execution.SavepointFormatType;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.streaming.api.functions.source.legacy.SourceFunction;
import org.apache.flink.util.Collector;

import java.io.IOException;
import java.nio.file.*;
import java.util.*;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.stream.Stream;

/**
 * The 1.x side of the upgrade pairs: runs the job (one keyed operator per uid of {@link UpgradeModel#states()}),
 * waits until every key's state is set, takes a canonical savepoint and writes OUT/savepoint and
 * OUT/expected.json ({flink_version, state_backend, type_info: {uid/state: TypeInformation}, operators:
 * {uid: {key: {state: value JSON}}}}).
 *
 * <p>Args: OUT_DIR [hashmap|rocksdb] [custom|plain] [N_KEYS]; N_KEYS (default {@link UpgradeModel#N_KEYS}) sizes the
 * state for benchmarks (bench/flink_upgrade.py); with "custom", Simple is registered with the user's own Kryo serializer
 * ({@link SimpleKryoSerializer}; through reflection, as the 1.x API for it is gone in 2.x).
 */
public class UpgradeWrite {
    static final AtomicInteger DONE = new AtomicInteger();
    static int nKeys = UpgradeModel.N_KEYS;

    /** Emits the key indexes once, then idles until cancelled (so that a savepoint can be taken). */
    public static class Keys implements SourceFunction<Integer> {
        private volatile boolean running = true;
        @Override public void run(SourceContext<Integer> ctx) throws Exception {
            for (int i = 0; i < nKeys; i++) {
                synchronized (ctx.getCheckpointLock()) { ctx.collect(i); }
            }
            while (running) Thread.sleep(20);
        }
        @Override public void cancel() { running = false; }
    }

    /** Sets every state of one operator for the key of each element. */
    public static class SetAll extends KeyedProcessFunction<String, Integer, Integer> {
        final String uid;
        transient List<State> states;
        transient List<String> names;
        SetAll(String uid) { this.uid = uid; }

        @Override
        @SuppressWarnings({"unchecked", "rawtypes"})
        public void open(OpenContext ctx) {
            states = new ArrayList<>();
            names = new ArrayList<>();
            for (Map.Entry<String, TypeInformation<?>> e : UpgradeModel.states().get(uid).entrySet()) {
                names.add(e.getKey());
                states.add(UpgradeModel.LIST_STATES.contains(e.getKey())
                        ? getRuntimeContext().getListState(new ListStateDescriptor(e.getKey(), e.getValue()))
                        : UpgradeModel.MAP_STATES.contains(e.getKey())
                        ? getRuntimeContext().getMapState(new MapStateDescriptor(e.getKey(), Types.STRING, e.getValue()))
                        : getRuntimeContext().getState(new ValueStateDescriptor(e.getKey(), e.getValue())));
            }
        }

        @Override
        @SuppressWarnings({"unchecked", "rawtypes"})
        public void processElement(Integer i, Context ctx, Collector<Integer> out) throws Exception {
            for (int s = 0; s < states.size(); s++) {
                Object v = UpgradeModel.value(names.get(s), i);
                if (states.get(s) instanceof ListState) ((ListState) states.get(s)).update((List) v);
                else if (states.get(s) instanceof MapState) ((MapState) states.get(s)).putAll((Map) v);
                else ((ValueState) states.get(s)).update(v);
            }
            DONE.incrementAndGet();
            out.collect(i);
        }
    }

    public static void main(String[] args) throws Exception {
        Path out = Paths.get(args[0]).toAbsolutePath();
        String backend = args.length > 1 ? args[1] : "hashmap";
        if (args.length > 3) nKeys = Integer.parseInt(args[3]);
        Configuration conf = new Configuration();
        conf.setString("state.backend.type", backend);
        conf.setString("rest.bind-address", "127.0.0.1");
        conf.setString("rest.address", "127.0.0.1");
        conf.setString("rest.bind-port", "0");
        Path work = Files.createTempDirectory("statekit-upgrade-");
        conf.setString("execution.checkpointing.dir", work.resolve("chk").toUri().toString());
        conf.setString("state.checkpoints.dir", work.resolve("chk").toUri().toString());  // before Flink 2.0
        StreamExecutionEnvironment env = StreamExecutionEnvironment.createLocalEnvironment(UpgradeModel.PARALLELISM, conf);
        env.setMaxParallelism(UpgradeModel.MAX_PARALLELISM);
        if (args.length > 2 && args[2].equals("custom")) {
            env.getConfig().getClass().getMethod("registerTypeWithKryoSerializer", Class.class, Class.class)
                    .invoke(env.getConfig(), UpgradeModel.Simple.class, SimpleKryoSerializer.class);
        }

        DataStream<Integer> s = env.addSource(new Keys(), "Keys", Types.INT).setParallelism(1).uid("src");
        for (String uid : UpgradeModel.states().keySet()) {
            s = s.keyBy(UpgradeModel::key, Types.STRING).process(new SetAll(uid)).returns(Types.INT).uid(uid).name(uid);
        }
        s.sinkTo(new DiscardingSink<>()).uid("sink");

        JobClient client = env.executeAsync("statekit-upgrade-pairs");
        long deadline = System.currentTimeMillis() + 180_000 + nKeys;
        int want = nKeys * UpgradeModel.states().size();
        while (DONE.get() < want) {
            if (System.currentTimeMillis() > deadline) throw new IllegalStateException("job did not process input in time");
            Thread.sleep(50);
        }
        String sp = client.triggerSavepoint(work.resolve("sp").toUri().toString(), SavepointFormatType.CANONICAL)
                .get(120, TimeUnit.SECONDS);
        client.cancel().get(60, TimeUnit.SECONDS);
        Path dest = out.resolve("savepoint");
        deleteTree(dest);
        copyTree(Paths.get(new java.net.URI(sp)), dest);
        deleteTree(work);

        ObjectNode root = UpgradeModel.F.objectNode();
        root.put("flink_version", org.apache.flink.runtime.util.EnvironmentInformation.getVersion());
        root.put("generator", "statekit.upgrade.UpgradeWrite (tests/flink/java)");
        root.put("state_backend", backend);
        ObjectNode types = root.putObject("type_info");
        ObjectNode ops = root.putObject("operators");
        UpgradeModel.states().forEach((uid, states) -> {
            ObjectNode op = ops.putObject(uid);
            states.forEach((name, t) -> types.put(uid + "/" + name, t.toString()));
            for (int i = 0; i < nKeys; i++) {
                ObjectNode k = op.putObject(UpgradeModel.key(i));
                for (String name : states.keySet()) k.set(name, UpgradeModel.json(UpgradeModel.value(name, i)));
            }
        });
        UpgradeModel.M.writerWithDefaultPrettyPrinter().writeValue(out.resolve("expected.json").toFile(), root);
        System.out.println("wrote " + dest);
        System.exit(0);
    }

    static void deleteTree(Path p) throws IOException {
        if (!Files.exists(p)) return;
        try (Stream<Path> s = Files.walk(p)) {
            s.sorted(Comparator.reverseOrder()).forEach(x -> x.toFile().delete());
        }
    }

    static void copyTree(Path src, Path dst) throws IOException {
        try (Stream<Path> s = Files.walk(src)) {
            for (Path x : (Iterable<Path>) s::iterator) {
                Path t = dst.resolve(src.relativize(x).toString());
                if (Files.isDirectory(x)) Files.createDirectories(t);
                else Files.copy(x, t, StandardCopyOption.REPLACE_EXISTING);
            }
        }
    }
}
