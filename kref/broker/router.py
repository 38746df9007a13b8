"""Request routing: API key -> handler, and the advertised version table.

Theory of operation: each area of the broker (admin, produce, fetch,
groups, ...) registers `(api_key, min_version, max_version, handler)` at
start. The router's table is the single source of truth for ApiVersions:
what is registered is advertised, and what is advertised is decoded; a
request outside the table never reaches a handler (the codec closes the
connection, as Kafka does). Registration refuses versions kio has no
schemas for.

Note for areas: kafka-python infers the broker's release from advertised
ranges (Produce v13 -> 4.1, ListOffsets v10 -> 4.0, Fetch v17 -> 3.9, ...)
and refuses some features (e.g. CreateTopics with -1 defaults) below 2.4,
so advertise the modern ranges kio has.

Handlers are `async def handler(ctx: RequestContext, request) -> response`
where `request` and `response` are kio dataclasses of the request's version.
A handler may return None to send no response at all (Produce with acks=0),
or a codec.PreEncoded body already in wire form.

An area may also register an inline handler for a key:
`handler(broker, api_version, request) -> response`, a plain function that
answers without a suspension point, or returns DECLINED, having done
nothing, for a request that may have to wait (the server then dispatches it
as usual). The server uses it for a lone request, whose answer then costs
no coroutines and no RequestContext (a single-record produce, acks 0 or 1).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from kref.protocol.api_versions import api_versions_response, unsupported_version_response
from kref.protocol.codec import API_VERSIONS_KEY, DecodedRequest, PreEncoded, encode_body, kio_version_range
from kref.protocol.errors import ErrorCode

__all__ = ["Router", "RequestContext", "Handler", "InlineHandler", "DECLINED"]

_SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


@dataclass(slots=True)
class RequestContext:
    broker: Any
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    client_host: str
    client_port: int = 0
    listener_name: str = "PLAINTEXT"


Handler = Callable[[RequestContext, Any], Awaitable[Any]]
InlineHandler = Callable[[Any, int, Any], Any]
# An inline handler's answer for a request it leaves to the async handler.
DECLINED = object()


class Router:
    def __init__(self) -> None:
        self._handlers: dict[int, Handler] = {}
        self._inline: dict[int, InlineHandler] = {}
        self._versions: dict[int, tuple[int, int]] = {}
        # ApiVersions is the first request of every connection and its body
        # only changes when the table does: encode it once per version.
        self._api_versions_bodies: dict[int, PreEncoded] = {}
        self.register(API_VERSIONS_KEY, 0, 4, self._handle_api_versions)

    def register(self, api_key: int, min_version: int, max_version: int, handler: Handler) -> None:
        if api_key in self._handlers and api_key != API_VERSIONS_KEY:
            raise ValueError(f"API key {api_key} is already registered")
        kio_range = kio_version_range(api_key)
        if kio_range is None:
            raise ValueError(f"kio has no schemas for API key {api_key}")
        if not (kio_range[0] <= min_version <= max_version <= kio_range[1]):
            raise ValueError(
                f"API key {api_key}: versions {min_version}-{max_version} outside kio's {kio_range[0]}-{kio_range[1]}"
            )
        self._handlers[api_key] = handler
        self._versions[api_key] = (min_version, max_version)
        self._api_versions_bodies.clear()

    def register_inline(self, api_key: int, handler: InlineHandler) -> None:
        """An inline handler for a registered key (see the module docstring)."""
        if api_key not in self._handlers:
            raise ValueError(f"API key {api_key} has no handler to fall back on")
        self._inline[api_key] = handler

    @property
    def inline_handlers(self) -> dict[int, InlineHandler]:
        return self._inline

    @property
    def supported_versions(self) -> dict[int, tuple[int, int]]:
        """api_key -> (min_version, max_version), exactly what ApiVersions advertises."""
        return self._versions

    def handler_for(self, api_key: int) -> Handler | None:
        return self._handlers.get(api_key)

    async def dispatch(self, ctx: RequestContext, request: DecodedRequest) -> Any:
        if request.is_unsupported_api_versions:
            return unsupported_version_response(self._versions)
        return await self._handlers[request.api_key](ctx, request.body)

    async def _handle_api_versions(self, ctx: RequestContext, request: Any) -> Any:
        # KIP-511: v3+ carry the client's software name and version, which
        # Kafka checks against a strict pattern (they become metric tags).
        name = getattr(request, "client_software_name", None)
        version = getattr(request, "client_software_version", None)
        if name is not None and not (_SOFTWARE.fullmatch(name) and _SOFTWARE.fullmatch(version or "")):
            return api_versions_response(ctx.api_version, {}, error_code=ErrorCode.INVALID_REQUEST)
        cached = self._api_versions_bodies.get(ctx.api_version)
        if cached is None:
            response = api_versions_response(ctx.api_version, self._versions)
            cached = PreEncoded(type(response), encode_body(response))
            self._api_versions_bodies[ctx.api_version] = cached
        return cached
