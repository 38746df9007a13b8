"""The cleaner's offset map: record key -> last offset, in Kafka's memory budget.

Theory of operation. Kafka's SkimpyOffsetMap is an open-addressing hash
table in one fixed buffer: per slot a 16-byte MD5 of the key and an 8-byte
offset (24 bytes), log.cleaner.dedupe.buffer.size / threads bytes in all,
filled to at most log.cleaner.io.buffer.load.factor of its slots. This is
the same table in numpy arrays, so that the map pass never makes a Python
object per record: the keys of a whole read buffer are hashed at once
(`key_hashes`), put at once (`OffsetMap.put_batches`, linear probing done
in vectorized rounds) and looked up at once (`OffsetMap.get_many`).

The 16 bytes a key is mapped by:
- a key shorter than 16 bytes is stored as itself: its bytes, zero-padded
  to 15, then a byte 0x80 | length. Exact: two different short keys never
  share a slot key (Kafka hashes them too; an exact key is strictly better);
- a longer key by its MD5 digest (Kafka's hash) with the top bit of the
  last byte cleared, so a digest never equals a short key's form. Two long
  keys collide only if their digests agree on 127 bits, which Kafka
  accepts at 128.

Memory: the table starts small and doubles (rehashing what it holds) as
it fills past an eighth, up to `slots` (default: capacity / 0.9, Kafka's load
factor), so a small log never costs the whole budget; `capacity` (the
number of distinct keys, from `offset_map_capacity`) is what the cleaner's
decisions see, exactly as before. At full size a slot costs 24 bytes, as
in Kafka.

Pure: arrays in, arrays out; no I/O, no clock.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

_RAW_KEY_LIMIT = 16  # keys shorter than a digest are their own (collision-free) map key
_MIN_SLOTS = 1024
_SCALAR_TAIL = 48  # pending keys below which probing goes on one key at a time
_STAGE_RECORDS = 1 << 16  # staged puts inserted at the latest after this many records (24 B each)
_MIX1 = 0x9E3779B97F4A7C15
_MIX2 = 0xC2B2AE3D27D4EB4F


def key_hashes(padded: "np.ndarray", starts: "np.ndarray", lengths: "np.ndarray") -> "np.ndarray":
    """The 16-byte map keys (as an (n, 2) little-endian uint64 array: bytes 0-7,
    bytes 8-15) of the n keys at padded[starts[i] : starts[i] + lengths[i]];
    `padded` is a uint8 array with at least 16 readable bytes after every key
    start. Short keys take a few array operations for all n at once: the 16
    bytes at each key's start are read as two words, bytes past the key are
    masked off and the length goes in the last byte."""
    import numpy as np

    n = len(starts)
    out = np.empty((n, 2), dtype="<u8")
    # Every byte position read as the first of a little-endian 8-byte word.
    words = np.ndarray(shape=(len(padded) - 7,), dtype="<u8", buffer=padded, strides=(1,))
    lengths = lengths.astype(np.int64)
    low_masks, high_masks, length_bytes = _key_tables()
    clipped = np.minimum(lengths, _RAW_KEY_LIMIT)  # longer keys are overwritten below
    out[:, 0] = words[starts] & low_masks[clipped]
    out[:, 1] = words[starts + 8] & high_masks[clipped] | length_bytes[clipped]
    long_ = np.flatnonzero(lengths >= _RAW_KEY_LIMIT)
    if len(long_):
        md5 = hashlib.md5
        digests = b"".join(
            md5(padded[a : a + b].tobytes()).digest() for a, b in zip(starts[long_].tolist(), lengths[long_].tolist())
        )
        digest_words = np.frombuffer(digests, dtype="<u8").reshape(-1, 2).copy()
        digest_words[:, 1] &= np.uint64((1 << 63) - 1)  # top bit of byte 15 clear: never a short key's form
        out[long_] = digest_words
    return out


_KEY_TABLES: tuple["np.ndarray", "np.ndarray", "np.ndarray"] | None = None


def _key_tables() -> tuple["np.ndarray", "np.ndarray", "np.ndarray"]:
    """Per key length 0..16: the masks keeping its bytes in word 0 and word 1, and
    the length byte (0x80 | length) in word 1's top byte."""
    global _KEY_TABLES
    if _KEY_TABLES is not None:
        return _KEY_TABLES
    import numpy as np

    low = [(1 << (8 * min(n, 8))) - 1 for n in range(_RAW_KEY_LIMIT + 1)]
    high = [(1 << (8 * min(max(n - 8, 0), 8))) - 1 for n in range(_RAW_KEY_LIMIT + 1)]
    length = [((0x80 | n) & 0xFF) << 56 for n in range(_RAW_KEY_LIMIT + 1)]
    _KEY_TABLES = np.array(low, dtype="<u8"), np.array(high, dtype="<u8"), np.array(length, dtype="<u8")
    return _KEY_TABLES


