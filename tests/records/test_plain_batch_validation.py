"""The produce path's one-function check of a plain single batch
(framing_validation._plain_single_batch) against validate_records.

validate_records_framing(require_single_batch=True) first tries the plain
check, which either accepts the payload with the header validate_records
would return or declines (None), and then validate_records runs and raises
the typed error naming the fault. Both ways must give the same outcome on
valid batches of every plain and non-plain kind and on mangled ones (bytes
flipped with and without a fixed-up CRC, cut short, extended, two batches),
and the plain check must be what accepts the plain ones.
"""

from __future__ import annotations

import random

import crc32c
import pytest

from kref.records import framing_validation as fv
from kref.records import header as h
from kref.records.batch import CompressionType, Record, build_batch
from kref.records.errors import CorruptRecordError
from tests.records.test_cwalker import cw  # noqa: F401 (the compiled walker, built for the test if need be)

SEED = 1414


def _batch(rng: random.Random, count: int, **kw) -> bytes:
    return build_batch([Record(offset=i, timestamp=1_700_000_000_000 + i, key=rng.choice([None, b"k"]),
                               value=rng.randbytes(rng.choice([0, 10, 100])), headers=()) for i in range(count)], **kw)


def _fix_crc(buf: bytearray) -> None:
    buf[h.CRC_OFFSET:h.CRC_OFFSET + 4] = crc32c.crc32c(memoryview(buf)[h.ATTRIBUTES_OFFSET:]).to_bytes(4, "big")


def _outcome(buf: bytes, max_batch_size: int):
    try:
        return fv.validate_records_framing(buf, max_batch_size=max_batch_size, require_single_batch=True)
    except CorruptRecordError as exc:
        return type(exc), str(exc)


def test_plain_check_gives_validate_records_verdict(cw, monkeypatch):  # noqa: F811
    rng = random.Random(SEED)
    print(f"seed {SEED}")
    monkeypatch.setattr(fv, "_cwalker", cw)
    real = fv._plain_single_batch
    accepted = []

    def spy(*args):
        result = real(*args)
        accepted.append(result is not None)
        return result

    plain_valid = 0
    for _ in range(600):
        kind = rng.random()
        if kind < 0.5:
            buf = bytearray(_batch(rng, rng.choice([1, 1, 2, 7, 50])))
        elif kind < 0.6:
            buf = bytearray(_batch(rng, rng.choice([1, 3]), producer_id=7, producer_epoch=0,
                                   base_sequence=rng.choice([0, 5])))
        elif kind < 0.7:
            buf = bytearray(_batch(rng, 3, compression=CompressionType.GZIP))
        elif kind < 0.75:
            buf = bytearray(_batch(rng, fv.VECTOR_MIN_RECORDS))
        else:
            buf = bytearray(_batch(rng, 2) + (_batch(rng, 1) if rng.random() < 0.3 else b""))
        was_valid_plain = kind < 0.6
        mangle = rng.random()
        if mangle < 0.3:
            pass
        elif mangle < 0.6:
            buf[rng.randrange(len(buf))] = rng.randrange(256)
            if rng.random() < 0.7:
                _fix_crc(buf)  # past the CRC check: the header and framing checks decide
            was_valid_plain = False
        elif mangle < 0.8:
            buf = buf[: rng.randrange(1, len(buf))]
            was_valid_plain = False
        else:
            buf += bytes([rng.randrange(256)])
            was_valid_plain = False
        max_batch_size = rng.choice([1 << 20, len(buf), len(buf) - 1])
        data = bytes(buf)
        accepted.clear()
        monkeypatch.setattr(fv, "_plain_single_batch", spy)
        fast = _outcome(data, max_batch_size)
        monkeypatch.setattr(fv, "_plain_single_batch", lambda *a: None)
        assert fast == _outcome(data, max_batch_size), data.hex()
        if was_valid_plain and max_batch_size >= len(data):
            assert accepted == [True]  # a plain valid batch took the one-function check
            plain_valid += 1
    assert plain_valid > 40
