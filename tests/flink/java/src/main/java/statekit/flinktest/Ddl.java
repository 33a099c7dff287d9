package statekit.flinktest;

import org.apache.flink.api.common.functions.ReduceFunction;
import org.apache.flink.api.common.typeinfo.PrimitiveArrayTypeInfo;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.tuple.Tuple;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ArrayNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.JsonNodeFactory;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.flink.types.Row;

import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import java.util.*;

/**
 * statekit's Spark-SQL DDL type strings to Flink TypeInformation, and Flink values to JSON.
 *
 * <p>DDL: bigint, int, smallint, tinyint, string, double, float, boolean, binary, array&lt;T&gt;,
 * map&lt;K,V&gt;, struct&lt;a:T,...&gt; (a Row, as statekit maps it by default), plus the harness-only
 * forms tuple&lt;T,...&gt; (Flink Tuple), pojo&lt;class.Name&gt; (PojoSerializer) and
 * generic&lt;class.Name&gt; (Kryo).
 */
public final class Ddl {
    private Ddl() {}

    static final ObjectMapper M = new ObjectMapper();
    static final JsonNodeFactory F = JsonNodeFactory.instance;

    @SuppressWarnings({"rawtypes", "unchecked"})
    public static TypeInformation<Object> type(String ddl) {
        return (TypeInformation) new Parser(ddl.trim()).parse();
    }

    private static final class Parser {
        final String s;
        int i = 0;
        Parser(String s) { this.s = s; }

        TypeInformation<?> parse() {
            TypeInformation<?> t = one();
            if (i != s.length()) throw new IllegalArgumentException("trailing text in type: " + s);
            return t;
        }

        String word() {
            skip();
            int b = i;
            while (i < s.length() && (Character.isLetterOrDigit(s.charAt(i)) || "_.$".indexOf(s.charAt(i)) >= 0)) i++;
            return s.substring(b, i);
        }
        void skip() { while (i < s.length() && s.charAt(i) == ' ') i++; }
        boolean eat(char c) { skip(); if (i < s.length() && s.charAt(i) == c) { i++; return true; } return false; }
        void expect(char c) { if (!eat(c)) throw new IllegalArgumentException("expected '" + c + "' at " + i + " in " + s); }

        TypeInformation<?> one() {
            String w = word().toLowerCase(Locale.ROOT);
            switch (w) {
                case "bigint": case "long": return Types.LONG;
                case "int": case "integer": return Types.INT;
                case "smallint": return Types.SHORT;
                case "tinyint": return Types.BYTE;
                case "string": return Types.STRING;
                case "double": return Types.DOUBLE;
                case "float": return Types.FLOAT;
                case "boolean": return Types.BOOLEAN;
                case "binary": return PrimitiveArrayTypeInfo.BYTE_PRIMITIVE_ARRAY_TYPE_INFO;
                case "array": { expect('<'); TypeInformation<?> e = one(); expect('>'); return Types.LIST(e); }
                case "map": { expect('<'); TypeInformation<?> k = one(); expect(','); TypeInformation<?> v = one(); expect('>'); return Types.MAP(k, v); }
                case "struct": {
                    expect('<');
                    List<String> names = new ArrayList<>();
                    List<TypeInformation<?>> types = new ArrayList<>();
                    do { names.add(word()); expect(':'); types.add(one()); } while (eat(','));
                    expect('>');
                    return Types.ROW_NAMED(names.toArray(new String[0]), types.toArray(new TypeInformation[0]));
                }
                case "tuple": {
                    expect('<');
                    List<TypeInformation<?>> types = new ArrayList<>();
                    do { types.add(one()); } while (eat(','));
                    expect('>');
                    return Types.TUPLE(types.toArray(new TypeInformation[0]));
                }
                case "pojo": case "generic": {
                    expect('<');
                    String cls = word();
                    expect('>');
                    try {
                        Class<?> c = Class.forName(cls);
                        return w.equals("pojo") ? Types.POJO(c) : Types.GENERIC(c);
                    } catch (ClassNotFoundException e) {
                        throw new IllegalArgumentException("no class " + cls, e);
                    }
                }
                default: throw new IllegalArgumentException("unknown type '" + w + "' in " + s);
            }
        }
    }

    /** A reduce function for ReducingState of the given type: sum for numbers, concatenation otherwise. */
    @SuppressWarnings({"rawtypes", "unchecked"})
    public static ReduceFunction<Object> reducer(String ddl) {
        String t = ddl.trim().toLowerCase(Locale.ROOT);
        switch (t) {
            case "bigint": return (a, b) -> (Long) a + (Long) b;
            case "int": return (a, b) -> (Integer) a + (Integer) b;
            case "double": return (a, b) -> (Double) a + (Double) b;
            case "float": return (a, b) -> (Float) a + (Float) b;
            case "string": return (a, b) -> (String) a + b;
            default: return (a, b) -> b;
        }
    }

    /** A Flink value as JSON: Row and Tuple as arrays, POJOs and other objects by their fields. */
    public static JsonNode json(Object v) {
        if (v == null) return F.nullNode();
        if (v instanceof String) return F.textNode((String) v);
        if (v instanceof Long) return F.numberNode((Long) v);
        if (v instanceof Integer) return F.numberNode((Integer) v);
        if (v instanceof Short) return F.numberNode((Short) v);
        if (v instanceof Byte) return F.numberNode((Byte) v);
        if (v instanceof Double) return F.numberNode((Double) v);
        if (v instanceof Float) return F.numberNode((Float) v);
        if (v instanceof Boolean) return F.booleanNode((Boolean) v);
        if (v instanceof Character) return F.textNode(v.toString());
        if (v instanceof byte[]) return F.textNode(hex((byte[]) v));
        if (v instanceof Row) {
            Row r = (Row) v;
            ArrayNode a = F.arrayNode();
            for (int i = 0; i < r.getArity(); i++) a.add(json(r.getField(i)));
            return a;
        }
        if (v instanceof Tuple) {
            Tuple t = (Tuple) v;
            ArrayNode a = F.arrayNode();
            for (int i = 0; i < t.getArity(); i++) a.add(json(t.getField(i)));
            return a;
        }
        if (v instanceof Iterable) {
            ArrayNode a = F.arrayNode();
            for (Object x : (Iterable<?>) v) a.add(json(x));
            return a;
        }
        if (v instanceof Map) {
            ObjectNode o = F.objectNode();
            TreeMap<String, JsonNode> sorted = new TreeMap<>();
            for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) sorted.put(keyString(e.getKey()), json(e.getValue()));
            sorted.forEach(o::set);
            return o;
        }
        ObjectNode o = F.objectNode();
        TreeMap<String, JsonNode> fields = new TreeMap<>();
        for (Class<?> c = v.getClass(); c != null && c != Object.class; c = c.getSuperclass()) {
            for (Field f : c.getDeclaredFields()) {
                if (Modifier.isStatic(f.getModifiers())) continue;
                try {
                    f.setAccessible(true);
                    fields.putIfAbsent(f.getName(), json(f.get(v)));
                } catch (ReflectiveOperationException | RuntimeException e) {
                    fields.putIfAbsent(f.getName(), F.textNode(String.valueOf(e)));
                }
            }
        }
        fields.forEach(o::set);
        return o;
    }

    /** Map keys as JSON object keys: strings as they are, anything else as its JSON text. */
    static String keyString(Object k) {
        return k instanceof String ? (String) k : json(k).toString();
    }

    static String hex(byte[] b) {
        StringBuilder sb = new StringBuilder();
        for (byte x : b) sb.append(String.format("%02x", x));
        return sb.toString();
    }
}
