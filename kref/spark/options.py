"""Options of the kref Spark source and sink, parsed and checked on the driver.

Theory of operation: the user-facing options copy Spark's Kafka connector
(docs "Structured Streaming + Kafka Integration Guide") so that a job written
for `format("kafka")` runs with `format("kref")` after renaming the
`kafka.` prefix to `kref.` (the `kafka.` prefix is accepted too). Everything
here is pure parsing: no broker is contacted, so a bad option fails at
`load()` / `start()` before any Spark job with a message that names the
option. Offsets use Kafka's ListOffsets sentinels: -2 = earliest
(log_start_offset), -1 = latest (high_watermark under read_uncommitted).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

EARLIEST = -2
LATEST = -1

# Client properties the connector owns; a user setting them would break the
# offset bookkeeping that Spark's checkpoint relies on (Spark's Kafka source
# refuses the same ones).
_RESERVED_CLIENT_PROPERTIES = frozenset(
    {
        "group.id",
        "auto.offset.reset",
        "enable.auto.commit",
        "key.deserializer",
        "value.deserializer",
        "key.serializer",
        "value.serializer",
    }
)

# Bounds so that a typo cannot ask for an unbounded wait or batch.
MAX_TIMEOUT_MS = 3_600_000
MAX_ROWS_PER_ARROW_BATCH = 1_000_000
# Measured (docs/spark.md, Performance): 2,000 records per consume() and
# Arrow batch keep a task's working set in cache; 10,000 cost ~25% more
# Python time per record, with no saving on the JVM side.
DEFAULT_ROWS_PER_ARROW_BATCH = 2_000


class KrefOptionError(ValueError):
    """A data source option is missing, contradictory or malformed."""


TopicPartition = tuple[str, int]
PartitionOffsets = dict[TopicPartition, int]


@dataclass(frozen=True)
class Subscription:
    """Which topic partitions to read: exactly one of the three Spark styles."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assignment: tuple[TopicPartition, ...] = ()

    def matches(self, topic: str) -> bool:
        if self.pattern is not None:
            # Java's Matcher.matches() (what Spark's subscribePattern uses) is a full match.
            return re.fullmatch(self.pattern, topic) is not None
        if self.assignment:
            return any(t == topic for t, _ in self.assignment)
        return topic in self.topics


@dataclass(frozen=True)
class SourceOptions:
    """The read side's options, checked."""

    client_config: dict[str, str]
    subscription: Subscription
    starting: str | PartitionOffsets  # "earliest" | "latest" | specific offsets
    ending: str | PartitionOffsets
    fail_on_data_loss: bool
    include_headers: bool
    max_offsets_per_trigger: int | None
    poll_timeout_ms: int
    metadata_timeout_ms: int
    rows_per_arrow_batch: int
    # "auto": the columnar fast path where it can (kref/spark/native_source.py);
    # "librdkafka": always the librdkafka consumer (the reference path).
    fetch_path: str = "auto"


@dataclass(frozen=True)
class SinkOptions:
    """The write side's options, checked."""

    client_config: dict[str, str]
    topic: str | None
    metadata_timeout_ms: int
    flush_timeout_ms: int


def _lower_keys(options) -> dict[str, str]:
    # Spark's DataSource options are case-insensitive; the Python API hands us
    # a case-insensitive mapping, but a plain dict in unit use is not.
    return {str(k).lower(): str(v) for k, v in dict(options).items()}


def client_config(options) -> dict[str, str]:
    """librdkafka properties from `kref.<property>` (or `kafka.<property>`) options."""
    config: dict[str, str] = {}
    for key, value in _lower_keys(options).items():
        for prefix in ("kref.", "kafka."):
            if key.startswith(prefix):
                prop = key[len(prefix) :]
                if prop in _RESERVED_CLIENT_PROPERTIES:
                    raise KrefOptionError(
                        f"option {key!r} is not supported: the kref connector manages "
                        f"{prop!r} itself (offsets are tracked in Spark's checkpoint)"
                    )
                config[prop] = value
    if "bootstrap.servers" not in config:
        raise KrefOptionError(
            "option 'kref.bootstrap.servers' is required, e.g. "
            ".option('kref.bootstrap.servers', '127.0.0.1:9092')"
        )
    return config


def _bounded_int(opts: dict[str, str], key: str, default: int, low: int, high: int) -> int:
    raw = opts.get(key.lower())
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise KrefOptionError(f"option {key!r} must be an integer, got {raw!r}") from None
    if not low <= value <= high:
        raise KrefOptionError(f"option {key!r} must be in [{low}, {high}], got {value}")
    return value


def _bool(opts: dict[str, str], key: str, default: bool) -> bool:
    raw = opts.get(key.lower())
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise KrefOptionError(f"option {key!r} must be 'true' or 'false', got {raw!r}")


