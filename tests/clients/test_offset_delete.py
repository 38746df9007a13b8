"""OffsetDelete (API key 47, KIP-496) against a real kref broker.

A live consumer group may lose the committed offsets of topics none of its
members subscribes to, never those of a subscribed topic
(GROUP_SUBSCRIBED_TO_TOPIC); once the group is Empty any offset may go. The
group is a real confluent-kafka consumer; OffsetDelete goes on the wire
because none of the installed Python clients sends it.
"""

from __future__ import annotations

import time

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.offset_delete.v0.request import (
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
)

from kref.protocol.client import WireClient

TIMEOUT = 30


def offset_delete(bootstrap: str, group: str, topic: str, partition: int = 0):
    host, port = bootstrap.rsplit(":", 1)
    with WireClient(host, int(port)) as client:
        request = OffsetDeleteRequest(
            group_id=group,
            topics=(OffsetDeleteRequestTopic(name=topic, partitions=(OffsetDeleteRequestPartition(partition_index=partition),)),),
        )
        response = client.request(request)
    per_partition = [int(p.error_code) for t in response.topics for p in t.partitions]
    return int(response.error_code), per_partition


def committed(consumer: Consumer, topic: str) -> int:
    return consumer.committed([TopicPartition(topic, 0)], timeout=TIMEOUT)[0].offset


def test_offset_delete_respects_subscriptions_then_frees_an_empty_group(kref_broker):
    bootstrap = kref_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic("od-sub", 1, 1), NewTopic("od-other", 1, 1)]).values():
        future.result(TIMEOUT)

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "od", "enable.auto.commit": False})
    consumer.subscribe(["od-sub"])
    deadline = time.monotonic() + TIMEOUT
    while not consumer.assignment() and time.monotonic() < deadline:
        consumer.poll(0.2)
    assert consumer.assignment(), "the consumer never joined the group"
    consumer.commit(offsets=[TopicPartition("od-sub", 0, 5), TopicPartition("od-other", 0, 7)], asynchronous=False)

    # Stable group subscribed to od-sub: that offset stays, the other may go.
    assert offset_delete(bootstrap, "od", "od-sub") == (0, [86])  # GROUP_SUBSCRIBED_TO_TOPIC
    assert offset_delete(bootstrap, "od", "od-other") == (0, [0])
    assert committed(consumer, "od-sub") == 5
    assert committed(consumer, "od-other") < 0  # no committed offset any more
    consumer.close()

    # Empty group: any offset may be deleted.
    assert offset_delete(bootstrap, "od", "od-sub") == (0, [0])
    assert offset_delete(bootstrap, "no-such-group", "od-sub")[0] == 69  # GROUP_ID_NOT_FOUND

    # The deletion is durable: after a restart the offset is still gone.
    kref_broker.restart()
    check = Consumer({"bootstrap.servers": bootstrap, "group.id": "od", "enable.auto.commit": False})
    try:
        deadline = time.monotonic() + TIMEOUT
        while True:
            try:
                assert committed(check, "od-sub") < 0
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        check.close()
