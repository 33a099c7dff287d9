package io.statekit.spark;

/**
 * A statekit error raised on the JVM. Its message starts with the Python class name
 * ({@code statekit.errors.ChecksumMismatchError: ...}), which {@code statekit.spark.errors}
 * turns back into that typed error on the Python driver.
 */
final class StatekitException extends RuntimeException {
    StatekitException(String errorClass, String message) {
        super("statekit.errors." + errorClass + ": " + message);
    }
}
