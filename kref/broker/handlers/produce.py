"""Produce (API key 0, v3-v13): validate, append as leader, answer per partition.

Theory of operation
-------------------
For each partition of the request, in order:

1. resolve the topic (by name, or by topic id from v13, KIP-516) and its
   partition driver; unknown -> ErrorCode.UNKNOWN_TOPIC_OR_PARTITION / ErrorCode.UNKNOWN_TOPIC_ID;
2. check the payload before a byte reaches the log: larger than the topic's
   max.message.bytes -> ErrorCode.MESSAGE_TOO_LARGE; then validate_records_framing
   (kref/records/framing_validation.py: v2 header, CRC-32C, bounded
   decompression, every record's framing and offset delta; it skips only
   decoding keys, values and headers, which made produce 6x slower);
   exactly one v2 batch per partition, as Kafka requires of clients
   (ErrorCode.INVALID_RECORD otherwise, CORRUPT_MESSAGE for a bad CRC or a torn batch);
3. `Partition.append_records_as_leader`: the replica core decides (leader?
   acks valid? isr >= min.insync.replicas for acks=all?), the Log assigns
   offsets, stamps the leader epoch and LogAppendTime if the topic says so.

Errors are per partition; one bad partition does not fail the others.
acks=0 gets no response at all (the router sends nothing for None); the
response is written by produce_response.py straight to wire bytes (kio's
generic writer cost more than the append itself). acks=all
partitions whose high watermark has not yet passed their batch wait together
in the produce purgatory (DelayedProduce) for at most the request's timeout;
those still waiting then answer REQUEST_TIMED_OUT.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from kref.broker.broker import INTERNAL_TOPICS
from kref.broker.handlers.produce_response import encode_produce_response, encode_single_partition_response
from kref.broker.partition import AppendResult, error_code_for
from kref.protocol.codec import PreEncoded, response_class
from kref.protocol.errors import ErrorCode
from kref.protocol.produce_request import ProduceBody, from_kio
from kref.records.errors import CorruptRecordError, InvalidRecordError
from kref.records.framing_validation import validate_records_framing
from kref.records.header import BatchHeader
from kref.replication.purgatory import DelayedProduce, ProducePartitionStatus
from kref.broker.purgatory_wait import wait_for
from kref.broker.router import DECLINED

log = logging.getLogger(__name__)

PRODUCE = 0
MIN_VERSION, MAX_VERSION = 3, 13
# Bound on how long an acks=all produce may wait, whatever the client asks.
MAX_PRODUCE_TIMEOUT_MS = 300_000
DEFAULT_MAX_MESSAGE_BYTES = 1_048_588


def validate_produce_payload(records: bytes | None, max_message_bytes: int) -> list[BatchHeader]:
    """Check a partition's produce payload; returns its one batch header.

    Raises the typed record errors (CorruptRecordError family), or
    PayloadTooLarge for a batch above max.message.bytes.
    """
    if not records:
        raise InvalidRecordError("produce request carries no record batch")
    if len(records) > max_message_bytes:
        raise PayloadTooLarge(f"{len(records)} bytes exceed max.message.bytes {max_message_bytes}")
    # The one max.message.bytes check of a produce: the payload is a single
    # batch, so its length is the batch's size (the bound below is framing).
    return validate_records_framing(records, max_batch_size=len(records), require_single_batch=True)


class PayloadTooLarge(Exception):
    error_code = ErrorCode.MESSAGE_TOO_LARGE


def register(router, broker) -> None:

    async def handle_produce(ctx, request) -> Any:
        return await produce(ctx.broker, ctx.api_version, request)

    router.register(PRODUCE, MIN_VERSION, MAX_VERSION, handle_produce)
    router.register_inline(PRODUCE, produce_inline)


def produce_inline(broker, api_version: int, request) -> Any:
    """The whole of an acks=0 or acks=1 produce, with no suspension point (the
    server answers a lone request with it, without the router's coroutines);
    acks=all may wait in the purgatory, so it is declined before anything is done."""
    if type(request) is not ProduceBody or request.acks == -1:
        return DECLINED
    return _append_and_answer(broker, api_version, request)


async def produce(broker, api_version: int, request) -> Any:
    if type(request) is not ProduceBody:
        request = from_kio(request)  # the generic reader's kio dataclasses
    answer = _append_and_answer(broker, api_version, request)
    if type(answer) is _Waiting:
        await _wait_for_acks_all(broker, answer.waiting, request.timeout_ms)
        return answer.respond()
    return answer


class _Waiting:
    """Appended, but acks=all partitions wait for their high watermark: the
    response is written once `waiting`'s results have their outcome."""

    __slots__ = ("waiting", "respond")

    def __init__(self, waiting: dict[tuple[str, int], AppendResult], respond) -> None:
        self.waiting, self.respond = waiting, respond


def _append_and_answer(broker, api_version: int, request: ProduceBody) -> Any:
    """Append every partition; the response (None for acks=0), or _Waiting."""
    now_ms = broker.now_ms()
    acks = request.acks
    topics = request.topics
    if len(topics) == 1 and len(topics[0][2]) == 1:
        # The shape nearly every client sends (one batch for one partition):
        # the same steps without the per-topic and per-partition dicts.
        (name, topic_id, ((index, records),)), = topics
        result, part = _append_partition(broker, name, topic_id, index, records, acks, now_ms)
        if acks == 0:
            return None
        if result.required_offset is not None:
            return _Waiting({part.key: result},
                            lambda: _single_partition_response(api_version, name, topic_id, index, result))
        return _single_partition_response(api_version, name, topic_id, index, result)

    results: dict[tuple[str | None, uuid.UUID | None], dict[int, AppendResult]] = {}
    waiting: dict[tuple[str, int], AppendResult] = {}
    for name, topic_id, partitions in topics:
        per_partition = results.setdefault((name, topic_id), {})
        for index, records in partitions:
            result, part = _append_partition(broker, name, topic_id, index, records, acks, now_ms)
            per_partition[index] = result
            if result.required_offset is not None:
                waiting[part.key] = result

    if acks == 0:
        return None

    def respond_all() -> PreEncoded:
        body = encode_produce_response(
            api_version,
            (
                (name, topic_id, [_row(index, r) for index, r in per_partition.items()])
                for (name, topic_id), per_partition in results.items()
            ),
        )
        return PreEncoded(response_class(PRODUCE, api_version), body)

    return _Waiting(waiting, respond_all) if waiting else respond_all()


def _append_partition(
    broker, name: str | None, topic_id: uuid.UUID | None, index: int, records: bytes | None, acks: int, now_ms: int
) -> tuple[AppendResult, Any]:
    """One partition's produce: resolve, check the payload, append as leader.

    Returns the result and the partition (None when nothing was appended).
    """
    if name is None and topic_id is not None:
        meta = broker.topic_by_id(topic_id)
        name = meta.name if meta is not None else None
        unknown = ErrorCode.UNKNOWN_TOPIC_ID
    else:
        unknown = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if name in INTERNAL_TOPICS:
        # Only the coordinators write there, through the driver directly.
        return AppendResult(ErrorCode.INVALID_TOPIC_EXCEPTION,
                            error_message=f"cannot produce to internal topic {name}"), None
    part = broker.partitions.get((name, index)) if name is not None else None
    if part is None:
        return AppendResult(broker.absent_partition_error(name, index, unknown)), None
    try:
        max_message_bytes = int(getattr(part.log.config, "max_message_bytes", DEFAULT_MAX_MESSAGE_BYTES))
        headers = validate_produce_payload(records, max_message_bytes)
    except (CorruptRecordError, PayloadTooLarge) as exc:
        return AppendResult(error_code_for(exc), error_message=str(exc)), None
    # The headers parsed here (CRC and size checked) travel to the Log:
    # the batch header is parsed once per produce.
    return part.append_records_as_leader(records, acks, headers[0].records_count, now_ms, validated=headers), part


async def _wait_for_acks_all(broker, waiting: dict[tuple[str, int], AppendResult], timeout_ms: int) -> None:
    """Park the acks=all partitions in the produce purgatory; their results get the outcome."""
    def check(key, required_offset):
        part = broker.partitions.get(key)
        if part is None:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return part.check_produce_completion(required_offset)

    op = DelayedProduce({key: ProducePartitionStatus(r.required_offset) for key, r in waiting.items()}, check)
    await wait_for(broker.produce_purgatory, op, max(0, min(timeout_ms, MAX_PRODUCE_TIMEOUT_MS)))
    for key, status in op.partitions.items():
        waiting[key].error_code = status.error_code


def _single_partition_response(api_version: int, name: str | None, topic_id: uuid.UUID | None, index: int,
                               result: AppendResult) -> PreEncoded:
    body = encode_single_partition_response(api_version, name, topic_id, _row(index, result))
    return PreEncoded(response_class(PRODUCE, api_version), body)


def _row(index: int, r: AppendResult) -> tuple:
    """A partition's response fields (produce_response.PartitionResult)."""
    return (index, r.error_code, r.base_offset, r.log_append_time if r.log_append_time is not None else -1,
            r.log_start_offset, r.error_message if r.error_code else None)
