package io.statekit.spark;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

import org.apache.spark.sql.catalyst.expressions.And;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.EqualNullSafe;
import org.apache.spark.sql.catalyst.expressions.EqualTo;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GreaterThan;
import org.apache.spark.sql.catalyst.expressions.GreaterThanOrEqual;
import org.apache.spark.sql.catalyst.expressions.In;
import org.apache.spark.sql.catalyst.expressions.InSet;
import org.apache.spark.sql.catalyst.expressions.LessThan;
import org.apache.spark.sql.catalyst.expressions.LessThanOrEqual;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.expressions.Or;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.ShortType;

import scala.jdk.javaapi.CollectionConverters;

/**
 * Which keys a filter condition can possibly match: the same rule as {@code statekit.spark.filters}.
 *
 * <p>{@code key = v}, {@code key <=> v}, {@code key IN (...)} name keys exactly; conjunctions
 * intersect, disjunctions unite; a closed integer range with at most {@code rangeLimit} keys is
 * enumerated. Anything else (open ranges, casts of the key, LIKE, NOT) does not narrow the keys.
 */
final class KeyFilter {
    private final Attribute key;
    private final long rangeLimit;

    KeyFilter(Attribute key, long rangeLimit) {
        this.key = key;
        this.rangeLimit = rangeLimit;
    }

    /** The only key values (Catalyst literals) that can satisfy {@code condition}, or null for "any". */
    Set<Object> keysOf(Expression condition) {
        if (condition instanceof Or or) {
            Set<Object> left = keysOf(or.left());
            Set<Object> right = left == null ? null : keysOf(or.right());
            if (right == null) {
                return null;
            }
            left.addAll(right);
            return left;
        }
        if (condition instanceof And) {
            return conjunction(condition);
        }
        return exact(condition);
    }

    private Set<Object> conjunction(Expression condition) {
        Set<Object> keys = null;
        long low = Long.MIN_VALUE;
        long high = Long.MAX_VALUE;
        boolean closedBelow = false;
        boolean closedAbove = false;
        List<Expression> parts = new ArrayList<>();
        splitConjuncts(condition, parts);
        for (Expression part : parts) {
            Set<Object> named = keysOf(part);
            if (named != null) {
                keys = intersect(keys, named);
                continue;
            }
            long[] bound = bound(part);
            if (bound != null) {
                low = Math.max(low, bound[0]);
                high = Math.min(high, bound[1]);
                closedBelow |= bound[2] == 1;
                closedAbove |= bound[3] == 1;
            }
        }
        if (keys != null || !closedBelow || !closedAbove) {
            return keys;
        }
        keys = new HashSet<>();
        if (high < low) {
            return keys; // an empty range: no key matches
        }
        long span;
        try {
            span = Math.subtractExact(high, low);
        } catch (ArithmeticException tooWide) {
            return null;
        }
        if (span >= rangeLimit) {
            return null;
        }
        for (long i = 0; i <= span; i++) {
            keys.add(boxed(low + i));
        }
        return keys;
    }

    private static void splitConjuncts(Expression e, List<Expression> out) {
        if (e instanceof And and) {
            splitConjuncts(and.left(), out);
            splitConjuncts(and.right(), out);
        } else {
            out.add(e);
        }
    }

    private static Set<Object> intersect(Set<Object> a, Set<Object> b) {
        if (a == null) {
            return b;
        }
        a.retainAll(b);
        return a;
    }

    private boolean isKey(Expression e) {
        return e instanceof Attribute a && a.exprId().equals(key.exprId());
    }

    private static Object literal(Expression e) {
        return e instanceof Literal l && l.value() != null ? l.value() : null;
    }

