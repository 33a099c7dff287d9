"""statekit.runtime."""
