"""kref: a formally specified reference implementation of Apache Kafka's internals.

Every stateful actor is a pure state machine (sans-IO) driven by the trio
broker, the deterministic simulator or the tests; see docs/architecture.md.
"""

__version__ = "0.1.0"
