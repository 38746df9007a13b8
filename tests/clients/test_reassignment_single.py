"""AlterPartitionReassignments / ListPartitionReassignments (KIP-455) against the
single broker, with kafka-python's KafkaAdminClient.

The single broker is its own controller and the only broker: a target of
just itself changes nothing (NONE), any other broker id is not registered
(INVALID_REPLICA_ASSIGNMENT), a cancel finds nothing in progress
(NO_REASSIGNMENT_IN_PROGRESS), an unknown partition is
UNKNOWN_TOPIC_OR_PARTITION, and the list is always empty. The cluster case is
tests/controller/test_reassignment_processes.py.
"""

from __future__ import annotations


def test_reassignments_on_a_single_broker(kref_broker):
    from kafka import KafkaAdminClient, TopicPartition
    from kafka.admin import NewTopic
    from kafka.errors import (InvalidReplicationAssignmentError, NoReassignmentInProgressError,
                              UnknownTopicOrPartitionError)

    admin = KafkaAdminClient(bootstrap_servers=kref_broker.bootstrap, request_timeout_ms=10_000)
    try:
        admin.create_topics([NewTopic("solo-moves", 2, 1)])
        node_id = admin.describe_cluster()["controller_id"]  # the single broker
        result = admin.alter_partition_reassignments({
            TopicPartition("solo-moves", 0): [node_id],
            TopicPartition("solo-moves", 1): [node_id + 1],
            TopicPartition("solo-moves", 7): [node_id],
        })
        assert result == {
            TopicPartition("solo-moves", 0): None,
            TopicPartition("solo-moves", 1): InvalidReplicationAssignmentError,
            TopicPartition("solo-moves", 7): UnknownTopicOrPartitionError,
        }
        assert admin.alter_partition_reassignments({TopicPartition("solo-moves", 0): None}) == {
            TopicPartition("solo-moves", 0): NoReassignmentInProgressError}
        assert admin.list_partition_reassignments() == {}
    finally:
        admin.close()
