package statekit.flinksql;

import org.apache.flink.api.dag.Transformation;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.core.execution.SavepointFormatType;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ArrayNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.table.api.PlanReference;
import org.apache.flink.table.api.bridge.java.StreamStatementSet;
import org.apache.flink.table.api.bridge.java.StreamTableEnvironment;
import org.apache.flink.table.api.internal.TableEnvironmentImpl;
import org.apache.flink.table.delegation.Planner;

import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.file.*;
import java.util.*;
import java.util.concurrent.TimeUnit;

/**
 * Versions of a SQL job over the corpus input, for statekit's migrate-sql tests (tests/flink/sql, copied into the
 * private generator copy of tests/flink/sql_restore.py). Each job is given by its sink DDL and INSERT statements and
 * always runs from its compiled plan (uids {@code <ExecNode id>_<transformation>}). One JVM runs every task of
 * TASKS.json:
 * <ul>
 *   <li>{@code {"action": "input", "out"}}: the model's input rows (orders, and payments' order ids and methods, of
 *       batches 1 and 2) as JSON,
 *       for the Python model of the tests;</li>
 *   <li>{@code {"action": "make", "sinks", "inserts", "expect", "out"}}: compiles the plan, runs batch 1 until every
 *       sink's materialized result equals {@code expect} (the Python model's), takes a canonical savepoint (hashmap)
 *       and writes OUT/savepoint and OUT/plan.json; with {@code "min_rows"} instead of {@code expect} (a source that
 *       reads on by itself, e.g. datagen), the savepoint is taken as soon as the sinks received that many rows;</li>
 *   <li>every task may add {@code "ddl"}: more CREATE TABLE statements (such a source's table);</li>
 *   <li>{@code {"action": "restore", "savepoint", "plan", "sinks", "out"}}: restores the savepoint into the job run
 *       from the plan file with unclaimed state not allowed (NO_CLAIM, no restarts), runs batch 2 to its end and
 *       writes every sink's changelog, or Flink's error when the restore fails.</li>
 * </ul>
 */
public class SqlMigrate {
    public static void main(String[] args) throws Exception {
        JsonNode tasks = Util.M.readTree(Files.readString(Paths.get(args[0])));
        for (JsonNode task : tasks) {
            String action = task.get("action").asText();
            Path out = Paths.get(task.get("out").asText());
            if (action.equals("input")) {
                Files.writeString(out, Util.M.writeValueAsString(input()));
            } else if (action.equals("make")) {
                make(task, out);
            } else {
                ObjectNode result = Util.F.objectNode();
                try {
                    ObjectNode logs = result.putObject("changelog");
                    restore(task).forEach((k, v) -> { ArrayNode a = logs.putArray(k); v.forEach(a::add); });
                } catch (Throwable e) {
                    StringBuilder why = new StringBuilder();
                    for (Throwable c = e; c != null; c = c.getCause()) why.append(c).append("\n");
                    result.put("error", why.toString());
                    StringWriter sw = new StringWriter();
                    e.printStackTrace(new PrintWriter(sw));
                    result.put("trace", sw.toString());
                }
                Files.writeString(out, Util.M.writeValueAsString(result));
            }
            System.out.println("done " + action + " " + out);
        }
        System.exit(0);
    }

    static ObjectNode input() {
        ObjectNode n = Util.F.objectNode();
        for (int b = 1; b <= 2; b++) {
            ArrayNode orders = n.putArray("orders" + b);
            for (Model.Order o : Model.orders(b)) {
                ObjectNode r = orders.addObject();
                r.put("order_id", o.orderId); r.put("user_name", o.userName); r.put("user_id", o.userId);
                r.put("device", o.device); r.put("kind", o.kind); r.put("amount", o.amount); r.put("ts", o.ts);
            }
            ArrayNode pays = n.putArray("payments" + b);
            for (Model.Payment p : Model.payments(b)) {
                ObjectNode r = pays.addObject();
                r.put("order_id", p.orderId); r.put("pay_method", p.method);
            }
        }
        return n;
    }

    static List<String> sinks(JsonNode task) {
        List<String> names = new ArrayList<>();
        task.get("sinks").fieldNames().forEachRemaining(names::add);
        return names;
    }

    static StreamTableEnvironment tables(StreamExecutionEnvironment env, JsonNode task) {
        StreamTableEnvironment t = Jobs.tableEnv(env);
        t.executeSql(Model.DDL_ORDERS);
        t.executeSql(Model.DDL_PAYMENTS);
        for (String sink : sinks(task)) {
            t.executeSql("CREATE TABLE " + sink + " (" + task.get("sinks").get(sink).asText()
                    + ") WITH ('connector' = 'statekit-corpus', 'sink' = '" + sink + "')");
        }
        if (task.has("ddl")) for (JsonNode ddl : task.get("ddl")) t.executeSql(ddl.asText());
        return t;
    }

    static void fromPlan(StreamExecutionEnvironment env, StreamTableEnvironment t, PlanReference plan) throws Exception {
        Planner planner = ((TableEnvironmentImpl) t).getPlanner();
        for (Transformation<?> tr : planner.translatePlan(planner.loadPlan(plan))) env.addOperator(tr);
    }

