"""Spark benchmark: rows/s read into Spark from a kref topic, beside spark.range.

What it measures, in one run on one local[2] SparkSession:

- kref: `--rows` records of `--value-bytes` bytes, produced beforehand (not
  timed) to a kref topic with `--partitions` partitions, then read with
  `spark.read.format("kref")` (one task per partition, each with its own
  Kafka consumer, records handed to Spark as Arrow batches) and aggregated
  (`sum(length(value))`, so every row crosses into the JVM): rows/s.
- peer: `spark.range(rows)` with a binary column of the same width, same
  aggregation, same session: rows/s. spark.range generates rows inside the
  JVM, so it is the ceiling of what any source can reach here; the ratio
  kref/range says how much of that ceiling the Python data source path
  (broker fetch + Python worker + Arrow) delivers.

Each figure is the best of `--repeat` runs after one warm-up. kref is
`kref broker` on a free port with a temporary log dir (bench/broker.py's
start_kref). Bounded: at most 2,000,000 rows.

    .venv/bin/python bench/spark.py [--rows 200000] [--partitions 2]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from broker import start_kref  # noqa: E402  (bench/ is not a package)

MAX_ROWS = 2_000_000


def produce(bootstrap: str, topic: str, partitions: int, rows: int, value_bytes: int) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        fut.result(30)
    producer = Producer({
        "bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
        "queue.buffering.max.messages": 500_000,
    })
    value = b"x" * value_bytes
    failed = []
    for i in range(rows):
        while True:
            try:
                producer.produce(topic, value, key=b"%d" % i, partition=i % partitions,
                                 on_delivery=lambda err, _m: err and failed.append(err))
                break
            except BufferError:
                producer.poll(0.01)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120) or failed:
        raise RuntimeError(f"produce incomplete: {failed[:3]}")


def best_rate(run, rows: int, repeat: int) -> float:
    run()  # warm-up: Python workers, code generation
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        got = run()
        best = min(best, time.perf_counter() - start)
        if got != rows:
            raise RuntimeError(f"read {got} rows, expected {rows}")
    return rows / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rows = max(1, min(args.rows, MAX_ROWS))

    os.environ.setdefault("JAVA_HOME", "/usr/lib/jvm/java-17-openjdk-amd64")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    with start_kref() as bootstrap:
        topic = "bench-spark"
        t0 = time.perf_counter()
        produce(bootstrap, topic, args.partitions, rows, args.value_bytes)
        produce_s = time.perf_counter() - t0
        spark = (
            SparkSession.builder.master("local[2]").appName("kref-bench")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        try:
            def kref_run() -> int:
                df = (spark.read.format("kref").option("kref.bootstrap.servers", bootstrap)
                      .option("subscribe", topic).load())
                r = df.agg(F.count("*").alias("n"), F.sum(F.length("value"))).collect()[0]
                return r["n"]

            def range_run() -> int:
                df = spark.range(rows, numPartitions=args.partitions).select(
                    F.expr(f"cast(repeat('x', {args.value_bytes}) as binary)").alias("value"))
                r = df.agg(F.count("*").alias("n"), F.sum(F.length("value"))).collect()[0]
                return r["n"]

            kref_rate = best_rate(kref_run, rows, args.repeat)
            range_rate = best_rate(range_run, rows, args.repeat)
        finally:
            spark.stop()

    print(f"rows={rows} partitions={args.partitions} value_bytes={args.value_bytes} "
          f"(produced in {produce_s:.1f} s, not timed), best of {args.repeat}")
    print(f"{'source':<28} {'rows/s':>14}")
    print(f"{'spark.read.format(kref)':<28} {kref_rate:>14,.0f}")
    print(f"{'spark.range (same width)':<28} {range_rate:>14,.0f}")
    print(f"ratio kref/range: {kref_rate / range_rate:.3f}")


if __name__ == "__main__":
    main()
