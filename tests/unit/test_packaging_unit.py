"""packaging/systemd/grantd.service and `packaging/install --with-service` (issue 12). The unit is
parsed and its hardening asserted (systemd need not run here); the installer is run with
`--root` against a stand-in bundle (tests/system/test_bundle.py covers the real one)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

from grantd.config import SCHEMA

from conftest import ROOT

UNIT = ROOT / "packaging" / "systemd" / "grantd.service"
INSTALL = ROOT / "packaging" / "install"


def parse_unit(text: str) -> dict[str, dict[str, list[str]]]:
    """systemd's format: [Section], Key=Value, repeated keys add up, # and ; start comments."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None and "=" in line, f"not a unit line: {raw!r}"
        key, _, value = line.partition("=")
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def service() -> dict[str, list[str]]:
    return parse_unit(UNIT.read_text())["Service"]


def test_the_unit_runs_the_installed_command_as_its_own_user_with_persistent_state() -> None:
    s = service()
    assert s["ExecStart"] == ["/usr/local/bin/grantd serve --config /etc/grantd/grantd.toml"]
    assert s["User"] == ["grantd"] and s["Group"] == ["grantd"]
    assert "DynamicUser" not in s  # the database and keys keep one owner across restarts and upgrades
    assert s["StateDirectory"] == ["grantd"] and s["StateDirectoryMode"] == ["0700"]
    assert s["UMask"] == ["0077"]
    assert s["Restart"] == ["on-failure"] and s["RestartSec"] == ["2"]


def test_the_unit_is_hardened() -> None:
    s = service()
    for key in (
        "NoNewPrivileges",
        "ProtectHome",
        "PrivateTmp",
        "LockPersonality",
        "MemoryDenyWriteExecute",
        "PrivateDevices",
        "RestrictSUIDSGID",
        "RestrictNamespaces",
        "ProtectKernelTunables",
    ):
        assert s.get(key) == ["yes"], key
    assert s["ProtectSystem"] == ["strict"]
    assert s["CapabilityBoundingSet"] == [""] and s["AmbientCapabilities"] == [
        ""
    ]  # no capabilities: port > 1024
    assert s["RestrictAddressFamilies"] == ["AF_INET AF_INET6 AF_UNIX"]
    assert s["ReadWritePaths"] == ["/var/lib/grantd"]
    assert SCHEMA["server"]["port"].default > 1024


def test_systemd_waits_longer_than_grantd_takes_to_stop() -> None:
    """grantd stops within graceful_shutdown_timeout (tests/system/test_stop_signals.py)."""
    stop = int(service()["TimeoutStopSec"][0])
    assert stop >= SCHEMA["server"]["graceful_shutdown_timeout"].default + 3


def test_systemd_analyze_accepts_the_unit_when_it_is_there(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        return  # the parse above is the check; systemd is not installed on every CI machine
    result = subprocess.run([analyze, "verify", str(UNIT)], capture_output=True, text=True, timeout=60)
    problems = [
        line
        for line in (result.stdout + result.stderr).splitlines()
        if line.strip() and "/usr/local/bin/grantd is not executable" not in line
    ]  # not installed here
    assert not problems, problems


def fake_bundle(directory: Path) -> Path:
    bundle = directory / "bundle"
    (bundle / "_internal").mkdir(parents=True)
    program = bundle / "grantd"
    program.write_text("#!/bin/sh\necho grantd stand-in\n")
    program.chmod(0o755)
    return bundle


def test_install_with_service_lays_out_the_unit(tmp_path: Path) -> None:
    root = tmp_path / "root"
    result = subprocess.run(
        [str(INSTALL), "--root", str(root), "--bundle", str(fake_bundle(tmp_path)), "--with-service"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    unit = root / "etc" / "systemd" / "system" / "grantd.service"
    assert unit.read_text() == UNIT.read_text()
    assert stat.S_IMODE(unit.stat().st_mode) == 0o644
    if os.geteuid() == 0:
        assert (unit.stat().st_uid, unit.stat().st_gid) == (0, 0)
    assert [p.name for p in unit.parent.iterdir()] == ["grantd.service"]  # no temporary left behind
    assert (root / "usr" / "local" / "bin" / "grantd").is_symlink()


def test_install_without_the_switch_installs_no_unit(tmp_path: Path) -> None:
    root = tmp_path / "root"
    result = subprocess.run(
        [str(INSTALL), "--root", str(root), "--bundle", str(fake_bundle(tmp_path))],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert not (root / "etc" / "systemd").exists()


def test_every_file_the_unit_and_the_banner_point_to_is_installed(tmp_path: Path) -> None:
    """Issue 20 item 6: the unit's Documentation= named a file the install did not ship, and the
    installed server's banner said "see README.md". Both now name files under /opt/grantd/docs/."""
    root = tmp_path / "root"
    result = subprocess.run(
        [str(INSTALL), "--root", str(root), "--bundle", str(fake_bundle(tmp_path)), "--with-service"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    documentation = [
        url
        for line in UNIT.read_text().splitlines()
        if line.startswith("Documentation=")
        for url in line.split("=", 1)[1].split()
    ]
    assert documentation
    for url in documentation:
        assert url.startswith("file:///"), url
        shipped = root / url.removeprefix("file:///")
        assert shipped.is_file(), f"{url} is not installed"
        assert (
            shipped.read_text()
            == (ROOT / ("README.md" if shipped.name == "README.md" else f"docs/{shipped.name}")).read_text()
        )
    docs = root / "opt" / "grantd" / "docs"
    assert (docs / "README.md").is_file() and (docs / "operations.md").is_file()
    assert all(
        not stat.S_IMODE(p.stat().st_mode) & 0o022 for p in docs.iterdir()
    )  # nothing writable by others


def test_a_frozen_grantd_names_the_installed_readme(tmp_path: Path, monkeypatch: Any) -> None:
    import sys

    from grantd.cli.server import readme_path

    root = tmp_path / "root"
    subprocess.run(
        [str(INSTALL), "--root", str(root), "--bundle", str(fake_bundle(tmp_path))],
        check=True,
        capture_output=True,
        timeout=120,
    )
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "executable", str(root / "opt" / "grantd" / "grantd"))
    assert readme_path() == str(root / "opt" / "grantd" / "docs" / "README.md")
    monkeypatch.delattr(sys, "frozen")
    assert readme_path() == str(ROOT / "README.md")  # a source checkout


def test_every_package_folder_is_in_pyprojects_package_list() -> None:
    """A wheel (and the bundle's pinned install) holds only the packages pyproject lists: a new
    folder with an ``__init__.py`` that is not listed works from a checkout and is missing when
    installed (grantd.core.review was, for a while)."""
    import tomllib

    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setup["packages"])
    found = set()
    for name, folder in setup["package-dir"].items():
        base = ROOT / folder
        for init in base.rglob("__init__.py"):
            if "__pycache__" in init.parts:
                continue
            relative = init.parent.relative_to(base)
            found.add(".".join([name, *relative.parts]) if relative.parts else name)
    assert found - listed == set(), "add these to [tool.setuptools] packages"
