"""The compiled record walker (kref/records/_cwalker.c) against its Python references.

_cwalker.check_records must accept exactly the sections that walker.py's
check_records_python accepts, and _cwalker.check_framing exactly those that
framing_validation._walk_records accepts: a batch gets the same verdict
whether the C file is built or not. Checked on valid sections of every shape
(keys, null values, headers, multi-byte varints, uniform runs), on every
truncation of a small section, on trailing bytes and wrong counts, on
negative and overlong varints in every field, and on random byte mutations
and random bytes (hypothesis). For a refused section, walker.check_records
(the produce path's entry) raises the reference's own error.

When the package holds no built module (a fresh checkout), the module is
compiled into a temporary directory for this test (scripts/build_cwalker.py),
so the comparison always runs where a C compiler is.
"""

from __future__ import annotations


import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kref.records import walker
from kref.records.batch import Header, Record, build_batch
from kref.records.errors import InvalidRecordError
from kref.records.framing_validation import _walk_records
from kref.records.header import HEADER_SIZE
from kref.records.varint import read_varint, write_varint
from tests.compiled import built_or_compiled
from tests.records.sections import record_starts



@pytest.fixture(scope="module")
def cw(tmp_path_factory):
    return built_or_compiled(walker._cwalker, "kref/records/_cwalker.c", "kref.records._cwalker",
                             tmp_path_factory.mktemp("cwalker"))


def reference(fn, section: bytes, count: int) -> str | None:
    """None: accepted; else the InvalidRecordError's message."""
    try:
        fn(section, count, 0)
    except InvalidRecordError as e:
        return str(e)
    return None


def same_verdicts(cw, section: bytes, count: int) -> None:
    full = reference(walker.check_records_python, section, count)
    assert cw.check_records(section, count) is (full is None), (full, section.hex(), count)
    framing = reference(lambda s, n, w: _walk_records(memoryview(s), n, w), section, count)
    assert cw.check_framing(section, count) is (framing is None), (framing, section.hex(), count)


def section_of(records) -> bytes:
    return bytes(build_batch(records)[HEADER_SIZE:])


