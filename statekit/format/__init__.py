"""On-disk formats, below both engines: statekit's own and Flink's (`statekit.format.flink`)."""
