"""The connector's own blocking connections to kref brokers, for its columnar paths.

Theory of operation: the columnar read and write paths (native_source.py,
native_sink.py) move whole record batches between the broker and Arrow
buffers, so they speak the Kafka protocol themselves instead of going
through librdkafka's per-record API. What they share lives here:

* `Brokers` holds, for one bootstrap list, one blocking connection per
  broker node (kref.protocol.client.WireClient), opened on first use, with
  that node's ApiVersions ranges read once per connection, and the
  partition leaders of the topics asked for (Metadata). A Kafka client
  learns the same things the same way: bootstrap, Metadata, then a
  connection per leader.
* Leaders are cached until a caller asks for a refresh (after
  NOT_LEADER_OR_FOLLOWER and the like), as a Kafka client refreshes its
  metadata on those errors.
* Every wait is bounded by the socket timeout; every failure surfaces as
  the connector's own error types (client.BrokerUnreachableError,
  client.UnknownTopicError) with the bootstrap list in the message.
* `brokers()` keeps one idle `Brokers` per process (Spark reuses its Python
  workers across tasks, as the librdkafka path's pools do), and
  `native_config()` says whether a connector configuration is one these
  paths serve: plain connections only; anything else (TLS, SASL, options
  that only librdkafka understands) stays on the librdkafka path, which
  remains the reference.
"""

from __future__ import annotations

import socket
import sys
import time

from kref.protocol.client import WireClient
from kref.protocol.codec import decode_response, request_class, response_class

from . import client

__all__ = ["Brokers", "brokers", "native_config", "parse_bootstrap"]

API_VERSIONS_KEY = 18
METADATA_KEY = 3
# Metadata v9 is the first flexible version; kref serves v9-v12 (and more).
_METADATA_VERSIONS = (9, 12)

# Kafka error codes this module reads.
_NONE = 0
_UNKNOWN_TOPIC_OR_PARTITION = 3
_LEADER_NOT_AVAILABLE = 5

# Connector (librdkafka) settings the columnar paths honour or that do not
# change what goes on the wire; any other key keeps a task on the
# librdkafka path, so no setting is silently ignored.
_NATIVE_KEYS = frozenset({
    "bootstrap.servers", "client.id", "log_level", "group.id", "isolation.level",
    "enable.auto.commit", "enable.auto.offset.store", "auto.offset.reset",
    "enable.partition.eof", "fetch.queue.backoff.ms", "fetch.wait.max.ms",
    "queued.max.messages.kbytes", "acks", "partitioner", "linger.ms",
    "queue.buffering.max.kbytes", "queue.buffering.max.messages", "message.timeout.ms",
    "delivery.report.only.error", "socket.timeout.ms", "request.timeout.ms",
    # The sink compresses its batches itself (native_sink.compression_of).
    "compression.type", "compression.codec", "compression.level",
})


def native_config(cfg: dict) -> bool:
    """True when every setting in `cfg` is one the columnar paths serve
    (plain connections; e.g. security.protocol=SSL or SASL stays on librdkafka)."""
    if str(cfg.get("security.protocol", "plaintext")).lower() != "plaintext":
        return False
    return all(key in _NATIVE_KEYS or key == "security.protocol" for key in cfg)


def parse_bootstrap(bootstrap: str) -> list[tuple[str, int]]:
    """'h1:9092,h2:9093' -> [('h1', 9092), ('h2', 9093)] (IPv6 as [addr]:port)."""
    out = []
    for item in bootstrap.split(","):
        item = item.strip()
        if not item:
            continue
        if "://" in item:
            item = item.split("://", 1)[1]
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit():
            raise client.KrefConnectorError(f"bad bootstrap server {item!r}: expected host:port")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise client.KrefConnectorError(f"no bootstrap server in {bootstrap!r}")
    return out


def _version_in(ranges: dict[int, tuple[int, int]], api_key: int, lo: int, hi: int) -> int | None:
    got = ranges.get(api_key)
    if got is None:
        return None
    best = min(hi, got[1])
    return best if best >= max(lo, got[0]) else None


