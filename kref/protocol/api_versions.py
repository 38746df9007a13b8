"""ApiVersions responses (KIP-35, KIP-511) built from the router's table.

Theory of operation: the broker advertises exactly the (api_key, min, max)
ranges its router has handlers for, nothing more (librdkafka, for one, uses
every API it sees advertised, e.g. GetTelemetrySubscriptions). A request
for a version we do not support gets UNSUPPORTED_VERSION in the v0 layout,
which every client can parse, so it can retry with a version it finds there.
No tagged fields are sent (see codec.py for why).
"""

from __future__ import annotations

import datetime
import sys
from collections.abc import Mapping

from kref.protocol.codec import API_VERSIONS_KEY, response_class
from kref.protocol.errors import ErrorCode

__all__ = ["api_versions_response", "unsupported_version_response", "KAFKA_4_1_MAX_VERSIONS"]

# Upper versions Apache Kafka 4.1 brokers advertise for the client-facing
# APIs; we never advertise above these even where kio has newer schemas.
KAFKA_4_1_MAX_VERSIONS = {
    0: 13,  # Produce
    1: 17,  # Fetch
    2: 10,  # ListOffsets
    3: 13,  # Metadata
    8: 9,  # OffsetCommit
    9: 9,  # OffsetFetch
    10: 6,  # FindCoordinator
    11: 9,  # JoinGroup
    12: 4,  # Heartbeat
    13: 5,  # LeaveGroup
    14: 5,  # SyncGroup
    15: 6,  # DescribeGroups
    16: 5,  # ListGroups
    18: 4,  # ApiVersions
    19: 7,  # CreateTopics
    20: 6,  # DeleteTopics
    21: 2,  # DeleteRecords
    22: 5,  # InitProducerId
    23: 4,  # OffsetForLeaderEpoch
    32: 4,  # DescribeConfigs
    37: 3,  # CreatePartitions
    42: 2,  # DeleteGroups
    44: 1,  # IncrementalAlterConfigs
    47: 0,  # OffsetDelete
    60: 2,  # DescribeCluster
}

_ZERO = datetime.timedelta(0)


def _entries(module_type, ranges: Mapping[int, tuple[int, int]]):
    return tuple(
        module_type(api_key=key, min_version=lo, max_version=hi) for key, (lo, hi) in sorted(ranges.items())
    )


def api_versions_response(api_version: int, ranges: Mapping[int, tuple[int, int]]):
    response_type = response_class(API_VERSIONS_KEY, api_version)
    kwargs = {"error_code": ErrorCode.NONE, "api_keys": _entries(_entry_class(response_type), ranges)}
    if "throttle_time" in response_type.__dataclass_fields__:
        kwargs["throttle_time"] = _ZERO
    return response_type(**kwargs)


def unsupported_version_response(ranges: Mapping[int, tuple[int, int]]):
    response_type = response_class(API_VERSIONS_KEY, 0)
    return response_type(error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=_entries(_entry_class(response_type), ranges))


def _entry_class(response_type):
    """The nested ApiVersion type generated next to this response version."""
    return sys.modules[response_type.__module__].ApiVersion
