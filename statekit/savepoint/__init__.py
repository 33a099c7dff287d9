"""statekit.savepoint."""
