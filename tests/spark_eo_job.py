"""The streaming query of test_spark_exactly_once's kill test, run as its own process so that
the test can SIGKILL the driver (its whole process group) in the middle of micro-batches.

    python tests/spark_eo_job.py BOOTSTRAP INPUT OUTPUT CHECKPOINT [--crash-in-commit FILE]

(The test's last run, which is not killed, starts the same query, `start_query`, in the tests'
Spark session: one Spark driver fewer to start.)

It reads INPUT (300 records a micro-batch, Trigger.AvailableNow), hash-partitions the rows by key
(3 Spark partitions: a shuffle, as aggregations have) and writes them to OUTPUT exactly once.
With --crash-in-commit, the driver's first commit of a micro-batch of several tasks ends only
the first task's transaction, creates FILE and waits to be killed: the crash that leaves a
micro-batch half committed, which timing alone seldom hits.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import StructType

from logbus.spark.exactly_once import Prepared
from logbus.spark.sink import LogbusStreamWriter
from logbus.spark.source import LogbusDataSource

MAX_OFFSETS_PER_TRIGGER, SPARK_PARTITIONS = 300, 3


class HalfCommittingWriter(LogbusStreamWriter):
    """Commits one task's transaction of a micro-batch, then stops for good (until killed)."""

    marker: Path

    def commit(self, messages: list, batchId: int) -> None:
        prepared = [m for m in messages if isinstance(m, Prepared) and m.producer is not None]
        if len(prepared) < 2:
            super().commit(messages, batchId)
            return
        super().commit(prepared[:1], batchId)
        self.marker.write_text(str(batchId))
        threading.Event().wait()


class HalfCommittingSource(LogbusDataSource):
    @classmethod
    def name(cls) -> str:
        return "logbus_half_committing"

    def streamWriter(self, schema: StructType, overwrite: bool) -> LogbusStreamWriter:
        writer = HalfCommittingWriter(self.options, schema)
        writer.marker = Path(self.options["crashMarker"])
        return writer


def start_query(spark: SparkSession, bootstrap: str, source: str, target: str, checkpoint: str,
                crash_marker: str | None = None) -> StreamingQuery:
    """The query (the test's last, uninterrupted run starts it in its own session)."""
    rows = (spark.readStream.format("logbus").option("logbus.bootstrap.servers", bootstrap)
            .option("subscribe", source).option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(MAX_OFFSETS_PER_TRIGGER)).load()
            .select("key", "value").repartition(SPARK_PARTITIONS, "key"))
    writer = (rows.writeStream.format("logbus").option("logbus.bootstrap.servers", bootstrap)
              .option("topic", target).option("checkpointLocation", checkpoint))
    if crash_marker:
        writer = writer.format("logbus_half_committing").option("crashMarker", crash_marker)
    return writer.trigger(availableNow=True).start()


def main() -> int:
    parser = argparse.ArgumentParser()
    for name in ("bootstrap", "input", "output", "checkpoint"):
        parser.add_argument(name)
    parser.add_argument("--crash-in-commit", metavar="FILE")
    args = parser.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (SparkSession.builder.master("local[2]").appName("logbus-eo-kill")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", str(SPARK_PARTITIONS))
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(LogbusDataSource)
    spark.dataSource.register(HalfCommittingSource)
    query = start_query(spark, args.bootstrap, args.input, args.output, args.checkpoint, args.crash_in_commit)
    query.awaitTermination()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
