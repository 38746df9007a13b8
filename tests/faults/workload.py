"""The clients of a fault run: idempotent acks=all producers and consumers.

Theory of operation
-------------------
Each producer is a thread owning one confluent-kafka Producer (acks=all,
enable.idempotence=true, short message/request timeouts so every write is
resolved within a bounded time). It writes unique values
b"<producer>:<seq>" round-robin over the partitions at a fixed rate and
records every value it hands over (`attempted`) and every delivery report
without an error (`acked`, with partition and offset). A fatal idempotence
error (librdkafka's error_cb with fatal()) retires that Producer; the
thread starts a new one under a new producer number, so sequence order is
only ever checked within one idempotent producer.

Each consumer is a thread with a confluent-kafka Consumer assigned every
partition from the beginning (no group: it observes, it commits nothing)
that records every (partition, offset, value) it polls.

`final_read` reads every partition from offset 0 to its high watermark
with a fresh consumer after the faults are undone. Every loop is bounded
by a deadline.
"""

from __future__ import annotations

import queue
import threading
import time

from tests.faults.checker import History, encode_value

PRODUCER_CONFIG = {
    "acks": "all",
    "enable.idempotence": True,
    # Longer than any fault plus a failover: a message that times out while in
    # flight makes librdkafka bump the producer epoch and re-send (drain and bump),
    # which the broker cannot deduplicate across epochs.
    "message.timeout.ms": 20000,
    "request.timeout.ms": 5000,
    "socket.timeout.ms": 5000,
    "topic.metadata.refresh.interval.ms": 1000,
    "metadata.max.age.ms": 3000,
    "retry.backoff.ms": 100,
    "reconnect.backoff.max.ms": 500,
    "linger.ms": 2,
    "log_level": 0,
}
CONSUMER_CONFIG = {
    "enable.auto.commit": False,
    "auto.offset.reset": "earliest",
    "fetch.wait.max.ms": 100,
    "topic.metadata.refresh.interval.ms": 1000,
    "socket.timeout.ms": 5000,
    "reconnect.backoff.max.ms": 500,
    "log_level": 0,
}


class ProducerThread(threading.Thread):
    def __init__(self, index: int, bootstrap: str, topic: str, partitions: int, rate: float, stop: threading.Event,
                 debug_dir=None):
        super().__init__(name=f"producer-{index}", daemon=True)
        self.debug_dir = debug_dir
        self.index, self.bootstrap, self.topic, self.partitions = index, bootstrap, topic, partitions
        self.rate, self.stop = rate, stop
        # Delivery callbacks only put reports on a SimpleQueue, never take a
        # lock: librdkafka may run a callback re-entrantly (a Producer freed by
        # the garbage collector serves its outstanding reports in whatever
        # thread frees it), and a lock taken there deadlocked a CI run.
        # SimpleQueue.put is documented as re-entrant; readers drain it.
        self.reports: queue.SimpleQueue = queue.SimpleQueue()
        self.lock = threading.Lock()  # guards the drained state below, taken by readers only
        self.attempted: set[bytes] = set()
        self.acked: list[tuple[bytes, int, int]] = []
        self._errors: dict[str, int] = {}
        self.fatal = 0
        self.generation = 0
        self.latencies_ms: list[float] = []

    def _new_producer(self):
        from confluent_kafka import Producer

        fatal = threading.Event()

        def on_error(err):
            if err.fatal():
                fatal.set()

        config = {"bootstrap.servers": self.bootstrap, "error_cb": on_error, **PRODUCER_CONFIG}
        if self.debug_dir is not None:
            # KREF_FAULT_CLIENT_DEBUG: librdkafka's idempotence and protocol log, one file per producer.
            import logging

            logger = logging.getLogger(f"rdkafka.{self.index}.{self.generation}")
            logger.setLevel(logging.DEBUG)
            logger.propagate = False
            logger.addHandler(logging.FileHandler(self.debug_dir / f"producer-{self.index}-{self.generation}.log"))
            config.update({"log_level": 7, "debug": "eos,protocol,msg,broker", "logger": logger})
        producer = Producer(config)
        return producer, fatal

    def _on_delivery(self, sent_ns):
        def callback(err, msg):
            if err is None:
                self.reports.put(("acked", (msg.value(), msg.partition(), msg.offset()),
                                  (time.monotonic_ns() - sent_ns) / 1e6))
            else:
                self.reports.put(("error", err.name(), None))
        return callback

    def drain(self) -> None:
        """Move the queued delivery reports into acked/errors (never called from a callback)."""
        with self.lock:
            while True:
                try:
                    kind, what, latency = self.reports.get_nowait()
                except queue.Empty:
                    return
                if kind == "acked":
                    self.acked.append(what)
                    self.latencies_ms.append(latency)
                elif kind == "attempted":
                    self.attempted.add(what)
                else:
                    self._errors[what] = self._errors.get(what, 0) + 1

    @property
    def errors(self) -> dict[str, int]:
        self.drain()
        with self.lock:
            return dict(self._errors)

    def run(self) -> None:
        producer, fatal = self._new_producer()
        seq, interval = 0, 1.0 / self.rate
        next_at = time.monotonic()
        while not self.stop.is_set():
            if fatal.is_set():
                self._quietly(producer.flush, 10)
                # Whatever is still queued will never be acknowledged by this
                # producer: purge it now (its reports say so) rather than
                # leave it to the garbage collector's timing.
                self._quietly(producer.purge)
                self._quietly(producer.poll, 0)
                self.fatal += 1
                self.generation += 1
                producer, fatal = self._new_producer()
                seq = 0
            number = self.index * 100 + self.generation
            value = encode_value(number, seq)
            try:
                producer.produce(self.topic, value, partition=seq % self.partitions,
                                 on_delivery=self._on_delivery(time.monotonic_ns()))
                self.reports.put(("attempted", value, None))
                seq += 1
            except BufferError:
                pass
            except Exception as exc:  # a fatal state surfaces here too; the error_cb flag handles it
                self.reports.put(("error", type(exc).__name__, None))
                time.sleep(0.05)
            if not self._quietly(producer.poll, 0):
                # librdkafka raises a fatal idempotence error from poll() too
                # (e.g. OUT_OF_ORDER_SEQUENCE_NUMBER after an unclean election
                # lost what it had acknowledged); replace the producer, as the
                # error_cb path does, instead of letting the thread die.
                fatal.set()
            next_at += interval
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            else:
                next_at = time.monotonic()
        # Bounded: message.timeout.ms resolves every outstanding write well within this.
        self._quietly(producer.flush, PRODUCER_CONFIG["message.timeout.ms"] / 1000 + 5)

    def _quietly(self, call, *args) -> bool:
        """Run a producer call; an exception it raises is counted, not fatal to the thread."""
        try:
            call(*args)
            return True
        except Exception as exc:
            self.reports.put(("error", type(exc).__name__, None))
            return False


