package statekit.upgrade;

import org.apache.flink.api.common.typeinfo.TypeHint;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ArrayNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.JsonNodeFactory;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ObjectNode;

import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import java.util.*;

/**
 * The state of the 1.x -> 2.x upgrade pairs: the same classes and declarations compiled against Flink 1.20
 * and 2.3. Profile, Address and Simple are not POJOs (final fields, no no-argument constructor), so both
 * lines serialize them with Kryo (Kryo 2.24 in 1.x, Kryo 5 in 2.x); the List and Map values are declared
 * with a TypeHint, which 1.20 treats as a generic (Kryo) type.
 */
public final class UpgradeModel {
    private UpgradeModel() {}

    public static final int N_KEYS = 60;
    public static final int PARALLELISM = 2;
    public static final int MAX_PARALLELISM = 128;
    static final ObjectMapper M = new ObjectMapper();
    static final JsonNodeFactory F = JsonNodeFactory.instance;

    public enum Tier { BRONZE, SILVER, GOLD }

    public static final class Address {
        private final String city;
        private final int zip;
        private final List<String> lines;
        public Address(String city, int zip, List<String> lines) { this.city = city; this.zip = zip; this.lines = lines; }
    }

    public static final class Profile {
        private final String name;
        private final int level;
        private final long score;
        private final Tier tier;
        private final Address address;
        private final List<String> tags;
        private final Map<String, Long> counters;
        private final String nickname;
        private final Double ratio;
        private final boolean active;
        // the same objects twice in one value: Kryo writes back-references (and Kryo 2 counts enums among them)
        private final String alias;
        private final Tier previousTier;
        public Profile(String name, int level, long score, Tier tier, Address address, List<String> tags,
                       Map<String, Long> counters, String nickname, Double ratio, boolean active, String alias,
                       Tier previousTier) {
            this.name = name; this.level = level; this.score = score; this.tier = tier; this.address = address;
            this.tags = tags; this.counters = counters; this.nickname = nickname; this.ratio = ratio; this.active = active;
            this.alias = alias; this.previousTier = previousTier;
        }
    }

    /** Two plain fields only: the kind of Kryo value that survived a direct 1.20 -> 2.3 restore before. */
    public static final class Simple {
        private final int n;
        private final String s;
        public Simple(int n, String s) { this.n = n; this.s = s; }
    }

    /** What the 2.x job declares for the 1.x Scala job's case class Reading (tests/flink/upgrade-scala): a POJO. */
    public static class Reading {
        public String sensor;
        public double value;
        public long count;
        public String unit;
        public int level;
        public Reading() {}
    }

    public static String key(int i) { return "user-" + i; }

    public static Profile profile(int i) {
        Address a = i % 5 == 0 ? null
                : new Address("city-" + (i % 4), 10000 + i, i % 2 == 0 ? new ArrayList<>(List.of("line a", "line b")) : new ArrayList<>());
        String name = "name-" + i;
        List<String> tags = new ArrayList<>();
        for (int j = 0; j < i % 4; j++) tags.add("t" + j + (i == 7 ? "-ü" : ""));
        if (i % 3 == 1) tags.add(name);  // the name's instance again
        Map<String, Long> counters = new HashMap<>();
        if (i % 3 != 0) { counters.put("clicks", (long) i); counters.put("views", 2L * i - 50); }
        Tier tier = Tier.values()[i % 3];
        return new Profile(name, i % 7, i * 1000L + 3, tier, a, tags, counters,
                i % 2 == 0 ? null : "nick-" + i, i % 4 == 0 ? null : i / 8.0, i % 2 == 1,
                i % 3 == 0 ? name : i % 3 == 1 ? null : "alias-" + i, i % 4 == 3 ? null : Tier.values()[(i / 2) % 3]);
    }

    public static List<String> recent(int i) {
        List<String> l = new ArrayList<>();
        for (int j = 0; j <= i % 5; j++) l.add("e" + (i + j) + (i == 3 ? "-ÿ€" : ""));
        return l;
    }

    public static Map<String, Integer> totals(int i) {
        Map<String, Integer> m = new HashMap<>();
        m.put("a", i);
        if (i % 2 == 0) m.put("b", -i);
        if (i % 3 == 0) m.put("long-key-" + i, i * 100000);
        return m;
    }

    public static Simple simple(int i) { return new Simple(i, "s" + i); }

