"""Kafka's framing of metadata records (kref/metadata/serde.py).

Round trips for every record type (tagged fields present and absent),
fixed bytes for a few records worked out by hand from the layout (frame
version, apiKey, version as unsigned varints; flexible encoding; a tagged
field section), and garbled values refused with MetadataRecordError rather
than misread.
"""

from __future__ import annotations

import uuid

import pytest

from kref.metadata import records as r
from kref.metadata import serde

TOPIC_ID = uuid.UUID("00000000-0000-0000-0000-00000000000a")

ALL = [
    r.RegisterBrokerRecord(
        broker_id=1, incarnation_id=uuid.uuid4(), broker_epoch=5,
        end_points=(r.BrokerEndpoint("PLAINTEXT", "127.0.0.1", 9092, 0),),
        features=(r.BrokerFeature("metadata.version", 1, 20),), rack="r1", fenced=True,
    ),
    r.RegisterBrokerRecord(broker_id=2, incarnation_id=uuid.uuid4(), broker_epoch=6),
    r.UnregisterBrokerRecord(broker_id=2, broker_epoch=6),
    r.FenceBrokerRecord(id=1, epoch=7),
    r.UnfenceBrokerRecord(id=2, epoch=8),
    r.BrokerRegistrationChangeRecord(broker_id=2, broker_epoch=8, in_controlled_shutdown=1),
    r.BrokerRegistrationChangeRecord(broker_id=2, broker_epoch=8, fenced=-1),
    r.TopicRecord(name="t", topic_id=TOPIC_ID),
    r.PartitionRecord(partition_id=0, topic_id=TOPIC_ID, replicas=(1, 2, 3), isr=(1, 2), leader=1,
                      leader_epoch=3, partition_epoch=4),
    r.PartitionChangeRecord(partition_id=1, topic_id=TOPIC_ID, isr=(1,)),
    r.PartitionChangeRecord(partition_id=1, topic_id=TOPIC_ID, isr=(1,), leader=r.NO_LEADER, replicas=(1, 2)),
    r.PartitionChangeRecord(partition_id=1, topic_id=TOPIC_ID),
    r.RemoveTopicRecord(topic_id=TOPIC_ID),
    r.ConfigRecord(resource_type=r.TOPIC_RESOURCE, resource_name="t", name="cleanup.policy", value="compact"),
    r.ConfigRecord(resource_type=r.TOPIC_RESOURCE, resource_name="t", name="x", value=None),
    r.FeatureLevelRecord(name="metadata.version", feature_level=20),
]


@pytest.mark.parametrize("record", ALL, ids=lambda x: type(x).__name__)
def test_round_trip(record):
    assert serde.decode(serde.encode(record)) == record


def test_fixed_bytes():
    # frame 1, apiKey 7, version 0, id int32 1, epoch int64 7, no tagged fields
    assert serde.encode(r.FenceBrokerRecord(id=1, epoch=7)).hex() == "010700" + "00000001" + "0000000000000007" + "00"
    # TopicRecord: compact string "t" (length 1 + 1), 16-byte uuid, no tagged fields
    assert serde.encode(r.TopicRecord(name="t", topic_id=TOPIC_ID)).hex() == "010200" + "0274" + TOPIC_ID.hex + "00"
    # PartitionChangeRecord with only the isr: tagged field 0 = compact array [1]
    change = serde.encode(r.PartitionChangeRecord(partition_id=3, topic_id=TOPIC_ID, isr=(1,)))
    assert change.hex() == "010500" + "00000003" + TOPIC_ID.hex + "01" + "00" + "05" + "02" + "00000001"


@pytest.mark.parametrize(
    "data, message",
    [
        (b"", "needs"),
        (bytes.fromhex("020700"), "frame version 2"),
        (bytes.fromhex("016300"), "unknown metadata record type 99"),
        (bytes.fromhex("010705"), "version 5"),
        (bytes.fromhex("010700000001"), "needs"),
        (serde.encode(r.FenceBrokerRecord(id=1, epoch=7)) + b"\x00", "bytes after the record"),
    ],
)
def test_garbled_values_refused(data, message):
    with pytest.raises(serde.MetadataRecordError, match=message):
        serde.decode(data)


def test_broker_registration_change_tags():
    # apiKey 17 version 1; InControlledShutdown is tag 1, absent when 0 (no change)
    value = serde.encode(r.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=7, in_controlled_shutdown=1))
    assert value.hex() == "011101" + "00000001" + "0000000000000007" + "01" + "01" + "01" + "01"
