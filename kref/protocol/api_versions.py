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

__all__ = ["api_versions_response", "unsupported_version_response"]

_ZERO = datetime.timedelta(0)


def _entries(module_type, ranges: Mapping[int, tuple[int, int]]):
    return tuple(
        module_type(api_key=key, min_version=lo, max_version=hi) for key, (lo, hi) in sorted(ranges.items())
    )


def api_versions_response(
    api_version: int, ranges: Mapping[int, tuple[int, int]], *, error_code: ErrorCode = ErrorCode.NONE
):
    response_type = response_class(API_VERSIONS_KEY, api_version)
    kwargs = {"error_code": error_code, "api_keys": _entries(_entry_class(response_type), ranges)}
    if "throttle_time" in response_type.__dataclass_fields__:
        kwargs["throttle_time"] = _ZERO
    return response_type(**kwargs)


def unsupported_version_response(ranges: Mapping[int, tuple[int, int]]):
    response_type = response_class(API_VERSIONS_KEY, 0)
    return response_type(error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=_entries(_entry_class(response_type), ranges))


def _entry_class(response_type):
    """The nested ApiVersion type generated next to this response version."""
    return sys.modules[response_type.__module__].ApiVersion
