"""kref topics as a PySpark data source and sink: `format("kref")`.

Theory of operation: a Python data source (pyspark.sql.datasource, Spark 4)
that mirrors Spark's Kafka connector (same schema, same options with a
`kref.` client prefix). Its common case (plain connections, whole record
batches) speaks the Kafka protocol itself and moves record batches straight
between the broker and Arrow buffers (native_source.py, native_sink.py,
wire.py, two optional C extensions); everything else, and every task when
the extensions are not built, goes through librdkafka (confluent-kafka),
which stays the reference the fast paths are tested against. Both speak
only the Kafka protocol, so it works against kref or any Kafka-compatible
broker.

Registration: pyspark >= 4 looks, at the first data-source lookup of a
session, for top-level modules named `pyspark_*` exposing `DefaultSource`;
installing kref installs `pyspark_kref`, so `spark.read.format("kref")`
works with no code. `register(spark)` does the same explicitly (for a
session whose Python workers cannot see the installed package's top level,
e.g. an editable install).
"""

from __future__ import annotations


def register(spark) -> None:
    """Register `format("kref")` on this SparkSession."""
    from .source import KrefDataSource

    spark.dataSource.register(KrefDataSource)


def __getattr__(name):
    # Lazy: importing kref.spark must not need pyspark unless the source is used.
    if name == "KrefDataSource":
        from .source import KrefDataSource

        return KrefDataSource
    raise AttributeError(name)


__all__ = ["KrefDataSource", "register"]
