"""Spark's discovery hook for the kref data source.

pyspark (>= 4.0) imports every top-level module whose name starts with
`pyspark_` and registers its `DefaultSource` under `DefaultSource.name()`,
so installing kref makes `spark.read.format("kref")` available by name.
"""

from kref.spark.source import KrefDataSource as DefaultSource

__all__ = ["DefaultSource"]
