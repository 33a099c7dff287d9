"""Spark over savepoints: read any savepoint's tables as DataFrames and query them with SQL.

>>> from statekit.spark import spark_session, SavepointReader          # doctest: +SKIP
>>> spark = spark_session()                                             # doctest: +SKIP
>>> reader = SavepointReader.read(spark, "/savepoints/sp-7")            # doctest: +SKIP
>>> reader.read_keyed_state("counter").where("key IN (1, 2)").show()    # doctest: +SKIP
>>> reader.register("myapp"); spark.sql("SELECT * FROM myapp_counter.keyed").show()  # doctest: +SKIP

Writing (bootstrap from any DataFrame, Delta tables included; modify existing savepoints)::

    t = OperatorTransformation.bootstrap_with(df).key_by("user").columns(ValueStateDescriptor("balance", "double"))
    SavepointWriter.new_savepoint(spark, max_parallelism=128).with_operator("accounts", t).write(path)

Window state: ``reader.read_window_state(op[, WindowReaderFunction])`` reads pending windows;
``bootstrap_with(df).key_by(k).window(assigner, timestamp="ts").aggregate(...)`` writes them.
``SavepointWriter.from_existing_savepoint(spark, path).rekey(op, "upper(key)")`` re-keys an operator.

The same tables through the data source, from Python or SQL::

    spark.read.format("statekit").option("uid", "counter").option("table", "keyed").load(path)
    CREATE TEMPORARY VIEW v USING statekit OPTIONS (path '...', uid 'counter', table 'keyed')
    spark.read.format("statekit-metadata").load(path)

Options of the ``statekit`` data source
---------------------------------------
==============  ======  ==========  ===================================================================
name            type    default     meaning
==============  ======  ==========  ===================================================================
path            string  (required)  savepoint or checkpoint directory (the one holding _metadata.json)
uid             string  --          operator uid; give this or ``uid_hash``
uid_hash        string  --          operator uid hash, 32 hex chars (for operators without a uid)
table           string  ``keyed``   ``keyed``, ``timers``, or the name of an operator state
with_key_group  bool    ``false``   add the ``key_group`` column (keyed and timers tables)
trust_pickled   bool    ``false``   open the savepoint trusting pickled state (columns stay ``binary``)
==============  ======  ==========  ===================================================================

Key pruning: ``key = v``, ``key IN (...)`` and closed integer ranges of at most
`statekit.spark.filters.RANGE_ENUMERATION_LIMIT` keys read only the files of those keys' key
groups. `SavepointReader` reads keyed and timer tables with Spark's own Parquet reader and
statekit's Catalyst rule (`statekit.spark.pruning`), which prunes and verifies the files; the
``statekit`` data source above (also the fallback without a JDK) prunes through the filters
PySpark >= 4.1 passes to Python data sources. On PySpark 4.1 a
query without filters may reuse the previous query's pruned plan of the same relation; the
DataFrames `SavepointReader` returns guard against it, and `statekit.spark.datasource` shows the
SQL view recipe that does.
"""

from statekit.extras import require

# before any pyspark import: without the extra, `import statekit.spark` is a typed error naming the install
require("spark", "statekit.spark (Spark readers and writers, --engine spark, export to Delta)")

from statekit.spark.bootstrap import (
    BootstrapTransformation,
    BroadcastStateBootstrapFunction,
    KeyedBootstrapContext,
    KeyedStateBootstrapFunction,
    OperatorBootstrapContext,
    OperatorTransformation,
    StateBootstrapFunction,
)
from statekit.spark.datasource import StatekitDataSource, StatekitMetadataDataSource, register_data_sources
from statekit.spark.diff import diff, diff_operators
from statekit.spark.filters import RANGE_ENUMERATION_LIMIT
from statekit.spark.history import append_state_history
from statekit.spark.reader import SavepointReader
from statekit.spark.reader_function import KeyedStateReaderFunction, ReaderContext
from statekit.spark.session import prepare_session, spark_session
from statekit.spark.sql_bootstrap import bootstrap_sql
from statekit.spark.window_reader import WindowReaderContext, WindowReaderFunction
from statekit.spark.writer import SavepointWriter

__all__ = [
    "RANGE_ENUMERATION_LIMIT",
    "BootstrapTransformation",
    "BroadcastStateBootstrapFunction",
    "KeyedBootstrapContext",
    "KeyedStateBootstrapFunction",
    "KeyedStateReaderFunction",
    "OperatorBootstrapContext",
    "OperatorTransformation",
    "ReaderContext",
    "SavepointReader",
    "SavepointWriter",
    "StateBootstrapFunction",
    "StatekitDataSource",
    "StatekitMetadataDataSource",
    "WindowReaderContext",
    "WindowReaderFunction",
    "append_state_history",
    "bootstrap_sql",
    "diff",
    "diff_operators",
    "prepare_session",
    "register_data_sources",
    "spark_session",
]