    static Map<String, List<String>> materialized(List<String> sinks) {
        Map<String, List<String>> m = new TreeMap<>();
        for (String s : sinks) {
            List<String> t = new ArrayList<>();
            String bad = Model.apply(t, new ArrayList<>(CorpusConnector.collected(s)));
            if (bad != null) t.add("RETRACTION OF A MISSING ROW: " + bad);
            m.put(s, t);
        }
        return m;
    }

    static void make(JsonNode task, Path out) throws Exception {
        CorpusConnector.COLLECTED.clear();
        Model.batch = 1;
        Configuration conf = new Configuration();
        conf.setString("state.backend.type", "hashmap");
        conf.setString("execution.checkpointing.data-inline-threshold", "0b");
        Path work = Paths.get(System.getProperty("java.io.tmpdir"), "flink-sql-migrate");
        Util.deleteTree(work);
        Files.createDirectories(work);
        conf.setString("execution.checkpointing.dir", work.resolve("chk").toUri().toString());
        StreamExecutionEnvironment env = Jobs.env(conf);
        StreamTableEnvironment t = tables(env, task);
        StreamStatementSet ss = t.createStatementSet();
        for (JsonNode insert : task.get("inserts")) ss.addInsertSql(insert.asText());
        String plan = ss.compilePlan().asJsonString();
        fromPlan(env, t, PlanReference.fromJsonString(plan));

        List<String> sinks = sinks(task);
        if (task.has("min_rows")) {   // a source that reads on by itself (datagen): a savepoint mid-way through it
            JobClient client = env.executeAsync("statekit-sql-migrate-make");
            long deadline = System.currentTimeMillis() + 180_000;
            int min = task.get("min_rows").asInt();
            while (sinks.stream().mapToInt(x -> CorpusConnector.collected(x).size()).sum() < min) {
                if (System.currentTimeMillis() > deadline) {
                    client.cancel();
                    throw new IllegalStateException("the job did not emit " + min + " rows in time");
                }
                Thread.sleep(20);
            }
            String sp = client.triggerSavepoint(work.resolve("sp").toUri().toString(), SavepointFormatType.CANONICAL)
                    .get(120, TimeUnit.SECONDS);
            client.cancel().get(60, TimeUnit.SECONDS);
            keep(sp, out, work, plan);
            return;
        }
        Map<String, List<String>> expected = new TreeMap<>();
        task.get("expect").fields().forEachRemaining(e -> {
            List<String> rows = new ArrayList<>();
            e.getValue().forEach(r -> rows.add(r.asText()));
            Collections.sort(rows);
            expected.put(e.getKey(), rows);
        });
        JobClient client = env.executeAsync("statekit-sql-migrate-make");
        long deadline = System.currentTimeMillis() + 180_000;
        while (!materialized(sinks).equals(expected)) {
            if (System.currentTimeMillis() > deadline) {
                client.cancel();
                throw new IllegalStateException("the job did not produce the model's results in time:\n"
                        + Util.diff(expected, materialized(sinks)));
            }
            Thread.sleep(50);
        }
        Thread.sleep(1500);   // the last periodic watermark; then nothing else may have been emitted
        if (!materialized(sinks).equals(expected)) {
            throw new IllegalStateException("results changed after the model's were reached:\n"
                    + Util.diff(expected, materialized(sinks)));
        }
        String sp = client.triggerSavepoint(work.resolve("sp").toUri().toString(), SavepointFormatType.CANONICAL)
                .get(120, TimeUnit.SECONDS);
        client.cancel().get(60, TimeUnit.SECONDS);
        keep(sp, out, work, plan);
    }

    /** OUT/savepoint (a copy of the savepoint at `sp`) and OUT/plan.json; the work directory removed. */
    static void keep(String sp, Path out, Path work, String plan) throws Exception {
        Path dest = out.resolve("savepoint");
        Util.deleteTree(dest);
        Files.createDirectories(out);
        Util.copyTree(Paths.get(new java.net.URI(sp)), dest);
        Util.deleteTree(work);
        Files.writeString(out.resolve("plan.json"), plan);
    }

    static Map<String, List<String>> restore(JsonNode task) throws Exception {
        CorpusConnector.COLLECTED.clear();
        Model.batch = 2;
        Configuration conf = new Configuration();
        conf.setString("state.backend.type", "hashmap");
        conf.setString("execution.state-recovery.path", Paths.get(task.get("savepoint").asText()).toUri().toString());
        conf.setString("execution.state-recovery.ignore-unclaimed-state", "false");
        conf.setString("execution.state-recovery.claim-mode", "NO_CLAIM");
        conf.setString("restart-strategy.type", "none");
        StreamExecutionEnvironment env = Jobs.env(conf);
        StreamTableEnvironment t = tables(env, task);
        fromPlan(env, t, PlanReference.fromFile(task.get("plan").asText()));
        env.execute("statekit-sql-migrate-restore");
        Map<String, List<String>> log = new TreeMap<>();
        for (String s : sinks(task)) log.put(s, new ArrayList<>(CorpusConnector.collected(s)));
        return log;
    }
}
