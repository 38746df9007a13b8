"""The optional C extensions in tests: the built module, or one compiled for the test.

kref's C extensions (scripts/build_cwalker.py) are optional: each has a
pure-Python or librdkafka path that is the reference. A test that compares an
extension with its reference should still run where the package has no
built module but a compiler is there, so it compiles one into a temporary
directory, and skips (saying why) only when that fails too.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def built_or_compiled(loaded, source: str, module_name: str, directory: Path):
    """`loaded` (the package's module) if built; else `source` (relative to the
    repository) compiled into `directory` and loaded as `module_name`."""
    if loaded is not None:
        return loaded
    spec = importlib.util.spec_from_file_location("build_cwalker", ROOT / "scripts" / "build_cwalker.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    path, why = build.build(directory, source=ROOT / source)
    if path is None:
        pytest.skip(f"{source} is not built and cannot be compiled here: {why}")
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
