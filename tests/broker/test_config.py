"""BrokerConfig: Kafka's property names and precedence (file < --override,
broker.id/log.dir synonyms, log.retention.ms > minutes > hours), embedded
defaults (127.0.0.1:9092, ./kref-data), Java .properties syntax, and start-up
rejection of unknown names and invalid values with a message naming the
property. Kafka-only machinery settings are accepted and ignored."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kref.broker.config import BrokerConfig, ConfigError, Listener, parse_properties


def test_embedded_defaults():
    c = BrokerConfig.load()
    assert c.listeners == (Listener("PLAINTEXT", "127.0.0.1", 9092),)
    assert c.log_dirs == ("./kref-data",)
    assert c.node_id == 1 and c.num_partitions == 1 and c.auto_create_topics_enable
    assert c.socket_request_max_bytes == 104857600 and c.message_max_bytes == 1048588
    assert c.log_retention_ms_effective == 168 * 3600 * 1000


def test_file_then_overrides(tmp_path):
    f = tmp_path / "server.properties"
    f.write_text(
        "# comment\n! other comment\nbroker.id = 7\nlog.dir=/data/a\nnum.partitions:3\n"
        "listeners=PLAINTEXT://:9093,CONTROLLER://:9094\ncontroller.listener.names=CONTROLLER\n"
        "process.roles=broker,controller\nlog.retention.minutes=5\ncontroller.quorum.voters=7@localhost:9094\n"
    )
    c = BrokerConfig.load(f, ["num.partitions=4", "log.retention.ms=1234"])
    assert c.node_id == 7 and c.log_dirs == ("/data/a",) and c.num_partitions == 4
    assert c.listeners == (Listener("PLAINTEXT", "", 9093),)  # controller listener is not ours
    assert c.advertised == (Listener("PLAINTEXT", "127.0.0.1", 9093),)
    assert c.log_retention_ms_effective == 1234
    assert "num.partitions" in c.explicit and "log.segment.bytes" not in c.explicit


def test_retention_precedence():
    assert BrokerConfig.load(None, ["log.retention.minutes=2"]).log_retention_ms_effective == 120000
    assert BrokerConfig.load(None, ["log.retention.hours=-1"]).log_retention_ms_effective == -1


@pytest.mark.parametrize(
    "override, message",
    [
        ("no.such.thing=1", "unknown broker property no.such.thing"),
        ("num.partitions=0", "num.partitions: 0 is below the minimum 1"),
        ("num.partitions=many", "num.partitions: expected an integer"),
        ("auto.create.topics.enable=yes", "auto.create.topics.enable: expected true or false"),
        ("listeners=localhost:9092", "listeners: 'localhost:9092' is not NAME://host:port"),
        ("log.message.timestamp.type=Now", "log.message.timestamp.type"),
        ("default.replication.factor=3", "single kref broker"),
        ("noequals", "--override expects key=value"),
        ("advertised.listeners=OTHER://h:1", "OTHER is not one of the listeners"),
        # kref speaks PLAINTEXT only; an SSL/SASL listener would garble TLS clients
        ("listeners=SSL://127.0.0.1:0", "SSL://127.0.0.1:0 uses security protocol SSL"),
        ("listeners=EXTERNAL://127.0.0.1:0", "no security protocol for listener EXTERNAL"),
    ],
)
def test_invalid_settings_rejected(override, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        BrokerConfig.load(None, [override])


def test_conflicting_synonyms_rejected():
    with pytest.raises(ConfigError, match="conflicts"):
        BrokerConfig.load(None, ["broker.id=1", "node.id=2"])


def test_properties_syntax():
    props = parse_properties("a=1\nb : two \\\n   three\nc\\:d=x\\ty\n  # indented comment\ne\n")
    assert props == {"a": "1", "b": "two three", "c:d": "x\ty", "e": ""}


def test_topic_defaults_use_topic_names():
    c = BrokerConfig.load(None, ["log.segment.bytes=2048", "log.cleanup.policy=compact,delete"])
    d = c.topic_config_defaults()
    assert d["segment.bytes"] == "2048" and d["cleanup.policy"] == "compact,delete"
    assert d["max.message.bytes"] == "1048588"


def test_cli_rejects_bad_config_with_clear_message(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "kref.cli", "broker", "--override", "log.dirs=" + str(tmp_path / "d"),
         "--override", "log.segmnet.bytes=1"],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 2
    assert "invalid configuration: unknown broker property log.segmnet.bytes" in out.stderr
    assert not (tmp_path / "d").exists()  # nothing touched the disk


KAFKA_KRAFT_SAMPLE = """
############################# Server Basics #############################
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=localhost:9093
############################# Socket Server Settings #############################
listeners=PLAINTEXT://:9092,CONTROLLER://:9093
inter.broker.listener.name=PLAINTEXT
advertised.listeners=PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
############################# Log Basics #############################
log.dirs=/tmp/kraft-combined-logs
num.partitions=1
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
#log.flush.interval.messages=10000
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
"""


def test_kafka_kraft_sample_server_properties(tmp_path):
    """Kafka's own combined-mode sample loads unchanged: one bootstrap
    controller makes a standalone quorum whose only voter is this node."""
    f = tmp_path / "server.properties"
    f.write_text(KAFKA_KRAFT_SAMPLE)
    ignored = []
    c = BrokerConfig.load(f, log=ignored.append)
    assert c.listeners == (Listener("PLAINTEXT", "", 9092),)
    assert c.advertised == (Listener("PLAINTEXT", "localhost", 9092),)
    assert c.log_dirs == ("/tmp/kraft-combined-logs",)
    assert "socket.send.buffer.bytes" in ignored[0] and "process.roles" not in ignored[0]
    assert c.num_io_threads == 8  # described and dynamically settable, though kref has no such pool
    assert c.process_roles == ("broker", "controller") and c.controller_listener_names == ("CONTROLLER",)
    assert [str(v) for v in c.controller_quorum_voters] == ["1@localhost:9093"]
    assert c.controller_listeners == (Listener("CONTROLLER", "", 9093),)


def test_listener_security_protocol_map():
    c = BrokerConfig.load(None, ["listeners=CLIENT://127.0.0.1:0",
                                 "listener.security.protocol.map=CLIENT:PLAINTEXT,CONTROLLER:PLAINTEXT"])
    assert c.listeners == (Listener("CLIENT", "127.0.0.1", 0),)
    with pytest.raises(ConfigError, match="CLIENT://127.0.0.1:0 uses security protocol SASL_SSL"):
        BrokerConfig.load(None, ["listeners=CLIENT://127.0.0.1:0", "listener.security.protocol.map=CLIENT:SASL_SSL"])
