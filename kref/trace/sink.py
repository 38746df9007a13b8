"""Trace sinks: where the events of the pure cores go.

A trace is NDJSON, one event per line, written by exactly one sink per
process so that lines never interleave and their order is the order in which
the driver carried out the cores' steps (`seq` numbers them). The broker
creates a `NdjsonTraceSink` when started with `--trace-file F` and a
`NullTraceSink` otherwise; tests use `ListTraceSink`.

The NDJSON sink writes each event to the operating system as it is emitted
(`max_buffered_events` = 1, the default): a kill -9 then loses nothing the
process had traced, so a killed broker's trace ends at its last step and
trace_check can infer the crash there (a trace with a hole would not validate
against the spec: events lost from a killed leader's buffer left followers
appending records no leader had appended). Nothing is fsynced: only a power
cut loses lines, and no test makes one. A larger `max_buffered_events` keeps
that many encoded lines before writing them (bounded memory, never a dropped
event); `flush()` writes the buffer, and the broker calls it periodically
and on shutdown. Each line carries `mono_ns`, the machine's CLOCK_MONOTONIC
when the event was written, so the traces of several kref processes on one
machine merge into one causal order; the run header carries it too (when
the process started: after a crash, its restart).

Runs. A trace file may be reused by several runs (a broker restarted with
the same --trace-file appends). Each run starts with a header line
`{"type": "TraceRun", "run": <uuid>, "node": ..., "start_time_ms": ...,
"mono_ns": ..., "kref_version": ...}` and numbers its events from seq 1; `read_ndjson_runs`
splits a file at the headers, so a trace checker never mixes two runs, and
`read_ndjson_trace` returns the events of one run (the last by default).
A path that cannot be opened raises TraceFileError (one clear line for the
command line), not a bare OSError.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import dataclass
from typing import Any, Protocol

from kref.trace.events import TraceEvent


class TraceSink(Protocol):
    enabled: bool

    def emit(self, event: TraceEvent) -> None: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


class NullTraceSink:
    """Tracing off: drivers may skip building events when `enabled` is False."""

    enabled = False

    def emit(self, event: TraceEvent) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


class ListTraceSink:
    """Keeps event dicts in memory, bounded (tests and the simulator)."""

    enabled = True

    def __init__(self, max_events: int = 100_000) -> None:
        self.max_events = max_events
        self.events: list[dict[str, Any]] = []
        self._seq = 0

    def emit(self, event: TraceEvent) -> None:
        if len(self.events) >= self.max_events:
            raise OverflowError(f"trace holds {self.max_events} events, the configured bound")
        self._seq += 1
        record = event.to_dict()
        record["seq"] = self._seq
        self.events.append(record)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


RUN_HEADER_TYPE = "TraceRun"


class TraceFileError(OSError):
    """The trace file cannot be opened for appending."""


class NdjsonTraceSink:
    """Appends one JSON object per line to `path`; the only writer of that file."""

    enabled = True

    def __init__(
        self, path: str | os.PathLike[str], *, max_buffered_events: int = 1, node: int | None = None
    ) -> None:
        if max_buffered_events < 1:
            raise ValueError("max_buffered_events must be at least 1")
        self.path = os.fspath(path)
        self.max_buffered_events = max_buffered_events
        self._buffer: list[str] = []
        self._seq = 0
        # Line-oriented text; opened once, appended to, so restarts of the
        # broker continue an existing trace file rather than clobbering it.
        try:
            self._file = open(self.path, "a", encoding="utf-8")
        except OSError as exc:
            raise TraceFileError(exc.errno, f"cannot open trace file {self.path}: {exc.strerror or exc}") from None
        from kref import __version__

        self.run_id = str(uuid.uuid4())
        header = {
            "type": RUN_HEADER_TYPE,
            "run": self.run_id,
            "node": node,
            "start_time_ms": time.time_ns() // 1_000_000,
            "mono_ns": time.clock_gettime_ns(time.CLOCK_MONOTONIC),
            "kref_version": __version__,
        }
        # Written at once: the run is on disk even before its first event.
        self._file.write(json.dumps(header, separators=(",", ":")) + "\n")
        self._file.flush()

    def emit(self, event: TraceEvent) -> None:
        self._seq += 1
        record = event.to_dict()
        record["seq"] = self._seq
        # CLOCK_MONOTONIC is shared by every process of one machine: the traces of
        # several brokers merge on it into one order consistent with causality (an
        # event is written in the step that caused it, before any message it sends).
        record["mono_ns"] = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        self._buffer.append(json.dumps(record, separators=(",", ":")))
        if len(self._buffer) >= self.max_buffered_events:
            self.flush()

    def flush(self) -> None:
        if self._file.closed:
            return
        if self._buffer:
            self._file.write("\n".join(self._buffer))
            self._file.write("\n")
            self._buffer.clear()
        self._file.flush()

    def close(self) -> None:
        if not self._file.closed:
            self.flush()
            self._file.close()


@dataclass
class TraceRun:
    header: dict[str, Any]  # empty for events before any header (files of older versions)
    events: list[dict[str, Any]]


def read_ndjson_runs(path: str | os.PathLike[str]) -> list[TraceRun]:
    """Every run in a trace file, in file order, each with its own events."""
    runs: list[TraceRun] = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            obj = json.loads(line)
            if obj.get("type") == RUN_HEADER_TYPE:
                runs.append(TraceRun(obj, []))
            else:
                if not runs:
                    runs.append(TraceRun({}, []))
                runs[-1].events.append(obj)
    return runs


def read_ndjson_trace(path: str | os.PathLike[str], run: int = -1) -> list[dict[str, Any]]:
    """The events of one run of a trace file (default: the last), without its header."""
    runs = read_ndjson_runs(path)
    return runs[run].events if runs else []
