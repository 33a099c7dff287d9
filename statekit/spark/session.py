"""A local Spark session ready for statekit: Delta Lake, Arrow, this interpreter as worker Python."""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Mapping

from pyspark.sql import SparkSession

from statekit.errors import InvalidArgumentError

__all__ = ["spark_session", "prepare_session", "s3a_conf", "hadoop_version"]

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


#: URI schemes that Spark's JVM reads through Hadoop's S3A connector (``hadoop-aws``)
S3A_SCHEMES = ("s3", "s3a", "s3n")


def hadoop_version() -> str:
    """The Hadoop version of the running PySpark's jars (``hadoop-client-api-<version>.jar``; 3.4.2 for Spark 4.1.0)."""
    import pyspark

    for jar in sorted((Path(pyspark.__file__).parent / "jars").glob("hadoop-client-api-*.jar")):
        return jar.name[len("hadoop-client-api-"):-len(".jar")]
    raise InvalidArgumentError("PySpark's jars hold no hadoop-client-api jar, so the matching hadoop-aws cannot be "
                               "chosen; add org.apache.hadoop:hadoop-aws of your Spark's Hadoop to spark.jars.packages.")


def s3a_conf(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Settings that let a new session's JVM (Spark's own Parquet and Delta readers and writers) use ``s3a://``
    and ``s3://`` paths.

    ``hadoop-aws`` of PySpark's Hadoop version (`hadoop_version`), which brings the AWS SDK bundle it was built
    with, from Maven Central through ``spark.jars.packages``; ``s3://`` mapped to S3A; an S3-compatible
    endpoint with path-style access from ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL`` and the region from
    ``AWS_REGION``. Credentials are never put in the configuration: S3A's own chain finds them (the JVM's
    ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, instance and container roles).
    """
    env = os.environ if environ is None else environ
    out = {
        "spark.jars.packages": f"org.apache.hadoop:hadoop-aws:{hadoop_version()}",
        "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "spark.hadoop.fs.s3n.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
    }
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    if endpoint:
        out["spark.hadoop.fs.s3a.endpoint"] = endpoint
        out["spark.hadoop.fs.s3a.path.style.access"] = "true"  # S3-compatible stores rarely resolve bucket hosts
        out["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(endpoint.startswith("https")).lower()
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    if region:
        out["spark.hadoop.fs.s3a.endpoint.region"] = region
    return out


def _needs_s3a(paths: Iterable[Any]) -> bool:
    from statekit.format.storage import StoragePath

    for p in paths:
        text = str(p)
        scheme = p.scheme if isinstance(p, StoragePath) else text.partition("://")[0].lower() if "://" in text else ""
        if scheme in S3A_SCHEMES:
            return True
    return False


def spark_session(*, paths: Iterable[Any] = (), **conf: Any) -> SparkSession:
    """The active Spark session, or a new local one configured for statekit.

    A new session runs ``local[*]`` with Delta Lake (jars resolved from Maven Central through
    ``spark.jars.packages`` by `delta.configure_spark_with_delta_pip`), the current interpreter as
    driver and worker Python, the UI off, shuffle partitions sized for the machine and Arrow
    enabled. An already active session is reused as it is, apart from the settings statekit
    needs (`SESSION_CONF`); in both cases statekit's Python data sources are registered.

    Parameters
    ----------
    paths
        The savepoints and targets the session will work with. When one is an ``s3://``/``s3a://`` URI, a new
        session also gets Hadoop's S3A connector for Spark's JVM readers and writers (`s3a_conf`). statekit's
        own reads and writes of savepoints on object storage need no jars (each task opens the store
        through pyarrow).
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

    settings = {**_default_conf(), **{k: str(v) for k, v in conf.items()}}
    extra: list[str] = []
    if _needs_s3a(paths):
        s3a = s3a_conf()
        extra.append(s3a.pop("spark.jars.packages"))  # beside Delta's (configure_spark_with_delta_pip sets the key)
        settings = {**s3a, **settings}
    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = configure_spark_with_delta_pip(builder, extra_packages=extra or None).getOrCreate()
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
