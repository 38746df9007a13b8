"""Request handlers, one module per area, each with `register(router, broker)`.

AREAS lists the modules `register_all` loads, in order. An area appends
itself here (one line each, to keep merges trivial).
"""

from __future__ import annotations

import importlib

AREAS = (
    "metadata",
    "topics",
    "configs",
    "cluster",
    "produce",
    "fetch",
    "list_offsets",
    "delete_records",
    "group",
    "offsets",
    "init_producer_id",
    "log_dirs",
    "offsets_for_leader_epoch",
    "elect_leaders",
    "describe_topic_partitions",
    "reassignments",
    "replica_log_dirs",
)


def register_all(router, broker) -> None:
    for area in AREAS:
        importlib.import_module(f"{__name__}.{area}").register(router, broker)
