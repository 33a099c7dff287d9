package io.statekit.spark;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.expressions.And;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.AttributeReference;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.InSet;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.execution.datasources.HadoopFsRelation;
import org.apache.spark.sql.execution.datasources.InMemoryFileIndex;
import org.apache.spark.sql.execution.datasources.LogicalRelation;
import org.apache.spark.sql.execution.datasources.NoopCache$;
import org.apache.spark.sql.types.IntegerType;

import scala.Option;
import scala.jdk.javaapi.CollectionConverters;

/**
 * A Catalyst rule for statekit keyed tables read with Spark's Parquet reader: filters on
 * {@code key} keep only the files of those keys' key groups, and every file that is read is first
 * verified against the manifest.
 *
 * <p>It rewrites a statekit relation (a Parquet relation carrying {@code statekit.*} options) once,
 * marking it {@code statekit.pruned}: its file index is narrowed to the files covering the key
 * groups of the keys the filter allows (all files without such a filter), and {@code key_group IN
 * (...)} is added to the filter so Parquet skips row groups and pages of other key groups.
 */
public final class KeyGroupPruning extends Rule<LogicalPlan> {
    /** Append the rule to the session's optimizer (Spark's {@code experimental.extraOptimizations}), once. */
    public void install(SparkSession session) {
        var experimental = session.experimental();
        List<Rule<LogicalPlan>> rules = new ArrayList<>(CollectionConverters.asJava(experimental.extraOptimizations()));
        for (Rule<LogicalPlan> rule : rules) {
            if (rule.getClass().getName().equals(getClass().getName())) {
                return;
            }
        }
        rules.add(this);
        experimental.extraOptimizations_$eq(CollectionConverters.asScala(rules).toList());
    }

    @Override
    public LogicalPlan apply(LogicalPlan plan) {
        if (plan instanceof Filter filter && filter.child() instanceof LogicalRelation relation) {
            SavepointFiles files = SavepointFiles.of(relation);
            if (files != null) {
                return prune(filter, relation, files);
            }
        }
        if (plan instanceof LogicalRelation relation) {
            SavepointFiles files = SavepointFiles.of(relation);
            if (files != null) {
                return narrow(relation, files, files.entries);
            }
        }
        List<LogicalPlan> children = CollectionConverters.asJava(plan.children());
        List<LogicalPlan> rewritten = new ArrayList<>(children.size());
        boolean changed = false;
        for (LogicalPlan child : children) {
            LogicalPlan out = apply(child);
            changed |= out != child;
            rewritten.add(out);
        }
        return changed ? plan.withNewChildren(CollectionConverters.asScala(rewritten).toSeq()) : plan;
    }

    private LogicalPlan prune(Filter filter, LogicalRelation relation, SavepointFiles files) {
        Attribute key = column(relation, "key");
        Attribute keyGroup = column(relation, "key_group");
        Set<Object> keys = key != null && KeyFilter.prunable(key.dataType())
            ? new KeyFilter(key, files.rangeLimit).keysOf(filter.condition())
            : null;
        if (keys == null) {
            return new Filter(filter.condition(), narrow(relation, files, files.entries));
        }
        Set<Integer> groups = new HashSet<>();
        for (Object k : keys) {
            groups.add(KeyGroups.keyGroupOf(k, key.dataType(), files.maxParallelism));
        }
        Expression condition = filter.condition();
        if (keyGroup != null && keyGroup.dataType() instanceof IntegerType && !groups.isEmpty()) {
            Set<Object> values = new HashSet<>(groups);
            condition = new And(condition, new InSet(keyGroup, CollectionConverters.asScala(values).toSet()));
        }
        return new Filter(condition, narrow(relation, files, files.covering(groups)));
    }

    /** The relation reading only `selected` (verified first), marked as pruned. */
    private static LogicalRelation narrow(LogicalRelation relation, SavepointFiles files,
                                          List<SavepointFiles.Entry> selected) {
        files.verify(selected);
        HadoopFsRelation fs = (HadoopFsRelation) relation.relation();
        List<Path> paths = new ArrayList<>(selected.size());
        for (SavepointFiles.Entry e : selected) {
            // Built as Hadoop builds the paths it lists (URI quoting of the raw path), not from
            // java.nio's toUri(), which percent-encodes non-ASCII bytes: the file index matches
            // files by URI, and differently encoded paths would silently match nothing (0 rows).
            paths.add(new Path("file", null, files.resolve(e).toString()));
        }
        scala.collection.immutable.Map<String, String> options = fs.options().updated(SavepointFiles.PRUNED, "true");
        InMemoryFileIndex index = new InMemoryFileIndex(fs.sparkSession(), CollectionConverters.asScala(paths).toSeq(),
            options, Option.apply(fs.dataSchema()), NoopCache$.MODULE$, Option.empty(), Option.empty());
        HadoopFsRelation narrowed = new HadoopFsRelation(index, fs.partitionSchema(), fs.dataSchema(),
            fs.bucketSpec(), fs.fileFormat(), options, fs.sparkSession());
        return new LogicalRelation(narrowed, relation.output(), relation.catalogTable(), relation.isStreaming(),
            relation.stream());
    }

    private static Attribute column(LogicalRelation relation, String name) {
        for (AttributeReference a : CollectionConverters.asJava(relation.output())) {
            if (a.name().equals(name)) {
                return a;
            }
        }
        return null;
    }
}
