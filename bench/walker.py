"""Produce validation's record walk: the vectorized walker against the inline
per-record loop, in one process and one run (CPU time, so other load on the
machine counts less).

For batches of several sizes (records of 100-300 B, with and without keys),
both walks check the same records section: kref/records/walker.check_records
(used for batches of VECTOR_MIN_RECORDS records or more) and the inline loop
framing_validation._walk_records (used below that). Printed: ns per record
for each and the ratio loop / walker (> 1: the walker is faster).
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kref.records.batch import Record, build_batch  # noqa: E402
from kref.records.framing_validation import _walk_records  # noqa: E402
from kref.records.header import HEADER_SIZE  # noqa: E402
from kref.records.walker import VECTOR_MIN_RECORDS, check_records  # noqa: E402

CASES = ((100, 100, None), (300, 100, None), (1000, 100, b"k"), (2000, 300, b"kk"), (8000, 100, None))


def per_record_ns(fn, section, count: int) -> float:
    reps = max(3, 100_000 // count)
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        for _ in range(reps):
            fn(section, count, 0)
        best = min(best, (time.process_time() - start) / reps)
    return best / count * 1e9


def main() -> None:
    print(f"walker used from {VECTOR_MIN_RECORDS} records per batch")
    for count, value_bytes, key in CASES:
        records = [Record(timestamp=1_700_000_000_000 + i, key=key, value=b"v" * value_bytes) for i in range(count)]
        section = build_batch(records)[HEADER_SIZE:]
        loop = per_record_ns(lambda s, n, w: _walk_records(memoryview(s), n, w), section, count)
        walker = per_record_ns(check_records, section, count)
        print(f"{count:5d} records of {value_bytes} B: loop {loop:6.0f} ns/record, walker {walker:6.0f} ns/record, "
              f"loop/walker {loop / walker:4.2f}x")
    print(f"load average: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
