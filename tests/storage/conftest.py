"""Fixtures shared by the storage tests."""

from __future__ import annotations

import os
import pathlib
import tempfile

import pytest


@pytest.fixture
def no_fsync(monkeypatch):
    """For tests that damage files explicitly instead of simulating power loss:
    fsync (several ms each on this disk, thousands per test) only costs time."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)


@pytest.fixture
def scratch(tmp_path):
    """A scratch dir in RAM when the machine has one: hundreds of copies and
    reopenings of a small log would otherwise wait on filesystem journaling."""
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        with tempfile.TemporaryDirectory(dir="/dev/shm", prefix="kref-storage-") as d:
            yield pathlib.Path(d)
    else:
        yield tmp_path
