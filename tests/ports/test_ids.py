"""The ids port and the drivers that draw through it: one seed gives the same
ids and seeds every run, and the drivers' ids, dates and waits come from the
ports they are given (kref/ports/ids.py, kref/ports/clock.py)."""

from __future__ import annotations

import uuid

from kref.node import local_cluster
from kref.node.local_cluster import NodeSpec
from kref.ports import ManualClock, MemoryFileSystem, SeededIds, SystemIds
from kref.storage import meta_properties as mp
from kref.storage.future_log import delete_dir_name, parse_suffixed_dir_name


def test_seeded_ids_repeat_with_their_seed_and_differ_across_seeds():
    a, b, c = SeededIds(7), SeededIds(7), SeededIds(8)
    drawn_a = [a.uuid(), a.seed(), a.uuid()]
    assert drawn_a == [b.uuid(), b.seed(), b.uuid()]
    assert drawn_a != [c.uuid(), c.seed(), c.uuid()]
    assert drawn_a[0].version == 4 and 0 <= drawn_a[1] < 2**63


def test_system_ids_are_fresh():
    ids = SystemIds()
    assert len({ids.uuid() for _ in range(50)}) == 50
    assert len({ids.seed() for _ in range(50)}) == 50


def test_kafka_uuids_and_meta_properties_come_from_the_ports():
    """`kref storage format` with a seeded ids port and a virtual clock writes
    the same files twice: directory ids from the port, the date from the clock."""
    written = []
    for _ in range(2):
        fs = MemoryFileSystem()
        ids, clock = SeededIds(11), ManualClock(1_700_000_000_000)
        cluster_id = mp.random_uuid(ids)
        # format_dirs reads through the real disk; write() takes the ports directly.
        meta = mp.MetaProperties(cluster_id, 1, mp.random_uuid(ids))
        mp.write("/d", meta, fs, clock=clock)
        written.append(fs.read_bytes("/d/meta.properties"))
        assert mp.read("/d", fs) == meta
    assert written[0] == written[1]
    assert mp.random_uuid(SeededIds(11)) == mp.random_uuid(SeededIds(11))


def test_format_dirs_draws_directory_ids_from_its_ids_port(tmp_path):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    cluster_id = mp.random_uuid(SeededIds(1))
    mp.format_dirs(dirs, cluster_id, 3, ids=SeededIds(5), clock=ManualClock(0))
    expected = SeededIds(5)
    assert [mp.read(d).directory_id for d in dirs] == [mp.random_uuid(expected), mp.random_uuid(expected)]


def test_a_deleted_dirs_unique_name_comes_from_the_ids_port():
    name = delete_dir_name("t", 0, SeededIds(3))
    assert name == delete_dir_name("t", 0, SeededIds(3))
    assert parse_suffixed_dir_name(name) == ("t", 0, "-delete")
    assert uuid.UUID(hex=name.split(".")[1].removesuffix("-delete")) == SeededIds(3).uuid()


def test_wait_ready_gives_up_on_the_clock_ports_deadline(tmp_path):
    """A node nobody answers for: the wait runs its whole 2 s on a virtual clock."""
    clock = ManualClock(0)
    spec = NodeSpec(1, ("broker",), local_cluster.free_port(), None, tmp_path)
    assert local_cluster.wait_ready([spec], timeout_s=2.0, clock=clock) is False
    assert clock.monotonic_ms() >= 2_000
