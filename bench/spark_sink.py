"""The Spark sink's task body alone: CPU and wall time per write, fast path beside librdkafka.

What it measures, in one run, against one `kref broker`: a write task's body
(kref.spark.client.write_batches, as a Spark Python worker runs it) writing
`--rows` rows of `--value-bytes` bytes (key = the row number) in Arrow
batches of 10,000 rows (Spark's default maxRecordsPerBatch) to a topic of
`--partitions` partitions, once through the columnar fast path
(native_sink) and once through the librdkafka path, alternating, `--runs`
times each after one warm-up of each. Per run: wall time, this process's
CPU time (every thread: librdkafka's too), and the broker's CPU time (from
/proc). It prints the medians and the ratio of the two paths, and the load.
No Spark: this isolates the connector's own per-row work, which bench/spark.py
measures inside a real query. `--compression gzip|snappy|lz4|zstd` sets the
sink's kafka.compression.type on both paths (values are then half random
bytes, half repeated, so that the codecs have something to do). `--headers N`
adds a headers column of N headers per row (key "h<i>", 16-byte values).

    .venv/bin/python bench/spark_sink.py [--rows 200000] [--partitions 2] [--runs 5] [--compression lz4]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from broker import start_kref_process  # noqa: E402  (bench/ is not a package)
from spark import create_topic  # noqa: E402

MAX_ROWS = 2_000_000
MAX_RUNS = 20


def proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--headers", type=int, default=0, help="headers per row (0: no headers column)")
    parser.add_argument("--compression", choices=["none", "gzip", "snappy", "lz4", "zstd"], default="none")
    args = parser.parse_args()
    rows = max(1, min(args.rows, MAX_ROWS))
    runs = max(1, min(args.runs, MAX_RUNS))

    import pyarrow as pa

    from kref.spark import client, native_sink

    if native_sink._csink is None:
        sys.exit("kref/spark/_csink.c is not built (python scripts/build_cwalker.py)")
    batches = []
    rng = random.Random(1230)
    print("seed 1230 (compressed runs' values)")
    for start in range(0, rows, 10_000):
        n = min(10_000, rows - start)
        if args.compression == "none":
            values = [b"x" * args.value_bytes] * n
        else:
            half = args.value_bytes // 2
            values = [rng.randbytes(half) + b"x" * (args.value_bytes - half) for _ in range(n)]
        arrays = [pa.array([b"%d" % i for i in range(start, start + n)]), pa.array(values)]
        if args.headers:
            kind = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
            arrays.append(pa.array([[{"key": f"h{j}", "value": b"%016d" % (i + j)} for j in range(args.headers)]
                                    for i in range(start, start + n)], kind))
        batches.append(pa.RecordBatch.from_arrays(arrays, names=["key", "value", "headers"][:len(arrays)]))
    limits = {"metadata_timeout_ms": 30_000, "flush_timeout_ms": 120_000}
    with start_kref_process() as (bootstrap, broker):
        topic = "bench-spark-sink"
        create_topic(bootstrap, topic, args.partitions)
        cfg = {"bootstrap.servers": bootstrap, "compression.type": args.compression}
        columns = client.SinkColumns(value="value", key="key", topic=topic,
                                     headers="headers" if args.headers else None)
        got: dict[str, list[tuple[float, float, float]]] = {"native": [], "librdkafka": []}
        loads = []
        for n in range(runs + 1):
            for name in (("native", "librdkafka") if n % 2 else ("librdkafka", "native")):
                native_sink.ENABLED = name == "native"
                loads.append(os.getloadavg()[0])
                cpu0, broker0, wall0 = time.process_time(), proc_cpu_s(broker.pid), time.perf_counter()
                written = client.write_batches(cfg, columns, batches, **limits)
                wall = time.perf_counter() - wall0
                cpu, broker_cpu = time.process_time() - cpu0, proc_cpu_s(broker.pid) - broker0
                if written != rows:
                    raise RuntimeError(f"{name}: wrote {written} of {rows}")
                if n:
                    got[name].append((wall, cpu, broker_cpu))
                    print(f"run {n} {name:<10} wall {wall * 1000:6.0f} ms  cpu {cpu:5.2f} s  "
                          f"broker cpu {broker_cpu:5.2f} s  load {loads[-1]:.1f}", flush=True)
        # The pooled producer and connections go before the broker does (else
        # librdkafka logs its reconnect attempts to a stopped broker).
        client._producers.clear()
        native_sink.wire.close_idle()
    print(f"\nrows={rows} partitions={args.partitions} value_bytes={args.value_bytes} "
          f"compression={args.compression} headers={args.headers}, "
          f"{runs} runs per path after one warm-up each, load {min(loads):.1f}-{max(loads):.1f}")
    med = {k: [statistics.median(x[i] for x in v) for i in range(3)] for k, v in got.items()}
    for name, (wall, cpu, broker_cpu) in med.items():
        print(f"{name:<10} wall {wall * 1000:6.0f} ms  {rows / wall:>10,.0f} rows/s  "
              f"task cpu {cpu:5.2f} s  broker cpu {broker_cpu:5.2f} s (medians)")
    print(f"native / librdkafka: wall {med['native'][0] / med['librdkafka'][0]:.2f}, "
          f"task cpu {med['native'][1] / med['librdkafka'][1]:.2f}")


if __name__ == "__main__":
    main()