    public static final TypeInformation<Profile> PROFILE = TypeInformation.of(Profile.class);
    public static final TypeInformation<List<String>> RECENT = TypeInformation.of(new TypeHint<List<String>>() {});
    public static final TypeInformation<Map<String, Integer>> TOTALS = TypeInformation.of(new TypeHint<Map<String, Integer>>() {});
    public static final TypeInformation<Simple> SIMPLE = TypeInformation.of(Simple.class);
    public static final TypeInformation<Long> COUNT = Types.LONG;
    /** States kept as ListState (of their declared element type); the others are ValueStates. */
    public static final Set<String> LIST_STATES = Set.of("visits");
    /** States kept as MapState with String keys (of their declared value type). */
    public static final Set<String> MAP_STATES = Set.of("by_tag");

    /** uid -> state name -> its type (what the job declares). */
    public static Map<String, Map<String, TypeInformation<?>>> states() {
        Map<String, Map<String, TypeInformation<?>>> m = new LinkedHashMap<>();
        m.put("profiles", new LinkedHashMap<>(Map.of("profile", PROFILE)));
        Map<String, TypeInformation<?>> lists = new LinkedHashMap<>();
        lists.put("recent", RECENT);
        lists.put("totals", TOTALS);
        m.put("lists", lists);
        Map<String, TypeInformation<?>> simple = new LinkedHashMap<>();
        simple.put("count", COUNT);
        simple.put("simple", SIMPLE);
        m.put("simple", simple);
        Map<String, TypeInformation<?>> history = new LinkedHashMap<>();
        history.put("visits", PROFILE);  // a ListState<Profile> (LIST_STATES)
        history.put("by_tag", PROFILE);  // a MapState<String, Profile> (MAP_STATES)
        m.put("history", history);
        return m;
    }

    /** What the 2.x job declares: {@link #states()} and the 1.x Scala job's operator "readings". */
    public static Map<String, Map<String, TypeInformation<?>>> allStates() {
        Map<String, Map<String, TypeInformation<?>>> m = states();
        Map<String, TypeInformation<?>> readings = new LinkedHashMap<>();
        readings.put("reading", Types.POJO(Reading.class));
        readings.put("last", Types.LONG);
        m.put("readings", readings);
        return m;
    }

    /** What key i holds in state `name` (the write job's values). */
    public static Object value(String name, int i) {
        switch (name) {
            case "profile": return profile(i);
            case "recent": return recent(i);
            case "totals": return totals(i);
            case "count": return (long) i * 3;
            case "simple": return simple(i);
            case "by_tag": {
                Map<String, Profile> m = new HashMap<>();
                for (int j = 0; j <= i % 3; j++) m.put("tag-" + j, profile(i + 11 * j));
                return m;
            }
            case "visits": {
                List<Profile> l = new ArrayList<>();
                for (int j = 0; j <= i % 3; j++) l.add(profile(i + 7 * j));
                return l;
            }
            default: throw new IllegalArgumentException(name);
        }
    }

    /** A value as JSON: objects by their declared fields (sorted by name), enums by name, maps with sorted keys. */
    public static JsonNode json(Object v) {
        if (v == null) return F.nullNode();
        if (v instanceof String) return F.textNode((String) v);
        if (v instanceof Integer || v instanceof Long || v instanceof Short || v instanceof Byte) return F.numberNode(((Number) v).longValue());
        if (v instanceof Double || v instanceof Float) return F.numberNode(((Number) v).doubleValue());
        if (v instanceof Boolean) return F.booleanNode((Boolean) v);
        if (v instanceof Enum) return F.textNode(((Enum<?>) v).name());
        if (v instanceof Collection) {
            ArrayNode a = F.arrayNode();
            for (Object x : (Collection<?>) v) a.add(json(x));
            return a;
        }
        if (v instanceof Map) {
            TreeMap<String, JsonNode> m = new TreeMap<>();
            for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) m.put(String.valueOf(e.getKey()), json(e.getValue()));
            ObjectNode o = F.objectNode();
            m.forEach(o::set);
            return o;
        }
        if (v.getClass().isArray() || v.getClass().getName().startsWith("java.")) return F.textNode(String.valueOf(v));
        TreeMap<String, JsonNode> fields = new TreeMap<>();
        for (Class<?> c = v.getClass(); c != null && c != Object.class; c = c.getSuperclass()) {
            for (Field f : c.getDeclaredFields()) {
                if (Modifier.isStatic(f.getModifiers()) || Modifier.isTransient(f.getModifiers())) continue;
                try {
                    f.setAccessible(true);
                    fields.put(f.getName(), json(f.get(v)));
                } catch (IllegalAccessException e) {
                    throw new IllegalStateException(e);
                }
            }
        }
        ObjectNode o = F.objectNode();
        fields.forEach(o::set);
        return o;
    }
}
