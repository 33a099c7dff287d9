"""Shared fixtures: one Spark session for the whole test run (starting one takes seconds)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    """The test run's Spark session (`statekit.spark.spark_session`), stopped at the end."""
    from statekit.spark import spark_session

    session = spark_session(**{"spark.sql.shuffle.partitions": "4"})
    yield session
    session.stop()
