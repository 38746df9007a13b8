"""The fault tests' checker on crafted histories: it passes a clean one and
fails each kind of anomaly it claims to count (so a zero is evidence)."""

from __future__ import annotations

from tests.faults.checker import History, check, decode_value, encode_value


def v(producer: int, seq: int) -> bytes:
    return encode_value(producer, seq)


def clean_history() -> History:
    # Two producers, two partitions; producer 1 writes seq 0..3, producer 2 seq 0..1.
    h = History()
    final = {0: [], 1: []}
    for producer, seqs in ((1, range(4)), (2, range(2))):
        for seq in seqs:
            value = v(producer, seq)
            partition = seq % 2
            offset = len(final[partition])
            final[partition].append((offset, value))
            h.attempted.add(value)
            h.acked.append((value, partition, offset))
    h.final = final
    h.observed = {"c1": {p: list(entries) for p, entries in final.items()},
                  "c2": {0: final[0][:2]}}
    return h


def test_values_round_trip():
    assert decode_value(v(3, 17)) == (3, 17)
    assert decode_value(b"garbage") is None


def test_a_clean_history_passes():
    report = check(clean_history())
    assert report.ok, report.table()
    assert report.counts()["acknowledged"] == 6 and report.counts()["read back"] == 6
    assert "verdict: OK" in report.table()


def test_an_acknowledged_value_missing_is_lost():
    h = clean_history()
    h.final[1] = h.final[1][:-1]  # truncated, as after an unclean election
    h.observed = {}
    report = check(h)
    assert not report.ok and len(report.lost) == 1
    assert "acknowledged lost" in report.table() and "verdict: FAILED" in report.table()


def test_a_value_at_another_offset_than_acknowledged_is_reported():
    h = clean_history()
    (o0, a), (o1, b) = h.final[0][:2]
    h.final[0][:2] = [(o0, b), (o1, a)]
    h.observed = {}
    report = check(h)
    assert len(report.moved) == 2 and not report.lost
    assert report.out_of_order  # producer 1's seq 0 and 2 now run backwards


def test_a_duplicate_is_reported():
    h = clean_history()
    h.final[0].append((len(h.final[0]), h.final[0][0][1]))
    report = check(h)
    assert len(report.duplicates) == 1 and not report.lost


def test_offsets_not_increasing_are_reported():
    h = clean_history()
    h.final[1] = list(reversed(h.final[1]))
    h.observed = {}
    assert check(h).out_of_order


def test_a_consumer_that_saw_another_value_disagrees():
    h = clean_history()
    h.attempted.add(v(9, 0))
    h.observed["c2"][0] = [(0, h.final[0][0][1]), (1, v(9, 0))]
    report = check(h)
    assert not report.lost and not report.duplicates
    assert any("c2 p0@1" in d for d in report.disagreements)
    assert any("consumers disagree at p0@1" in d for d in report.disagreements)


def test_a_consumer_that_read_past_the_final_end_disagrees():
    h = clean_history()
    h.attempted.add(v(9, 0))
    h.observed["c1"][1] = h.observed["c1"][1] + [(len(h.final[1]), v(9, 0))]
    report = check(h)
    assert any("beyond the final high watermark" in d for d in report.disagreements)


def test_unacknowledged_values_are_allowed_either_way():
    h = clean_history()
    h.attempted.update({v(1, 10), v(1, 11)})
    h.final[0].append((len(h.final[0]), v(1, 10)))
    report = check(h)
    assert report.ok, report.table()
    assert report.unacked_present == 1 and report.unknown_absent == 1


def test_a_value_nobody_wrote_is_reported():
    h = clean_history()
    h.final[0].append((len(h.final[0]), b"stranger"))
    assert not check(h).ok


def test_a_partition_not_read_to_the_end_fails_without_counting_loss():
    h = clean_history()
    h.final[1] = []
    h.unread = {1: (0, 2)}
    h.observed = {}
    report = check(h)
    assert not report.ok and not report.lost and report.unread == ["p1: read to 0 of 2"]


def test_a_copy_under_a_new_producer_epoch_is_told_apart_from_a_duplicate():
    h = clean_history()
    value = h.final[0][0][1]
    again = (0, len(h.final[0]))
    h.final[0].append((again[1], value))
    h.writers = {(0, 0): (7, 0), again: (7, 1)}
    report = check(h)
    assert report.ok and len(report.rebumped) == 1 and not report.duplicates, report.table()
    h.writers[again] = (7, 0)  # the same epoch twice: the broker failed to deduplicate
    assert not check(h).ok


def test_an_acknowledgement_without_an_offset_only_needs_the_value_present():
    h = clean_history()
    value, partition, _ = h.acked[0]
    h.acked[0] = (value, partition, None)
    report = check(h)
    assert report.ok and len(report.no_offset) == 1
    h.final[partition] = [(o, v) for o, v in h.final[partition] if v != value]
    h.observed = {}
    assert len(check(h).lost) == 1
