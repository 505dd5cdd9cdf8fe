"""House style is checked by the suite: ruff (with the security and async rules) and mypy."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT


def test_ruff_is_clean():
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "appliance", "plugins", "tui", "tests", "bench"],
                            cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_is_clean():
    result = subprocess.run([sys.executable, "-m", "mypy", "appliance", "plugins"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
