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
 * <p>Args: BOOTSTRAP TOPIC PARTITIONS RUN... where RUN is "RESTORE,EXPECT,SAVEPOINT_DIR,BEFORE,AFTER": RESTORE a
 * savepoint path to restore (or "-" to start from the earliest offsets), EXPECT the number of records the run
 * waits for, SAVEPOINT_DIR where to take a canonical savepoint of the running job once they were emitted (or
 * "-"), BEFORE and AFTER the records to append to the topic (created if new) before the job starts and after
 * the savepoint ("0=5;1=7": 5 records to partition 0, 7 to partition 1; or "-"), see {@link KafkaTool}.
 * A run waits until EXPECT records were emitted, then 2 s more (so a record too many shows), takes the
 * savepoint while the job runs, cancels it and prints, framed by "BEGIN i" / "END i", one line
 * "REC partition offset value" per emitted record, "PRODUCED partition offset value" per appended record and
 * "SAVEPOINT path". A failure prints "ERROR i text".
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

    /**
     * Cancel the job and wait until it has stopped: the cancel future completes when the request is acknowledged,
     * while the tasks may still emit a few records, which would land in the next run's {@link #EMITTED}.
     */
    static void cancel(JobClient client) throws Exception {
        java.util.concurrent.CompletableFuture<?> done = client.getJobExecutionResult();  // before the job is gone
        client.cancel().get(60, TimeUnit.SECONDS);
        try {
            done.get(60, TimeUnit.SECONDS);
        } catch (java.util.concurrent.ExecutionException cancelled) {
            // the result of a cancelled job: it has stopped
        }
    }

    static List<String> counts(String spec) {
        return spec.equals("-") ? List.of() : List.of(spec.split(";"));
    }

    static void run(int index, String bootstrap, String topic, int partitions, String[] spec) throws Exception {
        String restore = spec[0], savepointDir = spec[2];
        int expect = Integer.parseInt(spec[1]);
        EMITTED.clear();
        if (!counts(spec[3]).isEmpty()) KafkaTool.produce(bootstrap, topic, partitions, counts(spec[3]));
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
                cancel(client);
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
        if (EMITTED.size() != before.size()) {  // nothing new was in the topic: every record emitted came before it
            throw new IllegalStateException("records arrived while the savepoint was taken: " + EMITTED);
        }
        // records appended now reach the running job after its savepoint; only a restore sees them again
        if (!counts(spec[4]).isEmpty()) KafkaTool.produce(bootstrap, topic, partitions, counts(spec[4]));
        cancel(client);
        for (String r : before) System.out.println("REC " + r);
        if (savepoint != null) System.out.println("SAVEPOINT " + savepoint);
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1];
        int partitions = Integer.parseInt(args[2]);
        for (int i = 3; i < args.length; i++) {
            int index = i - 3;
            System.out.println("BEGIN " + index);
            try {
                run(index, bootstrap, topic, partitions, args[i].split(",", 5));
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
