"""Group life cycle with real clients: delete right after close.

- Every member of a group closes (confluent-kafka and kafka-python, the
  members' close sends LeaveGroup); DeleteGroups right after succeeds: the
  group is Empty at once, no member lingers.
- Static members (group.instance.id) send no LeaveGroup on close: the group
  stays non-empty until their sessions expire, as with Kafka.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException
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


def test_static_members_stay_until_their_session_expires(kref_broker):
    # KIP-345: a static member's close sends no LeaveGroup (librdkafka and
    # kafka-python alike), so the group is not Empty right after close -- as
    # with Kafka -- and DeleteGroups answers NON_EMPTY_GROUP until the
    # members' sessions expire (tests/coordinator/test_group_not_empty.py).
    admin, _ = setup(kref_broker.bootstrap, ["static"])
    rk = Consumer({"bootstrap.servers": kref_broker.bootstrap, "group.id": "g-static", "group.instance.id": "rk-1",
                   "auto.offset.reset": "earliest", "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    rk.subscribe(["static"])
    kp = KafkaConsumer("static", bootstrap_servers=kref_broker.bootstrap, group_id="g-static",
                       group_instance_id="kp-1", auto_offset_reset="earliest", session_timeout_ms=6000,
                       heartbeat_interval_ms=500)
    deadline = time.monotonic() + DEADLINE_S
    while len(rk.assignment()) + len(kp.assignment()) < 2:
        assert time.monotonic() < deadline, "the group never formed"
        rk.poll(0.1)
        kp.poll(100)
    rk.close()
    kp.close()
    with pytest.raises(KafkaException) as refused:
        delete_group(admin, "g-static")
    assert refused.value.args[0].code() == KafkaError.NON_EMPTY_GROUP
    deadline = time.monotonic() + DEADLINE_S
    while True:
        d = admin.describe_consumer_groups(["g-static"])["g-static"].result(15)
        if d.state.name == "EMPTY":
            break
        assert time.monotonic() < deadline, f"static members never expired: {d.state}"
        time.sleep(0.5)
    delete_group(admin, "g-static")
