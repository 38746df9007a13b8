"""Trace events named as the TLA+ actions, and the NDJSON sink that writes them.

See events.py for the event types and sink.py for where they go.
"""

from kref.trace.events import *  # noqa: F401,F403
from kref.trace.sink import (  # noqa: F401
    ListTraceSink,
    NdjsonTraceSink,
    NullTraceSink,
    TraceFileError,
    TraceRun,
    TraceSink,
    read_ndjson_runs,
    read_ndjson_trace,
)
