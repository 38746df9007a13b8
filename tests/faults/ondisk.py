"""Who wrote each record, read from the nodes' partition logs after a fault run.

The consumers cannot see a record's producer id and producer epoch; the
batch headers on disk carry them. For each partition, the longest copy of
the log among the nodes gives (producer_id, producer_epoch) per offset, so
the checker can tell a duplicate written twice under one producer epoch
(the broker failed to deduplicate) from one the client re-sent under a new
epoch (librdkafka's drain-and-bump after a message timeout, which no broker
can deduplicate). Read with kref's own batch decoder, after the nodes stop.
"""

from __future__ import annotations

from pathlib import Path

from kref.records.memory_records import iter_batches


def writers(data_dirs: list[Path], topic: str, partitions: int) -> dict[tuple[int, int], tuple[int, int]]:
    out: dict[tuple[int, int], tuple[int, int]] = {}
    for partition in range(partitions):
        best: dict[int, tuple[int, int]] = {}
        for data_dir in data_dirs:
            found: dict[int, tuple[int, int]] = {}
            for segment in sorted((Path(data_dir) / f"{topic}-{partition}").glob("*.log")):
                try:
                    for batch in iter_batches(segment.read_bytes()):
                        for i in range(len(batch.records)):
                            found[batch.base_offset + i] = (batch.producer_id, batch.producer_epoch)
                except Exception:  # a torn tail after kill -9: what was read before it stands
                    continue
            if len(found) > len(best):
                best = found
        out.update({(partition, offset): ids for offset, ids in best.items()})
    return out