MIXED = [
    Record(timestamp=1_700_000_000_000 + 3 * i, key=None if i % 5 else b"key-%d" % i,
           value=None if i % 97 == 3 else b"v" * (i % 150), headers=(Header("h", b"x"),) if i % 7 == 0 else ())
    for i in range(700)
]
SHAPES = {
    "mixed": MIXED,
    "uniform": [Record(timestamp=i, value=b"x" * 100) for i in range(600)],
    "long records": [Record(timestamp=0, key=b"k", value=b"y" * (9000 + i)) for i in range(20)],
    "headers": [Record(timestamp=-i, value=b"v", headers=(Header("hk", b"hv"), Header("n", None))) for i in range(40)],
    "one": [Record(timestamp=1_700_000_000_000, value=b"z" * 100)],
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_valid_sections_pass_both(cw, shape):
    records = SHAPES[shape]
    section = section_of(records)
    assert cw.check_records(section, len(records)) is True
    assert cw.check_framing(section, len(records)) is True
    same_verdicts(cw, section, len(records))
    # Any buffer, no copy: memoryview and bytearray too.
    assert cw.check_records(memoryview(section), len(records)) is True
    assert cw.check_records(bytearray(section), len(records)) is True


def test_every_truncation_and_count(cw):
    records = SHAPES["headers"][:6] + SHAPES["mixed"][:6]
    section = section_of(records)
    for cut in range(len(section) + 1):
        same_verdicts(cw, section[:cut], len(records))
    for count in range(len(records) + 3):
        same_verdicts(cw, section, count)
    same_verdicts(cw, section + b"\x00", len(records))
    same_verdicts(cw, b"", 0)
    same_verdicts(cw, b"\x00", 0)
    assert cw.check_records(section, -1) is False  # left to the reference
    assert cw.check_framing(section, -1) is False


def _record(fields: list[int | bytes]) -> bytes:
    """One record from raw parts: ints are varints, bytes are copied; its length varint first."""
    body = bytearray()
    for f in fields:
        if isinstance(f, int):
            write_varint(body, f)
        else:
            body += f
    out = bytearray()
    write_varint(out, len(body))
    return bytes(out + body)


# attributes, timestamp delta, offset delta, key length, key, value length, value, header count, headers...
ODD_RECORDS = {
    "null key and value": [b"\x00", 0, 0, -1, -1, 0],
    "key length -2": [b"\x00", 0, 0, -2, 1, b"v", 0],
    "value length -7": [b"\x00", 0, 0, -1, -7, 0],
    "key past its record": [b"\x00", 0, 0, 9, b"k", -1, 0],
    "value past its record": [b"\x00", 0, 0, -1, 5, b"vv", 0],
    "negative header count": [b"\x00", 0, 0, -1, 1, b"v", -1],
    "header key length -1": [b"\x00", 0, 0, -1, -1, 1, -1, -1],
    "header value null": [b"\x00", 0, 0, -1, -1, 1, 1, b"h", -1],
    "header value length -3": [b"\x00", 0, 0, -1, -1, 1, 1, b"h", -3],
    "header value past its record": [b"\x00", 0, 0, -1, -1, 1, 1, b"h", 4, b"x"],
    "too few headers": [b"\x00", 0, 0, -1, -1, 3, 1, b"h", 1, b"x"],
    "bytes after the headers": [b"\x00", 0, 0, -1, -1, 0, b"\x00\x00"],
    "huge timestamp delta": [b"\x00", -(1 << 63), 0, -1, -1, 0],
    "offset delta 1": [b"\x00", 0, 1, -1, -1, 0],
    "offset delta -1": [b"\x00", 0, -1, -1, -1, 0],
    "timestamp varlong of 11 bytes": [b"\x00", b"\x80" * 10 + b"\x00", 0, -1, -1, 0],
    "timestamp varlong of 10 bytes": [b"\x00", b"\x81" * 9 + b"\x01", 0, -1, -1, 0],
    "offset delta varint of 6 bytes": [b"\x00", 0, b"\x80" * 5 + b"\x00", -1, -1, 0],
    "offset delta varint of 5 bytes, high bits": [b"\x00", 0, b"\x80\x80\x80\x80\x70", -1, -1, 0],
    "key length varint of 6 bytes": [b"\x00", 0, 0, b"\x81\x80\x80\x80\x80\x00", -1, 0],
    "attributes only": [b"\x00"],
    "two bytes": [b"\x00", 0],
}


@pytest.mark.parametrize("name", list(ODD_RECORDS))
@pytest.mark.parametrize("where", [0, 1, 2])
def test_odd_records(cw, name, where):
    """A record with odd fields first, in the middle or last among good ones."""
    good = SHAPES["mixed"][:3]
    odd = ODD_RECORDS[name]
    parts = []
    for i in range(3):
        if i == where:
            fields = list(odd)
            if len(fields) > 2 and fields[2] == 0:
                fields[2] = i  # its offset delta in place, unless the case is about the delta
            parts.append(_record(fields))
        else:
            one = section_of(good[:i + 1])
            starts = record_starts(one)
            parts.append(one[starts[i]:])
    section = b"".join(parts)
    same_verdicts(cw, section, 3)


def test_odd_length_varints(cw):
    good = section_of(SHAPES["uniform"][:2])
    for prefix in (b"\x01", b"\x03", b"\x04", b"\xff\xff\xff\xff\x0f", b"\x80\x80\x80\x80\x80\x00", b"\x80",
                   b"\xfe\xff\xff\xff\x0f", b"\x81\x80\x80\x80\x10"):
        same_verdicts(cw, prefix + good, 3)
        same_verdicts(cw, good + prefix, 3)
        same_verdicts(cw, prefix, 1)


def test_refused_sections_raise_the_references_error(cw, monkeypatch):
    monkeypatch.setattr(walker, "_cwalker", cw)
    section = bytearray(section_of(SHAPES["mixed"]))
    _, pos = read_varint(section, record_starts(bytes(section))[600], len(section))
    _, pos = read_varint(section, pos + 1, len(section), 10)
    section[pos] ^= 0x02  # offset delta 600 -> 599
    expected = reference(walker.check_records_python, bytes(section), 700)
    assert expected is not None
    assert reference(walker.check_records, bytes(section), 700) == expected


BASES = [section_of(SHAPES["mixed"][:40]), section_of(SHAPES["headers"][:10]), section_of(SHAPES["uniform"][:30])]


@settings(max_examples=400, deadline=None)
@given(st.integers(0, len(BASES) - 1),
       st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)), min_size=1, max_size=4),
       st.integers(-2, 2))
def test_random_mutations(cw, base, mutations, count_shift):
    section = bytearray(BASES[base])
    for where, value in mutations:
        section[where % len(section)] = value
    count = len(record_starts(BASES[base])) + count_shift
    same_verdicts(cw, bytes(section), count)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=64), st.integers(0, 6))
def test_random_bytes(cw, data, count):
    same_verdicts(cw, data, count)


def test_the_broker_says_when_it_runs_without_it():
    assert (walker.ACCELERATOR_NOTE is None) is (walker._cwalker is not None)
    if walker._cwalker is None:
        assert "scripts/build_cwalker.py" in walker.ACCELERATOR_NOTE
