"""Reading a config file, and writing one: `grantd config init` and config.example.toml come from
the same schema."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

import tomli_w

from grantd.config.extensions import BUILTIN_SECTIONS
from grantd.config.model import Config, ConfigError
from grantd.config.schema import CURRENT_VERSION, SCHEMA, SECTION_HELP
from grantd.config.secretfiles import write_secret_file
from grantd.config.validation import validate


def read_toml(path: str | os.PathLike[str]) -> tuple[Path, dict[str, Any]]:
    """The config file's absolute path and its parsed TOML (ConfigError when it cannot be read)."""
    p = Path(path).expanduser().resolve()
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([f"cannot read config file: {exc.strerror or exc}"], p) from None
    try:
        return p, tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([f"not valid TOML: {exc}"], p) from None


def load(path: str | os.PathLike[str]) -> Config:
    """The file's keys checked (grantd.plugin_manager.check_startup adds what needs the plugins)."""
    p, raw = read_toml(path)
    return validate(raw, p)


def load_for_client(path: str | os.PathLike[str]) -> Config:
    """The server's config as a client on its machine reads it (the approver console: the issuer and
    the management token). grantd's own keys are checked as ``load`` checks them; a top-level table
    grantd does not know is left out instead of refused: with ``[plugins]`` set it is a section a
    plugin declares, which only the server (it loads the plugins) can check, and it must not keep
    the console from starting. A typo there is reported by ``grantd config validate`` and ``serve``."""
    p, raw = read_toml(path)
    known = set(SCHEMA) | set(SCHEMA[""]) | {key for section in BUILTIN_SECTIONS for key in section.keys}
    if raw.get("plugins"):
        raw = {key: value for key, value in raw.items() if key in known}
    return validate(raw, p)


# -- writing configs ------------------------------------------------------------------------------


def _toml_value(value: Any) -> str:
    return tomli_w.dumps({"v": value}).split("=", 1)[1].strip()


def render(overrides: dict[str, dict[str, Any]] | None = None, *, example: bool = False) -> str:
    """A commented TOML config: every key with its meaning; overridden keys set, the rest commented out."""
    overrides = overrides or {}
    lines = [
        "# grantd configuration. Every key is listed with its default; uncomment to change it.",
        "# Validate with: grantd config validate FILE",
        "",
    ]
    for section, keys in SCHEMA.items():
        if section:
            lines += ["", f"# {SECTION_HELP[section]}", f"[{section}]"]
        for name, key in keys.items():
            lines.append(f"# {key.help}")
            if key.choices:
                lines.append(f"# One of: {', '.join(key.choices)}.")
            chosen = overrides.get(section, {})
            if name in chosen:
                lines.append(f"{name} = {_toml_value(chosen[name])}")
            elif section == "" and name == "version":
                lines.append(f"version = {CURRENT_VERSION}")
            elif key.default is None:
                lines.append(f"# {name} =")
            else:
                lines.append(f"# {name} = {_toml_value(key.default)}")
            if key.example:
                lines.append("# For example:")
                lines += [line if line.startswith("#") else f"# {line}" for line in key.example.splitlines()]
    text = "\n".join(lines) + "\n"
    if not example:
        tomllib.loads(text)  # what we write must parse
    return text


def development_issuer(host: str, port: int) -> str:
    """The issuer of a generated development config: ``localhost`` for a loopback address, because
    browsers refuse an IP address as a passkey's relying-party id (http://localhost is a secure
    context, so passkeys work there without TLS)."""
    name = "localhost" if host in ("127.0.0.1", "localhost", "::1") else host
    return f"http://{name}:{port}"


def write_new_config(
    path: Path,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    data_dir: Path | None = None,
    force: bool = False,
    first_admin: str | None = None,
) -> tuple[str, Path]:
    """Write a new config with a fresh management token kept in a 0600 file beside it.
    ``first_admin`` (the development config of ``grantd serve``) becomes ``people.first_admin``:
    ``grantd serve`` creates that administrator and prints their registration URL (D8).

    Returns (token, token_path). The token is returned so the caller can print it once.
    """
    path = path.expanduser().resolve()
    if path.exists() and not force:
        raise FileExistsError(str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    token_path = path.parent / "management-token"
    token = write_secret_file(token_path, force=True)
    db = (data_dir / "grantd.db") if data_dir else Path("grantd.db")
    text = render(
        {
            "server": {"host": host, "port": port, "issuer": development_issuer(host, port)},
            "admin": {"management_token": f"file:{token_path.name}"},
            "storage": {"plugin": "sqlite", "path": str(db)},
            **({"people": {"first_admin": first_admin}} if first_admin else {}),
        }
    )
    path.write_text(text, encoding="utf-8")
    return token, token_path
