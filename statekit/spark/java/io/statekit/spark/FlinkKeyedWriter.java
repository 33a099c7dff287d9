package io.statekit.spark;

import static io.statekit.spark.FlinkColumns.*;

import java.io.IOException;
import java.io.Serializable;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.UUID;

import org.apache.spark.BarrierTaskContext;
import org.apache.spark.SparkContext;
import org.apache.spark.rdd.RDD;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;

import scala.jdk.javaapi.CollectionConverters;
import scala.reflect.ClassTag$;
import scala.runtime.AbstractFunction1;

/**
 * Canonical Flink keyed-state files written by Spark tasks in the JVM, for keys and values with simple serializers.
 *
 * <p>Input: a Dataset of (key, value 1, ..., value n), one row per key, whose Spark types are exactly those of
 * the declared kinds ({@code long int short byte double float boolean string}, and {@code bytes} for values).
 * Flink's {@code _metadata} holds one keyed handle (one file) per subtask, so a subtask's key groups from every
 * input partition must meet in one file; a shuffle of the rows by subtask costs more than the whole write, so
 * instead each input partition's task keeps its rows in primitive arrays, orders them by key group (a counting
 * sort) and writes a fragment of unflagged entries plus its keys sorted per key group; one task per subtask then
 * concatenates its key groups' runs from every fragment into the subtask's file: the
 * {@code KeyedBackendSerializationProxy} bytes it is given (made by {@code statekit.format.flink}, the reference
 * for every byte statekit writes), then per key group {@code i16 stateId ([i32 klen][kg|key|00][i32 vlen][value])*
 * ... 0xFFFF}, the 0x80 flag in the first key byte of each state run's last entry (FORMAT.md section 3.5). A null
 * value means "no state" for that key and state. The driver gets back one line per subtask (name, size, key-group
 * offsets) and writes {@code _metadata} from those alone. {@code statekit.spark.flink_jvm} drives it;
 * {@code tests/spark/test_flink_jvm_writer.py} pins its bytes to the Python writer's.
 */
public final class FlinkKeyedWriter {
    private FlinkKeyedWriter() {}

    /**
     * Write the keyed files of {@code rows} into {@code dir}, one per subtask; one line per subtask
     * ({@code subtask TAB name TAB size TAB offset,offset,...}).
     *
     * @param rows (key, values...) with Spark types matching {@code keyKind} and {@code valueKinds}
     * @param proxy the exact {@code KeyedBackendSerializationProxy} bytes every file starts with
     * @param scratch a directory for the tasks' sorted keys (removed by the caller)
     * @param what the operator as named in error messages
     */
    public static List<String> write(Dataset<Row> rows, int maxParallelism, int parallelism, String keyKind,
                                     String[] valueKinds, byte[] proxy, String dir, String scratch, String what) {
        SparkContext sc = rows.sparkSession().sparkContext();
        // a barrier stage runs all its tasks at once: at most as many tasks as the cluster has slots
        int slots = Math.max(1, sc.maxNumConcurrentTasks(sc.resourceProfileManager().defaultResourceProfile()));
        String[] names = new String[parallelism];
        for (int s = 0; s < parallelism; s++) {
            names[s] = UUID.randomUUID().toString();
        }
        Task task = new Task(maxParallelism, parallelism, kind(keyKind, true), kinds(valueKinds), proxy, dir, scratch,
            names, what);
        int partitions = rows.queryExecution().toRdd().getNumPartitions();
        Dataset<Row> input = partitions > slots ? rows.repartition(slots) : rows;
        try {
            return run(input, task);
        } catch (Exception e) { // Scala throws the barrier refusal undeclared, so javac sees no checked exception
            // a plan whose RDD chain a barrier stage refuses (a union, a coalesce): one shuffle makes it plain
            if (String.valueOf(e.getMessage()).contains("Barrier execution mode does not allow")) {
                return run(rows.repartition(Math.max(1, Math.min(slots, partitions))), task);
            }
            if (e instanceof RuntimeException r) {
                throw r;
            }
            throw new IllegalStateException(e.getMessage(), e);
        }
    }

