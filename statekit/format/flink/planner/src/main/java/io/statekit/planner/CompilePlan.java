package io.statekit.planner;

import org.apache.flink.table.api.EnvironmentSettings;
import org.apache.flink.table.api.StatementSet;
import org.apache.flink.table.api.TableEnvironment;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * A Flink SQL job's statements (stdin, UTF-8) to its compiled plan (stdout): what {@code COMPILE PLAN ... FOR
 * STATEMENT SET} writes. Every statement but the INSERTs runs as the SQL client would (CREATE, SET, USE, ...);
 * the INSERTs (bare, or inside {@code EXECUTE STATEMENT SET BEGIN ... END}) form the statement set. A statement
 * the planner refuses: its message on stderr, exit 2.
 */
public final class CompilePlan {
    private CompilePlan() {}

    public static void main(String[] args) throws Exception {
        String sql = new String(System.in.readAllBytes(), StandardCharsets.UTF_8);
        TableEnvironment t = TableEnvironment.create(EnvironmentSettings.inStreamingMode());
        StatementSet set = t.createStatementSet();
        int inserts = 0;
        String current = null;
        try {
            for (String st : split(sql)) {
                String s = st.strip();
                String head = s.toUpperCase(Locale.ROOT).replaceAll("\\s+", " ");
                if (head.startsWith("EXECUTE STATEMENT SET BEGIN")) {
                    s = s.substring(s.toUpperCase(Locale.ROOT).indexOf("BEGIN") + 5).strip();
                    head = s.toUpperCase(Locale.ROOT);
                } else if (head.equals("BEGIN STATEMENT SET") || head.equals("END")) {
                    continue;
                }
                if (s.isEmpty()) continue;
                if (head.startsWith("EXECUTE INSERT")) {
                    s = s.substring(s.toUpperCase(Locale.ROOT).indexOf("INSERT")).strip();
                    head = s.toUpperCase(Locale.ROOT);
                }
                current = s;
                java.util.regex.Matcher set1 = SET.matcher(s);
                if (set1.matches()) {   // the SQL client's SET 'key' = 'value' (TableEnvironment has no such statement)
                    t.getConfig().set(unquote(set1.group(1)), unquote(set1.group(2)));
                } else if (head.startsWith("INSERT")) {
                    set.addInsertSql(s);
                    inserts++;
                } else {
                    t.executeSql(s);
                }
            }
            if (inserts == 0) {
                System.err.println("the SQL has no INSERT statement: a job's plan is compiled from its INSERT INTO ... "
                        + "statements (with the CREATE TABLE statements they use)");
                System.exit(2);
            }
            System.out.print(set.compilePlan().asJsonString());
            System.out.flush();
            System.exit(0);
        } catch (Throwable e) {
            StringBuilder msg = new StringBuilder();
            if (current != null) {
                String first = current.strip().split("\n", 2)[0];
                msg.append("in the statement starting ").append(first.length() > 120 ? first.substring(0, 120) + "..." : first)
                   .append(":\n");
            }
            int start = msg.length();
            for (Throwable c = e; c != null && msg.length() < 4000; c = c.getCause()) {
                if (msg.length() > start) msg.append("\nCaused by: ");
                msg.append(c.getClass().getSimpleName()).append(": ").append(c.getMessage());
            }
            System.err.println(msg);
            System.exit(2);
        }
    }

    static final java.util.regex.Pattern SET = java.util.regex.Pattern.compile(
            "(?is)\\s*SET\\s+('(?:[^']|'')*'|[^\\s=]+)\\s*=\\s*('(?:[^']|'')*'|\\S+)\\s*");

    static String unquote(String s) {
        return s.startsWith("'") && s.endsWith("'") ? s.substring(1, s.length() - 1).replace("''", "'") : s;
    }

    /** Statements split at semicolons outside quotes ('', "", ``) and comments (line and block comments, dropped). */
    static List<String> split(String sql) {
        List<String> out = new ArrayList<>();
        StringBuilder cur = new StringBuilder();
        int n = sql.length();
        for (int i = 0; i < n; i++) {
            char c = sql.charAt(i);
            if (c == '-' && i + 1 < n && sql.charAt(i + 1) == '-') {
                while (i < n && sql.charAt(i) != '\n') i++;
                cur.append('\n');
            } else if (c == '/' && i + 1 < n && sql.charAt(i + 1) == '*') {
                int end = sql.indexOf("*/", i + 2);
                i = end < 0 ? n : end + 1;
                cur.append(' ');
            } else if (c == '\'' || c == '"' || c == '`') {
                int j = i + 1;
                while (j < n) {
                    if (sql.charAt(j) == c) {
                        if (j + 1 < n && sql.charAt(j + 1) == c) { j += 2; continue; }   // a doubled quote
                        break;
                    }
                    j++;
                }
                cur.append(sql, i, Math.min(j + 1, n));
                i = j;
            } else if (c == ';') {
                if (!cur.toString().isBlank()) out.add(cur.toString());
                cur.setLength(0);
            } else {
                cur.append(c);
            }
        }
        if (!cur.toString().isBlank()) out.add(cur.toString());
        return out;
    }
}
