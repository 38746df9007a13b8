"""The architecture's promise, as a test: a pure core performs no I/O, reads no
clock and draws no randomness of its own (docs/architecture.md, "The audit").

Each module listed below holds decisions only; drivers carry its effects out.
The test reads each module's syntax tree: no runtime import of an I/O, clock,
concurrency or randomness module (imports under `if TYPE_CHECKING:` are types
only), no call of `open`, and no `uuid` generator (a `uuid.UUID` as a type is
data, handed in by a driver). A new decision module belongs in CORES.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

CORES = [
    "kref/replication/replica.py",
    "kref/replication/follower.py",
    "kref/replication/purgatory.py",
    "kref/controller/quorum.py",
    "kref/controller/controller.py",
    "kref/controller/lifecycle.py",
    "kref/coordinator/group.py",
    "kref/coordinator/group_events.py",
    "kref/coordinator/group_model.py",
    "kref/coordinator/group_membership.py",
    "kref/coordinator/group_offsets.py",
    "kref/coordinator/producer_id.py",
    "kref/storage/retention.py",
    "kref/storage/cleaner_planner.py",
    "kref/metadata/image.py",
    "kref/broker/fetch_session.py",
]

FORBIDDEN_MODULES = {
    "trio", "anyio", "asyncio", "threading", "multiprocessing", "subprocess", "socket", "selectors", "signal",
    "time", "random", "secrets", "os", "shutil", "pathlib", "io", "tempfile", "mmap", "fcntl", "datetime",
}
FORBIDDEN_CALLS = {"open", "uuid1", "uuid4", "getrandbits", "urandom"}


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


def test_the_check_catches_what_it_forbids():
    """The audit would fail on each kind of impurity (so a pass means something)."""
    assert impurities("import trio\n")
    assert impurities("from time import monotonic\n")
    assert impurities("import os.path\n")
    assert impurities("def f():\n    return open('x')\n")
    assert impurities("import uuid\nx = uuid.uuid4()\n")
    assert impurities("from uuid import uuid4\n")
    assert not impurities("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import random\n")
    assert not impurities("import uuid\ndef f(t: uuid.UUID) -> uuid.UUID:\n    return t\n")
