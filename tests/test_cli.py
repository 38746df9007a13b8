"""The command line answers and exits cleanly (smoke test of the entry point)."""

import subprocess
import sys

import kref


def test_version_subcommand_prints_package_version():
    out = subprocess.run(
        [sys.executable, "-m", "kref.cli", "version"], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == kref.__version__
