package statekit.flinktest;

import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.runtime.state.hashmap.HashMapStateBackend;
import org.apache.flink.state.api.OperatorIdentifier;
import org.apache.flink.state.api.OperatorTransformation;
import org.apache.flink.state.api.SavepointWriter;
import org.apache.flink.state.api.StateBootstrapTransformation;
import org.apache.flink.state.api.functions.KeyedStateBootstrapFunction;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import statekit.flinkreal.Model;

import java.nio.file.Path;
import java.nio.file.Paths;

/**
 * The Kryo/POJO pair of the compat tests: two savepoints written by Flink's State Processor API, each with one keyed
 * operator (uid "pojo-state", Long keys 0..9, max parallelism 128, parallelism 2) holding ValueState "v" of
 * {@link Model.ValuePojo} ("v-K", K*10): OUT/kryo declares it {@code Types.GENERIC(ValuePojo.class)}, so Flink writes
 * it with its KryoSerializer (as a job with {@code enableForceKryo()} or a generic type does); OUT/pojo declares it
 * {@code Types.POJO(ValuePojo.class)}, Flink's PojoSerializer.
 *
 * <p>Args: OUT_DIR
 */
public class KryoPojoWrite {
    public static class Boot extends KeyedStateBootstrapFunction<Long, Long> {
        final TypeInformation<Model.ValuePojo> type;
        transient ValueState<Model.ValuePojo> v;

        Boot(TypeInformation<Model.ValuePojo> type) {
            this.type = type;
        }

        @Override public void open(OpenContext c) {
            v = getRuntimeContext().getState(new ValueStateDescriptor<>("v", type));
        }

        @Override public void processElement(Long k, Context ctx) throws Exception {
            v.update(new Model.ValuePojo("v-" + k, k * 10));
        }
    }

    static void write(Path dest, TypeInformation<Model.ValuePojo> type) throws Exception {
        Configuration conf = new Configuration();
        conf.setString("execution.checkpointing.data-inline-threshold", "0b");
        conf.setString("rest.bind-address", "127.0.0.1");
        conf.setString("rest.bind-port", "0");
        StreamExecutionEnvironment env = StreamExecutionEnvironment.createLocalEnvironment(2, conf);
        StateBootstrapTransformation<Long> t = OperatorTransformation.bootstrapWith(env.fromSequence(0, 9))
                .keyBy(k -> k, Types.LONG)
                .transform(new Boot(type));
        if (java.nio.file.Files.exists(dest)) throw new IllegalStateException(dest + " exists");
        SavepointWriter.newSavepoint(env, new HashMapStateBackend(), 128)
                .withOperator(OperatorIdentifier.forUid("pojo-state"), t)
                .write(dest.toUri().toString());
        env.execute("statekit-kryo-pojo-" + dest.getFileName());
        System.out.println("wrote " + dest);
    }

    public static void main(String[] args) throws Exception {
        Path out = Paths.get(args[0]).toAbsolutePath();
        write(out.resolve("kryo"), Types.GENERIC(Model.ValuePojo.class));
        write(out.resolve("pojo"), Types.POJO(Model.ValuePojo.class));
        System.exit(0);
    }
}
