"""MetadataImage.apply: Kafka's epoch rules and what each delta reports."""

from __future__ import annotations

import uuid

import pytest

from kref.metadata import records as r
from kref.metadata.image import MetadataImage, MetadataImageError, PartitionImage

TID = uuid.UUID(int=7)


def topic_records(num_partitions=2, leader=1):
    return [r.TopicRecord("orders", TID)] + [
        r.PartitionRecord(p, TID, (1, 2, 3), (1, 2, 3), leader, 0, 0) for p in range(num_partitions)
    ]


def test_create_reports_every_partition_and_the_topic():
    image = MetadataImage()
    delta = image.apply(topic_records())
    assert delta.created_topics == ["orders"]
    assert sorted(delta.changed_partitions) == [("orders", 0), ("orders", 1)]
    assert delta.changed_partitions[("orders", 0)] == (None, PartitionImage((1, 2, 3), (1, 2, 3), 1, 0, 0))
    assert image.topic_by_id(TID).name == "orders"


def test_a_leader_field_starts_a_new_term_even_for_the_same_leader():
    image = MetadataImage()
    image.apply(topic_records())
    image.apply([r.PartitionChangeRecord(0, TID, leader=1)])
    assert (image.partition("orders", 0).leader_epoch, image.partition("orders", 0).partition_epoch) == (1, 1)
    image.apply([r.PartitionChangeRecord(0, TID, leader=2)])
    assert (image.partition("orders", 0).leader, image.partition("orders", 0).leader_epoch) == (2, 2)


def test_an_isr_change_bumps_only_the_partition_epoch():
    image = MetadataImage()
    image.apply(topic_records())
    delta = image.apply([r.PartitionChangeRecord(1, TID, isr=(1, 2))])
    before, after = delta.changed_partitions[("orders", 1)]
    assert before.isr == (1, 2, 3) and after.isr == (1, 2)
    assert (after.leader, after.leader_epoch, after.partition_epoch) == (1, 0, 1)


def test_remove_topic_and_configs():
    image = MetadataImage()
    image.apply(topic_records())
    delta = image.apply([r.ConfigRecord(r.TOPIC_RESOURCE, "orders", "retention.ms", "5")])
    assert delta.changed_configs == {(r.TOPIC_RESOURCE, "orders")}
    assert image.topic_configs("orders") == {"retention.ms": "5"}
    image.apply([r.ConfigRecord(r.TOPIC_RESOURCE, "orders", "retention.ms", None)])
    assert image.topic_configs("orders") == {}
    delta = image.apply([r.RemoveTopicRecord(TID)])
    assert list(delta.deleted_topics) == ["orders"] and image.topic("orders") is None
    # created and removed in one delta: only the removal is reported
    delta = MetadataImage().apply(topic_records() + [r.RemoveTopicRecord(TID)])
    assert delta.created_topics == [] and delta.changed_partitions == {} and "orders" in delta.deleted_topics


def test_refusals():
    image = MetadataImage()
    with pytest.raises(MetadataImageError):
        image.apply([r.PartitionRecord(0, TID, (1,), (1,), 1)])
    image.apply(topic_records())
    with pytest.raises(MetadataImageError):
        image.apply([r.TopicRecord("orders", uuid.uuid4())])
    with pytest.raises(MetadataImageError):
        image.apply([r.PartitionRecord(0, TID, (1,), (1,), 1, leader_epoch=-1)])  # an epoch never goes back


def test_snapshot_records_rebuild_the_same_image():
    image = MetadataImage()
    image.apply(topic_records())
    image.apply([
        r.PartitionChangeRecord(0, TID, leader=2, isr=(2, 3)),
        r.ConfigRecord(r.TOPIC_RESOURCE, "orders", "cleanup.policy", "compact"),
        r.RegisterBrokerRecord(1, uuid.UUID(int=1), 10, (r.BrokerEndpoint("PLAINTEXT", "127.0.0.1", 9092),)),
        r.UnfenceBrokerRecord(1, 10),
        r.FeatureLevelRecord("metadata.version", 20),
    ])
    copy = MetadataImage()
    copy.apply(image.to_records())
    assert copy == image


