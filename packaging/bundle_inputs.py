"""The content hash of everything the bundle is built from; packaging/build rebuilds only when it changes.

    build/bundle-venv/bin/python packaging/bundle_inputs.py           # the digest (hex), one line
    build/bundle-venv/bin/python packaging/bundle_inputs.py --list    # every input with its own digest

Inputs: every file under appliance/, plugins/, tui/ and packaging/ (path and content; __pycache__
left out), pyproject.toml, the Python that runs this (version and platform) and the name and version
of every distribution installed beside it (the dependencies and PyInstaller). Run it with the
interpreter that builds the bundle (build/bundle-venv/bin/python, which packaging/build makes from
packaging/requirements-bundle.txt): that is the environment it describes.
Not seen: a dependency reinstalled at the same version with other content (use packaging/build --force).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import platform
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE_FOLDERS = ("appliance", "plugins", "tui", "packaging")
# Where packaging/build keeps the digest of the bundle in dist/grantd: beside it, not inside it.
STAMP = ROOT / "dist" / "grantd.inputs"


def inputs() -> Iterator[tuple[str, bytes]]:
    """(name, content) of every input, in a stable order."""
    files = [ROOT / "pyproject.toml"]
    for folder in SOURCE_FOLDERS:
        files += [p for p in (ROOT / folder).rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    for path in sorted(files):
        yield f"file {path.relative_to(ROOT).as_posix()}", path.read_bytes()
    yield "python", f"{sys.version} {platform.machine()} {sys.platform}".encode()
    installed = {}
    for dist in importlib.metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if name and name != "grantd":  # grantd itself is its source files above
            installed[name] = dist.version
    for name, version in sorted(installed.items()):
        yield f"distribution {name}", version.encode()


def digest() -> str:
    total = hashlib.sha256()
    for name, content in inputs():
        total.update(f"{name}\0{len(content)}\0".encode())
        total.update(content)
    return total.hexdigest()


def main(argv: list[str]) -> int:
    if argv == ["--list"]:
        for name, content in inputs():
            print(f"{hashlib.sha256(content).hexdigest()[:16]}  {name}")
        return 0
    if argv:
        print("usage: bundle_inputs.py [--list]", file=sys.stderr)
        return 2
    print(digest())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
