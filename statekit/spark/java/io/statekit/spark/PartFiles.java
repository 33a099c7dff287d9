package io.statekit.spark;

import java.io.IOException;
import java.io.Serializable;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.Arrays;
import java.util.List;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.parquet.column.ColumnDescriptor;
import org.apache.parquet.column.ColumnReader;
import org.apache.parquet.column.impl.ColumnReadStoreImpl;
import org.apache.parquet.column.page.PageReadStore;
import org.apache.parquet.column.statistics.Statistics;
import org.apache.parquet.example.data.simple.convert.GroupRecordConverter;
import org.apache.parquet.hadoop.ParquetFileReader;
import org.apache.parquet.hadoop.metadata.BlockMetaData;
import org.apache.parquet.hadoop.metadata.ColumnChunkMetaData;
import org.apache.parquet.hadoop.util.HadoopInputFile;
import org.apache.parquet.io.api.Binary;
import org.apache.parquet.schema.MessageType;
import org.apache.parquet.schema.PrimitiveComparator;
import org.apache.parquet.schema.PrimitiveType.PrimitiveTypeName;
import org.apache.parquet.schema.Types;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.api.java.function.Function;

/**
 * Describes the Parquet parts Spark's writer wrote for a statekit keyed table, on the executors and
 * without Python: size and CRC-32 of the bytes (then fsynced), rows and {@code key_group} range from
 * the footer, and optionally whether a key appears twice (for keys stored as one INT32, INT64,
 * BINARY or BOOLEAN column; {@code statekit.spark.jvm_parts} checks other key types in Python).
 *
 * <p>{@link #describe} returns one line per file:
 * {@code path TAB rows TAB bytes TAB crc32-hex TAB kg-min TAB kg-max TAB duplicate}, where
 * {@code duplicate} is empty, or {@code D} followed by a repeated key (decimal for integers, UTF-8
 * for text, hex for bytes, {@code true}/{@code false}).
 */
public final class PartFiles implements Function<String, String>, Serializable {
    private static final long serialVersionUID = 1L;
    private final boolean checkKeys;
    private final boolean text;

    private PartFiles(boolean checkKeys, boolean text) {
        this.checkKeys = checkKeys;
        this.text = text;
    }

    /** Describe {@code paths} (local files), one Spark task per file. */
    public static String[] describe(JavaSparkContext jsc, String[] paths, boolean checkKeys, boolean text) {
        List<String> out = jsc.parallelize(Arrays.asList(paths), Math.max(1, paths.length))
            .map(new PartFiles(checkKeys, text)).collect();
        return out.toArray(new String[0]);
    }

    @Override
    public String call(String path) throws IOException {
        long checksum;
        long size;
        try (FileChannel ch = FileChannel.open(Paths.get(path), StandardOpenOption.READ)) {
            checksum = SavepointFiles.crc32(ch);
            size = ch.position(); // the bytes just checksummed
            ch.force(true); // durable before the manifest naming it is
        }
        Configuration conf = new Configuration(false);
        long rows = 0;
        Integer lo = null, hi = null;
        String duplicate = "";
        try (ParquetFileReader reader = ParquetFileReader.open(
                HadoopInputFile.fromPath(new Path(Paths.get(path).toUri()), conf))) {
            for (BlockMetaData block : reader.getFooter().getBlocks()) {
                rows += block.getRowCount();
                if (block.getRowCount() == 0) {
                    continue;
                }
                for (ColumnChunkMetaData col : block.getColumns()) {
                    if (!col.getPath().toDotString().equals("key_group")) {
                        continue;
                    }
                    Statistics<?> st = col.getStatistics();
                    if (st == null || !st.hasNonNullValue()) {
                        throw new IOException(path + ": no key_group statistics in a row group");
                    }
                    int min = (Integer) st.genericGetMin(), max = (Integer) st.genericGetMax();
                    lo = lo == null ? min : Math.min(lo, min);
                    hi = hi == null ? max : Math.max(hi, max);
                }
            }
            if (checkKeys && rows > 0) {
                duplicate = duplicateKey(reader);
            }
        }
        return path + "\t" + rows + "\t" + size + "\t" + String.format("%08x", checksum) + "\t"
            + (lo == null ? 0 : lo) + "\t" + (hi == null ? 0 : hi) + "\t" + duplicate;
    }

    /** A key that appears twice in the file ("D" + the key), or "". */
    private String duplicateKey(ParquetFileReader reader) throws IOException {
        MessageType schema = reader.getFooter().getFileMetaData().getSchema();
        ColumnDescriptor key = schema.getColumnDescription(new String[] {"key"});
        MessageType projection = Types.buildMessage().addField(schema.getType("key")).named(schema.getName());
        reader.setRequestedSchema(projection);
        PrimitiveTypeName type = key.getPrimitiveType().getPrimitiveTypeName();
        int maxDef = key.getMaxDefinitionLevel();
        long total = reader.getRecordCount();
        if (total > Integer.MAX_VALUE - 8) {
            throw new IOException("a part of more than 2^31 rows");
        }
        long[] longs = type == PrimitiveTypeName.INT64 || type == PrimitiveTypeName.INT32 ? new long[(int) total] : null;
        Binary[] bins = type == PrimitiveTypeName.BINARY ? new Binary[(int) total] : null;
        int trues = 0, falses = 0, n = 0;
        String createdBy = reader.getFooter().getFileMetaData().getCreatedBy();
        PageReadStore pages;
        while ((pages = reader.readNextRowGroup()) != null) {
            ColumnReadStoreImpl store = new ColumnReadStoreImpl(
                pages, new GroupRecordConverter(projection).getRootConverter(), projection, createdBy);
            ColumnReader cr = store.getColumnReader(key);
            long values = cr.getTotalValueCount();
            for (long i = 0; i < values; i++) {
                if (cr.getCurrentDefinitionLevel() == maxDef) { // null keys were refused before the write
                    switch (type) {
                        case INT64: longs[n++] = cr.getLong(); break;
                        case INT32: longs[n++] = cr.getInteger(); break;
                        case BINARY: bins[n++] = cr.getBinary().copy(); break;
                        case BOOLEAN: if (cr.getBoolean()) { trues++; } else { falses++; } break;
                        default: throw new IOException("key column of type " + type + " is checked in Python");
                    }
                }
                cr.consume();
            }
        }
        if (type == PrimitiveTypeName.BOOLEAN) {
            return trues > 1 ? "Dtrue" : falses > 1 ? "Dfalse" : "";
        }
        if (longs != null) {
            long[] a = Arrays.copyOf(longs, n);
            Arrays.sort(a);
            for (int i = 1; i < a.length; i++) {
                if (a[i] == a[i - 1]) {
                    return "D" + a[i];
                }
            }
            return "";
        }
        Binary[] a = Arrays.copyOf(bins, n);
        Arrays.sort(a, PrimitiveComparator.UNSIGNED_LEXICOGRAPHICAL_BINARY_COMPARATOR);
        for (int i = 1; i < a.length; i++) {
            if (a[i].equals(a[i - 1])) {
                return "D" + (text ? new String(a[i].getBytes(), StandardCharsets.UTF_8) : hex(a[i].getBytes()));
            }
        }
        return "";
    }

    private static String hex(byte[] bytes) {
        StringBuilder sb = new StringBuilder();
        for (byte b : bytes) {
            sb.append(String.format("%02x", b & 0xff));
        }
        return sb.toString();
    }
}
