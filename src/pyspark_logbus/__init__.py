"""Lets PySpark find the `logbus` data source by name, without `logbus.spark.register(spark)`.

PySpark scans top-level modules named `pyspark_*` for a `DefaultSource` data source class.
"""

from logbus.spark.source import LogbusDataSource as DefaultSource

__all__ = ["DefaultSource"]
