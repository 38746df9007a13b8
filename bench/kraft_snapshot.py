"""Cost of a KRaft metadata snapshot (kref/controller/snapshot.py) per image size.

Builds a metadata image of 3 brokers and N partitions (as T topics x 10,
replication factor 3), then measures in CPU seconds (time.process_time, so
other processes on the box do not count): writing the snapshot (the image's
records framed as Kafka frames them, in Kafka's .checkpoint batches) and
loading it (validate every batch, decode the records, rebuild the image),
next to replaying the same records from a plain list (what a restart without
a snapshot pays at least, before reading the log). Prints one line per size.
Usage: python bench/kraft_snapshot.py [partitions ...]
"""

from __future__ import annotations

import sys
import time
import uuid

from kref.controller import snapshot as snap
from kref.metadata import records as r
from kref.metadata import serde
from kref.metadata.image import MetadataImage


def image_of(partitions: int) -> MetadataImage:
    records: list = [r.RegisterBrokerRecord(b, uuid.UUID(int=b), 10 + b, fenced=False) for b in (1, 2, 3)]
    for t in range(partitions // 10):
        topic_id = uuid.UUID(int=1000 + t)
        records.append(r.TopicRecord(f"topic-{t}", topic_id))
        for p in range(10):
            records.append(r.PartitionRecord(p, topic_id, (1, 2, 3), (1, 2, 3), 1 + p % 3, 0, 0))
    image = MetadataImage()
    image.apply(records)
    return image


def measure(partitions: int) -> str:
    image = image_of(partitions)
    snapshot_id = snap.SnapshotId(partitions + 100, 1)
    t0 = time.process_time()
    values = [serde.encode(record) for record in image.to_records()]
    data = snap.encode_snapshot(snapshot_id, values, 0, 0)
    t1 = time.process_time()
    loaded = snap.decode_snapshot(snapshot_id, data)
    rebuilt = MetadataImage()
    rebuilt.apply([serde.decode(v) for v in loaded.records])
    t2 = time.process_time()
    plain = MetadataImage()
    plain.apply([serde.decode(v) for v in values])
    t3 = time.process_time()
    assert rebuilt == image == plain
    return (f"{partitions:>7} partitions: snapshot {len(data) / 1024:8.0f} KiB, {len(values)} records; "
            f"write {t1 - t0:.3f} s CPU, load {t2 - t1:.3f} s CPU (replay of the bare records {t3 - t2:.3f} s)")


def main() -> None:
    sizes = [int(a) for a in sys.argv[1:]] or [1_000, 10_000]
    for n in sizes:
        print(measure(n))


if __name__ == "__main__":
    main()
