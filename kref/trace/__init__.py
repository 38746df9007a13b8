"""Trace events named as the TLA+ actions, and the NDJSON sink that writes them.

See events.py for the event types and sink.py for where they go.
"""

from kref.trace.events import *  # noqa: F401,F403
from kref.trace.sink import ListTraceSink, NdjsonTraceSink, NullTraceSink, TraceSink, read_ndjson_trace  # noqa: F401
