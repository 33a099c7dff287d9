package statekit.flinkreal;

import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.runtime.state.hashmap.HashMapStateBackend;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.flink.state.api.OperatorIdentifier;
import org.apache.flink.state.api.OperatorTransformation;
import org.apache.flink.state.api.SavepointWriter;
import org.apache.flink.state.api.StateBootstrapTransformation;
import org.apache.flink.state.api.functions.KeyedStateBootstrapFunction;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;

import java.nio.file.*;

/**
 * A savepoint written by Flink's own State Processor API (SavepointWriter): operator uid
 * "spa-values", keyed by Long 0..999, ValueState&lt;Long&gt; "value" = key*3+1, HashMap backend,
 * max parallelism 128, parallelism 2.
 *
 * <p>Args: OUT_DIR INLINE(0b|default)
 */
public class SpaWrite {
    public static class Boot extends KeyedStateBootstrapFunction<Long, Long> {
        transient ValueState<Long> value;
        @Override public void open(OpenContext c) {
            value = getRuntimeContext().getState(new ValueStateDescriptor<>("value", Types.LONG));
        }
        @Override public void processElement(Long k, Context ctx) throws Exception {
            value.update(Model.spaValue(k));
        }
    }

    public static void main(String[] args) throws Exception {
        Path out = Paths.get(args[0]).toAbsolutePath();
        String inline = args.length > 1 ? args[1] : "0b";
        Configuration conf = new Configuration();
        if (!inline.equals("default")) {
            conf.setString("execution.checkpointing.data-inline-threshold", inline);
            conf.setString("state.storage.fs.memory-threshold", inline);  // its name before Flink 2.0
        }
        conf.setString("rest.bind-address", "127.0.0.1");
        conf.setString("rest.address", "127.0.0.1");
        conf.setString("rest.bind-port", "0");
        StreamExecutionEnvironment env = StreamExecutionEnvironment.createLocalEnvironment(Model.PARALLELISM, conf);

        DataStream<Long> keys = env.fromSequence(0, Model.SPA_KEYS - 1);
        StateBootstrapTransformation<Long> t = OperatorTransformation.bootstrapWith(keys)
                .keyBy(k -> k, Types.LONG)
                .transform(new Boot());
        Path dest = out.resolve("savepoint");
        Util.deleteTree(dest);
        SavepointWriter.newSavepoint(env, new HashMapStateBackend(), Model.MAX_PARALLELISM)
                .withOperator(OperatorIdentifier.forUid("spa-values"), t)
                .write(dest.toUri().toString());
        env.execute("statekit-corpus-spa-write");

        ObjectNode root = Model.F.objectNode();
        root.put("flink_version", org.apache.flink.runtime.util.EnvironmentInformation.getVersion());
        root.put("generator", "statekit.flinkreal.SpaWrite (../shared/flink/generator): SavepointWriter.newSavepoint(env, HashMapStateBackend, 128)");
        root.put("savepoint_dir", "savepoint");
        root.put("state_backend", "hashmap");
        root.put("format", "CANONICAL");
        root.put("data_inline_threshold", inline.equals("default") ? "default (20kb)" : inline);
        root.put("key_mode", "long");
        root.put("max_parallelism", Model.MAX_PARALLELISM);
        root.put("parallelism", Model.PARALLELISM);
        root.set("operators", Model.expectedSpa(Model.PARALLELISM));
        Model.M.writeValue(out.resolve("expected.json").toFile(), root);
        System.out.println("wrote " + out.resolve("expected.json"));
        System.exit(0);
    }
}
