"""House style is checked by the suite: ruff (with the security and async rules) and mypy."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

from conftest import ROOT

# The folders and the import names differ (pyproject: appliance/ is `grantd`, plugins/ is
# `grantd.plugins`, tui/ is `grantd.tui`); mypy resolves modules by path, so it checks a tree of
# links in that shape, made from pyproject's package-dir: every mapped folder is checked.


def _package_dir() -> dict[str, str]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]


def _import_tree(base: Path, package_dir: dict[str, str] | None = None) -> Path:
    folders = {name: ROOT / folder for name, folder in (package_dir or _package_dir()).items()}
    for name, folder in sorted(folders.items(), key=lambda item: item[0].count(".")):
        target = base.joinpath(*name.split("."))
        nested = {other.rpartition(".")[2] for other in folders if other.rpartition(".")[0] == name}
        if nested:  # a package with mapped subpackages: a real folder linking each other entry
            target.mkdir(parents=True)
            for entry in folder.iterdir():
                if entry.name != "__pycache__" and entry.name not in nested:
                    (target / entry.name).symlink_to(entry)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(folder, target_is_directory=True)
    return base


def test_mypy_checks_every_folder_pyproject_maps(tmp_path):
    """The server, its plugins and the console (tui/, issue 21.5): each mapped folder is in the tree."""
    package_dir = _package_dir()
    assert {"grantd", "grantd.plugins", "grantd.tui"} <= set(package_dir)
    tree = _import_tree(tmp_path)
    for name, folder in package_dir.items():
        linked = tmp_path.joinpath(*name.split("."))
        assert (linked / "__init__.py").resolve() == (ROOT / folder / "__init__.py").resolve(), name
    # The modules mypy is given (-p grantd) are every Python file of every mapped folder.
    seen = {
        (Path(folder) / name).relative_to(tree).with_suffix("").as_posix().replace("/", ".")
        for folder, _, files in os.walk(tree / "grantd", followlinks=True)
        if "__pycache__" not in folder
        for name in files
        if name.endswith(".py")
    }
    assert {
        "grantd.tui.app",
        "grantd.tui.screens.main",
        "grantd.plugins.elevate_default",
        "grantd.elevate.cli",
    } <= seen


def test_ruff_is_clean():
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "appliance", "plugins", "tui", "tests", "bench"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_one_formatter_holds_everywhere():
    """`ruff format` is the one formatter (issue 21): applied in one mechanical commit, kept here."""
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "appliance", "plugins", "tui", "tests", "bench"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_is_clean(tmp_path):
    tree = _import_tree(tmp_path)
    env = {**os.environ, "MYPYPATH": str(tree)}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(ROOT / ".mypy_cache"),
            "-p",
            "grantd",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_product_file_is_over_800_lines():
    """Issue 21: a file that grows past 800 lines is split by concern (one room each), not left to grow."""
    long = {}
    for folder in ("appliance", "plugins", "tui"):
        for path in (ROOT / folder).rglob("*.py"):
            lines = len(path.read_text().splitlines())
            if lines > 800:
                long[str(path.relative_to(ROOT))] = lines
    assert not long, long
