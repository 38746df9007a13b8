"""KRaft configuration and start-up: Kafka's consistency checks, meta.properties,
`kref storage format` / `random-uuid` (issue 9; the garbled meta.properties
item of issue 13).

Config checks are one ConfigError each (one line, exit 2 from the CLI,
checked through a real `kref broker` process once). Start-up refuses an
unformatted dir, a dir of another cluster or node, and a garbled
meta.properties, before touching anything; the single-node broker (no
process.roles) formats itself.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from kref.broker.config import BrokerConfig, ConfigError
from kref.storage import meta_properties as mp

COMBINED = [
    "process.roles=broker,controller",
    "node.id=1",
    "controller.quorum.voters=1@127.0.0.1:9093,2@127.0.0.1:9095,3@127.0.0.1:9097",
    "listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
    "controller.listener.names=CONTROLLER",
    "inter.broker.listener.name=PLAINTEXT",
]


def load(*items: str, base=COMBINED) -> BrokerConfig:
    props = dict(x.split("=", 1) for x in base)
    for item in items:
        key, _, value = item.partition("=")
        if value == "<unset>":
            props.pop(key, None)
        else:
            props[key] = value
    return BrokerConfig.load(None, [f"{k}={v}" for k, v in props.items()])


def test_combined_node():
    c = load("broker.rack=r1", "metadata.log.dir=/tmp/meta")
    assert c.process_roles == ("broker", "controller")
    assert [v.node_id for v in c.controller_quorum_voters] == [1, 2, 3]
    assert [str(lst) for lst in c.controller_listeners] == ["CONTROLLER://127.0.0.1:9093"]
    assert [str(lst) for lst in c.listeners] == ["PLAINTEXT://127.0.0.1:9092"]
    assert c.broker_rack == "r1" and c.metadata_log_dir == "/tmp/meta"
    assert (c.broker_session_timeout_ms, c.broker_heartbeat_interval_ms) == (9000, 2000)
    assert (c.controller_quorum_election_timeout_ms, c.controller_quorum_fetch_timeout_ms) == (1000, 2000)


def test_broker_and_controller_only_nodes():
    broker = load("process.roles=broker", "node.id=4", "listeners=PLAINTEXT://127.0.0.1:9092")
    assert broker.process_roles == ("broker",) and broker.controller_listeners == ()
    controller = load("process.roles=controller", "listeners=CONTROLLER://127.0.0.1:9093",
                      "inter.broker.listener.name=<unset>")
    assert controller.listeners == () and len(controller.controller_listeners) == 1


@pytest.mark.parametrize(
    "items, message",
    [
        (["node.id=9"], "node.id 9 must be one of controller.quorum.voters"),
        (["listeners=PLAINTEXT://127.0.0.1:9092"], "must name one of the listeners"),
        (["controller.listener.names=<unset>"], "controller.listener.names must be set"),
        (["controller.quorum.voters=<unset>"], "controller.quorum.voters must list the controllers"),
        (["controller.quorum.voters=1@h"], "is not id@host:port"),
        (["controller.quorum.voters=1@h:1,1@h:2"], "node id 1 appears more than once"),
        (["process.roles=broker"], "must not be one of controller.quorum.voters"),
        (["process.roles=broker", "node.id=4"], "must not include the controller listener CONTROLLER"),
        (["process.roles=controller"], "must all be controller listeners"),
        (["process.roles=observer"], "unknown role 'observer'"),
        (["process.roles=broker,broker"], "names a role twice"),
        (["inter.broker.listener.name=CONTROLLER"], "must not be a controller listener"),
        (["inter.broker.listener.name=INTERNAL"], "is not one of the listeners"),
        (["broker.heartbeat.interval.ms=9000"], "must be less than broker.session.timeout.ms"),
        (["controller.quorum.fetch.timeout.ms=500"], "must not be less than controller.quorum.election.timeout.ms"),
        (["process.roles=<unset>"], "controller.quorum.voters is set but process.roles is not"),
    ],
)
def test_inconsistent_kraft_configs_rejected(items, message):
    with pytest.raises(ConfigError, match=message):
        load(*items)


def test_random_uuid_is_a_kafka_uuid():
    ids = {mp.random_uuid() for _ in range(200)}
    assert len(ids) == 200
    for cid in ids:
        assert mp.validate_cluster_id(cid) == cid and not cid.startswith("-")
    with pytest.raises(mp.MetaPropertiesError, match="not a Kafka Uuid"):
        mp.validate_cluster_id("my-cluster")


def test_format_then_check(tmp_path):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    cid = mp.random_uuid()
    assert mp.format_dirs(dirs, cid, 3) == dirs
    text = (tmp_path / "a" / "meta.properties").read_text()
    assert f"cluster.id={cid}" in text and "node.id=3" in text and "version=1" in text
    assert mp.ensure_formatted(dirs, 3, require_formatted=True) == cid
    with pytest.raises(mp.MetaPropertiesError, match="already formatted"):
        mp.format_dirs(dirs, cid, 3)
    assert mp.format_dirs(dirs, cid, 3, ignore_formatted=True) == []
    with pytest.raises(mp.MetaPropertiesError, match="not reformatting"):
        mp.format_dirs(dirs, mp.random_uuid(), 3, ignore_formatted=True)


def test_start_refuses_unformatted_foreign_and_garbled_dirs(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    cid = mp.random_uuid()
    with pytest.raises(mp.MetaPropertiesError, match="is not formatted: run `kref storage format"):
        mp.ensure_formatted([str(a)], 1, require_formatted=True)
    assert not a.exists()  # nothing written on refusal
    mp.format_dirs([str(a)], cid, 1)
    mp.format_dirs([str(b)], mp.random_uuid(), 1)
    with pytest.raises(mp.MetaPropertiesError, match="belongs to cluster"):
        mp.ensure_formatted([str(a), str(b)], 1, require_formatted=True)
    with pytest.raises(mp.MetaPropertiesError, match="belongs to node.id 1, but this node is node.id 2"):
        mp.ensure_formatted([str(a)], 2, require_formatted=True)
    for garbage, message in [
        ("node.id=1\nversion=1\n", "has no cluster.id"),
        ("cluster.id=x\nversion=1\nnode.id=one\n", "no valid node.id"),
        ("cluster.id=x\nnode.id=1\n", "no valid version"),
        ("cluster.id=x\nnode.id=1\nversion=0\n", "version 0"),
    ]:
        (b / "meta.properties").write_text(garbage)
        with pytest.raises(mp.MetaPropertiesError, match=message):
            mp.ensure_formatted([str(b)], 1, require_formatted=False)
    (b / "meta.properties").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(mp.MetaPropertiesError, match="not a text properties file"):
        mp.ensure_formatted([str(b)], 1, require_formatted=False)


def test_single_node_broker_formats_itself(tmp_path):
    d = str(tmp_path / "d")
    cid = mp.ensure_formatted([d], 1, require_formatted=False)
    assert mp.read(d).cluster_id == cid and mp.read(d).node_id == 1
    assert mp.ensure_formatted([d], 1, require_formatted=False) == cid
    with pytest.raises(mp.MetaPropertiesError, match="but cluster.id is set to"):
        mp.ensure_formatted([d], 1, require_formatted=False, cluster_id=mp.random_uuid())


def _kref(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "kref.cli", *args], capture_output=True, text=True, timeout=timeout)


def test_storage_cli_and_broker_refusals(tmp_path):
    config = tmp_path / "server.properties"
    data = tmp_path / "data"
    config.write_text("\n".join(COMBINED + [f"log.dirs={data}", f"metadata.log.dir={tmp_path / 'meta'}"]) + "\n")
    out = _kref("storage", "random-uuid")
    assert out.returncode == 0
    cid = out.stdout.strip()
    mp.validate_cluster_id(cid)
    # A node with process.roles refuses an unformatted dir: one line, exit 2, nothing written.
    out = _kref("broker", "--config", str(config))
    assert out.returncode == 2 and "is not formatted" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert not (data / "meta.properties").exists()
    out = _kref("storage", "format", "--cluster-id", "bad", "--config", str(config))
    assert out.returncode == 2 and "not a Kafka Uuid" in out.stderr
    out = _kref("storage", "format", "--cluster-id", cid, "--config", str(config))
    assert out.returncode == 0, out.stderr
    assert mp.read(data).cluster_id == cid and mp.read(tmp_path / "meta").cluster_id == cid
    out = _kref("storage", "format", "--cluster-id", cid, "--config", str(config))
    assert out.returncode == 1 and "already formatted" in out.stderr
    # An inconsistent quorum config: one line, exit 2.
    out = _kref("broker", "--config", str(config), "--override", "node.id=7")
    assert out.returncode == 2
    assert "node.id 7 must be one of controller.quorum.voters" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
