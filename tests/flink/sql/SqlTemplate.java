package statekit.flinksql;

import org.apache.flink.api.dag.Transformation;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.core.execution.SavepointFormatType;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.source.legacy.SourceFunction;
import org.apache.flink.streaming.api.graph.StreamGraph;
import org.apache.flink.streaming.api.graph.StreamNode;
import org.apache.flink.streaming.api.operators.AbstractUdfStreamOperator;
import org.apache.flink.streaming.api.operators.SimpleOperatorFactory;
import org.apache.flink.streaming.api.operators.StreamOperator;
import org.apache.flink.table.api.PlanReference;
import org.apache.flink.table.api.bridge.java.StreamTableEnvironment;
import org.apache.flink.table.api.internal.TableEnvironmentImpl;
import org.apache.flink.table.data.RowData;
import org.apache.flink.table.delegation.Planner;

import java.lang.reflect.Field;
import java.nio.file.*;
import java.util.concurrent.TimeUnit;

/**
 * statekit's bootstrap template for the SQL corpus job (tests/flink/sql, copied into a private copy of the
 * generator): runs the job with sources that emit nothing (the same operators, ids and serializers: only the
 * legacy source functions are swapped for idle ones), takes a canonical savepoint once every task runs, and
 * copies it to OUT. This is what a user does with an empty input (e.g. a topic read from its latest offset).
 *
 * <p>Args: OUT MODE(default|plan) [PLAN_FILE] ({@code plan}: the job runs from that compiled plan).
 */
public class SqlTemplate {
    /** Emits nothing and idles until cancelled. */
    static final class Idle implements SourceFunction<RowData> {
        private volatile boolean running = true;
        @Override public void run(SourceContext<RowData> ctx) throws Exception { while (running) Thread.sleep(20); }
        @Override public void cancel() { running = false; }
    }

    public static void main(String[] args) throws Exception {
        Path out = Paths.get(args[0]).toAbsolutePath();
        String mode = args[1];
        Configuration conf = new Configuration();
        conf.setString("state.backend.type", "hashmap");
        conf.setString("execution.checkpointing.data-inline-threshold", "0b");
        Path work = Files.createTempDirectory("statekit-sql-template");
        StreamExecutionEnvironment env = Jobs.env(conf);
        StreamTableEnvironment t = Jobs.tableEnv(env, null);
        if (mode.equals("plan")) {
            Jobs.ddl(t);
            Planner planner = ((TableEnvironmentImpl) t).getPlanner();
            for (Transformation<?> tr : planner.translatePlan(planner.loadPlan(PlanReference.fromFile(args[2])))) {
                env.addOperator(tr);
            }
        } else {
            Jobs.attach(env, t, Jobs.UidMode.valueOf(mode.toUpperCase()));
        }
        StreamGraph sg = env.getStreamGraph();
        Field f = AbstractUdfStreamOperator.class.getDeclaredField("userFunction");
        f.setAccessible(true);
        int swapped = 0;
        for (StreamNode node : sg.getStreamNodes()) {
            if (!(node.getOperatorFactory() instanceof SimpleOperatorFactory)) continue;
            StreamOperator<?> op = node.getOperator();
            if (op instanceof AbstractUdfStreamOperator && ((AbstractUdfStreamOperator<?, ?>) op).getUserFunction()
                    instanceof CorpusConnector.RowSource) {
                f.set(op, new Idle());
                swapped++;
            }
        }
        if (swapped == 0) throw new IllegalStateException("no corpus source found to make idle");
        JobClient client = env.executeAsync(sg);
        String sp = null;
        long deadline = System.currentTimeMillis() + 120_000;
        while (sp == null) {
            try {   // fails until every task runs
                sp = client.triggerSavepoint(work.resolve("sp").toUri().toString(), SavepointFormatType.CANONICAL)
                        .get(60, TimeUnit.SECONDS);
            } catch (Exception e) {
                if (System.currentTimeMillis() > deadline) throw e;
                Thread.sleep(200);
            }
        }
        client.cancel().get(60, TimeUnit.SECONDS);
        Path dest = out;
        Util.deleteTree(dest);
        Util.copyTree(Paths.get(new java.net.URI(sp)), dest);
        Util.deleteTree(work);
        System.out.println("template taken: " + dest);
        System.exit(0);
    }
}