    /** Keys named by one non-AND predicate, or null. */
    private Set<Object> exact(Expression e) {
        Object v = null;
        if (e instanceof EqualTo eq) {
            v = isKey(eq.left()) ? literal(eq.right()) : isKey(eq.right()) ? literal(eq.left()) : null;
        } else if (e instanceof EqualNullSafe eq) {
            v = isKey(eq.left()) ? literal(eq.right()) : isKey(eq.right()) ? literal(eq.left()) : null;
        } else if (e instanceof In in && isKey(in.value())) {
            Set<Object> out = new HashSet<>();
            for (Expression item : CollectionConverters.asJava(in.list())) {
                Object value = literal(item);
                if (value == null) {
                    if (!(item instanceof Literal)) {
                        return null; // a non-literal IN item could be anything
                    }
                    continue; // NULL in IN never matches
                }
                addKey(out, value);
            }
            return out;
        } else if (e instanceof InSet in && isKey(in.child())) {
            Set<Object> out = new HashSet<>();
            for (Object value : CollectionConverters.asJava(in.hset())) {
                if (value != null) {
                    addKey(out, value);
                }
            }
            return out;
        }
        if (v == null) {
            return null;
        }
        Set<Object> out = new HashSet<>();
        addKey(out, v);
        return out;
    }

    /** SQL equality treats 0.0 and -0.0 as equal, but their Java hash codes (and key groups) differ. */
    private static void addKey(Set<Object> out, Object value) {
        out.add(value);
        if (value instanceof Double d && d == 0.0) {
            out.add(0.0d);
            out.add(-0.0d);
        } else if (value instanceof Float f && f == 0.0f) {
            out.add(0.0f);
            out.add(-0.0f);
        }
    }

    /**
     * {low, high, lowGiven, highGiven} of an integer-key comparison: inclusive bounds, and 1 for each
     * side the comparison actually bounds (the other side is MIN/MAX_VALUE), or null.
     */
    private long[] bound(Expression e) {
        if (!isIntegral(key.dataType())) {
            return null;
        }
        if (e instanceof GreaterThanOrEqual c) {
            return atLeast(c.left(), c.right(), 0);
        } else if (e instanceof GreaterThan c) {
            return atLeast(c.left(), c.right(), 1);
        } else if (e instanceof LessThanOrEqual c) {
            return atLeast(c.right(), c.left(), 0);
        } else if (e instanceof LessThan c) {
            return atLeast(c.right(), c.left(), 1);
        }
        return null;
    }

    /** Bounds from {@code big >= small} ({@code big > small} when strict is 1). */
    private long[] atLeast(Expression big, Expression small, int strict) {
        if (isKey(big) && literal(small) instanceof Number n) {
            long v = n.longValue();
            if (strict == 1 && v == Long.MAX_VALUE) {
                return new long[] {1, 0, 1, 1}; // key > MAX: empty
            }
            return new long[] {v + strict, Long.MAX_VALUE, 1, 0};
        }
        if (isKey(small) && literal(big) instanceof Number n) {
            long v = n.longValue();
            if (strict == 1 && v == Long.MIN_VALUE) {
                return new long[] {1, 0, 1, 1}; // key < MIN: empty
            }
            return new long[] {Long.MIN_VALUE, v - strict, 0, 1};
        }
        return null;
    }

    private static boolean isIntegral(DataType t) {
        return t instanceof LongType || t instanceof IntegerType || t instanceof ShortType || t instanceof ByteType;
    }

    /** A long as the Catalyst value type of the key column. */
    private Object boxed(long v) {
        DataType t = key.dataType();
        if (t instanceof IntegerType) {
            return (int) v;
        } else if (t instanceof ShortType) {
            return (short) v;
        } else if (t instanceof ByteType) {
            return (byte) v;
        }
        return v;
    }

    static boolean prunable(DataType t) {
        if (t instanceof org.apache.spark.sql.types.StructType struct) {
            // Struct keys hash field by field (Flink's Tuple.hashCode). Float fields are left out:
            // SQL calls 0.0 and -0.0 equal inside a struct too, and expanding that is not worth it.
            for (org.apache.spark.sql.types.StructField f : struct.fields()) {
                if (f.dataType() instanceof DoubleType || f.dataType() instanceof FloatType || !prunable(f.dataType())) {
                    return false;
                }
            }
            return struct.fields().length > 0;
        }
        return isIntegral(t) || t instanceof DoubleType || t instanceof FloatType
            || t instanceof org.apache.spark.sql.types.StringType
            || t instanceof org.apache.spark.sql.types.BooleanType;
    }
}
