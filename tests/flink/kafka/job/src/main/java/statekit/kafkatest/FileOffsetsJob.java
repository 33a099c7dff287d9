package statekit.kafkatest;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.connector.file.src.FileSource;
import org.apache.flink.connector.file.src.reader.TextLineInputFormat;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.core.execution.SavepointFormatType;
import org.apache.flink.core.fs.Path;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;

import java.nio.file.Paths;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * A Flink job reading a directory with a continuously monitoring {@link FileSource} (text lines, uid "file-source",
 * parallelism 2), each line handed to the test by the map "emit" of {@link OffsetsJob}.
 *
 * <p>Args: DIR RUN... where RUN is "RESTORE,EXPECT,SAVEPOINT_DIR,THROTTLE_MICROS" as for {@link OffsetsJob}: wait
 * for EXPECT lines, take a canonical savepoint of the running job (or not: "-"), cancel it, print "REC line" per
 * line emitted before the savepoint and "SAVEPOINT path", framed by "BEGIN i" / "END i" ("ERROR i text" on a
 * failure). THROTTLE_MICROS > 0 makes "emit" wait that long per line, so a large file is still being read when
 * the savepoint is taken (the reader's split then holds its position in the file); 0 waits 2 s before it.
 * RESTORE "@prev" restores the savepoint the run before took.
 */
public class FileOffsetsJob {
    /** Hands each line to the test, waiting `micros` first (backpressure on the source). */
    static class Throttled implements org.apache.flink.api.common.functions.MapFunction<String, String> {
        final long micros;

        Throttled(long micros) {
            this.micros = micros;
        }

        @Override
        public String map(String value) {
            if (micros > 0) java.util.concurrent.locks.LockSupport.parkNanos(micros * 1000);
            OffsetsJob.EMITTED.add(value);
            return value;
        }
    }

    static String previous;  // the savepoint of the run before ("@prev" restores it)

    static void run(int index, String dir, String[] spec) throws Exception {
        String restore = spec[0].equals("@prev") ? previous : spec[0], savepointDir = spec[2];
        int expect = Integer.parseInt(spec[1]);
        long throttle = Long.parseLong(spec[3]);
        OffsetsJob.EMITTED.clear();
        Configuration conf = new Configuration();
        conf.setString("rest.bind-port", "0");
        if (!restore.equals("-")) {
            conf.setString("execution.state-recovery.path", Paths.get(restore).toUri().toString());
        }
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
        env.setParallelism(2);
        env.setMaxParallelism(128);
        FileSource<String> source = FileSource.forRecordStreamFormat(new TextLineInputFormat(), new Path(dir))
                .monitorContinuously(Duration.ofMillis(100))
                .build();
        env.fromSource(source, WatermarkStrategy.noWatermarks(), "files").uid("file-source")
                .map(new Throttled(throttle)).uid("emit")
                .sinkTo(new DiscardingSink<>()).uid("discard");
        JobClient client = env.executeAsync("statekit-file-offsets-" + index);
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
        while (OffsetsJob.EMITTED.size() < expect) {
            if (System.nanoTime() > deadline) {
                OffsetsJob.cancel(client);
                throw new IllegalStateException("only " + OffsetsJob.EMITTED.size() + " of " + expect + " lines");
            }
            Thread.sleep(50);
        }
        if (throttle == 0) Thread.sleep(2000);
        List<String> before = new ArrayList<>(OffsetsJob.EMITTED);
        String savepoint = null;
        if (!savepointDir.equals("-")) {
            savepoint = client.triggerSavepoint(Paths.get(savepointDir).toUri().toString(), SavepointFormatType.CANONICAL)
                    .get(120, TimeUnit.SECONDS);
        }
        OffsetsJob.cancel(client);
        for (String r : before) System.out.println("REC " + r);
        if (savepoint != null) System.out.println("SAVEPOINT " + savepoint);
        previous = savepoint == null ? null : Paths.get(new java.net.URI(savepoint)).toString();
    }

    public static void main(String[] args) throws Exception {
        for (int i = 1; i < args.length; i++) {
            int index = i - 1;
            System.out.println("BEGIN " + index);
            try {
                run(index, args[0], args[i].split(",", 4));
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