def parse_subscription(opts: dict[str, str]) -> Subscription:
    given = [k for k in ("subscribe", "subscribepattern", "assign") if opts.get(k)]
    if len(given) != 1:
        raise KrefOptionError(
            "exactly one of the options 'subscribe', 'subscribePattern', 'assign' must be "
            f"given (got {len(given)})"
        )
    kind = given[0]
    raw = opts[kind]
    if kind == "subscribe":
        topics = tuple(t.strip() for t in raw.split(",") if t.strip())
        if not topics:
            raise KrefOptionError(f"option 'subscribe' names no topic: {raw!r}")
        return Subscription(topics=topics)
    if kind == "subscribepattern":
        try:
            re.compile(raw)
        except re.error as exc:
            raise KrefOptionError(f"option 'subscribePattern' is not a regex: {exc}") from None
        return Subscription(pattern=raw)
    try:
        parsed = json.loads(raw)
        assignment = tuple(
            (str(topic), int(p)) for topic, parts in parsed.items() for p in parts
        )
    except (ValueError, TypeError, AttributeError):
        raise KrefOptionError(
            f"option 'assign' must be JSON like {{\"topicA\":[0,1]}}, got {raw!r}"
        ) from None
    if not assignment:
        raise KrefOptionError("option 'assign' names no partition")
    return Subscription(assignment=tuple(sorted(set(assignment))))


def parse_offsets_json(raw: str, option: str) -> PartitionOffsets:
    """Spark-Kafka-style `{"topic":{"0":23,"1":-2}}` into {(topic, 0): 23, ...}."""
    try:
        parsed = json.loads(raw)
        offsets = {
            (str(topic), int(p)): int(offset)
            for topic, per_partition in parsed.items()
            for p, offset in per_partition.items()
        }
    except (ValueError, TypeError, AttributeError):
        raise KrefOptionError(
            f'option {option!r} must be "earliest", "latest" or JSON like '
            f'{{"topicA":{{"0":23,"1":-1}}}}, got {raw!r}'
        ) from None
    for (topic, partition), offset in offsets.items():
        if offset < EARLIEST:
            raise KrefOptionError(
                f"option {option!r}: offset {offset} for {topic}-{partition} is invalid "
                "(use -2 for earliest, -1 for latest)"
            )
    return offsets


def _offsets_option(
    opts: dict[str, str], key: str, default: str, forbidden: str | None, forbidden_sentinel: int
) -> str | PartitionOffsets:
    raw = opts.get(key.lower(), default).strip()
    if raw.lower() in ("earliest", "latest"):
        value: str | PartitionOffsets = raw.lower()
    else:
        value = parse_offsets_json(raw, key)
    if forbidden is not None:
        if value == forbidden or (
            isinstance(value, dict) and forbidden_sentinel in value.values()
        ):
            raise KrefOptionError(
                f"option {key!r}: {forbidden!r} ({forbidden_sentinel} in JSON) is not valid "
                "for a batch query"
            )
    return value


def source_options(options, *, streaming: bool) -> SourceOptions:
    opts = _lower_keys(options)
    if streaming:
        if "endingoffsets" in opts:
            raise KrefOptionError("option 'endingOffsets' is for batch queries only")
        starting = _offsets_option(opts, "startingOffsets", "latest", None, 0)
        ending: str | PartitionOffsets = "latest"
    else:
        # Same rules as Spark's Kafka source: a batch cannot start at latest or end at earliest.
        starting = _offsets_option(opts, "startingOffsets", "earliest", "latest", LATEST)
        ending = _offsets_option(opts, "endingOffsets", "latest", "earliest", EARLIEST)
    max_per_trigger = opts.get("maxoffsetspertrigger")
    return SourceOptions(
        client_config=client_config(options),
        subscription=parse_subscription(opts),
        starting=starting,
        ending=ending,
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        include_headers=_bool(opts, "includeHeaders", False),
        max_offsets_per_trigger=(
            None
            if max_per_trigger is None
            else _bounded_int(opts, "maxOffsetsPerTrigger", 0, 1, 2**62)
        ),
        poll_timeout_ms=_bounded_int(
            opts, "kafkaConsumer.pollTimeoutMs", 120_000, 1, MAX_TIMEOUT_MS
        ),
        metadata_timeout_ms=_bounded_int(opts, "metadataTimeoutMs", 30_000, 1, MAX_TIMEOUT_MS),
        rows_per_arrow_batch=_bounded_int(
            opts, "rowsPerArrowBatch", DEFAULT_ROWS_PER_ARROW_BATCH, 1, MAX_ROWS_PER_ARROW_BATCH
        ),
        fetch_path=_fetch_path(opts),
    )


def _fetch_path(opts: dict[str, str]) -> str:
    value = opts.get("fetchpath", "auto").strip().lower()
    if value not in ("auto", "librdkafka"):
        raise KrefOptionError(f"option 'fetchPath' must be auto or librdkafka, not {value!r}")
    return value


def sink_options(options) -> SinkOptions:
    opts = _lower_keys(options)
    return SinkOptions(
        client_config=client_config(options),
        topic=opts.get("topic") or None,
        metadata_timeout_ms=_bounded_int(opts, "metadataTimeoutMs", 30_000, 1, MAX_TIMEOUT_MS),
        flush_timeout_ms=_bounded_int(opts, "flushTimeoutMs", 120_000, 1, MAX_TIMEOUT_MS),
    )


def offsets_to_json(offsets: PartitionOffsets) -> dict[str, dict[str, int]]:
    """The stream offset: Spark's Kafka JSON shape, topics and partitions sorted."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def offsets_from_json(obj: dict) -> PartitionOffsets:
    return {
        (str(topic), int(p)): int(offset)
        for topic, per_partition in obj.items()
        for p, offset in per_partition.items()
    }
