"""Small pieces of the Kafka wire format for hand-written encoders.

Theory of operation: kio's writer is generic and reflective (pure Python),
so the hottest or largest responses (Produce, Metadata for many partitions)
are written with `struct` instead and checked byte for byte against kio in
tests. What those encoders share lives here: unsigned varints and array
lengths, which flexible versions (KIP-482) write as a uvarint of n + 1 and
older versions as an int32.
"""

from __future__ import annotations

import struct

__all__ = ["uvarint", "array_count"]

_I32 = struct.Struct(">i")


# One-byte uvarints, prebuilt: nearly every length and count is below 128,
# and a Metadata answer for 10,000 topics writes 20,000 of them.
_ONE_BYTE = tuple(bytes((i,)) for i in range(0x80))


def uvarint(n: int) -> bytes:
    if 0 <= n < 0x80:
        return _ONE_BYTE[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def array_count(n: int, flexible: bool) -> bytes:
    """An array's length: int32, or (flexible versions) uvarint of n + 1."""
    return uvarint(n + 1) if flexible else _I32.pack(n)