class ConsumerThread(threading.Thread):
    def __init__(self, name: str, bootstrap: str, topic: str, partitions: int, stop: threading.Event):
        super().__init__(name=name, daemon=True)
        self.bootstrap, self.topic, self.partitions, self.stop = bootstrap, topic, partitions, stop
        self.observed: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
        self.errors: dict[str, int] = {}

    def run(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"jepsen-{self.name}", **CONSUMER_CONFIG})
        consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in range(self.partitions)])
        try:
            while not self.stop.is_set():
                message = consumer.poll(0.2)
                if message is None:
                    continue
                if message.error() is not None:
                    name = message.error().name()
                    self.errors[name] = self.errors.get(name, 0) + 1
                    continue
                self.observed[message.partition()].append((message.offset(), message.value()))
        finally:
            consumer.close()


def final_read(bootstrap: str, topic: str, partitions: int, timeout_s: float = 30, **extra):
    """Every partition from offset 0 to its high watermark, within `timeout_s`.

    Returns (records, unread): unread maps a partition that was not read up to
    its high watermark in time to (offset reached, high watermark; -1 if unknown).
    """
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "jepsen-final", **CONSUMER_CONFIG, **extra})
    deadline = time.monotonic() + timeout_s
    out = {p: [] for p in range(partitions)}
    ends: dict[int, int] = {}
    try:
        for p in range(partitions):
            while p not in ends and time.monotonic() < deadline:
                try:
                    ends[p] = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1]
                except Exception:
                    time.sleep(0.2)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends if ends[p] > 0])
        position = {p: 0 for p in ends}
        while any(position[p] < ends[p] for p in ends) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            p = message.partition()
            if message.offset() < ends[p]:
                out[p].append((message.offset(), message.value()))
            position[p] = max(position[p], message.offset() + 1)
        unread = {p: (position.get(p, 0), ends.get(p, -1)) for p in range(partitions)
                  if p not in ends or position[p] < ends[p]}
        return out, unread
    finally:
        consumer.close()


def history(producers, consumers, final, unread=None) -> History:
    h = History(final=final, unread=dict(unread or {}))
    for p in producers:
        p.drain()
        with p.lock:
            h.attempted |= p.attempted
            h.acked += p.acked
    h.observed = {c.name: c.observed for c in consumers}
    return h
