"""PySpark connector for logbus topics: `spark.read.format("logbus")` with Spark's Kafka face.

    import logbus.spark
    logbus.spark.register(spark)
    df = (spark.readStream.format("logbus")
          .option("logbus.bootstrap.servers", "127.0.0.1:9092").option("subscribe", "orders").load())

Installed with the package, the source is also found by name without `register` (PySpark
looks for top-level `pyspark_*` modules with a `DefaultSource`: see `pyspark_logbus`).
PySpark is imported on first use, so `logbus.spark.pipeline` loads without it (for `--help`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["LogbusDataSource", "register"]


def register(spark: SparkSession) -> None:
    """Make `format("logbus")` available in this session."""
    from .source import LogbusDataSource

    spark.dataSource.register(LogbusDataSource)


def __getattr__(name: str) -> Any:
    if name == "LogbusDataSource":
        from .source import LogbusDataSource

        return LogbusDataSource
    raise AttributeError(name)
