"""The bundle's pinned requirements (packaging/requirements-bundle.txt) hold every runtime dependency
of pyproject.toml: a dependency added to pyproject alone builds a bundle whose collect_submodules
silently drops every module that imports it (stop 17: the storage plugins, for orjson)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _name(requirement: str) -> str:
    return re.split(r"[\[<>=!~; ]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def test_every_runtime_dependency_is_pinned_for_the_bundle() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {_name(r) for r in project["dependencies"]}
    pinned = {
        _name(line)
        for line in (ROOT / "packaging" / "requirements-bundle.txt").read_text().splitlines()
        if line.split("#", 1)[0].strip()
    }
    assert wanted - pinned == set(), "pin these in packaging/requirements-bundle.txt (then packaging/build)"
