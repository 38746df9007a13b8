"""The ids port: where drivers get fresh identifiers and random seeds.

Theory of operation
-------------------
Kafka draws several values at random that no decision depends on but every
later decision refers to: a topic id (CreateTopics), a broker's incarnation
id (BrokerRegistration), a cluster or directory id (`kafka-storage format`),
the unique name a deleted partition's directory is renamed to, and the seed
of a raft node's election jitter. Cores never draw them; their drivers do,
and hand the value to the core as data. This port is that one source, so a
driver runs unchanged on the machine's entropy (`SystemIds`, the default)
and on one seed (`SeededIds`: a simulator or a test replays the same ids
and the same jitter run after run).

- `uuid()`: a random (version 4) UUID.
- `seed()`: a non-negative 63-bit integer, to seed a core's own generator.
"""

from __future__ import annotations

import random
import uuid as _uuid
from typing import Protocol


class Ids(Protocol):
    def uuid(self) -> _uuid.UUID: ...

    def seed(self) -> int: ...


class SystemIds:
    """The machine's entropy (the broker, `kref cluster`, `kref storage`)."""

    def uuid(self) -> _uuid.UUID:
        return _uuid.uuid4()

    def seed(self) -> int:
        return random.SystemRandom().getrandbits(63)


class SeededIds:
    """Every id and seed from one seeded generator: the same seed, the same values."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)

    def uuid(self) -> _uuid.UUID:
        return _uuid.UUID(int=self._rng.getrandbits(128), version=4)

    def seed(self) -> int:
        return self._rng.getrandbits(63)


SYSTEM_IDS = SystemIds()
