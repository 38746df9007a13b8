"""Record batch encode/decode throughput: kref beside two real clients' codecs.

Prints, per codec, MB/s (of uncompressed record bytes) for building and for
decoding+validating (CRC, decompress, every record) a batch, for kref,
kafka-python (pure Python) and aiokafka (Cython), measured in the same run,
with kref's ratio to each. Also decodes batches of 1k, 10k and 100k records
to show decode time grows linearly (no quadratic slicing). Times are CPU
time (time.process_time), best of several runs.

    .venv/bin/python bench/records.py [--records N] [--value-bytes B]
"""

from __future__ import annotations

import argparse
import time

import aiokafka.record.default_records as aio
from kafka.record.default_records import DefaultRecordBatch as KpBatch
from kafka.record.default_records import DefaultRecordBatchBuilder as KpBuilder

from kref.records.batch import Header, Record, build_batch, decode_batch
from kref.records.compression import CompressionType


def best_of(fn, repeat=5):
    # CPU time of this process: the machine is shared, and wall time would
    # charge other processes' time slices to longer runs.
    best = float("inf")
    for _ in range(repeat):
        t = time.process_time()
        fn()
        best = min(best, time.process_time() - t)
    return max(best, 1e-6)


def client_build(builder_cls, codec, records):
    b = builder_cls(magic=2, compression_type=int(codec), is_transactional=False, producer_id=-1,
                    producer_epoch=-1, base_sequence=-1, batch_size=1 << 30)
    for i, r in enumerate(records):
        b.append(i, timestamp=r.timestamp, key=r.key, value=r.value, headers=[(h.key, h.value) for h in r.headers])
    return bytes(b.build())


def client_decode(reader_cls, raw):
    batch = reader_cls(raw)
    assert batch.validate_crc()
    for r in batch:
        r.value


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=5000)
    ap.add_argument("--value-bytes", type=int, default=200)
    args = ap.parse_args()
    records = [Record(timestamp=1_700_000_000_000 + i, key=b"key-%d" % i,
                      value=(b"%08d" % i) * (args.value_bytes // 8), headers=(Header("trace", b"abc"),))
               for i in range(args.records)]
    payload = sum(len(r.value) + len(r.key) for r in records)
    mb = payload / 1e6
    print(f"{args.records} records, {payload / 1e6:.2f} MB of keys+values per batch; MB/s, higher is better")
    print(f"{'codec':7} {'op':7} {'kref':>8} {'kafka-py':>9} {'aiokafka':>9} {'kref/kp':>8} {'kref/aio':>9}")
    for codec in CompressionType:
        raw = build_batch(records, compression=codec)
        builds = [best_of(lambda: build_batch(records, compression=codec)),
                  best_of(lambda: client_build(KpBuilder, codec, records)),
                  best_of(lambda: client_build(aio.DefaultRecordBatchBuilder, codec, records))]
        decodes = [best_of(lambda: decode_batch(raw, max_uncompressed_bytes=1 << 30)),
                   best_of(lambda: client_decode(KpBatch, raw)),
                   best_of(lambda: client_decode(aio.DefaultRecordBatch, raw))]
        for op, times in (("build", builds), ("decode", decodes)):
            k, p, a = (mb / t for t in times)
            print(f"{codec.name:7} {op:7} {k:8.1f} {p:9.1f} {a:9.1f} {k / p:8.2f} {k / a:9.2f}")
    print("decode time by batch size; the baseline allocates one plain 6-tuple per record, to show how much")
    print("of any per-record growth is the interpreter's allocator/GC rather than the decoder:")
    for n in (1_000, 10_000, 100_000):
        raw = build_batch([Record(timestamp=i, value=b"v" * 50) for i in range(n)])
        t = best_of(lambda: decode_batch(raw, max_uncompressed_bytes=1 << 30), repeat=3)
        t0 = best_of(lambda: [(i, i, b"", b"", (), 0) for i in range(n)], repeat=3)
        print(f"  {n:>7} records: {t * 1e3:8.1f} ms = {t / n * 1e6:5.2f} us/record "
              f"(baseline tuples {t0 / n * 1e6:5.2f} us/record)")

if __name__ == "__main__":
    main()
