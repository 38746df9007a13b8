"""The single broker's metadata source: durable records, torn tails, migration, epochs."""

from __future__ import annotations

import json
import uuid

import pytest

from kref.metadata import records as r
from kref.metadata.local_source import (
    LEGACY_TOPICS_FILE,
    METADATA_LOG_FILE,
    LocalMetadataSource,
    MetadataSourceError,
    restart_leadership,
)

TID = uuid.UUID(int=42)


def opened(path, node_id=1) -> LocalMetadataSource:
    source = LocalMetadataSource(path, node_id)
    source.open()
    return source


def test_committed_records_survive_a_reopen(tmp_path):
    source = opened(tmp_path)
    source.commit([r.TopicRecord("t", TID), r.PartitionRecord(0, TID, (1,), (1,), 1)])
    source.commit([r.PartitionChangeRecord(0, TID, leader=1)])
    source.close()
    again = opened(tmp_path)
    assert again.image == source.image and again.image.partition("t", 0).leader_epoch == 1


def test_a_refused_record_never_reaches_the_file(tmp_path):
    source = opened(tmp_path)
    with pytest.raises(ValueError):
        source.commit([r.PartitionRecord(0, TID, (1,), (1,), 1)])  # no such topic
    source.close()
    assert opened(tmp_path).image.topics == {}


def test_a_torn_tail_is_cut_and_a_corrupt_middle_refused(tmp_path):
    source = opened(tmp_path)
    source.commit([r.TopicRecord("t", TID)])
    source.commit([r.PartitionRecord(0, TID, (1,), (1,), 1)])
    source.close()
    path = tmp_path / METADATA_LOG_FILE
    data = path.read_bytes()
    path.write_bytes(data[:-3])  # a crash mid-append
    assert opened(tmp_path).image.partition("t", 0) is None and opened(tmp_path).image.topic("t") is not None
    data = bytearray(path.read_bytes())
    source = opened(tmp_path)
    source.commit([r.PartitionRecord(0, TID, (1,), (1,), 1)])
    source.close()
    data = bytearray(path.read_bytes())
    data[10] ^= 0xFF  # inside the first record, not the tail
    path.write_bytes(bytes(data))
    with pytest.raises(MetadataSourceError, match="corrupt"):
        opened(tmp_path)


def test_kref_topics_json_is_migrated_with_ids_and_configs(tmp_path):
    legacy = {"version": 1, "topics": [
        {"name": "old", "topic_id": str(TID), "num_partitions": 2, "configs": {"retention.ms": "1000"}},
    ]}
    (tmp_path / LEGACY_TOPICS_FILE).write_text(json.dumps(legacy))
    source = opened(tmp_path)
    assert source.image.topic("old").topic_id == TID
    assert sorted(source.image.topic("old").partitions) == [0, 1]
    assert source.image.topic_configs("old") == {"retention.ms": "1000"}
    assert not (tmp_path / LEGACY_TOPICS_FILE).exists()
    source.close()
    assert opened(tmp_path).image.topic("old").topic_id == TID


def test_corrupt_kref_topics_json_is_refused(tmp_path):
    (tmp_path / LEGACY_TOPICS_FILE).write_text('{"version": 1, "topics": [')
    with pytest.raises(MetadataSourceError, match="corrupt"):
        opened(tmp_path)
    assert (tmp_path / LEGACY_TOPICS_FILE).exists()  # nothing lost


def test_every_restart_is_a_new_term_and_passes_the_log(tmp_path):
    source = opened(tmp_path)
    source.commit([r.TopicRecord("t", TID), r.PartitionRecord(0, TID, (1,), (1,), 1),
                   r.PartitionRecord(1, TID, (1,), (1,), 1)])
    epochs = []
    for _ in range(3):  # restarts with empty logs: never the same epoch twice
        source.commit(restart_leadership(source.image, 1, lambda t, p: -1))
        epochs.append(source.image.partition("t", 0).leader_epoch)
    assert epochs == [1, 2, 3]
    # a log already holding a later epoch (migrated from the old format) is passed
    source.commit(restart_leadership(source.image, 1, lambda t, p: 9 if p == 1 else -1))
    assert source.image.partition("t", 1).leader_epoch == 10 and source.image.partition("t", 0).leader_epoch == 4
