"""Produce validation's record walk: the inline per-record loop, the vectorized
(numpy) walker and the compiled walker, in one process and one run (CPU time,
so other load on the machine counts less).

For batches of several sizes (records of 100-300 B, with and without keys),
each walk checks the same records section: framing_validation._walk_records
(pure Python, used below VECTOR_MIN_RECORDS records), walker.check_records_python
(numpy, used from VECTOR_MIN_RECORDS on) and the compiled walker
(kref/records/_cwalker.c: check_framing and check_records, which replace
both when built). Printed: ns per record for each, and the ratio of the
Python walk the broker would use to the compiled one.
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kref.records.batch import Record, build_batch  # noqa: E402
from kref.records.framing_validation import _walk_records  # noqa: E402
from kref.records.header import HEADER_SIZE  # noqa: E402
from kref.records.walker import VECTOR_MIN_RECORDS, _cwalker, check_records_python  # noqa: E402

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
    print(f"numpy walker used from {VECTOR_MIN_RECORDS} records per batch; compiled walker "
          f"{'built' if _cwalker is not None else 'not built (python scripts/build_cwalker.py)'}")
    for count, value_bytes, key in CASES:
        records = [Record(timestamp=1_700_000_000_000 + i, key=key, value=b"v" * value_bytes) for i in range(count)]
        section = build_batch(records)[HEADER_SIZE:]
        loop = per_record_ns(lambda s, n, w: _walk_records(memoryview(s), n, w), section, count)
        walker = per_record_ns(check_records_python, section, count)
        line = f"{count:5d} records of {value_bytes} B: loop {loop:6.0f} ns/record, numpy walker {walker:6.0f} ns/record"
        if _cwalker is not None:
            compiled_fn = _cwalker.check_records if count >= VECTOR_MIN_RECORDS else _cwalker.check_framing
            compiled = per_record_ns(lambda s, n, w: compiled_fn(s, n), section, count)
            python = walker if count >= VECTOR_MIN_RECORDS else loop
            line += f", compiled {compiled:5.1f} ns/record, Python/compiled {python / compiled:5.1f}x"
        print(line)
    print(f"load average: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
