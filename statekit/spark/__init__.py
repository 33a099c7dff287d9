"""statekit.spark."""
