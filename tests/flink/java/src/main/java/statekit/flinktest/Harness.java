package statekit.flinktest;

import java.io.PrintWriter;
import java.io.StringWriter;

/** Runs one step per (savepoint, spec) pair in a single JVM and frames each pair's output lines. */
final class Harness {
    private Harness() {}

    interface Step { void run(String savepoint, String spec) throws Exception; }

    /**
     * Prints "BEGIN i" before pair i, then "END i" or "ERROR i &lt;json string of the cause chain&gt;";
     * returns the exit code: 0 when every pair ran, 1 otherwise.
     */
    static int runPairs(String[] args, Step step) {
        if (args.length == 0 || args.length % 2 != 0) {
            System.err.println("usage: (SAVEPOINT_DIR SPEC_JSON)+");
            return 2;
        }
        int failed = 0;
        for (int i = 0; i < args.length / 2; i++) {
            System.out.println("BEGIN " + i);
            try {
                step.run(args[2 * i], args[2 * i + 1]);
                System.out.println("END " + i);
            } catch (Throwable t) {
                failed++;
                StringBuilder causes = new StringBuilder();
                for (Throwable c = t; c != null; c = c.getCause()) causes.append(c).append("\n");
                StringWriter sw = new StringWriter();
                t.printStackTrace(new PrintWriter(sw));
                System.err.println(sw);
                System.out.println("ERROR " + i + " " + Ddl.F.textNode(causes.toString()));
            }
            System.out.flush();
        }
        return failed == 0 ? 0 : 1;
    }
}
