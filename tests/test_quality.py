"""House style is checked by the suite: ruff (with the security and async rules) and mypy."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import ROOT

# The folders and the import names differ (pyproject: appliance/ is `grantd`, plugins/ is
# `grantd.plugins`); mypy resolves modules by path, so it checks a tree of links in that shape.


def _import_tree(base: Path) -> Path:
    package = base / "grantd"
    package.mkdir(parents=True)
    for entry in (ROOT / "appliance").iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    (package / "plugins").symlink_to(ROOT / "plugins")
    return base


def test_ruff_is_clean():
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "appliance", "plugins", "tui", "tests", "bench"],
                            cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_is_clean(tmp_path):
    tree = _import_tree(tmp_path)
    env = {**os.environ, "MYPYPATH": str(tree)}
    result = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                             "--cache-dir", str(ROOT / ".mypy_cache"), "-p", "grantd"],
                            cwd=tmp_path, capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
