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

With `validate=True` (`--validate`) each seed's trace is also checked by TLC
against spec/Replication.tla (trace_check/seeds.py: the seed run again in
the scenario whose faults the spec models), VALIDATE_CHUNK seeds per TLC run:
a pool task or a Spark partition runs a chunk of seeds and checks their
traces in one JVM. The verdict per seed lands in the row's trace_* columns.
"""

from __future__ import annotations

import os
import sys
from concurrent.futures import ProcessPoolExecutor

from kref.sim.runner import ROW_FIELDS, SCENARIOS, run_local, run_seed, summarize

MAX_SEEDS = 10_000_000  # bound on one campaign
# Seeds whose traces share one TLC run (a JVM start and a parse of the specs, ~1.5 CPU s, per chunk;
# a traced seed is ~600 steps; trace_check.tlc.BATCH_STEPS splits a chunk further if needed).
VALIDATE_CHUNK = 25


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


def chunks(seeds, size: int = VALIDATE_CHUNK) -> list[list[int]]:
    seeds = list(seeds)
    return [seeds[i:i + size] for i in range(0, len(seeds), size)]


def with_traces(rows: list[dict], checked: list[dict]) -> list[dict]:
    """The rows with their seeds' trace verdicts (trace_check.seeds.validate_seeds rows) filled in."""
    by_seed = {c["seed"]: c for c in checked}
    for row in rows:
        if row["seed"] in by_seed:
            row.update({k: v for k, v in by_seed[row["seed"]].items() if k != "seed"})
    return rows


def _validate_chunk(args: tuple) -> list[dict]:
    seeds, mutation, keep_dir = args
    from trace_check.seeds import validate_seeds

    return validate_seeds(seeds, mutation, keep_dir=keep_dir)


def _spark_partition(seeds, mutation, scenarios, validate=False, keep_dir=None):
    for chunk in chunks(seeds):
        rows = [run_seed(seed, mutation, scenarios)[0] for seed in chunk]
        if validate:
            rows = with_traces(rows, _validate_chunk((chunk, mutation, keep_dir)))
        yield from rows


def run_spark(seeds: range, mutation: str | None, scenarios, master: str, output: str | None,
              validate: bool = False, keep_dir: str | None = None) -> list[dict]:
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
        types = {"events": LongType(), "faults": LongType(), "seed": LongType(), "seconds": DoubleType(),
                 "trace_steps": LongType()}
        schema = StructType([StructField(f, types.get(f, StringType()), False) for f in ROW_FIELDS])
        slices = max(1, min(len(seeds), spark.sparkContext.defaultParallelism * 4))
        if validate:  # a partition's traces share TLC runs: no partition smaller than a chunk
            slices = max(1, min(slices, -(-len(seeds) // VALIDATE_CHUNK)))
        scen = tuple(scenarios)
        rdd = spark.sparkContext.parallelize(list(seeds), slices).mapPartitions(
            lambda part: ({**row, "seconds": float(row["seconds"])}
                          for row in _spark_partition(part, mutation, scen, validate, keep_dir))
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
                 progress: bool | None = None, validate: bool = False, keep_traces: str | None = None) -> dict:
    """Run `seeds`; with validate, also check each seed's trace with TLC (keep_traces: where rejected ones go)."""
    if engine == "spark":
        rows = run_spark(seeds, mutation, scenarios, master, output, validate, keep_traces)
    elif engine == "local":
        rows = run_local(seeds, mutation, scenarios, workers=workers, on_row=Progress(len(seeds), progress))
        if validate:
            jobs = [(chunk, mutation, keep_traces) for chunk in chunks(seeds)]
            if workers == 1 or len(jobs) == 1:
                checked = [row for job in jobs for row in _validate_chunk(job)]
            else:
                with ProcessPoolExecutor(max_workers=workers) as pool:
                    checked = [row for part in pool.map(_validate_chunk, jobs) for row in part]
            rows = with_traces(rows, checked)
        if output:
            write_parquet_local(rows, output)
    else:
        raise ValueError(f"unknown engine {engine!r} (local or spark)")
    summary = summarize(rows)
    summary["rows"] = rows
    return summary
