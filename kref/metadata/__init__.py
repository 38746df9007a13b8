"""Cluster metadata: Kafka's metadata records (records.py) and their framing in the log (serde.py)."""
