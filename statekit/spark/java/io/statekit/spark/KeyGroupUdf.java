package io.statekit.spark;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.api.java.UDF1;
import org.apache.spark.sql.expressions.UserDefinedFunction;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataTypes;

/**
 * A Spark UDF giving a key's Flink key group, so that statekit's Spark writers hash keys in the JVM.
 *
 * <p>Its argument is a key column of a statekit key type as Spark hands it to a Java UDF: a boxed
 * {@code Long}, {@code Integer}, {@code Short}, {@code Byte}, {@code Boolean}, {@code Double},
 * {@code Float}, a {@code String}, or a {@code Row} of those (a struct key, hashed as Flink hashes a
 * Tuple). It returns {@code null} for a null key, which the writer refuses by name. The hash is
 * {@link KeyGroups}'s (Java's own {@code hashCode()}, then Flink's murmur mixing);
 * {@code tests/spark/test_keygroup_column.py} pins it to {@code statekit.keygroups}.
 */
public final class KeyGroupUdf implements UDF1<Object, Integer> {
    private static final long serialVersionUID = 1L;
    private final int maxParallelism;

    public KeyGroupUdf(int maxParallelism) {
        this.maxParallelism = maxParallelism;
    }

    /**
     * The UDF for {@code maxParallelism} key groups, named {@code statekit_key_group} in plans.
     *
     * <p>Made here, where javac picks {@code functions.udf(UDF1, DataType)}: called through Py4J,
     * {@code udf} may resolve to the untyped Scala overload, which Spark refuses.
     */
    public static UserDefinedFunction function(int maxParallelism) {
        return functions.udf(new KeyGroupUdf(maxParallelism), DataTypes.IntegerType).withName("statekit_key_group");
    }

    @Override
    public Integer call(Object key) {
        if (key == null) {
            return null;
        }
        return KeyGroups.murmurHash(javaHash(key)) % maxParallelism;
    }

    /** Java's {@code hashCode()} of an external (Row, String, boxed number) key value, as Flink hashes it. */
    static int javaHash(Object value) {
        if (value instanceof Row row) {
            int h = 0; // Flink's Tuple.hashCode: 31 * h + field hash, 0 for a null field
            for (int i = 0; i < row.length(); i++) {
                h = 31 * h + (row.isNullAt(i) ? 0 : javaHash(row.get(i)));
            }
            return h;
        }
        return value.hashCode(); // String, Long, Integer, Short, Byte, Boolean, Double, Float: Java's own
    }
}
