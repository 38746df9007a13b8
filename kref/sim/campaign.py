"""Simulation campaigns: many seeds on a process pool or on Spark, one results table.

Theory of operation
-------------------
A campaign runs `run_seed` (kref/sim/runner.py) for every seed of a range
and writes one row per seed -- seed, scenario, mutation, events, faults,
verdict, invariant, first violation, seconds, repro -- to Parquet, then
prints a summary. `engine="local"` uses a process pool on this machine;
`engine="spark"` is the project's second pipeline on Spark (next to the
kref source/sink): the seeds are an RDD partitioned over the executors
(`local[*]` by default, any master URL for a real cluster), each partition
runs its seeds in its Python worker, and the rows become a DataFrame written
as Parquet. Seeds are independent and deterministic, so a failing row is
re-run anywhere with its `repro` line.
"""

from __future__ import annotations

import os
import sys

from kref.sim.runner import ROW_FIELDS, SCENARIOS, run_local, run_seed, summarize

MAX_SEEDS = 10_000_000  # bound on one campaign


def parse_range(text: str) -> range:
    """'A..B' (inclusive) or a single seed."""
    try:
        if ".." in text:
            a, b = text.split("..", 1)
            seeds = range(int(a), int(b) + 1)
        else:
            seeds = range(int(text), int(text) + 1)
    except ValueError:
        raise ValueError(f"seeds must look like A..B, got {text!r}") from None
    if not 0 < len(seeds) <= MAX_SEEDS:
        raise ValueError(f"seed range {text!r} must hold 1..{MAX_SEEDS} seeds")
    return seeds


class Progress:
    """A one-line progress bar on stderr (only on a terminal, or when forced)."""

    def __init__(self, total: int, enabled: bool | None = None) -> None:
        self.total, self.done, self.bad = total, 0, 0
        self.enabled = sys.stderr.isatty() if enabled is None else enabled

    def __call__(self, row: dict) -> None:
        self.done += 1
        self.bad += row["verdict"] != "ok"
        if self.enabled and (self.done == self.total or self.done % max(1, self.total // 200) == 0):
            width = 30
            filled = width * self.done // self.total
            sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} seeds, "
                             f"{self.bad} violations")
            if self.done == self.total:
                sys.stderr.write("\n")
            sys.stderr.flush()


def _spark_partition(seeds, mutation, scenarios):
    for seed in seeds:
        yield run_seed(seed, mutation, scenarios)[0]


def run_spark(seeds: range, mutation: str | None, scenarios, master: str, output: str | None) -> list[dict]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession
    from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

    spark = (
        SparkSession.builder.master(master).appName("kref-sim-campaign")
        .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        types = {"events": LongType(), "faults": LongType(), "seed": LongType(), "seconds": DoubleType()}
        schema = StructType([StructField(f, types.get(f, StringType()), False) for f in ROW_FIELDS])
        slices = max(1, min(len(seeds), spark.sparkContext.defaultParallelism * 4))
        scen = tuple(scenarios)
        rdd = spark.sparkContext.parallelize(list(seeds), slices).mapPartitions(
            lambda part: ({**row, "seconds": float(row["seconds"])} for row in _spark_partition(part, mutation, scen))
        )
        frame = spark.createDataFrame(rdd.map(lambda row: tuple(row[f] for f in ROW_FIELDS)), schema)
        if output:
            frame.write.mode("overwrite").parquet(output)
            frame = spark.read.parquet(output)
        rows = [r.asDict() for r in frame.orderBy("seed").collect()]
    finally:
        spark.stop()
    return rows


def write_parquet_local(rows: list[dict], output: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(output, exist_ok=True)
    table = pa.Table.from_pylist([{f: row[f] for f in ROW_FIELDS} for row in rows])
    pq.write_table(table, os.path.join(output, "part-00000.parquet"))


def run_campaign(seeds: range, *, engine: str = "local", mutation: str | None = None, scenarios=SCENARIOS,
                 master: str = "local[*]", output: str | None = None, workers: int | None = None,
                 progress: bool | None = None) -> dict:
    if engine == "spark":
        rows = run_spark(seeds, mutation, scenarios, master, output)
    elif engine == "local":
        rows = run_local(seeds, mutation, scenarios, workers=workers, on_row=Progress(len(seeds), progress))
        if output:
            write_parquet_local(rows, output)
    else:
        raise ValueError(f"unknown engine {engine!r} (local or spark)")
    summary = summarize(rows)
    summary["rows"] = rows
    return summary
