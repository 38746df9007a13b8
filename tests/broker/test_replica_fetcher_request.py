"""kref/broker/replica_fetcher_request.py against kio's writer, byte for byte, and back through kio's reader."""

from __future__ import annotations

import datetime
import sys
import uuid

import pytest

from kref.broker.replica_fetcher_request import encode_fetch_request
from kref.protocol.codec import encode_request, request_class

T1 = uuid.UUID("6f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f1")
T2 = uuid.UUID("00000000-0000-4000-8000-000000000002")


def _kio(correlation_id, client_id, *, replica_id, replica_epoch, max_wait_ms, min_bytes, max_bytes, session_id,
         session_epoch, topics, forgotten=(), rack_id=""):
    cls = request_class(1, 15)
    m = sys.modules[cls.__module__]
    body = cls(
        cluster_id=None,
        replica_state=m.ReplicaState(replica_id=replica_id, replica_epoch=replica_epoch),
        max_wait=datetime.timedelta(milliseconds=max_wait_ms),
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=0,
        session_id=session_id,
        session_epoch=session_epoch,
        topics=tuple(m.FetchTopic(topic_id=t, partitions=tuple(
            m.FetchPartition(partition=p, current_leader_epoch=e, fetch_offset=o, last_fetched_epoch=le,
                             log_start_offset=ls, partition_max_bytes=mb) for p, e, o, le, ls, mb in ps))
            for t, ps in topics),
        forgotten_topics_data=tuple(m.ForgottenTopic(topic_id=t, partitions=tuple(ps)) for t, ps in forgotten),
        rack_id=rack_id,
    )
    return encode_request(body, correlation_id, client_id)


SHAPES = {
    "full, one partition": dict(topics=[(T1, [(0, 3, 1234, 2, 0, 1048576)])]),
    "incremental, nothing named": dict(topics=[], session_id=77, session_epoch=5),
    "several topics and partitions": dict(topics=[
        (T1, [(0, 3, 1 << 40, 3, 17, 1048576), (5, 0, 0, -1, 0, 65536)]),
        (T2, [(2, 9, 99, 8, 12, 1)])]),
    "forgotten topics": dict(topics=[(T1, [(1, 1, 5, 1, 0, 100)])], forgotten=[(T2, [0, 3, 7]), (T1, [4])]),
    "no broker epoch (KIP-903 unknown)": dict(topics=[(T1, [(0, 0, 0, -1, 0, 10)])], replica_epoch=-1),
    "a rack id": dict(topics=[(T1, [(0, 0, 0, -1, 0, 10)])], rack_id="rack-é"),
    "replica state at its default": dict(topics=[], replica_id=-1, replica_epoch=-1),
}


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("client_id", ["kref-replica-fetcher-2-1-0", None])
def test_encoding_equals_kios_writer(shape, client_id):
    args = dict(replica_id=2, replica_epoch=41, max_wait_ms=500, min_bytes=1, max_bytes=10485760,
                session_id=0, session_epoch=0)
    args.update(SHAPES[shape])
    assert encode_fetch_request(9001, client_id, **args) == _kio(9001, client_id, **args)


def test_a_different_request_encodes_differently():
    """The comparison above can fail: one field changed gives other bytes."""
    args = dict(replica_id=2, replica_epoch=41, max_wait_ms=500, min_bytes=1, max_bytes=10485760,
                session_id=0, session_epoch=0, topics=[(T1, [(0, 3, 1234, 2, 0, 1048576)])])
    other = dict(args, topics=[(T1, [(0, 3, 1235, 2, 0, 1048576)])])
    assert encode_fetch_request(1, "x", **args) != _kio(1, "x", **other)
