"""Out of descriptors, the broker fails the one request and keeps serving.

A real broker under a low descriptor limit (set on the running process with
prlimit) is filled up with idle connections until accept() fails. Then:
CreateTopics is answered with KAFKA_STORAGE_ERROR and leaves neither the
topic nor any of its directories behind (a half-done creation is rolled
back); the connection already open keeps working; the broker logs one line
about the shortage, not a traceback per accept attempt. Once the idle
connections go away, the same creation succeeds and a client produces and
consumes on it (confluent-kafka).
"""

from __future__ import annotations

import os
import resource
import socket
import time

from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic


def test_out_of_descriptors_fails_the_request_and_keeps_serving(kref_broker):
    admin = AdminClient({"bootstrap.servers": kref_broker.bootstrap})
    admin.create_topics([NewTopic("before", 1, 1)])["before"].result(15)
    pid = kref_broker.proc.pid
    in_use = len(os.listdir(f"/proc/{pid}/fd"))
    hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)[1]
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (in_use + 40, hard))

    idle = []
    try:
        for _ in range(80):  # more than the limit leaves room for
            idle.append(socket.create_connection((kref_broker.host, kref_broker.port), timeout=5))
        deadline = time.monotonic() + 20
        while "cannot accept connections" not in kref_broker.log_text():
            assert time.monotonic() < deadline, kref_broker.log_text()[-3000:]
            time.sleep(0.1)
        time.sleep(1.0)  # let the broker retry accept() a few times

        futures = admin.create_topics([NewTopic("starved", 50, 1)], request_timeout=15)
        error = futures["starved"].exception(20)
        assert error is not None and error.args[0].code() == KafkaError.KAFKA_STORAGE_ERROR, error
        listed = admin.list_topics(timeout=10).topics  # the open connection still serves
        assert "starved" not in listed and "before" in listed
        data_dir = kref_broker.log_dirs[0]
        assert not [n for n in os.listdir(data_dir) if n.startswith("starved-")]
    finally:
        for s in idle:
            s.close()

    deadline = time.monotonic() + 20
    while len(os.listdir(f"/proc/{pid}/fd")) > in_use + 20:  # the broker drains the closed ones
        assert time.monotonic() < deadline
        time.sleep(0.1)
    text = kref_broker.log_text()
    assert text.count("cannot accept connections") == 1, text[-3000:]
    assert "Traceback" not in text

    admin.create_topics([NewTopic("starved", 3, 1)])["starved"].result(20)
    producer = Producer({"bootstrap.servers": kref_broker.bootstrap})
    producer.produce("starved", b"fed", partition=2)
    assert producer.flush(20) == 0
    consumer = Consumer({"bootstrap.servers": kref_broker.bootstrap, "group.id": "g-starved", "auto.offset.reset": "earliest"})
    consumer.subscribe(["starved"])
    got = None
    deadline = time.monotonic() + 30
    while got is None and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            got = msg.value()
    consumer.close()
    assert got == b"fed"
