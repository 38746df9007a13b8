"""Build the optional compiled record walker (kref/records/_cwalker.c) in place.

kref works without it: produce validation then uses the pure-Python walker
(kref/records/walker.py) and the broker says so once at start. With it, a
batch's record check costs a few ns per record instead of about 100.

Compiles with the C compiler and flags this Python was built with (sysconfig)
into kref/records/_cwalker<EXT_SUFFIX>, next to the source, where the
package imports it from (an editable install and PYTHONPATH alike). Exit
status 0 on success; otherwise one line saying why, and status 1.

    python scripts/build_cwalker.py
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "kref" / "records" / "_cwalker.c"
# Every optional extension this script builds, each beside its source; each is
# optional on its own (its pure-Python or librdkafka path stays the reference).
SOURCES = [
    SOURCE,
    ROOT / "kref" / "spark" / "_csource.c",  # the Spark reader's columnar decoder
    ROOT / "kref" / "spark" / "_csink.c",  # the Spark sink's columnar encoder
]


def build(directory: Path | None = None, source: Path = SOURCE) -> tuple[Path | None, str]:
    """Compile into `directory` (tests/records/test_cwalker.py builds into a
    temporary one when the package has none): (the module's path or None, why not)."""
    directory = source.parent if directory is None else directory
    target = directory / (source.stem + sysconfig.get_config_var("EXT_SUFFIX"))
    include = sysconfig.get_paths()["include"]
    if not (Path(include) / "Python.h").exists():
        return None, f"no Python.h in {include} (install Python's headers)"
    cc = shlex.split(sysconfig.get_config_var("CC") or "cc")
    # Compiled beside the target, then renamed over it: a running broker that
    # has the old module mapped keeps its copy intact.
    staging = target.with_name(f".{target.name}.{os.getpid()}")
    cmd = [*cc, "-O2", "-Wall", "-Werror", "-fPIC", "-shared", f"-I{include}", str(source), "-o", str(staging)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        staging.unlink(missing_ok=True)
        return None, f"{cc[0]} failed to run ({e})"
    if done.returncode != 0:
        staging.unlink(missing_ok=True)
        return None, f"compiling failed:\n{done.stderr.strip()}"
    os.replace(staging, target)
    return target, ""


def main() -> int:
    status = 0
    for source in SOURCES:
        target, why = build(source=source)
        if target is None:
            print(f"build_cwalker: {source.name} not built, kref uses its pure-Python path: {why}")
            status = 1
        else:
            print(f"build_cwalker: built {target.relative_to(ROOT)}")
    return status


if __name__ == "__main__":
    sys.exit(main())
