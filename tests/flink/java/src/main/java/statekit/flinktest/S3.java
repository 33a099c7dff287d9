package statekit.flinktest;

import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.fs.FileSystem;

/**
 * Flink's S3 filesystem (flink-s3-fs-hadoop, put on the classpath by the Python harness) pointed at the test's S3
 * server: endpoint, region and path-style access from STATEKIT_S3_ENDPOINT / STATEKIT_S3_REGION, credentials from
 * AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (set in the configuration in memory only, never printed).
 */
final class S3 {
    private S3() {}

    /** Configure `conf` and Flink's filesystems for the test server; does nothing without STATEKIT_S3_ENDPOINT. */
    static void configure(Configuration conf) throws Exception {
        String endpoint = System.getenv("STATEKIT_S3_ENDPOINT");
        if (endpoint == null) return;
        conf.setString("s3.endpoint", endpoint);
        conf.setString("s3.endpoint.region", System.getenv().getOrDefault("STATEKIT_S3_REGION", "us-east-1"));
        conf.setString("s3.path.style.access", "true");
        conf.setString("s3.connection.ssl.enabled", String.valueOf(endpoint.startsWith("https")));
        conf.setString("s3.access-key", System.getenv("AWS_ACCESS_KEY_ID"));
        conf.setString("s3.secret-key", System.getenv("AWS_SECRET_ACCESS_KEY"));
        FileSystem.initialize(conf, null);  // the S3 factory is found on the classpath
    }

    /** A savepoint argument as Flink's URI: URIs (s3://...) as given, local directories as file: URIs. */
    static String uri(String path) {
        return path.contains("://") ? path : new java.io.File(path).getAbsoluteFile().toURI().toString();
    }
}
