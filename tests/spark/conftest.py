"""Fixtures for the Spark connector tests: one real local SparkSession and one
real broker per module, plus helpers that produce and consume with a real
Kafka client (confluent-kafka), never through the connector under test."""

from __future__ import annotations

import importlib.util
import os
import sys
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

JAVA_HOME = "/usr/lib/jvm/java-17-openjdk-amd64"


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
        # kref's daemon: the connector's modules imported once, before the fork
        # (kref/spark/daemon.py); every test below runs through it.
        .config("spark.python.daemon.module", "kref.spark.daemon")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@dataclass
class Broker:
    bootstrap: str

    def create_topic(self, partitions: int, prefix: str = "t", config: dict | None = None) -> str:
        from confluent_kafka.admin import AdminClient, NewTopic

        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        new = NewTopic(name, partitions, 1, config=config or {})
        for future in admin.create_topics([new]).values():
            future.result(timeout=30)
        return name

    def produce(self, topic: str, records):
        """Produce (key, value, partition, headers) tuples with acks=all; return
        the delivered (partition, offset, key, value, headers) of each, sorted."""
        from confluent_kafka import Producer

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


def _load_kref_broker_class():
    # The clients' fixture module owns how a `kref broker` subprocess is run;
    # load its class by path (conftest modules are not importable by name).
    path = Path(__file__).resolve().parents[1] / "clients" / "conftest.py"
    spec = importlib.util.spec_from_file_location("kref_clients_conftest", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.KrefBroker


@pytest.fixture
def start_kref_broker():
    """Start another real `kref broker` subprocess with config overrides:
    `with start_kref_broker(base_dir, overrides) as bootstrap: ...`."""

    @contextmanager
    def start(base: Path, overrides: dict[str, str]):
        handle = _load_kref_broker_class()(base, overrides).start()
        try:
            yield handle.bootstrap
        finally:
            handle.kill()

    return start


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """A real `kref broker` subprocess on a free loopback port (module scope:
    one broker for the module, each test on its own topics)."""
    base = tmp_path_factory.mktemp("kref-broker")
    handle = _load_kref_broker_class()(base).start()
    try:
        yield Broker(handle.bootstrap)
    finally:
        handle.kill()
        # Shown by pytest only when a test failed.
        print(f"--- kref broker log ({handle.bootstrap}) ---\n{handle.log_text()[-20000:]}")