def key_hash(key: bytes) -> "np.ndarray":
    """`key_hashes` of one key (a (1, 2) array)."""
    import numpy as np

    padded = np.frombuffer(key + bytes(_RAW_KEY_LIMIT), dtype=np.uint8)
    return key_hashes(padded, np.zeros(1, dtype=np.int64), np.array([len(key)], dtype=np.int64))


class OffsetMap:
    """Record key -> last offset seen, at most `capacity` keys.

    Offsets are fed in increasing order, so the last put for a key wins;
    `latest_offset` is the highest offset mapped (records past it were not
    seen and are always retained); `first_offset` is where the mapped range
    starts (the first dirty offset).
    """

    def __init__(self, capacity: int, slots: int | None = None) -> None:
        if capacity < 1:
            raise ValueError("the offset map needs room for at least one entry")
        self.capacity = capacity
        self.max_slots = max(slots or int(capacity / 0.9) + 1, capacity + 1)
        self.first_offset = 0
        self.latest_offset = -1
        self._reset()

    def _reset(self) -> None:
        import numpy as np

        m = min(self.max_slots, _MIN_SLOTS)
        self._keys = np.zeros((m, 2), dtype="<u8")
        self._offsets = np.full(m, -1, dtype=np.int64)
        self._count = 0
        self._survivors: np.ndarray | None = None
        self._staged: list[tuple[np.ndarray, np.ndarray]] = []
        self._staged_records = 0  # records (keyed or not) the staged puts stand for

    def __len__(self) -> int:
        self._flush()
        return self._count

    def room(self) -> int:
        self._flush()
        return self.capacity - self._count

    def advance(self, offset: int) -> None:
        if offset > self.latest_offset:
            self.latest_offset = offset

    def clear(self, first_offset: int = 0) -> None:
        self.first_offset = first_offset
        self.latest_offset = -1
        self._reset()

    # -- puts -------------------------------------------------------------------

    def put_batches(self, hashes: "np.ndarray", offsets: "np.ndarray", keyed_bounds: list[int], counts: list[int]) -> int:
        """Map consecutive batches' keyed records (`key_hashes`, offsets in increasing
        order; batch i's are keyed_bounds[i] .. keyed_bounds[i + 1] - 1, out of its
        counts[i] records). A batch is mapped only if all its records fit in the
        room left (Kafka's rule, whether or not its keys are new); returns how many
        batches were mapped, from the first: fewer than all when the map filled.

        Puts that fit even if every staged key were new are staged, not
        inserted: the probing rounds then run once for many read buffers
        (their numpy calls cost per call, not per key). Whatever reads the map
        inserts the staged keys first, so no caller sees the difference."""
        total = sum(counts)
        if self._staged_records + total <= self.capacity - self._count:
            if len(offsets):  # no batch can fail the room check
                self._staged.append((hashes, offsets))
            self._staged_records += total
            if self._staged_records >= _STAGE_RECORDS:
                self._flush()
            return len(counts)
        if total <= self.room():
            self._put(hashes, offsets)
            return len(counts)
        for i, count in enumerate(counts):
            if count > self.room():
                return i
            lo, hi = keyed_bounds[i], keyed_bounds[i + 1]
            self._put(hashes[lo:hi], offsets[lo:hi])
        return len(counts)

    def put(self, key: bytes, offset: int) -> bool:
        """One key (tests and small callers); False when the map is full."""
        import numpy as np

        return self.put_batches(key_hash(key), np.array([offset], dtype=np.int64), [0, 1], [1]) == 1

    def _flush(self) -> None:
        if not self._staged_records:
            return
        import numpy as np

        staged, self._staged, self._staged_records = self._staged, [], 0
        if len(staged) == 1:
            self._put(*staged[0])
        elif staged:
            self._put(np.concatenate([hs for hs, _ in staged]), np.concatenate([os for _, os in staged]))

    def _slots_of(self, hashes: "np.ndarray", m: int) -> "np.ndarray":
        import numpy as np

        with np.errstate(over="ignore"):
            h = hashes[:, 0] * np.uint64(_MIX1) ^ hashes[:, 1] * np.uint64(_MIX2)
            h ^= h >> np.uint64(29)
        return (h % np.uint64(m)).astype(np.int64)

    def _put(self, hashes: "np.ndarray", offsets: "np.ndarray") -> None:
        if not len(offsets):
            return
        self._survivors = None
        self._grow_for(self._count + len(offsets))
        self._insert(hashes, offsets)

    def _grow_for(self, entries: int) -> None:
        """Double the table (up to max_slots) until `entries` fill at most an eighth of it
        (short probe runs: each run is one vectorized round in `_insert`)."""
        m = len(self._offsets)
        target = m
        while entries * 8 > target and target < self.max_slots:
            target = min(target * 2, self.max_slots)
        if target == m:
            return
        import numpy as np

        held = np.flatnonzero(self._offsets >= 0)
        keys, offsets = self._keys[held], self._offsets[held]
        self._keys = np.zeros((target, 2), dtype="<u8")
        self._offsets = np.full(target, -1, dtype=np.int64)
        self._count = 0
        self._insert(keys, offsets)

    def _insert(self, hashes: "np.ndarray", offsets: "np.ndarray") -> None:
        """Linear probing for all keys at once: each round, every pending key looks
        at its slot: its own key there -> its offset, if larger; an empty slot ->
        one pending key aiming at it claims it (the others retry it next round:
        the same key then updates it, another moves on); another key -> the next
        slot. Offsets only grow (they are fed in order), so "largest" is "last
        put", also for a key repeated in one call. The few keys left after the
        first rounds (long probe runs) finish one by one."""
        import numpy as np

        table_keys, table_offsets = self._keys, self._offsets
        m = len(table_offsets)
        pos = self._slots_of(hashes, m)
        pending = np.arange(len(offsets))
        while len(pending) > _SCALAR_TAIL:
            s = pos[pending]
            current = table_offsets[s]
            empty = current < 0
            mine = hashes[pending]
            same = ~empty & (table_keys[s, 0] == mine[:, 0]) & (table_keys[s, 1] == mine[:, 1])
            done = same.copy()
            if same.any():
                np.maximum.at(table_offsets, s[same], offsets[pending[same]])
            if empty.any():
                # Claims: each key aiming at an empty slot writes its mark (-2 - its
                # index) there; whichever mark stays wins that slot.
                empty_at = np.flatnonzero(empty)
                slots = s[empty_at]
                marks = -2 - empty_at
                table_offsets[slots] = marks
                won = table_offsets[slots] == marks
                slots, winners = slots[won], pending[empty_at[won]]
                table_keys[slots] = hashes[winners]
                table_offsets[slots] = offsets[winners]
                self._count += len(slots)
                done[empty_at[won]] = True
            moving = ~empty & ~same
            if moving.any():
                pos[pending[moving]] = (s[moving] + 1) % m
            pending = pending[~done]
        if len(pending):
            for slot, (hi, lo), offset in zip(pos[pending].tolist(), hashes[pending].tolist(), offsets[pending].tolist()):
                while True:
                    if table_offsets[slot] < 0:
                        table_keys[slot] = (hi, lo)
                        table_offsets[slot] = offset
                        self._count += 1
                        break
                    if table_keys[slot, 0] == hi and table_keys[slot, 1] == lo:
                        table_offsets[slot] = max(offset, int(table_offsets[slot]))
                        break
                    slot = (slot + 1) % m

    # -- lookups ----------------------------------------------------------------

    def get_many(self, hashes: "np.ndarray") -> "np.ndarray":
        """The offset mapped for each key (`key_hashes`), -1 where none is."""
        import numpy as np

        self._flush()
        table_keys, table_offsets = self._keys, self._offsets
        m = len(table_offsets)
        result = np.full(len(hashes), -1, dtype=np.int64)
        pos = self._slots_of(hashes, m)
        pending = np.arange(len(hashes))
        while len(pending):
            s = pos[pending]
            current = table_offsets[s]
            occupied = current >= 0
            mine = hashes[pending]
            same = occupied & (table_keys[s, 0] == mine[:, 0]) & (table_keys[s, 1] == mine[:, 1])
            result[pending[same]] = current[same]
            moving = occupied & ~same
            pos[pending[moving]] = (s[moving] + 1) % m
            pending = pending[moving]
        return result

    def get(self, key: bytes) -> int:
        return int(self.get_many(key_hash(key))[0])

    def survivor_offsets(self) -> "np.ndarray":
        """The mapped offsets (each key's last), sorted."""
        import numpy as np

        self._flush()
        if self._survivors is None:
            self._survivors = np.sort(self._offsets[self._offsets >= 0])
        return self._survivors

    def survivors_between(self, first: int, last: int) -> int | None:
        """How many keys have their last record in [first, last]; None unless the
        range lies wholly in the mapped one.

        Inside the mapped range a record survives only if it is its key's
        last one, i.e. its offset is a value of the map: a batch with none
        loses every record, and the cleaner need not even parse it.
        """
        if first < self.first_offset or last > self.latest_offset:
            return None
        import numpy as np

        return int(self.survivors_in(np.array([first]), np.array([last]))[0])

    def survivors_in(self, firsts: "np.ndarray", lasts: "np.ndarray") -> "np.ndarray":
        """`survivors_between` of many ranges at once; -1 where it is None."""
        import numpy as np

        s = self.survivor_offsets()
        counts = np.searchsorted(s, lasts, "right") - np.searchsorted(s, firsts, "left")
        return np.where((firsts < self.first_offset) | (lasts > self.latest_offset), -1, counts)
