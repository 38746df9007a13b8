"""trace_check: is what kref did a behaviour of its TLA+ specification?

Theory of operation. kref's pure cores log one NDJSON event per spec action
they take, named as the action and carrying the spec's variable names
(kref/trace/events.py; docs/trace-format.md). trace_check

1. reads one or more trace files (one per node) and merges them into one
   order: by CLOCK_MONOTONIC (`mono_ns`) for real processes on one machine,
   by the virtual clock (`time_ms`) for the simulator, file order breaking
   ties (replication.load_events);
2. picks one partition and normalises the events into the steps
   spec/TraceReplication.tla knows, refusing (never silently dropping)
   events of faults the spec does not model (replication.normalise);
3. writes the steps as a generated TLA+ module and has the real TLC check
   that a behaviour of spec/Replication.tla takes every one of them
   (tlc.check); a rejection names the first event no action can take and
   the spec state just before it.

`kref trace check FILE...` is the command line (trace_check.cli).
"""
