"""Group life cycle with real clients: delete right after close.

- Every member of a group closes (confluent-kafka and kafka-python, the
  members' close sends LeaveGroup); DeleteGroups right after succeeds: the
  group is Empty at once, no member lingers.
"""

from __future__ import annotations

import time

from confluent_kafka import Consumer
from kafka import KafkaConsumer

from tests.clients.test_group_topic_deletion import setup

DEADLINE_S = 30


def delete_group(admin, group):
    admin.delete_consumer_groups([group], request_timeout=10)[group].result(15)


def test_delete_groups_right_after_every_member_closed(kref_broker):
    admin, _ = setup(kref_broker.bootstrap, ["closing"])
    conf = {"bootstrap.servers": kref_broker.bootstrap, "group.id": "g-closing", "auto.offset.reset": "earliest",
            "session.timeout.ms": 10_000, "heartbeat.interval.ms": 500}
    members = [Consumer(conf) for _ in range(2)]
    for c in members:
        c.subscribe(["closing"])
    got, deadline = 0, time.monotonic() + DEADLINE_S
    while got < 10 and time.monotonic() < deadline:
        for c in members:
            msg = c.poll(0.1)
            got += msg is not None and not msg.error()
    assert got == 10
    for c in members:
        c.close()
    delete_group(admin, "g-closing")

    kp = [KafkaConsumer("closing", bootstrap_servers=kref_broker.bootstrap, group_id="g-kp",
                        auto_offset_reset="earliest", consumer_timeout_ms=15_000) for _ in range(2)]
    next(kp[0])
    for c in kp:
        c.close()
    delete_group(admin, "g-kp")
    assert {g.group_id for g in admin.list_consumer_groups().result(15).valid} & {"g-closing", "g-kp"} == set()
