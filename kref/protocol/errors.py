"""Kafka's protocol error codes as an IntEnum, plus typed protocol errors.

Theory of operation: the codes are the numbers of Kafka's `Errors` table
(KIP-less, part of the wire protocol since 0.8). We derive them from kio's
generated table so the numbers can never drift from the schemas kio was
generated from, and expose them with Kafka's constant names
(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION == 3). Members are ints, so kio's
writers accept them in any response `error_code` field.
"""

from __future__ import annotations

import enum

from kio.schema.errors import ErrorCode as _KioErrorCode

__all__ = ["ErrorCode", "is_retriable", "ProtocolError", "UnsupportedApiError", "RequestDecodeError"]

ErrorCode = enum.IntEnum(  # type: ignore[misc]
    "ErrorCode",
    {member.name.upper(): int(member) for member in _KioErrorCode},
    module=__name__,
)
ErrorCode.__doc__ = "Kafka wire error codes, named as Kafka's Errors enum (NONE = 0, ...)."

_RETRIABLE = frozenset(int(m) for m in _KioErrorCode if m.retriable)


def is_retriable(code: int) -> bool:
    return int(code) in _RETRIABLE


class ProtocolError(Exception):
    """A request cannot be understood; Kafka closes the connection for these."""


class UnsupportedApiError(ProtocolError):
    """Unknown API key, or a version outside the advertised range."""

    def __init__(self, api_key: int, api_version: int, reason: str) -> None:
        self.api_key = api_key
        self.api_version = api_version
        super().__init__(reason)


class RequestDecodeError(ProtocolError):
    """The header or body bytes do not parse for the announced API and version."""
