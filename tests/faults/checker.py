"""The checker of the fault tests: what the clients saw against what is there.

Theory of operation
-------------------
A pure function of a history, no I/O. Every value a producer writes is
unique: b"<producer>:<seq>", seq counting up per producer. The history is

- `acked`: (value, partition, offset) for every delivery report without an
  error (acks=all: the leader answered after the high watermark passed it);
- `attempted`: every value handed to a producer (acked, failed or unknown);
- `final`: partition -> [(offset, value)] read back from offset 0 up to the
  high watermark after every fault was undone;
- `observed`: consumer -> partition -> [(offset, value)] that the consumers
  polled while the faults ran.

and the checker counts:

- lost: acknowledged values absent from the final read of their partition;
- moved: acknowledged values present, but at another offset than the one
  acknowledged (a log rewritten under an acknowledgement);
- acknowledged without an offset: a delivery report whose offset is
  unknown (-1: what a broker answers a retried batch it deduplicated
  without recalling the original offset); only presence is checked;
- duplicates: extra copies of a value in the final read (idempotence failed);
- re-sent under a new producer epoch: a duplicate whose copies carry one
  producer id but different producer epochs (from the logs on disk,
  `writers`): the client bumped its epoch after a message timeout and sent
  the value again (librdkafka's drain-and-bump); no broker can deduplicate
  that, so it is reported but does not fail the run;
- offsets out of order: the final read's offsets not strictly increasing,
  plus pairs of one producer's values in a partition whose offsets run
  against their sequence numbers (an idempotent producer keeps order);
- consumer disagreements: (consumer, partition) pairs where an observed
  (offset, value) differs from the final read at that offset, or the
  offset is missing below the final high watermark; and pairs of consumers
  that saw different values at one offset of one partition;
- partitions not read to the end: the final read did not reach a
  partition's high watermark in time (its acknowledged values are then not
  counted as lost: nobody knows);
- unknown values: written, with no acknowledgement and absent from the read
  (allowed; Kafka promises nothing for them), and unacknowledged values
  that are present (allowed: a timeout is not a failure).

`ok` is true when lost, moved, duplicates, out-of-order and disagreements
are all zero.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

EXAMPLES = 3


def encode_value(producer: int, seq: int) -> bytes:
    return f"{producer}:{seq}".encode()


def decode_value(value: bytes) -> tuple[int, int] | None:
    try:
        producer, seq = value.decode().split(":")
        return int(producer), int(seq)
    except (ValueError, UnicodeDecodeError, AttributeError):
        return None


@dataclass
class History:
    acked: list[tuple[bytes, int, int]] = field(default_factory=list)
    attempted: set[bytes] = field(default_factory=set)
    final: dict[int, list[tuple[int, bytes]]] = field(default_factory=dict)
    observed: dict[str, dict[int, list[tuple[int, bytes]]]] = field(default_factory=dict)
    unread: dict[int, tuple[int, int]] = field(default_factory=dict)  # partition -> (reached, high watermark)
    # (partition, offset) -> (producer_id, producer_epoch) from the logs on disk, when known
    writers: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)


@dataclass
class Report:
    attempted: int = 0
    acked: int = 0
    read: int = 0
    lost: list = field(default_factory=list)
    moved: list = field(default_factory=list)
    duplicates: list = field(default_factory=list)
    out_of_order: list = field(default_factory=list)
    disagreements: list = field(default_factory=list)
    unacked_present: int = 0
    unknown_absent: int = 0
    foreign: list = field(default_factory=list)
    unread: list = field(default_factory=list)
    rebumped: list = field(default_factory=list)
    no_offset: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.moved or self.duplicates or self.out_of_order or self.disagreements
                    or self.foreign or self.unread)

    def counts(self) -> dict[str, int]:
        return {
            "attempted": self.attempted,
            "acknowledged": self.acked,
            "read back": self.read,
            "acknowledged lost": len(self.lost),
            "acknowledged at another offset": len(self.moved),
            "acknowledged without an offset": len(self.no_offset),
            "duplicates": len(self.duplicates),
            "re-sent under a new producer epoch": len(self.rebumped),
            "offsets out of order": len(self.out_of_order),
            "consumer disagreements": len(self.disagreements),
            "unknown values (not ours)": len(self.foreign),
            "partitions not read to the end": len(self.unread),
            "unacknowledged, present": self.unacked_present,
            "unacknowledged, absent": self.unknown_absent,
        }

    def table(self) -> str:
        examples = {
            "acknowledged lost": self.lost, "acknowledged at another offset": self.moved,
            "acknowledged without an offset": self.no_offset,
            "duplicates": self.duplicates, "re-sent under a new producer epoch": self.rebumped, "offsets out of order": self.out_of_order,
            "consumer disagreements": self.disagreements, "unknown values (not ours)": self.foreign,
            "partitions not read to the end": self.unread,
        }
        rows = [("check", "count", "examples")]
        for name, count in self.counts().items():
            ex = "; ".join(str(e) for e in examples.get(name, [])[:EXAMPLES])
            rows.append((name, str(count), ex))
        width = [max(len(r[i]) for r in rows) for i in range(2)]
        lines = [f"{r[0]:<{width[0]}}  {r[1]:>{width[1]}}  {r[2]}".rstrip() for r in rows]
        lines.insert(1, "-" * max(len(x) for x in lines))
        lines.append(f"verdict: {'OK' if self.ok else 'FAILED'}")
        return "\n".join(lines)


def check(history: History) -> Report:
    report = Report(attempted=len(history.attempted), acked=len(history.acked))
    report.unread = [f"p{p}: read to {reached} of {end}" for p, (reached, end) in sorted(history.unread.items())]
    where: dict[bytes, list[tuple[int, int]]] = defaultdict(list)  # value -> [(partition, offset)]
    for partition, entries in sorted(history.final.items()):
        report.read += len(entries)
        previous = None
        last_seq: dict[int, tuple[int, int]] = {}  # producer -> (seq, offset) of its latest value here
        for offset, value in entries:
            if previous is not None and offset <= previous:
                report.out_of_order.append(f"p{partition}: offset {offset} after {previous}")
            previous = offset
            where[value].append((partition, offset))
            if len(where[value]) > 1:
                continue  # a later copy: counted as a duplicate, not again as disorder
            parsed = decode_value(value)
            if parsed is None or value not in history.attempted:
                report.foreign.append(f"p{partition}@{offset}={value!r}")
                continue
            producer, seq = parsed
            if producer in last_seq and seq < last_seq[producer][0]:
                report.out_of_order.append(
                    f"p{partition}: {value.decode()}@{offset} after seq {last_seq[producer][0]}@{last_seq[producer][1]}")
            if producer not in last_seq or seq > last_seq[producer][0]:
                last_seq[producer] = (seq, offset)
    for value, places in where.items():
        first = history.writers.get(places[0])
        for partition, offset in places[1:]:
            again = history.writers.get((partition, offset))
            text = f"{value.decode(errors='replace')} again at p{partition}@{offset}"
            if first is not None and again is not None and first[0] == again[0] and first[1] != again[1]:
                report.rebumped.append(f"{text} (producer {again[0]} epoch {first[1]} -> {again[1]})")
            else:
                report.duplicates.append(text)
    acked_values = set()
    for value, partition, offset in history.acked:
        acked_values.add(value)
        places = [o for p, o in where.get(value, ()) if p == partition]
        if not places and partition in history.unread:
            continue  # not read back: counted under unread, not as lost
        if not places:
            report.lost.append(f"{value.decode(errors='replace')} acked p{partition}@{offset}")
        elif offset is None or offset < 0:
            report.no_offset.append(f"{value.decode(errors='replace')} acked p{partition} without an offset, read @{places[0]}")
        elif offset not in places:
            report.moved.append(f"{value.decode(errors='replace')} acked p{partition}@{offset}, read @{places[0]}")
    for value in history.attempted - acked_values:
        if value in where:
            report.unacked_present += 1
        else:
            report.unknown_absent += 1

    final_at = {p: dict(entries) for p, entries in history.final.items()}
    final_end = {p: (max(o for o, _ in entries) + 1 if entries else 0) for p, entries in history.final.items()}
    seen: dict[tuple[int, int], dict[str, bytes]] = defaultdict(dict)  # (partition, offset) -> consumer -> value
    for consumer, partitions in sorted(history.observed.items()):
        for partition, entries in sorted(partitions.items()):
            if partition in history.unread:
                continue  # the final read is incomplete there: nothing to compare with
            wrong = None
            for offset, value in entries:
                seen[(partition, offset)].setdefault(consumer, value)
                if wrong is not None:
                    continue
                expected = final_at.get(partition, {}).get(offset)
                if expected is None and offset < final_end.get(partition, 0):
                    wrong = f"{consumer} p{partition}@{offset}={value!r}, not in the final read"
                elif expected is None:
                    wrong = f"{consumer} p{partition}@{offset}={value!r}, beyond the final high watermark"
                elif expected != value:
                    wrong = f"{consumer} p{partition}@{offset}={value!r}, final read has {expected!r}"
            if wrong is not None:
                report.disagreements.append(wrong)
    for (partition, offset), by_consumer in sorted(seen.items()):
        values = Counter(by_consumer.values())
        if len(values) > 1:
            report.disagreements.append(
                f"consumers disagree at p{partition}@{offset}: " + ", ".join(f"{c}={v!r}" for c, v in sorted(by_consumer.items())))
    return report
