"""statekit.backends."""
