"""statekit.testing."""
