package statekit.flinksql;

import org.apache.flink.configuration.ConfigOption;
import org.apache.flink.configuration.ConfigOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.core.execution.SavepointFormatType;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.datastream.DataStreamSource;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.source.legacy.SourceFunction;
import org.apache.flink.table.api.bridge.java.StreamStatementSet;
import org.apache.flink.table.api.bridge.java.StreamTableEnvironment;
import org.apache.flink.table.connector.ChangelogMode;
import org.apache.flink.table.connector.ProviderContext;
import org.apache.flink.table.connector.source.DataStreamScanProvider;
import org.apache.flink.table.connector.source.DynamicTableSource;
import org.apache.flink.table.connector.source.ScanTableSource;
import org.apache.flink.table.data.GenericRowData;
import org.apache.flink.table.data.RowData;
import org.apache.flink.table.data.StringData;
import org.apache.flink.table.factories.DynamicTableSourceFactory;
import org.apache.flink.table.factories.FactoryUtil;
import org.apache.flink.table.runtime.typeutils.InternalTypeInfo;
import org.apache.flink.table.types.logical.RowType;

import java.nio.charset.StandardCharsets;
import java.nio.file.*;
import java.util.*;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * statekit's bench job (bench/flink_sql_read.py): a real Flink SQL job, run from its compiled plan
 * (uids), over N rows with N distinct BIGINT ids and N distinct STRING names:
 * {@code GROUP BY id} and {@code GROUP BY name}, each {@code COUNT(*), SUM(amount), MAX(amount)}.
 * The source (connector {@code statekit-bench}) emits its rows, then idles; a canonical savepoint
 * is taken once it is done (the barrier follows every row), then the job is cancelled.
 *
 * <p>Args: OUT_DIR N BACKEND(hashmap|rocksdb) [TTL, e.g. "1 d": table.exec.state.ttl]. Writes OUT/savepoint and
 * OUT/plan.json.
 */
public class BenchJob {
    static final AtomicBoolean DONE = new AtomicBoolean();

    public static void main(String[] args) throws Exception {
        Path out = Paths.get(args[0]).toAbsolutePath();
        long n = Long.parseLong(args[1]);
        Configuration conf = new Configuration();
        conf.setString("state.backend.type", args.length > 2 ? args[2] : "rocksdb");
        Path work = Paths.get(System.getProperty("java.io.tmpdir"), "flink-sql-bench");
        Util.deleteTree(work);
        Files.createDirectories(work);
        conf.setString("execution.checkpointing.dir", work.resolve("chk").toUri().toString());
        StreamExecutionEnvironment env = Jobs.env(conf);
        StreamTableEnvironment t = Jobs.tableEnv(env, args.length > 3 ? args[3] : null);   // table.exec.state.ttl
        t.executeSql("CREATE TABLE events (id BIGINT, name STRING, amount BIGINT) WITH ('connector' = 'statekit-bench', "
                + "'rows' = '" + n + "')");
        t.executeSql("CREATE TABLE by_id (id BIGINT, cnt BIGINT, total BIGINT, top BIGINT) WITH ('connector' = 'blackhole')");
        t.executeSql("CREATE TABLE by_name (name STRING, cnt BIGINT, total BIGINT, top BIGINT) WITH ('connector' = 'blackhole')");
        StreamStatementSet ss = t.createStatementSet();
        ss.addInsertSql("INSERT INTO by_id SELECT id, COUNT(*), SUM(amount), MAX(amount) FROM events GROUP BY id");
        ss.addInsertSql("INSERT INTO by_name SELECT name, COUNT(*), SUM(amount), MAX(amount) FROM events GROUP BY name");
        String plan = ss.compilePlan().asJsonString();
        org.apache.flink.table.delegation.Planner planner =
                ((org.apache.flink.table.api.internal.TableEnvironmentImpl) t).getPlanner();
        for (org.apache.flink.api.dag.Transformation<?> tr : planner.translatePlan(
                planner.loadPlan(org.apache.flink.table.api.PlanReference.fromJsonString(plan)))) {
            env.addOperator(tr);
        }
        long started = System.currentTimeMillis();
        JobClient client = env.executeAsync("statekit-sql-bench");
        while (!DONE.get()) Thread.sleep(100);
        long emitted = System.currentTimeMillis();
        String sp = client.triggerSavepoint(work.resolve("sp").toUri().toString(), SavepointFormatType.CANONICAL)
                .get(3600, TimeUnit.SECONDS);
        long saved = System.currentTimeMillis();
        client.cancel().get(120, TimeUnit.SECONDS);
        Path dest = out.resolve("savepoint");
        Util.deleteTree(dest);
        Files.createDirectories(out);
        Util.copyTree(Paths.get(new java.net.URI(sp)), dest);
        Util.deleteTree(work);
        Files.writeString(out.resolve("plan.json"), plan, StandardCharsets.UTF_8);
        System.out.println("rows " + n + " processed in " + (emitted - started) + " ms, savepoint in " + (saved - emitted) + " ms");
        System.exit(0);
    }

    /** Connector {@code statekit-bench}: N rows (id i, name 'user-i', amount i % 1000), then idle. */
    public static final class Factory implements DynamicTableSourceFactory {
        static final ConfigOption<Long> ROWS = ConfigOptions.key("rows").longType().noDefaultValue();
        @Override public String factoryIdentifier() { return "statekit-bench"; }
        @Override public Set<ConfigOption<?>> requiredOptions() { return Set.of(ROWS); }
        @Override public Set<ConfigOption<?>> optionalOptions() { return Set.of(); }

        @Override
        public DynamicTableSource createDynamicTableSource(Context context) {
            FactoryUtil.TableFactoryHelper h = FactoryUtil.createTableFactoryHelper(this, context);
            h.validate();
            return new Source(h.getOptions().get(ROWS), (RowType) context.getPhysicalRowDataType().getLogicalType());
        }
    }

    static final class Source implements ScanTableSource {
        final long rows;
        final RowType type;
        Source(long rows, RowType type) { this.rows = rows; this.type = type; }
        @Override public ChangelogMode getChangelogMode() { return ChangelogMode.insertOnly(); }
        @Override public DynamicTableSource copy() { return new Source(rows, type); }
        @Override public String asSummaryString() { return "statekit-bench"; }

        @Override
        public ScanRuntimeProvider getScanRuntimeProvider(ScanContext ctx) {
            return new DataStreamScanProvider() {
                @Override
                public DataStream<RowData> produceDataStream(ProviderContext pc, StreamExecutionEnvironment env) {
                    DataStreamSource<RowData> s = env.addSource(new Gen(rows), "events", InternalTypeInfo.of(type));
                    s.setParallelism(1);
                    pc.generateUid("bench-source").ifPresent(s::uid);
                    return s;
                }
                @Override public boolean isBounded() { return false; }
            };
        }
    }

    public static final class Gen implements SourceFunction<RowData> {
        private final long rows;
        private volatile boolean running = true;
        Gen(long rows) { this.rows = rows; }

        @Override
        public void run(SourceContext<RowData> ctx) throws Exception {
            for (long i = 0; i < rows && running; i++) {
                GenericRowData r = GenericRowData.of(i, StringData.fromString("user-" + i), i % 1000);
                synchronized (ctx.getCheckpointLock()) { ctx.collect(r); }
            }
            DONE.set(true);
            while (running) Thread.sleep(20);
        }

        @Override public void cancel() { running = false; }
    }
}
