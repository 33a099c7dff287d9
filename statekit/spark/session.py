"""A local Spark session ready for statekit: Delta Lake, Arrow, this interpreter as worker Python."""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from statekit.errors import InvalidArgumentError

__all__ = ["spark_session", "prepare_session"]

# Settings statekit needs on any session, including one the user built: Python data sources only
# see filters (key lookups prune key groups) when pushdown is on, and it is off by default in 4.1.
SESSION_CONF = {
    "spark.sql.python.filterPushdown.enabled": "true",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
}


def _default_conf() -> dict[str, str]:
    cores = os.cpu_count() or 2
    return {
        "spark.master": "local[*]",
        "spark.app.name": "statekit",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        # A shuffle partition per core (at least 4) suits local state inspection; 200 is for clusters.
        "spark.sql.shuffle.partitions": str(max(4, cores)),
        "spark.default.parallelism": str(max(4, cores)),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.driver.memory": "4g",
        # register() writes tables into the warehouse; keep them out of the working directory.
        "spark.sql.warehouse.dir": str(_session_warehouse()),
        # Keyed files are Arrow already; large batches keep the per-batch overhead off the profile.
        "spark.sql.execution.arrow.maxRecordsPerBatch": "131072",
        **SESSION_CONF,
    }


WAREHOUSE_PREFIX = "statekit-warehouse-"


def _session_warehouse() -> Path:
    """A warehouse directory for this process's session: removed when the process exits, swept by the
    next session if the process was killed (`statekit.tempdirs`)."""
    from statekit.tempdirs import owned_temp_dir

    return owned_temp_dir(WAREHOUSE_PREFIX)


def spark_session(**conf: Any) -> SparkSession:
    """The active Spark session, or a new local one configured for statekit.

    A new session runs ``local[*]`` with Delta Lake (jars resolved from Maven Central through
    ``spark.jars.packages`` by `delta.configure_spark_with_delta_pip`), the current interpreter as
    driver and worker Python, the UI off, shuffle partitions sized for the machine and Arrow
    enabled. An already active session is reused as it is, apart from the settings statekit
    needs (`SESSION_CONF`); in both cases statekit's Python data sources are registered.

    Parameters
    ----------
    **conf
        Extra Spark settings, with dots written as keys, e.g.
        ``spark_session(**{"spark.sql.shuffle.partitions": "8"})``. All apply to a new session;
        on a reused session runtime settings are set and a different value for a start-up
        setting raises `InvalidArgumentError`.

    Returns
    -------
    pyspark.sql.SparkSession
    """
    active = SparkSession.getActiveSession()
    if active is not None:
        for key, value in conf.items():
            if active.conf.get(key, None) == str(value):
                continue
            if not active.conf.isModifiable(key):
                raise InvalidArgumentError(
                    f"{key} cannot be changed on the running Spark session (it is fixed at start-up); stop the "
                    "session first (spark.stop()) or leave the setting out."
                )
            active.conf.set(key, str(value))
        return prepare_session(active)
    # Workers must import statekit and pyarrow from this very environment.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from delta import configure_spark_with_delta_pip

    builder = SparkSession.builder
    for key, value in {**_default_conf(), **{k: str(v) for k, v in conf.items()}}.items():
        builder = builder.config(key, value)
    spark = configure_spark_with_delta_pip(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return prepare_session(spark)


def prepare_session(spark: SparkSession) -> SparkSession:
    """Make `spark` ready for statekit: its settings, data sources and typed-error translation."""
    from statekit.spark.datasource import register_data_sources
    from statekit.spark.errors import install_error_translation

    for key, value in SESSION_CONF.items():
        if spark.conf.get(key, None) != value:
            spark.conf.set(key, value)
    register_data_sources(spark)
    install_error_translation()
    return spark


@contextmanager
def quiet_jvm_start(enabled: bool = True):
    """While a session starts, send this process's stderr (inherited by the JVM Spark launches, which keeps
    it) to /dev/null: Ivy's resolution report and the JVM's start-up warnings stay out of a command's
    output. Errors still reach Python as exceptions. Does nothing when stderr is not a real file."""
    if not enabled:
        yield
        return
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # e.g. a test runner's captured stream
        yield
        return
    sys.stderr.flush()
    saved = os.dup(fd)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    try:
        yield
    finally:
        os.dup2(saved, fd)
        os.close(saved)
        os.close(devnull)
