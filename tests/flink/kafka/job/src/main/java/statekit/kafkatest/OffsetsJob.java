package statekit.kafkatest;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.MapFunction;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.connector.kafka.source.KafkaSource;
import org.apache.flink.connector.kafka.source.enumerator.initializer.OffsetsInitializer;
import org.apache.flink.connector.kafka.source.reader.deserializer.KafkaRecordDeserializationSchema;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.core.execution.SavepointFormatType;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.util.Collector;
import org.apache.kafka.clients.consumer.ConsumerRecord;

import java.nio.charset.StandardCharsets;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;

/**
 * A Flink job reading a Kafka topic with {@link KafkaSource} (uid "kafka-source", parallelism 2), each record
 * passed on as "partition offset value" to a map (uid "emit") that hands it to the test. Runs in a local
 * MiniCluster, one run after another in one JVM.
 *
 * <p>Args: BOOTSTRAP TOPIC RUN... where RUN is "RESTORE,EXPECT,SAVEPOINT_DIR": RESTORE a savepoint path to
 * restore (or "-" to start from the earliest offsets), EXPECT the number of records the run waits for,
 * SAVEPOINT_DIR where to take a canonical savepoint of the running job once they were emitted (or "-").
 * A run waits until EXPECT records were emitted, then 2 s more (so a record too many shows), takes the
 * savepoint while the job runs, cancels it and prints, framed by "BEGIN i" / "END i", one line
 * "REC partition offset value" per emitted record and "SAVEPOINT path". A failure prints "ERROR i text".
 */
public class OffsetsJob {
    static final ConcurrentLinkedQueue<String> EMITTED = new ConcurrentLinkedQueue<>();

    /** Passes each Kafka record on as "partition offset value". */
    static class Records implements KafkaRecordDeserializationSchema<String> {
        @Override
        public void deserialize(ConsumerRecord<byte[], byte[]> r, Collector<String> out) {
            out.collect(r.partition() + " " + r.offset() + " " + new String(r.value(), StandardCharsets.UTF_8));
        }

        @Override
        public TypeInformation<String> getProducedType() {
            return TypeInformation.of(String.class);
        }
    }

    /** Hands each record to the test (the MiniCluster runs in this JVM). */
    static class Emit implements MapFunction<String, String> {
        @Override
        public String map(String value) {
            EMITTED.add(value);
            return value;
        }
    }

    static void run(int index, String bootstrap, String topic, String restore, int expect, String savepointDir)
            throws Exception {
        EMITTED.clear();
        Configuration conf = new Configuration();
        conf.setString("rest.bind-port", "0");
        if (!restore.equals("-")) {
            conf.setString("execution.state-recovery.path", Paths.get(restore).toUri().toString());
        }
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
        env.setParallelism(2);
        env.setMaxParallelism(128);
        KafkaSource<String> source = KafkaSource.<String>builder()
                .setBootstrapServers(bootstrap)
                .setTopics(topic)
                .setGroupId("statekit-offsets-test")
                .setStartingOffsets(OffsetsInitializer.earliest())
                .setDeserializer(new Records())
                .setProperty("commit.offsets.on.checkpoint", "false")
                .setProperty("partition.discovery.interval.ms", "-1")
                .build();
        env.fromSource(source, WatermarkStrategy.noWatermarks(), "kafka").uid("kafka-source")
                .map(new Emit()).uid("emit")
                .sinkTo(new DiscardingSink<>()).uid("discard");
        JobClient client = env.executeAsync("statekit-kafka-offsets-" + index);
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
        while (EMITTED.size() < expect) {
            if (System.nanoTime() > deadline) {
                client.cancel().get(60, TimeUnit.SECONDS);
                throw new IllegalStateException("only " + EMITTED.size() + " of " + expect + " records in 120 s: "
                        + EMITTED);
            }
            Thread.sleep(50);
        }
        Thread.sleep(2000);
        List<String> before = new ArrayList<>(EMITTED);
        String savepoint = null;
        if (!savepointDir.equals("-")) {
            savepoint = client.triggerSavepoint(Paths.get(savepointDir).toUri().toString(), SavepointFormatType.CANONICAL)
                    .get(120, TimeUnit.SECONDS);
        }
        client.cancel().get(60, TimeUnit.SECONDS);
        List<String> all = new ArrayList<>(EMITTED);
        if (all.size() != before.size()) {
            throw new IllegalStateException("records arrived while the savepoint was taken: " + all);
        }
        for (String r : all) System.out.println("REC " + r);
        if (savepoint != null) System.out.println("SAVEPOINT " + savepoint);
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1];
        for (int i = 2; i < args.length; i++) {
            String[] parts = args[i].split(",", 3);
            int index = i - 2;
            System.out.println("BEGIN " + index);
            try {
                run(index, bootstrap, topic, parts[0], Integer.parseInt(parts[1]), parts[2]);
                System.out.println("END " + index);
            } catch (Throwable t) {
                StringBuilder b = new StringBuilder();
                for (Throwable c = t; c != null; c = c.getCause()) b.append(c).append(" | ");
                System.out.println("ERROR " + index + " " + b.toString().replace('\n', ' '));
            }
            System.out.flush();
        }
        System.exit(0);
    }
}
