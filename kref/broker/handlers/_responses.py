"""Building kio responses of whatever version the request came in.

kio generates one module per (API, version), each with its own nested
classes (PartitionData, FetchableTopicResponse, ...) whose fields differ from
version to version. The partition-area handlers build every response from a
version-independent set of keyword arguments: `build(cls, **fields)` (the
protocol layer's, re-exported here) keeps the ones the version has and
leaves the rest to their defaults, so one code path serves Fetch v4 and v17 alike.
"""

from __future__ import annotations

import functools
import sys
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from kref.protocol.codec import response_class
from kref.protocol.messages import build, has_field  # one version-agnostic builder for every handler

__all__ = ["build", "error", "response_types", "topic_key_fields"]


@functools.cache
def response_types(api_key: int, api_version: int) -> Any:
    """The kio module holding the response classes of this API version."""
    return sys.modules[response_class(api_key, api_version).__module__]


@functools.cache
def error(code: int) -> ErrorCode:
    return ErrorCode(int(code))


def topic_key_fields(cls: type, name: str | None, topic_id: uuid.UUID | None) -> dict[str, Any]:
    """Name and/or topic id, whichever this version's topic entry carries (KIP-516)."""
    out: dict[str, Any] = {}
    if has_field(cls, "name"):
        out["name"] = name or ""
    if has_field(cls, "topic"):
        out["topic"] = name or ""
    if has_field(cls, "topic_id"):
        out["topic_id"] = topic_id if topic_id is not None else uuid.UUID(int=0)
    return out
