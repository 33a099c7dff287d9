"""Spark Structured Streaming checkpoints (Spark 4.1): layout, state files and row encodings, decoded without a JVM."""
