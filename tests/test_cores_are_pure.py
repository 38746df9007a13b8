"""The architecture's promise, as a test: a pure core performs no I/O, reads no
clock and draws no randomness of its own (docs/architecture.md, "The audit").

The core packages (kref/replication, kref/controller, kref/coordinator) hold
cores and pure formats only: EVERY module in them is checked, so a driver put
back among the cores fails here (the drivers live in kref/node, kref/broker,
kref/storage). A few cores live beside their drivers and are listed one by
one (CORE_MODULES). The test reads each module's syntax tree: no runtime
import of an I/O, clock, concurrency, randomness or process module (imports
under `if TYPE_CHECKING:` are types only), no call of `open` or `print`, and
no `uuid` generator (a `uuid.UUID` as a type is data, handed in by a driver).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

CORE_PACKAGES = ["kref/replication", "kref/controller", "kref/coordinator"]
CORE_MODULES = [
    "kref/storage/retention.py",
    "kref/storage/cleaner_planner.py",
    "kref/metadata/image.py",
    "kref/broker/fetch_session.py",
    "kref/broker/alter_log_dirs_core.py",
]
CORES = sorted(
    str(path.relative_to(ROOT)) for package in CORE_PACKAGES for path in (ROOT / package).rglob("*.py")
) + CORE_MODULES

# The drivers moved out of the core packages (session 9): each would fail here if put back.
MOVED_DRIVERS = [
    "kref/node/controller_driver.py", "kref/node/raft_driver.py", "kref/node/broker_view.py",
    "kref/node/controller_channel.py", "kref/node/node.py", "kref/node/local_cluster.py",
    "kref/node/storage_tool.py", "kref/storage/metadata_log.py", "kref/storage/meta_properties.py",
    "kref/broker/producer_id_driver.py",
]

FORBIDDEN_MODULES = {
    "trio", "anyio", "asyncio", "threading", "multiprocessing", "subprocess", "socket", "selectors", "signal",
    "time", "random", "secrets", "os", "shutil", "pathlib", "io", "tempfile", "mmap", "fcntl", "datetime",
    "sys", "argparse",
}
FORBIDDEN_CALLS = {"open", "print", "uuid1", "uuid4", "getrandbits", "urandom"}


def _is_type_checking_block(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _runtime_nodes(tree: ast.AST):
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if not _is_type_checking_block(child):
                stack.append(child)


def impurities(source: str) -> list[str]:
    found = []
    for node in _runtime_nodes(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [f"line {node.lineno}: import {a.name}" for a in node.names
                      if a.name.split(".")[0] in FORBIDDEN_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] in FORBIDDEN_MODULES:
                found.append(f"line {node.lineno}: from {node.module} import ...")
            elif node.module == "uuid" and any(a.name in FORBIDDEN_CALLS for a in node.names):
                found.append(f"line {node.lineno}: from uuid import a generator")
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if name in FORBIDDEN_CALLS:
                found.append(f"line {node.lineno}: call of {name}")
    return found


@pytest.mark.parametrize("module", CORES)
def test_a_core_module_does_no_io_reads_no_clock_draws_no_randomness(module):
    assert impurities((ROOT / module).read_text()) == [], f"{module} is a core: move the I/O to its driver"


def test_the_core_packages_are_read_whole():
    """Every module of each core package is in CORES (the glob found the packages)."""
    for package in CORE_PACKAGES:
        found = [m for m in CORES if m.startswith(package + "/")]
        assert f"{package}/__init__.py" in found and len(found) >= 3, package
    assert "kref/controller/quorum.py" in CORES and "kref/coordinator/group.py" in CORES


@pytest.mark.parametrize("module", MOVED_DRIVERS)
def test_a_driver_put_back_among_the_cores_would_fail(module):
    assert impurities((ROOT / module).read_text()), f"{module} reads as pure: the check would not catch it"


def test_the_check_catches_what_it_forbids():
    """The audit would fail on each kind of impurity (so a pass means something)."""
    assert impurities("import trio\n")
    assert impurities("from time import monotonic\n")
    assert impurities("import os.path\n")
    assert impurities("def f():\n    return open('x')\n")
    assert impurities("import uuid\nx = uuid.uuid4()\n")
    assert impurities("from uuid import uuid4\n")
    assert impurities("import sys\n")
    assert impurities("def f():\n    print('x')\n")
    assert not impurities("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import random\n")
    assert not impurities("import uuid\ndef f(t: uuid.UUID) -> uuid.UUID:\n    return t\n")
