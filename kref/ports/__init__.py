"""Ports: the only way cores' drivers reach files and time.

Theory of operation: a driver that calls `os` or `time` directly can only
run on a real machine; one that goes through these ports runs unchanged on a
real disk and clock (the broker) and on a lossy in-memory disk and a
virtual clock (tests and the simulator). Each port is a small Protocol with
a real implementation and an in-memory one:

- clock.py: `Clock.now_ms()` (wall clock, for timestamps) and
  `Clock.monotonic_ms()` (for deadlines); SystemClock, ManualClock.
- fs.py: the file operations storage needs, with explicit durability
  (`fsync`, `fsync_dir`); RealFileSystem, MemoryFileSystem (whose `crash()`
  drops every byte and rename not yet made durable, as a power cut does).
- ids.py: fresh ids and seeds (`Ids.uuid()`, `Ids.seed()`): topic ids,
  incarnation ids, directory ids, unique dir names, the election jitter's
  seed; SystemIds (the machine's entropy), SeededIds (one seed, the same
  values every run).

Timers for trio drivers are trio's own clock (`trio.run(clock=...)`), which
trio.testing.MockClock replaces for virtual time, so no timer port is added.
"""

from kref.ports.clock import Clock, ManualClock, SystemClock
from kref.ports.fs import FileHandle, FileSystem, MemoryFileSystem, PowerCut, RealFileSystem
from kref.ports.ids import Ids, SeededIds, SystemIds

__all__ = ["Clock", "SystemClock", "ManualClock", "FileHandle", "FileSystem", "RealFileSystem", "MemoryFileSystem",
           "PowerCut", "Ids", "SystemIds", "SeededIds"]
