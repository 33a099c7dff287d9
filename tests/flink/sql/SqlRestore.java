package statekit.flinksql;

import org.apache.flink.api.dag.Transformation;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ArrayNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.table.api.PlanReference;
import org.apache.flink.table.api.bridge.java.StreamTableEnvironment;
import org.apache.flink.table.api.internal.TableEnvironmentImpl;
import org.apache.flink.table.delegation.Planner;

import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.file.*;
import java.util.*;

/**
 * statekit's restore check for the SQL corpus job (tests/flink/sql, copied into a private copy of the
 * generator): for each task of TASKS.json ({@code [{"savepoint", "mode": default|plan, "ttl": "1 d"|null,
 * "plan": compiled plan file|null, "out"}]}) restores the savepoint into the job with unclaimed state not allowed (NO_CLAIM, no restarts),
 * lets the sources emit batch 2 and finish, and writes OUT: every sink's batch-2 changelog, and the
 * model's results after batch 1, after both batches, and over batch 2 alone. One JVM for all tasks.
 */
public class SqlRestore {
    public static void main(String[] args) throws Exception {
        JsonNode tasks = Util.M.readTree(Files.readString(Paths.get(args[0])));
        for (JsonNode task : tasks) {
            Path out = Paths.get(task.get("out").asText());
            ObjectNode result = Util.F.objectNode();
            try {
                Map<String, List<String>> log = restore(task.get("savepoint").asText(), task.get("mode").asText(),
                        task.hasNonNull("ttl") ? task.get("ttl").asText() : null,
                        task.hasNonNull("plan") ? task.get("plan").asText() : null);
                ObjectNode logs = result.putObject("changelog");
                log.forEach((k, v) -> { ArrayNode a = logs.putArray(k); v.forEach(a::add); });
            } catch (Throwable e) {
                StringBuilder why = new StringBuilder();
                for (Throwable c = e; c != null; c = c.getCause()) why.append(c).append("\n");
                result.put("error", why.toString());
                StringWriter sw = new StringWriter();
                e.printStackTrace(new PrintWriter(sw));
                result.put("trace", sw.toString());
            }
            put(result.putObject("results1"), Model.results1());
            put(result.putObject("results_all"), Model.resultsAll());
            put(result.putObject("results2"), Model.results(Model.orders2(), Model.payments2(), Long.MAX_VALUE));
            ArrayNode orders = result.putArray("orders2");   // user_name, kind, device, ts of every batch-2 order
            for (Model.Order o : Model.orders2()) { ArrayNode r = orders.addArray(); r.add(o.userName); r.add(o.kind); r.add(o.device); r.add(o.ts); }
            Files.writeString(out, Util.M.writeValueAsString(result));
            System.out.println((result.has("error") ? "FAILED " : "restored ") + task.get("savepoint").asText());
        }
        System.exit(0);
    }

    static void put(ObjectNode node, Map<String, List<String>> results) {
        results.forEach((k, v) -> { ArrayNode a = node.putArray(k); v.forEach(a::add); });
    }

    static Map<String, List<String>> restore(String savepoint, String mode, String ttl, String plan) throws Exception {
        CorpusConnector.COLLECTED.clear();
        Model.batch = 2;
        Configuration conf = new Configuration();
        conf.setString("state.backend.type", "hashmap");
        conf.setString("execution.state-recovery.path", Paths.get(savepoint).toUri().toString());
        conf.setString("execution.state-recovery.ignore-unclaimed-state", "false");
        conf.setString("execution.state-recovery.claim-mode", "NO_CLAIM");
        conf.setString("restart-strategy.type", "none");
        StreamExecutionEnvironment env = Jobs.env(conf);
        StreamTableEnvironment t = Jobs.tableEnv(env, ttl);
        if (plan == null) {
            Jobs.attach(env, t, Jobs.UidMode.valueOf(mode.toUpperCase()));
        } else {
            // the job from its compiled plan file (EXECUTE PLAN into env): compiling again in this JVM would number
            // the ExecNodes from a JVM-wide counter that earlier tasks advanced, so the uids would differ
            Jobs.ddl(t);
            Planner planner = ((TableEnvironmentImpl) t).getPlanner();
            for (Transformation<?> tr : planner.translatePlan(planner.loadPlan(PlanReference.fromFile(plan)))) {
                env.addOperator(tr);
            }
        }
        env.execute("statekit-sql-restore-check");
        Map<String, List<String>> log = new TreeMap<>();
        for (Model.Query q : Model.QUERIES) log.put(q.sink, new ArrayList<>(CorpusConnector.collected(q.sink)));
        return log;
    }
}