def test_a_broker_serves_clients_once_its_own_incarnation_is_unfenced():
    image = MetadataImage()
    old, new = uuid.UUID(int=1), uuid.UUID(int=2)
    image.apply([r.RegisterBrokerRecord(1, old, 10), r.UnfenceBrokerRecord(1, 10)])
    assert image.ready_to_serve(1, old)
    # A restart: the new incarnation waits for its own registration, then its unfencing.
    assert not image.ready_to_serve(1, new)
    image.apply([r.RegisterBrokerRecord(1, new, 20)])
    assert not image.ready_to_serve(1, new)
    image.apply([r.UnfenceBrokerRecord(1, 10)])  # the old epoch's: ignored
    assert not image.ready_to_serve(1, new)
    image.apply([r.UnfenceBrokerRecord(1, 20)])
    assert image.ready_to_serve(1, new) and not image.ready_to_serve(2, new)


def test_the_client_controller_id_is_always_a_listed_broker():
    image = MetadataImage()
    assert image.client_controller_id(1) == -1  # nobody alive: no controller to name
    image.apply([r.RegisterBrokerRecord(b, uuid.UUID(int=b), 10 + b) for b in (1, 2, 3)])
    assert image.client_controller_id(1) == -1  # registered but fenced are not alive
    image.apply([r.UnfenceBrokerRecord(3, 13), r.UnfenceBrokerRecord(2, 12)])
    assert image.alive_brokers() == [2, 3]
    assert image.client_controller_id(1) == 2  # not alive itself: the lowest alive one
    assert image.client_controller_id(3) == 3  # alive: itself (it forwards)


def test_changes_to_a_snapshot_image_reach_it_and_say_only_what_changed():
    """A node loading a newer snapshot over its image (kref/node/raft_driver.py):
    applying changes_to gives exactly the snapshot's image, and the delta names the
    removed topic, the moved partition and the new topic, not the unchanged ones."""
    gone, kept, new = uuid.UUID(int=1), uuid.UUID(int=2), uuid.UUID(int=3)
    old = MetadataImage()
    old.apply([
        r.RegisterBrokerRecord(1, uuid.UUID(int=11), 5, fenced=False),
        r.RegisterBrokerRecord(2, uuid.UUID(int=12), 6, fenced=False),
        r.TopicRecord("gone", gone), r.PartitionRecord(0, gone, (1,), (1,), 1, 0, 0),
        r.TopicRecord("kept", kept), r.PartitionRecord(0, kept, (1, 2), (1, 2), 1, 0, 0),
        r.PartitionRecord(1, kept, (1, 2), (1, 2), 2, 0, 0),
        r.ConfigRecord(r.TOPIC_RESOURCE, "kept", "retention.ms", "1000"),
        r.ProducerIdsRecord(-1, -1, 1000),
    ])
    target = MetadataImage()
    target.apply([
        r.RegisterBrokerRecord(1, uuid.UUID(int=11), 5, fenced=False),
        r.TopicRecord("kept", kept), r.PartitionRecord(0, kept, (1, 2), (1, 2), 1, 0, 0),
        r.PartitionRecord(1, kept, (1, 2), (1,), 1, 1, 1),
        r.TopicRecord("new", new), r.PartitionRecord(0, new, (2,), (2,), 2, 0, 0),
        r.ConfigRecord(r.TOPIC_RESOURCE, "kept", "cleanup.policy", "compact"),
        r.ProducerIdsRecord(-1, -1, 2000),
    ])
    delta = old.apply(old.changes_to(target))
    assert old.to_records() == target.to_records()
    assert old == target
    assert set(delta.deleted_topics) == {"gone"} and delta.created_topics == ["new"]
    assert set(delta.changed_partitions) == {("kept", 1), ("new", 0)}
    assert 2 in delta.changed_brokers


def test_a_copy_has_the_same_content_and_changes_independently():
    image = MetadataImage()
    image.apply(topic_records())
    image.apply([r.ConfigRecord(r.TOPIC_RESOURCE, "orders", "cleanup.policy", "compact"),
                 r.RegisterBrokerRecord(1, uuid.UUID(int=1), 10, ()), r.UnfenceBrokerRecord(1, 10)])
    copy = image.copy()
    assert copy == image
    copy.apply([
        r.PartitionChangeRecord(0, TID, leader=2, isr=(2, 3)),
        r.PartitionRecord(2, TID, (1, 2, 3), (1, 2, 3), 1, 0, 0),
        r.ConfigRecord(r.TOPIC_RESOURCE, "orders", "retention.ms", "1"),
        r.FenceBrokerRecord(1, 10),
    ])
    assert image.partition("orders", 0).leader == 1 and image.partition("orders", 2) is None
    assert image.topic_configs("orders") == {"cleanup.policy": "compact"}
    assert not image.brokers[1].fenced
    assert copy != image