class Brokers:
    """One process's blocking connections to the brokers behind one bootstrap list."""

    def __init__(self, bootstrap: str, *, timeout_s: float = 30.0):
        self.bootstrap = bootstrap
        self.timeout_s = timeout_s
        self._seeds = parse_bootstrap(bootstrap)
        # node id -> (host, port), from the last Metadata answer.
        self._addresses: dict[int, tuple[str, int]] = {}
        self._connections: dict[int, WireClient] = {}
        self._versions: dict[int, dict[int, tuple[int, int]]] = {}
        # topic -> leader node id per partition index (-1: no leader).
        self._leaders: dict[str, list[int]] = {}
        # The connection Metadata goes to: any live one, else a seed.
        self._seed_conn: WireClient | None = None
        self._seed_ranges: dict[int, tuple[int, int]] = {}

    # -- connections ---------------------------------------------------------

    def _unreachable(self, what: str, exc: BaseException) -> client.BrokerUnreachableError:
        return client.BrokerUnreachableError(
            f"kref broker unreachable at {self.bootstrap!r} ({what}): {exc}"
        )

    def _open(self, host: str, port: int) -> tuple[WireClient, dict[int, tuple[int, int]]]:
        conn = WireClient(host, port, timeout=self.timeout_s)
        try:
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            # ApiVersions v0 is the request every broker answers in a layout
            # every client can read (KIP-511's fallback).
            answer = conn.request(request_class(API_VERSIONS_KEY, 0)())
            if int(answer.error_code) != _NONE:
                raise client.KrefConnectorError(
                    f"kref broker {host}:{port} refused ApiVersions: error {int(answer.error_code)}"
                )
            ranges = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in answer.api_keys}
        except BaseException:
            conn.close()
            raise
        return conn, ranges

    def _metadata_conn(self) -> tuple[WireClient, dict[int, tuple[int, int]]]:
        # Its own connection, never a node's: a caller may have requests in
        # flight on those (pipelined), and answers come back in order.
        if self._seed_conn is not None:
            return self._seed_conn, self._seed_ranges
        errors = []
        for host, port in self._seeds:
            try:
                self._seed_conn, self._seed_ranges = self._open(host, port)
                return self._seed_conn, self._seed_ranges
            except (OSError, ConnectionError) as exc:
                errors.append(f"{host}:{port}: {exc}")
        raise client.BrokerUnreachableError(
            f"kref broker unreachable at {self.bootstrap!r}: {'; '.join(errors)}"
        )

    def connection(self, node_id: int) -> WireClient:
        """The connection to broker `node_id` (opened on first use, then kept)."""
        conn = self._connections.get(node_id)
        if conn is not None:
            return conn
        address = self._addresses.get(node_id)
        if address is None:
            raise client.KrefConnectorError(
                f"kref broker {node_id} is not in the cluster's metadata (bootstrap {self.bootstrap!r})"
            )
        try:
            conn, ranges = self._open(*address)
        except (OSError, ConnectionError) as exc:
            raise self._unreachable(f"node {node_id} at {address[0]}:{address[1]}", exc) from None
        self._connections[node_id] = conn
        self._versions[node_id] = ranges
        return conn

    def api_version(self, node_id: int, api_key: int, lo: int, hi: int) -> int | None:
        """The highest version in [lo, hi] that node's ApiVersions allows, or None."""
        self.connection(node_id)
        return _version_in(self._versions[node_id], api_key, lo, hi)

    def set_timeout(self, timeout_s: float) -> None:
        """Wait at most `timeout_s` on each answer from now on (open connections too)."""
        self.timeout_s = timeout_s
        for conn in (*self._connections.values(), self._seed_conn):
            if conn is not None:
                conn.sock.settimeout(timeout_s)

    def drop(self, node_id: int) -> None:
        """Close the connection to `node_id` (after an I/O error: the next use reconnects)."""
        conn = self._connections.pop(node_id, None)
        self._versions.pop(node_id, None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        for node in list(self._connections):
            self.drop(node)
        if self._seed_conn is not None:
            self._seed_conn.close()
            self._seed_conn = None

    # -- metadata ------------------------------------------------------------

    def _metadata(self, topic: str, create: bool):
        conn, ranges = self._metadata_conn()
        version = _version_in(ranges, METADATA_KEY, *_METADATA_VERSIONS)
        if version is None:
            raise client.KrefConnectorError(
                f"kref broker at {self.bootstrap!r} serves no Metadata version in "
                f"{_METADATA_VERSIONS[0]}-{_METADATA_VERSIONS[1]}"
            )
        request_type = request_class(METADATA_KEY, version)
        topic_type = sys.modules[request_type.__module__].MetadataRequestTopic
        fields = request_type.__dataclass_fields__
        kwargs = {
            "topics": (topic_type(**({"topic_id": None} if "topic_id" in topic_type.__dataclass_fields__ else {}), name=topic),),
            "allow_auto_topic_creation": create,
            "include_topic_authorized_operations": False,
        }
        if "include_cluster_authorized_operations" in fields:
            kwargs["include_cluster_authorized_operations"] = False
        try:
            return conn.request(request_type(**kwargs), response_class(METADATA_KEY, version))
        except (OSError, ConnectionError) as exc:
            self._forget(conn)
            raise self._unreachable("Metadata", exc) from None

    def _forget(self, conn: WireClient) -> None:
        if conn is self._seed_conn:
            self._seed_conn = None
            conn.close()

    def leaders(self, topic: str, *, refresh: bool = False, create: bool = False) -> list[int]:
        """Leader node id per partition index of `topic` (-1: none right now).

        `create`: ask with allow_auto_topic_creation, as a producer does, so a
        broker with auto.create.topics.enable creates a missing topic; a
        refusal is client.UnknownTopicError. A topic whose leaders are not yet
        elected (LEADER_NOT_AVAILABLE, just after creation) is asked again
        until the timeout.
        """
        known = self._leaders.get(topic)
        if known is not None and not refresh:
            return known
        deadline = time.monotonic() + self.timeout_s
        while True:
            answer = self._metadata(topic, create)
            self._addresses.update(
                {int(b.node_id): (b.host, int(b.port)) for b in answer.brokers}
            )
            found = next((t for t in answer.topics if t.name == topic), None)
            error = _UNKNOWN_TOPIC_OR_PARTITION if found is None else int(found.error_code)
            if error == _NONE and found.partitions:
                leaders = [-1] * (max(int(p.partition_index) for p in found.partitions) + 1)
                for p in found.partitions:
                    leaders[int(p.partition_index)] = int(p.leader_id)
                self._leaders[topic] = leaders
                return leaders
            if error not in (_NONE, _LEADER_NOT_AVAILABLE) or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        if create:
            raise client.topic_refused(topic, self.bootstrap, f"Metadata error {error}")
        raise client.UnknownTopicError(
            f"topic {topic!r} does not exist on kref broker {self.bootstrap!r} (Metadata error {error})"
        )


# One idle Brokers per process, as the librdkafka path keeps one client of each kind.
_idle = client._IdleSlot(close=lambda b: b.close())


def brokers(bootstrap: str, timeout_s: float = 30.0) -> Brokers:
    """This worker's Brokers for `bootstrap` (taken from the idle slot, or new),
    waiting at most `timeout_s` on each answer.
    Give it back with `keep()` after a clean use; drop it (close()) after a failure.

    The slot is keyed by the bootstrap list alone: a worker that reads and
    writes the same cluster keeps its connections across both, whatever
    timeout each task asks for (the reader's and the sink's differ)."""
    found = _idle.take((bootstrap,))
    if found is None:
        return Brokers(bootstrap, timeout_s=timeout_s)
    found.set_timeout(timeout_s)
    return found


def keep(handle: Brokers) -> None:
    """Return `handle` to the idle slot for the next task in this process."""
    _idle.keep((handle.bootstrap,), handle)


def close_idle() -> None:
    """Close this process's idle Brokers, if any (a process done with the cluster)."""
    _idle.clear()
