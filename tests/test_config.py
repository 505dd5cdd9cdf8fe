"""The configuration file: every problem reported at once, secrets from files or env, generated configs."""

from __future__ import annotations

import os
import subprocess
import tomllib
from pathlib import Path

import pytest

from grantd.config import ConfigError, load, render, validate

from conftest import GRANTD, ROOT, free_port

GOOD = """version = 1
[server]
port = 8123
[admin]
management_token = "env:TEST_GRANTD_TOKEN"
"""


@pytest.fixture(autouse=True)
def token_env(monkeypatch):
    monkeypatch.setenv("TEST_GRANTD_TOKEN", "t" * 32)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "grantd.toml"
    path.write_text(text)
    return path


def test_a_minimal_config_gets_defaults(tmp_path):
    config = load(write(tmp_path, GOOD))
    assert config.server.issuer == "http://127.0.0.1:8123"
    assert config.storage.plugin == "sqlite" and config.storage.path == "grantd.db"
    assert config.webauthn.rp_id == "127.0.0.1" and config.webauthn.origin == "http://127.0.0.1:8123"
    assert config.admin.management_token == "t" * 32
    assert config.tokens.agent_audience == "apes-cli"
    assert "t" * 32 not in repr(config.admin)


def test_every_problem_is_reported_at_once_with_paths_and_suggestions(tmp_path):
    text = """version = 1
[server]
prot = 8000
port = "eighty"
issuer = "http://idp.example.com/"
workers = 0
[admin]
management_token = "file:missing-token-file"
emails = ["not-an-email"]
[storage]
plugn = "sqlite"
[log]
format = "jsn"
[sevrer]
x = 1
"""
    with pytest.raises(ConfigError) as caught:
        load(write(tmp_path, text))
    problems = "\n".join(caught.value.problems)
    expected = [
        'server.prot: unknown key (did you mean "server.port"?)',
        "server.port: must be an integer",
        "server.issuer: must not end with a slash",
        "server.workers: must be at least 1",
        "admin.management_token: cannot read secret file",
        "admin.emails: 'not-an-email' is not an e-mail address",
        'storage.plugn: unknown key (did you mean "storage.plugin"?)',
        'log.format: must be one of text, json, got \'jsn\' (did you mean "json"?)',
        'sevrer: unknown key (did you mean "server"?)',
    ]
    for line in expected:
        assert line in problems, f"missing {line!r} in:\n{problems}"
    assert len(caught.value.problems) == len(expected)


def test_version_and_management_token_are_required(tmp_path):
    with pytest.raises(ConfigError) as caught:
        load(write(tmp_path, "[server]\nport = 8000\n"))
    problems = "\n".join(caught.value.problems)
    assert "version: missing" in problems and "admin.management_token: missing" in problems


def test_not_toml_is_one_clear_problem(tmp_path):
    with pytest.raises(ConfigError) as caught:
        load(write(tmp_path, "version = = 1"))
    assert caught.value.problems[0].startswith("not valid TOML")


def test_secrets_from_file_env_and_inline(tmp_path, monkeypatch):
    (tmp_path / "tok").write_text("f" * 20 + "\n")
    (tmp_path / "tok").chmod(0o600)
    config = load(write(tmp_path, GOOD.replace("env:TEST_GRANTD_TOKEN", "file:tok")))
    assert config.admin.management_token == "f" * 20 and not config.warnings
    config = load(write(tmp_path, GOOD.replace("env:TEST_GRANTD_TOKEN", "i" * 20)))
    assert config.admin.management_token == "i" * 20
    assert any("inline" in w for w in config.warnings)
    monkeypatch.delenv("TEST_GRANTD_TOKEN")
    with pytest.raises(ConfigError, match="TEST_GRANTD_TOKEN is not set"):
        load(write(tmp_path, GOOD))


def test_short_management_token_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="too short"):
        load(write(tmp_path, GOOD.replace("env:TEST_GRANTD_TOKEN", "short")))


def test_config_validate_command_lists_every_problem_and_exits_non_zero(tmp_path):
    path = write(tmp_path, "version = 1\n[server]\nprot = 1\n[stroage]\n")
    result = subprocess.run([*GRANTD, "config", "validate", str(path)], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 1
    assert "3 problems" in result.stderr
    assert 'did you mean "server.port"' in result.stderr and 'did you mean "storage"' in result.stderr
    ok = subprocess.run([*GRANTD, "config", "validate", str(write(tmp_path, GOOD))], capture_output=True, text=True, cwd=ROOT,
                        env={**os.environ, "TEST_GRANTD_TOKEN": "t" * 32})
    assert ok.returncode == 0 and "valid" in ok.stdout


def test_serve_with_a_bad_config_exits_non_zero_with_the_list(tmp_path):
    path = write(tmp_path, f"version = 1\n[server]\nport = {free_port()}\nhots = 'x'\n[admin]\nemails = 'a'\n")
    result = subprocess.run([*GRANTD, "serve", "--config", str(path)], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert result.returncode == 1
    assert 'server.hots: unknown key (did you mean "server.host"?)' in result.stderr
    assert "admin.emails: must be a list" in result.stderr
    assert "admin.management_token: missing" in result.stderr


def test_grantd_config_env_variable_names_the_file(tmp_path):
    path = write(tmp_path, GOOD)
    result = subprocess.run([*GRANTD, "keys", "list", "--json"], capture_output=True, text=True, cwd=tmp_path,
                            env={**os.environ, "GRANTD_CONFIG": str(path), "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "grantd.db").exists()


def test_config_init_writes_a_commented_config_with_a_fresh_secret(tmp_path):
    target = tmp_path / "etc" / "grantd.toml"
    result = subprocess.run([*GRANTD, "config", "init", "--path", str(target), "--port", "9000"], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    token = (target.parent / "management-token").read_text().strip()
    assert len(token) >= 32 and token in result.stdout
    assert (target.parent / "management-token").stat().st_mode & 0o077 == 0
    text = target.read_text()
    assert "# Address to listen on." in text and token not in text
    config = load(target)
    assert config.server.port == 9000 and config.admin.management_token == token
    again = subprocess.run([*GRANTD, "config", "init", "--path", str(target)], capture_output=True, text=True, cwd=ROOT)
    assert again.returncode == 1 and "exists" in again.stderr


def test_config_example_lists_every_key_and_matches_the_schema():
    example = (ROOT / "config.example.toml").read_text()
    assert example == render(example=True), "regenerate with: grantd config example > config.example.toml"
    from grantd.config import SCHEMA

    for section, keys in SCHEMA.items():
        for name in keys:
            assert f"{name} =" in example, f"{section}.{name} missing from config.example.toml"
    tomllib.loads(example)


def test_required_key_names_exist():
    """Other tools rely on these names."""
    from grantd.config import SCHEMA

    for section, name in [("", "version"), ("server", "host"), ("server", "port"), ("server", "issuer"),
                          ("admin", "management_token"), ("admin", "emails"), ("admin", "management_identity"),
                          ("storage", "plugin"), ("storage", "path"), ("webauthn", "rp_id"), ("webauthn", "origin")]:
        assert name in SCHEMA[section]


def test_validate_accepts_a_parsed_dict():
    config = validate({"version": 1, "admin": {"management_token": "x" * 20}})
    assert config.server.port == 8000
