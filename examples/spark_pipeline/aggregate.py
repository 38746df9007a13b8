"""Step 2 of the example pipeline: a Spark Structured Streaming job.

Reads `events` from kref with `readStream.format("kref")`, parses the JSON,
counts events and sums amounts per page, and writes every updated total back
to the kref topic `page-totals` (key = page, value = JSON) with the kref
sink (`format("kref")`, once per micro-batch through foreachBatch, because
an aggregation emits updates and Python stream sinks take appends only). Progress lives in the checkpoint directory:
stop the job at any time and start it again with the same --checkpoint, and
it goes on where it stopped.

    python examples/spark_pipeline/aggregate.py --bootstrap 127.0.0.1:9092 --once
"""

from __future__ import annotations

import argparse
import os
import sys


def build_query(spark, bootstrap: str, checkpoint: str, once: bool):
    from pyspark.sql import functions as F

    events = (
        spark.readStream.format("kref")
        .option("kref.bootstrap.servers", bootstrap)
        .option("subscribe", "events")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", 10_000)
        .load()
    )
    schema = "user string, page string, amount double, ts_ms long"
    parsed = events.select(F.from_json(F.col("value").cast("string"), schema).alias("e"))
    totals = parsed.groupBy("e.page").agg(
        F.count(F.lit(1)).alias("events"), F.round(F.sum("e.amount"), 2).alias("amount")
    )
    out = totals.select(
        F.col("page").alias("key"),
        F.to_json(F.struct("page", "events", "amount")).alias("value"),
    )
    def publish(batch, batch_id):
        # Python data source stream sinks accept append mode only, so the
        # updated totals of each micro-batch go out through the batch sink.
        (batch.write.format("kref").option("kref.bootstrap.servers", bootstrap)
         .option("topic", "page-totals").mode("append").save())

    writer = (
        out.writeStream.foreachBatch(publish)
        .option("checkpointLocation", checkpoint)
        .outputMode("update")
    )
    writer = writer.trigger(availableNow=True) if once else writer.trigger(processingTime="5 seconds")
    return writer.start()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--checkpoint", default="./checkpoints/page-totals")
    parser.add_argument("--once", action="store_true",
                        help="process what is in the topic now, then stop (Trigger.AvailableNow)")
    parser.add_argument("--master", default="local[*]",
                        help="ignored under spark-submit, which sets the master itself")
    args = parser.parse_args()

    # Python workers must run this interpreter (it has kref, pyarrow, confluent-kafka).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("kref-page-totals")
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # plain `python`, not spark-submit
        builder = builder.master(args.master).config("spark.sql.shuffle.partitions", "4")
        builder = builder.config("spark.ui.showConsoleProgress", "false")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    query = build_query(spark, args.bootstrap, args.checkpoint, args.once)
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()
    print(f"job done; last progress: {query.lastProgress and query.lastProgress['sources'][0]['endOffset']}")


if __name__ == "__main__":
    main()
