package io.statekit.spark;

import java.io.IOException;
import java.net.URLDecoder;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.BasicFileAttributes;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.zip.CRC32;

import org.apache.spark.sql.execution.datasources.HadoopFsRelation;
import org.apache.spark.sql.execution.datasources.LogicalRelation;

import scala.collection.immutable.Map;

/**
 * The manifest's keyed files of one operator, as {@code statekit.spark.reader} passes them in the
 * options of a Parquet relation, and their verification against the manifest's sizes and CRC-32s.
 */
final class SavepointFiles {
    static final String PREFIX = "statekit.";
    static final String PRUNED = PREFIX + "pruned";

    /** One keyed file: its key groups [start, end], size, checksum and path under the savepoint. */
    record Entry(int start, int end, long bytes, String checksum, String path) {
        boolean coversAny(Set<Integer> groups) {
            for (int g : groups) {
                if (start <= g && g <= end) {
                    return true;
                }
            }
            return false;
        }
    }

    // Verified files by path, inode, size, mtime and expected checksum: a savepoint is immutable, so a
    // file is read for its checksum once per session, not once per query.
    private static final Set<String> VERIFIED = ConcurrentHashMap.newKeySet();

    final Path root;
    final String operator;
    final int maxParallelism;
    final long rangeLimit;
    final List<Entry> entries;

    private SavepointFiles(Path root, String operator, int maxParallelism, long rangeLimit, List<Entry> entries) {
        this.root = root;
        this.operator = operator;
        this.maxParallelism = maxParallelism;
        this.rangeLimit = rangeLimit;
        this.entries = entries;
    }

    /** The files of a statekit keyed relation not yet pruned, or null for any other relation. */
    static SavepointFiles of(LogicalRelation relation) {
        if (!(relation.relation() instanceof HadoopFsRelation fs)) {
            return null;
        }
        Map<String, String> options = fs.options();
        if (!options.contains(PREFIX + "files") || options.contains(PRUNED)) {
            return null;
        }
        List<Entry> entries = new ArrayList<>();
        for (String line : options.apply(PREFIX + "files").split("\n")) {
            String[] f = line.split(" ", 5);
            entries.add(new Entry(Integer.parseInt(f[0]), Integer.parseInt(f[1]), Long.parseLong(f[2]), f[3],
                URLDecoder.decode(f[4], StandardCharsets.UTF_8)));
        }
        return new SavepointFiles(Paths.get(options.apply(PREFIX + "savepoint")), options.apply(PREFIX + "operator"),
            Integer.parseInt(options.apply(PREFIX + "max_parallelism")),
            Long.parseLong(options.apply(PREFIX + "range_limit")), entries);
    }

    List<Entry> covering(Set<Integer> groups) {
        List<Entry> out = new ArrayList<>();
        for (Entry e : entries) {
            if (e.coversAny(groups)) {
                out.add(e);
            }
        }
        return out;
    }

    Path resolve(Entry e) {
        Path full = root.resolve(e.path()).normalize();
        if (!full.startsWith(root.normalize())) {
            throw new StatekitException("UnsafePathError", root + ": manifest path " + e.path()
                + " leaves the savepoint directory; refusing to read it. The manifest was tampered with.");
        }
        return full;
    }

    /** Check each file's existence, size and CRC-32 against the manifest (messages as statekit.format.files). */
    void verify(Collection<Entry> files) {
        for (Entry e : files) {
            Path full = resolve(e);
            BasicFileAttributes attrs;
            try {
                attrs = Files.readAttributes(full, BasicFileAttributes.class);
            } catch (NoSuchFileException missing) {
                throw new StatekitException("CorruptSavepointError", root + ": file " + e.path()
                    + " listed in the manifest is missing. The savepoint is incomplete; restore the file or use"
                    + " another savepoint.");
            } catch (IOException io) {
                throw new StatekitException("CorruptSavepointError", root + ": file " + e.path()
                    + " cannot be read (" + io + "). Restore the file or use another savepoint.");
            }
            if (!attrs.isRegularFile()) {
                throw new StatekitException("CorruptSavepointError", root + ": " + e.path()
                    + " should be a file but is a directory or under a file.");
            }
            if (attrs.size() != e.bytes()) {
                throw new StatekitException("CorruptSavepointError", root + ": file " + e.path() + " has "
                    + attrs.size() + " bytes but the manifest recorded " + e.bytes()
                    + " (truncated or overwritten). Restore the file or use another savepoint.");
            }
            String stamp = full + "\0" + attrs.fileKey() + "\0" + attrs.size() + "\0"
                + attrs.lastModifiedTime().to(TimeUnit.NANOSECONDS) + "\0" + e.checksum();
            if (VERIFIED.contains(stamp)) {
                continue;
            }
            String actual = crc32(full, e);
            if (!actual.equals(e.checksum())) {
                throw new StatekitException("ChecksumMismatchError", root + ": file " + e.path() + " has checksum "
                    + actual + " but the manifest recorded " + e.checksum()
                    + "; its content was altered. Restore the file or use another savepoint.");
            }
            VERIFIED.add(stamp);
        }
    }

    private String crc32(Path full, Entry e) {
        try (FileChannel channel = FileChannel.open(full, StandardOpenOption.READ)) {
            return String.format("crc32:%08x", crc32(channel));
        } catch (IOException io) {
            throw new StatekitException("CorruptSavepointError", root + ": file " + e.path()
                + " cannot be read (" + io + "). Restore the file or use another savepoint.");
        }
    }

    /** The CRC-32 of the channel's bytes from its position to its end (the manifest's checksum of a file). */
    static long crc32(FileChannel channel) throws IOException {
        CRC32 crc = new CRC32();
        ByteBuffer buffer = ByteBuffer.allocateDirect(8 << 20);
        while (channel.read(buffer) >= 0) {
            buffer.flip();
            crc.update(buffer);
            buffer.clear();
        }
        return crc.getValue();
    }
}
