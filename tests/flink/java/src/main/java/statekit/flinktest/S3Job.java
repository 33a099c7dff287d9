package statekit.flinktest;

import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.CheckpointListener;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.core.execution.SavepointFormatType;
import org.apache.flink.runtime.state.FunctionInitializationContext;
import org.apache.flink.runtime.state.FunctionSnapshotContext;
import org.apache.flink.streaming.api.checkpoint.CheckpointedFunction;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.streaming.api.functions.source.legacy.SourceFunction;
import org.apache.flink.util.Collector;

import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

/**
 * A real Flink job whose checkpoints and savepoint go straight to object storage: keys 0..KEYS-1 each counted
 * ROUNDS times (ValueState<Long> "count" of operator "counter", RocksDB backend with incremental checkpoints,
 * parallelism 2, max parallelism 128, no state inlined in _metadata), a retained checkpoint (RETAIN_ON_CANCELLATION) taken after every event
 * was counted, then a canonical savepoint. Args: CHECKPOINT_DIR SAVEPOINT_DIR (URIs, e.g. s3://bucket/x).
 * Prints "checkpoint N" and "savepoint URI".
 */
public final class S3Job {
    static final int KEYS = 500;
    static final int ROUNDS = 3;
    static final AtomicInteger COUNTED = new AtomicInteger();
    static final AtomicLong FULL = new AtomicLong(-1);      // a checkpoint snapshotted after every event
    static final AtomicLong COMPLETE = new AtomicLong(-1);  // ... and completed

    public static class Keys implements SourceFunction<Long> {
        private volatile boolean running = true;
        @Override public void run(SourceContext<Long> ctx) throws Exception {
            for (int r = 0; r < ROUNDS; r++) {
                for (long k = 0; k < KEYS; k++) {
                    synchronized (ctx.getCheckpointLock()) { ctx.collect(k); }
                }
            }
            while (running) Thread.sleep(20);
        }
        @Override public void cancel() { running = false; }
    }

    public static class Counter extends KeyedProcessFunction<Long, Long, Long>
            implements CheckpointedFunction, CheckpointListener {
        private transient ValueState<Long> count;
        @Override public void open(OpenContext ctx) {
            count = getRuntimeContext().getState(new ValueStateDescriptor<>("count", Types.LONG));
        }
        @Override public void processElement(Long key, Context ctx, Collector<Long> out) throws Exception {
            Long c = count.value();
            count.update(c == null ? 1L : c + 1);
            COUNTED.incrementAndGet();
        }
        @Override public void snapshotState(FunctionSnapshotContext ctx) {
            if (COUNTED.get() == KEYS * ROUNDS) FULL.compareAndSet(-1, ctx.getCheckpointId());
        }
        @Override public void initializeState(FunctionInitializationContext ctx) {}
        @Override public void notifyCheckpointComplete(long id) {
            long full = FULL.get();
            if (full >= 0 && id >= full) COMPLETE.compareAndSet(-1, full);
        }
    }

    public static void main(String[] args) throws Exception {
        String checkpoints = args[0];
        String savepoints = args[1];
        Configuration conf = new Configuration();
        conf.setString("rest.bind-address", "127.0.0.1");
        conf.setString("rest.address", "127.0.0.1");
        conf.setString("rest.bind-port", "0");
        conf.setString("restart-strategy.type", "none");
        // RocksDB with incremental checkpoints: the checkpoint's _metadata names its shared SST files by absolute
        // s3:// paths (exclusive files of full checkpoints are relative, as in savepoints)
        conf.setString("state.backend.type", "rocksdb");
        conf.setString("execution.checkpointing.incremental", "true");
        conf.setString("state.backend.incremental", "true");  // its name before Flink 2.0
        conf.setString("execution.checkpointing.interval", "300 ms");
        conf.setString("execution.checkpointing.dir", checkpoints);
        conf.setString("state.checkpoints.dir", checkpoints);  // its name before Flink 2.0
        conf.setString("execution.checkpointing.savepoint-dir", savepoints);
        conf.setString("state.savepoints.dir", savepoints);  // its name before Flink 2.0
        conf.setString("execution.checkpointing.externalized-checkpoint-retention", "RETAIN_ON_CANCELLATION");
        conf.setString("execution.checkpointing.num-retained", "1000");  // the full checkpoint stays
        conf.setString("state.checkpoints.num-retained", "1000");
        conf.setString("execution.checkpointing.data-inline-threshold", "0");  // state files, not inline bytes
        conf.setString("state.storage.fs.memory-threshold", "0");
        conf.setString("pipeline.max-parallelism", "128");
        S3.configure(conf);
        StreamExecutionEnvironment env = StreamExecutionEnvironment.createLocalEnvironment(2, conf);
        env.setMaxParallelism(128);
        env.addSource(new Keys(), "Keys", Types.LONG).setParallelism(1).uid("src")
                .keyBy(k -> k, Types.LONG).process(new Counter()).returns(Types.LONG).uid("counter").name("Counter")
                .sinkTo(new DiscardingSink<>()).uid("sink");
        JobClient client = env.executeAsync("statekit-s3-job");
        long deadline = System.currentTimeMillis() + 300_000;
        while (COMPLETE.get() < 0) {
            if (System.currentTimeMillis() > deadline) throw new IllegalStateException("no complete checkpoint in time");
            Thread.sleep(50);
        }
        String sp = client.triggerSavepoint(savepoints, SavepointFormatType.CANONICAL).get(180, TimeUnit.SECONDS);
        client.cancel().get(60, TimeUnit.SECONDS);
        System.out.println("checkpoint " + COMPLETE.get());
        System.out.println("savepoint " + sp);
        System.out.println("job " + client.getJobID());
        System.exit(0);
    }
}
