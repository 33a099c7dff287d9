package io.statekit.spark;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Flink's key-group assignment for scalar and struct (Tuple) keys, on the JVM.
 *
 * <p>This is the JVM twin of {@code statekit.keygroups} (which is the reference for everything
 * statekit writes): a key group is {@code MathUtils.murmurHash(key.hashCode()) % maxParallelism}
 * with Java's own {@code hashCode()} of the boxed key, which is exactly what Flink computes. It
 * exists only because a Catalyst rule cannot call Python; {@code tests/spark/test_pruning.py}
 * pins it to the Python implementation with edge-case keys of every scalar type and of structs.
 */
final class KeyGroups {
    private KeyGroups() {}

    /** Java's {@code hashCode()} of a Catalyst literal value of type {@code type}, as Flink hashes the key. */
    static int javaHash(Object catalystValue, DataType type) {
        if (catalystValue instanceof UTF8String s) {
            return s.toString().hashCode(); // UTF8String's own hashCode is murmur3, not Java's
        }
        if (type instanceof StructType struct && catalystValue instanceof InternalRow row) {
            int h = 0; // Flink's Tuple.hashCode: 31 * h + field hash, 0 for a null field
            StructField[] fields = struct.fields();
            for (int i = 0; i < fields.length; i++) {
                Object field = row.isNullAt(i) ? null : row.get(i, fields[i].dataType());
                h = 31 * h + (field == null ? 0 : javaHash(field, fields[i].dataType()));
            }
            return h;
        }
        return catalystValue.hashCode(); // Long, Integer, Short, Byte, Boolean, Double, Float
    }

    /** Flink's {@code MathUtils.murmurHash(int)}. */
    static int murmurHash(int code) {
        code *= 0xcc9e2d51;
        code = Integer.rotateLeft(code, 15);
        code *= 0x1b873593;
        code = Integer.rotateLeft(code, 13);
        code = code * 5 + 0xe6546b64;
        code ^= 4;
        code ^= code >>> 16;
        code *= 0x85ebca6b;
        code ^= code >>> 13;
        code *= 0xc2b2ae35;
        code ^= code >>> 16;
        if (code >= 0) {
            return code;
        }
        return code != Integer.MIN_VALUE ? -code : 0;
    }

    static int keyGroupOf(Object catalystValue, DataType type, int maxParallelism) {
        return murmurHash(javaHash(catalystValue, type)) % maxParallelism;
    }
}
