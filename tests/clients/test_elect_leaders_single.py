"""ElectLeaders (KIP-460) against the single broker, with confluent-kafka.

The single broker leads every partition it has, so nothing ever needs
electing: each known partition answers ELECTION_NOT_NEEDED (preferred and
unclean alike), an unknown one UNKNOWN_TOPIC_OR_PARTITION. The cluster
case is tests/controller/test_leadership_processes.py.
"""

from __future__ import annotations


def test_elect_leaders_on_a_single_broker(kref_broker):
    from confluent_kafka import ElectionType, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": kref_broker.bootstrap})
    admin.create_topics([NewTopic("solo", num_partitions=2, replication_factor=1)])["solo"].result(timeout=30)
    for kind in (ElectionType.PREFERRED, ElectionType.UNCLEAN):
        result = admin.elect_leaders(kind, [TopicPartition("solo", 0), TopicPartition("solo", 1),
                                            TopicPartition("solo", 7)]).result(timeout=30)
        codes = {tp.partition: err.name() for tp, err in result.items()}
        assert codes == {0: "ELECTION_NOT_NEEDED", 1: "ELECTION_NOT_NEEDED", 7: "UNKNOWN_TOPIC_OR_PART"}, codes  # librdkafka's name for code 3