    private static List<String> run(Dataset<Row> rows, Task task) {
        RDD<String> lines = rows.queryExecution().toRdd().barrier().mapPartitions(task, false,
            ClassTag$.MODULE$.apply(String.class));
        return lines.toJavaRDD().collect();
    }

    /**
     * A statekit error raised in a task: a JDK class (the driver cannot load statekit's classes when it deserializes
     * a task's failure) whose message {@code statekit.spark.errors} turns back into the typed error.
     */
    static RuntimeException error(String errorClass, String message) {
        return new IllegalStateException("statekit.errors." + errorClass + ": " + message);
    }

    /**
     * One barrier task: its partition's rows in memory, ordered by key group; its keys sorted per key group into a
     * scratch file; then, once every task has told every other how many bytes it holds per key group and state,
     * its entries written at their final positions in the subtask files (no row is moved between tasks).
     */
    static final class Task extends AbstractFunction1<scala.collection.Iterator<InternalRow>,
            scala.collection.Iterator<String>> implements Serializable {
        private static final long serialVersionUID = 1L;
        final int maxParallelism, parallelism, keyKind, prefix;
        final int[] valueKinds;
        final byte[] proxy;
        final String dir, scratch, what;
        final String[] names;

        Task(int maxParallelism, int parallelism, int keyKind, int[] valueKinds, byte[] proxy, String dir,
             String scratch, String[] names, String what) {
            this.maxParallelism = maxParallelism;
            this.parallelism = parallelism;
            this.keyKind = keyKind;
            this.valueKinds = valueKinds;
            this.proxy = proxy;
            this.dir = dir;
            this.scratch = scratch;
            this.names = names;
            this.what = what;
            this.prefix = maxParallelism <= 128 ? 1 : 2;
        }

        int subtaskOf(int g) {
            return (int) ((long) g * parallelism / maxParallelism); // KeyGroupRangeAssignment
        }

        int rangeStart(int s) {
            return (int) (((long) s * maxParallelism + parallelism - 1) / parallelism);
        }

        @Override
        public scala.collection.Iterator<String> apply(scala.collection.Iterator<InternalRow> input) {
            BarrierTaskContext ctx = BarrierTaskContext.get();
            int me = ctx.partitionId();
            Iterator<InternalRow> rows = CollectionConverters.asJava(input);
            int capacity = 1 << 14;
            int[] kg = new int[capacity];
            Col key = new Col(keyKind, capacity);
            int states = valueKinds.length;
            Col[] values = new Col[states];
            for (int j = 0; j < states; j++) {
                values[j] = new Col(valueKinds[j], capacity);
            }
            int n = 0;
            while (rows.hasNext()) {
                InternalRow row = rows.next();
                if (n == capacity) {
                    capacity = capacity * 2;
                    kg = Arrays.copyOf(kg, capacity);
                    key.grow(capacity);
                    for (Col c : values) {
                        c.grow(capacity);
                    }
                }
                if (row.isNullAt(0)) {
                    throw error("StateTypeError", what + ": the bootstrap DataFrame holds a null key; "
                        + "Flink forbids null keys. Filter or fill the null keys first.");
                }
                int hash;
                if (keyKind == STRING) {
                    String s = row.getUTF8String(0).toString(); // UTF8String's own hashCode is not Java's
                    key.bytes[n] = stringValue(s);
                    hash = s.hashCode();
                } else {
                    key.read(row, 0, n);
                    hash = key.javaHash(n);
                }
                kg[n] = KeyGroups.murmurHash(hash) % maxParallelism;
                for (int j = 0; j < states; j++) {
                    values[j].read(row, j + 1, n);
                }
                n++;
            }
            // counting sort by key group (stable): first[g] .. first[g + 1] are key group g's rows in `order`
            int[] first = new int[maxParallelism + 1];
            for (int i = 0; i < n; i++) {
                first[kg[i] + 1]++;
            }
            for (int g = 0; g < maxParallelism; g++) {
                first[g + 1] += first[g];
            }
            int[] order = new int[n];
            int[] fill = Arrays.copyOf(first, maxParallelism);
            for (int i = 0; i < n; i++) {
                order[fill[kg[i]]++] = i;
            }
            // my keys, sorted and unique per key group, for the check across tasks; my bytes per (group, state)
            long[] keyAt = new long[maxParallelism + 1];
            Path keysPath = Paths.get(scratch, me + ".keys");
            try (FileChannel kch = FileChannel.open(keysPath, StandardOpenOption.CREATE, StandardOpenOption.WRITE,
                    StandardOpenOption.TRUNCATE_EXISTING)) {
                Out keys = new Out(kch);
                for (int g = 0; g < maxParallelism; g++) {
                    keyAt[g] = keys.position();
                    if (first[g + 1] > first[g]) {
                        sortedUniqueKeys(key, order, first[g], first[g + 1], g, keys, what);
                    }
                }
                keyAt[maxParallelism] = keys.position();
                keys.flush();
            } catch (IOException e) {
                throw ioError(keysPath, e);
            }
            long[] bytes = new long[maxParallelism * states];
            StringBuilder msg = new StringBuilder();
            for (int g = 0; g < maxParallelism; g++) {
                for (int j = 0; j < states; j++) {
                    long b = 0;
                    for (int r = first[g]; r < first[g + 1]; r++) {
                        int i = order[r];
                        if (!values[j].isNull(i)) {
                            b += 9 + prefix + key.width(i) + values[j].width(i);
                        }
                    }
                    bytes[g * states + j] = b;
                    if (b > 0) {
                        msg.append(msg.length() == 0 ? "" : ",").append(g).append(':').append(j).append(':').append(b);
                    }
                }
                if (first[g + 1] > first[g]) {
                    msg.append(msg.length() == 0 ? "" : ",").append(g).append(":k:").append(keyAt[g]).append(':')
                        .append(keyAt[g + 1]);
                }
            }
            String[] all = exchange(ctx, me, me + "\t" + msg);
            int tasks = all.length;
            long[][] byTask = new long[tasks][maxParallelism * states];
            long[][][] keyRuns = new long[maxParallelism][][];
            List<List<long[]>> keyLists = new ArrayList<>();
            for (int g = 0; g < maxParallelism; g++) {
                keyLists.add(new ArrayList<>());
            }
            for (String m : all) {
                String[] parts = m.split("\t", -1);
                int t = Integer.parseInt(parts[0]);
                for (String e : parts[1].isEmpty() ? new String[0] : parts[1].split(",")) {
                    String[] f = e.split(":");
                    int g = Integer.parseInt(f[0]);
                    if (f[1].equals("k")) {
                        keyLists.get(g).add(new long[] {t, Long.parseLong(f[2]), Long.parseLong(f[3])});
                    } else {
                        byTask[t][g * states + Integer.parseInt(f[1])] = Long.parseLong(f[2]);
                    }
                }
            }
            // the check across tasks: key groups g with g % tasks == me, where more than one task has keys
            for (int g = me; g < maxParallelism; g += tasks) {
                if (keyLists.get(g).size() > 1) {
                    checkAcross(keyLists.get(g), g);
                }
            }
            // the layout every task computes alike: per subtask file, per key group and state, where each task's
            // piece starts; I write my pieces, the first contributor the state id, the last the flag
            long[] sizes = new long[parallelism];
            long[][] offsets = new long[parallelism][];
            Map<Integer, FileChannel> open = new HashMap<>();
            ByteBuffer piece = ByteBuffer.allocateDirect(1 << 20);
            try {
                for (int s = 0; s < parallelism; s++) {
                    int start = rangeStart(s), end = rangeStart(s + 1) - 1;
                    offsets[s] = new long[end - start + 1];
                    long pos = proxy.length;
                    if (me == 0) {
                        write(open, s, ByteBuffer.wrap(proxy), 0);
                    }
                    for (int g = start; g <= end; g++) {
                        boolean any = false;
                        int firstTask = -1;
                        for (int j = 0; j < states; j++) {
                            int from = -1, to = -1;
                            for (int t = 0; t < tasks; t++) {
                                if (byTask[t][g * states + j] > 0) {
                                    from = from < 0 ? t : from;
                                    to = t;
                                }
                            }
                            if (from < 0) {
                                continue;
                            }
                            if (!any) {
                                offsets[s][g - start] = pos;
                                any = true;
                                firstTask = from;
                            }
                            if (me == from) {
                                write(open, s, ByteBuffer.allocate(2).putShort(0, (short) j), pos);
                            }
                            pos += 2;
                            for (int t = 0; t < tasks; t++) {
                                if (t == me && bytes[g * states + j] > 0) {
                                    piece = writeRun(open, s, piece, pos, g, values[j], key, order, first,
                                        me == to);
                                }
                                pos += byTask[t][g * states + j];
                            }
                        }
                        if (any) {
                            if (me == firstTask) {
                                write(open, s, ByteBuffer.allocate(2).putShort(0, (short) -1), pos);
                            }
                            pos += 2; // END_OF_KEY_GROUP_MARK
                        }
                    }
                    sizes[s] = pos;
                }
                // each task makes the files it wrote durable: a file's force() flushes every task's bytes in it, so
                // once all tasks are done (the driver's collect) every byte is on disk; the driver checks the sizes
                for (FileChannel c : open.values()) {
                    c.force(true);
                    c.close();
                }
                open.clear();
            } catch (IOException e) {
                throw ioError(Paths.get(dir), e);
            } finally {
                for (FileChannel c : open.values()) {
                    try {
                        c.close();
                    } catch (IOException ignored) {
                        // failing already
                    }
                }
            }
            List<String> out = new ArrayList<>();
            for (int s = 0; me == 0 && s < parallelism; s++) {
                StringBuilder line = new StringBuilder();
                line.append(s).append('\t').append(names[s]).append('\t').append(sizes[s]).append('\t');
                for (int i = 0; i < offsets[s].length; i++) {
                    line.append(i == 0 ? "" : ",").append(offsets[s][i]);
                }
                out.add(line.toString());
            }
            return CollectionConverters.asScala(out.iterator());
        }

        /**
         * Every task's message, this one's included: what {@code allGather} does, through files in the scratch
         * directory, because Spark's barrier sync answers in steps of one second. The barrier stage still runs every
         * task at once (so none waits for a task not started) and fails them all together.
         */
        private String[] exchange(BarrierTaskContext ctx, int me, String msg) {
            int tasks = ctx.getTaskInfos().length;
            String prefix = "counts-" + ctx.stageAttemptNumber() + "-";
            Path tmp = Paths.get(scratch, prefix + me + ".tmp");
            try {
                Files.write(tmp, msg.getBytes(StandardCharsets.UTF_8));
                Files.move(tmp, Paths.get(scratch, prefix + me), StandardCopyOption.ATOMIC_MOVE);
                String[] out = new String[tasks];
                int got = 0;
                while (got < tasks) {
                    for (int t = 0; t < tasks; t++) {
                        Path p = Paths.get(scratch, prefix + t);
                        if (out[t] == null && Files.exists(p)) {
                            out[t] = new String(Files.readAllBytes(p), StandardCharsets.UTF_8);
                            got++;
                        }
                    }
                    if (got < tasks) {
                        if (ctx.isInterrupted()) {
                            throw new IllegalStateException("task killed while waiting for the other tasks");
                        }
                        Thread.sleep(2);
                    }
                }
                return out;
            } catch (IOException e) {
                throw ioError(tmp, e);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IllegalStateException("interrupted while waiting for the other tasks", e);
            }
        }

        private void write(Map<Integer, FileChannel> open, int s, ByteBuffer b, long pos) throws IOException {
            FileChannel c = open.get(s);
            if (c == null) {
                c = FileChannel.open(Paths.get(dir, names[s]), StandardOpenOption.CREATE, StandardOpenOption.WRITE);
                open.put(s, c);
            }
            while (b.hasRemaining()) {
                pos += c.write(b, pos);
            }
        }

        /** My entries of key group g for one state at `pos`, the last flagged when no later task has any. */
        private ByteBuffer writeRun(Map<Integer, FileChannel> open, int s, ByteBuffer buf, long pos, int g, Col v,
                                    Col key, int[] order, int[] first, boolean flagLast) throws IOException {
            int lo = first[g], hi = first[g + 1];
            int last = hi - 1;
            while (v.isNull(order[last])) {
                last--;
            }
            buf.clear();
            for (int r = lo; r <= last; r++) {
                int i = order[r];
                if (v.isNull(i)) {
                    continue;
                }
                int kw = key.width(i), vw = v.width(i);
                if (buf.remaining() < 10 + prefix + kw + vw) {
                    buf.flip();
                    int size = buf.remaining();
                    write(open, s, buf, pos);
                    pos += size;
                    buf.clear();
                    if (buf.capacity() < 10 + prefix + kw + vw) {
                        buf = ByteBuffer.allocateDirect(10 + prefix + kw + vw);
                    }
                }
                buf.putInt(prefix + kw + 1);
                int flag = flagLast && r == last ? 0x80 : 0;
                if (prefix == 1) {
                    buf.put((byte) (g | flag));
                } else {
                    buf.put((byte) ((g >>> 8) | flag)).put((byte) g);
                }
                key.put(buf, i);
                buf.put((byte) 0); // VoidNamespace
                buf.putInt(vw);
                v.put(buf, i);
            }
            buf.flip();
            write(open, s, buf, pos);
            return buf;
        }

        /** No key of key group g is held by two tasks (each task's keys are sorted and unique already). */
        private void checkAcross(List<long[]> runs, int g) {
            long total = 0;
            for (long[] r : runs) {
                total += r[2] - r[1];
            }
            ByteBuffer all = ByteBuffer.allocate(Math.toIntExact(total));
            for (long[] r : runs) {
                Path p = Paths.get(scratch, r[0] + ".keys");
                try (FileChannel c = FileChannel.open(p, StandardOpenOption.READ)) {
                    ByteBuffer view = all.slice(all.position(), (int) (r[2] - r[1]));
                    long at = r[1];
                    while (view.hasRemaining()) {
                        int got = c.read(view, at);
                        if (got < 0) {
                            throw new IOException("short read of " + p);
                        }
                        at += got;
                    }
                } catch (IOException e) {
                    throw ioError(p, e);
                }
                all.position(all.position() + (int) (r[2] - r[1]));
            }
            all.flip();
            boolean dup = false;
            if (WIDTH[keyKind] > 0) {
                long[] k = new long[(int) (total / 8)];
                all.asLongBuffer().get(k);
                Arrays.sort(k); // sorted runs: merged, not re-sorted (DualPivotQuicksort finds the runs)
                for (int i = 1; i < k.length && !dup; i++) {
                    dup = k[i] == k[i - 1];
                }
            } else {
                List<byte[]> k = new ArrayList<>();
                while (all.hasRemaining()) {
                    byte[] x = new byte[all.getInt()];
                    all.get(x);
                    k.add(x);
                }
                k.sort(Arrays::compare);
                for (int i = 1; i < k.size() && !dup; i++) {
                    dup = Arrays.equals(k.get(i), k.get(i - 1));
                }
            }
            if (dup) {
                throw duplicate(what, g);
            }
        }
    }

    static RuntimeException duplicate(String what, int g) {
        return error("DuplicateKeyError", what + ": a key appears in more than one row of the bootstrap DataFrame "
            + "(key group " + g + "); the columnar path takes one row per key. Aggregate the rows per key first.");
    }

    static RuntimeException ioError(Path path, IOException e) {
        String msg = String.valueOf(e.getMessage());
        if (msg.contains("No space left") || msg.contains("Disk quota")) {  // worded as statekit.format.files words it
            return error("StorageFullError", "no space left while writing " + path + " (" + e + "); nothing was "
                + "published and the partial output was removed. Free space (or raise the quota) and retry.");
        }
        return error("SavepointWriteError", "writing " + path + " failed: " + e + "; nothing was published. Check "
            + "the target's file system, then retry.");
    }

}
