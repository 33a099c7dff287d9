package io.statekit.spark;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.util.Arrays;

import org.apache.spark.sql.catalyst.InternalRow;

/**
 * The columns and byte encodings {@link FlinkKeyedWriter}'s tasks use: a task's rows as primitive arrays (raw bits
 * of fixed-width values, Flink bytes of strings and byte arrays), Flink's {@code StringValue} and
 * {@code BytePrimitiveArraySerializer} encodings, Java's {@code hashCode()} of a key as Flink hashes it, and a
 * reused buffer in front of a file.
 */
final class FlinkColumns {
    private FlinkColumns() {}

    // kinds: fixed-width ones keep raw bits in a long[]; string/bytes keep their Flink bytes
    static final int LONG = 0, INT = 1, SHORT = 2, BYTE = 3, DOUBLE = 4, FLOAT = 5, BOOLEAN = 6, STRING = 7, BYTES = 8;
    static final int[] WIDTH = {8, 4, 2, 1, 8, 4, 1, -1, -1};

    static int kind(String name, boolean key) {
        int k = switch (name) {
            case "long" -> LONG;
            case "int" -> INT;
            case "short" -> SHORT;
            case "byte" -> BYTE;
            case "double" -> DOUBLE;
            case "float" -> FLOAT;
            case "boolean" -> BOOLEAN;
            case "string" -> STRING;
            case "bytes" -> BYTES;
            default -> throw new IllegalArgumentException("no JVM encoding for Flink kind " + name);
        };
        if (key && k == BYTES) {
            throw new IllegalArgumentException("byte[] keys have no stable hash in Flink");
        }
        return k;
    }

    static int[] kinds(String[] names) {
        int[] out = new int[names.length];
        for (int i = 0; i < names.length; i++) {
            out[i] = kind(names[i], false);
        }
        return out;
    }

    /** One column of a task's rows: raw bits of fixed-width values, or Flink bytes of strings/byte arrays. */
    static final class Col {
        final int kind;
        long[] bits;
        byte[][] bytes;
        boolean[] nulls;
        boolean anyNull;

        Col(int kind, int capacity) {
            this.kind = kind;
            if (WIDTH[kind] > 0) {
                bits = new long[capacity];
            } else {
                bytes = new byte[capacity][];
            }
        }

        void grow(int capacity) {
            if (bits != null) {
                bits = Arrays.copyOf(bits, capacity);
            } else {
                bytes = Arrays.copyOf(bytes, capacity);
            }
            if (nulls != null) {
                nulls = Arrays.copyOf(nulls, capacity);
            }
        }

        void read(InternalRow row, int ordinal, int i) {
            if (row.isNullAt(ordinal)) {
                if (nulls == null) {
                    nulls = new boolean[bits != null ? bits.length : bytes.length];
                }
                nulls[i] = true;
                anyNull = true;
                return;
            }
            switch (kind) {
                case LONG -> bits[i] = row.getLong(ordinal);
                case INT -> bits[i] = row.getInt(ordinal);
                case SHORT -> bits[i] = row.getShort(ordinal);
                case BYTE -> bits[i] = row.getByte(ordinal);
                case DOUBLE -> bits[i] = Double.doubleToLongBits(row.getDouble(ordinal)); // DataOutput.writeDouble
                case FLOAT -> bits[i] = Float.floatToIntBits(row.getFloat(ordinal));
                case BOOLEAN -> bits[i] = row.getBoolean(ordinal) ? 1 : 0;
                case STRING -> bytes[i] = stringValue(row.getUTF8String(ordinal).toString());
                default -> bytes[i] = byteArray(row.getBinary(ordinal));
            }
        }

        boolean isNull(int i) {
            return anyNull && nulls[i];
        }

        int width(int i) {
            return bits != null ? WIDTH[kind] : bytes[i].length;
        }

        void put(ByteBuffer out, int i) {
            long v = 0;
            if (bits != null) {
                v = bits[i];
            }
            switch (WIDTH[kind]) {
                case 8 -> out.putLong(v);
                case 4 -> out.putInt((int) v);
                case 2 -> out.putShort((short) v);
                case 1 -> out.put((byte) v);
                default -> out.put(bytes[i]);
            }
        }

        /** Java's {@code hashCode()} of the boxed key, as Flink hashes it (see KeyGroups). */
        int javaHash(int i) {
            long v = bits != null ? bits[i] : 0;
            return switch (kind) {
                case LONG, DOUBLE -> (int) (v ^ (v >>> 32)); // Long.hashCode; Double.hashCode of doubleToLongBits
                case INT, SHORT, BYTE, FLOAT -> (int) v; // Float.hashCode = floatToIntBits
                case BOOLEAN -> v != 0 ? 1231 : 1237;
                default -> throw new IllegalStateException("string keys hash from their text");
            };
        }
    }

    /** Flink's {@code StringValue.writeString}: varint(length + 1), then each UTF-16 char as a varint. */
    static byte[] stringValue(String s) {
        int n = s.length();
        byte[] out = new byte[5 + 3 * n];
        int at = 0;
        int len = n + 1;
        while (len >= 0x80) {
            out[at++] = (byte) (len | 0x80);
            len >>>= 7;
        }
        out[at++] = (byte) len;
        for (int i = 0; i < n; i++) {
            int c = s.charAt(i);
            while (c >= 0x80) {
                out[at++] = (byte) (c | 0x80);
                c >>>= 7;
            }
            out[at++] = (byte) c;
        }
        return Arrays.copyOf(out, at);
    }

    /** Flink's {@code BytePrimitiveArraySerializer}: i32 length, then the bytes. */
    static byte[] byteArray(byte[] b) {
        return ByteBuffer.allocate(4 + b.length).putInt(b.length).put(b).array();
    }

    /** Key group g's keys (rows lo..hi of `order`) sorted into `out`; a DuplicateKeyError when one repeats. */
    static void sortedUniqueKeys(Col key, int[] order, int lo, int hi, int g, Out out, String what)
            throws IOException {
        int m = hi - lo;
        if (key.bits != null) {
            long[] k = new long[m];
            for (int i = 0; i < m; i++) {
                k[i] = key.bits[order[lo + i]];
            }
            Arrays.sort(k);
            for (int i = 1; i < m; i++) {
                if (k[i] == k[i - 1]) {
                    throw FlinkKeyedWriter.duplicate(what, g);
                }
            }
            for (long x : k) {
                out.ensure(8);
                out.buf.putLong(x);
            }
            return;
        }
        byte[][] k = new byte[m][];
        for (int i = 0; i < m; i++) {
            k[i] = key.bytes[order[lo + i]];
        }
        Arrays.sort(k, Arrays::compare);
        for (int i = 1; i < m; i++) {
            if (Arrays.equals(k[i], k[i - 1])) {
                throw FlinkKeyedWriter.duplicate(what, g);
            }
        }
        for (byte[] x : k) {
            out.ensure(4 + x.length);
            out.buf.putInt(x.length).put(x);
        }
    }

    /** A reused buffer in front of a file channel. */
    static final class Out {
        final FileChannel ch;
        ByteBuffer buf = ByteBuffer.allocateDirect(1 << 22); // direct: the channel copies from it without a bounce
        long flushed;

        Out(FileChannel ch) {
            this.ch = ch;
        }

        long position() {
            return flushed + buf.position();
        }

        void ensure(int n) throws IOException {
            if (buf.remaining() < n) {
                flush();
                if (buf.capacity() < n) {
                    buf = ByteBuffer.allocate(n);
                }
            }
        }

        void flush() throws IOException {
            buf.flip();
            while (buf.hasRemaining()) {
                flushed += ch.write(buf);
            }
            buf.clear();
        }
    }
}
