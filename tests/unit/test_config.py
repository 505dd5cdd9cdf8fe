"""The configuration file: every problem reported at once, secrets from files or env, generated configs."""

from __future__ import annotations

import ast
import dataclasses
import ipaddress
import os
import subprocess
import sys
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
    assert config.server.trusted_proxies == () and config.federation.providers == ()
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
        "log.format: must be one of text, json, got 'jsn' (did you mean \"json\"?)",
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
    result = subprocess.run(
        [*GRANTD, "config", "validate", str(path)], capture_output=True, text=True, cwd=ROOT
    )
    assert result.returncode == 1
    assert "3 problems" in result.stderr
    assert 'did you mean "server.port"' in result.stderr and 'did you mean "storage"' in result.stderr
    ok = subprocess.run(
        [*GRANTD, "config", "validate", str(write(tmp_path, GOOD))],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "TEST_GRANTD_TOKEN": "t" * 32},
    )
    assert ok.returncode == 0 and "valid" in ok.stdout


def test_serve_with_a_bad_config_exits_non_zero_with_the_list(tmp_path):
    path = write(
        tmp_path, f"version = 1\n[server]\nport = {free_port()}\nhots = 'x'\n[admin]\nemails = 'a'\n"
    )
    result = subprocess.run(
        [*GRANTD, "serve", "--config", str(path)], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert result.returncode == 1
    assert 'server.hots: unknown key (did you mean "server.host"?)' in result.stderr
    assert "admin.emails: must be a list" in result.stderr
    assert "admin.management_token: missing" in result.stderr


def test_grantd_config_env_variable_names_the_file(tmp_path):
    path = write(tmp_path, GOOD)
    result = subprocess.run(
        [*GRANTD, "keys", "list", "--json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "GRANTD_CONFIG": str(path), "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "grantd.db").exists()


def test_config_init_writes_a_commented_config_with_a_fresh_secret(tmp_path):
    target = tmp_path / "etc" / "grantd.toml"
    result = subprocess.run(
        [*GRANTD, "config", "init", "--path", str(target), "--port", "9000"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    token = (target.parent / "management-token").read_text().strip()
    assert len(token) >= 32 and token in result.stdout
    assert (target.parent / "management-token").stat().st_mode & 0o077 == 0
    text = target.read_text()
    assert "# Address to listen on." in text and token not in text
    config = load(target)
    assert config.server.port == 9000 and config.admin.management_token == token
    again = subprocess.run(
        [*GRANTD, "config", "init", "--path", str(target)], capture_output=True, text=True, cwd=ROOT
    )
    assert again.returncode == 1 and "exists" in again.stderr


def test_generated_secrets_are_url_safe_and_private(tmp_path):
    """`grantd config init` and `grantd config secret` make only URL-safe secrets: a client secret
    goes unencoded into HTTP Basic credentials with many clients (authlib's default), where "+", "/",
    "=" and "%" mean something else to a server decoding as RFC 6749 §2.3.1 says."""
    import re

    url_safe = re.compile(r"^[A-Za-z0-9_-]{43}$")
    target = tmp_path / "client-secret"
    made = subprocess.run(
        [*GRANTD, "config", "secret", str(target)], capture_output=True, text=True, cwd=ROOT
    )
    assert made.returncode == 0, made.stderr
    first = target.read_text().strip()
    assert url_safe.match(first) and target.stat().st_mode & 0o777 == 0o600
    assert (
        first not in made.stdout and f'client_secret = "file:{target}"' in made.stdout
    )  # never shown on screen
    again = subprocess.run(
        [*GRANTD, "config", "secret", str(target)], capture_output=True, text=True, cwd=ROOT
    )
    assert again.returncode == 1 and "exists" in again.stderr and target.read_text().strip() == first
    forced = subprocess.run(
        [*GRANTD, "config", "secret", str(target), "--force"], capture_output=True, text=True, cwd=ROOT
    )
    assert (
        forced.returncode == 0
        and url_safe.match(target.read_text().strip())
        and target.read_text().strip() != first
    )
    from grantd.config import new_secret

    assert all(url_safe.match(new_secret()) for _ in range(200))
    init = tmp_path / "etc" / "grantd.toml"
    assert (
        subprocess.run(
            [*GRANTD, "config", "init", "--path", str(init)], capture_output=True, cwd=ROOT
        ).returncode
        == 0
    )
    assert url_safe.match((init.parent / "management-token").read_text().strip())


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

    for section, name in [
        ("", "version"),
        ("server", "host"),
        ("server", "port"),
        ("server", "issuer"),
        ("admin", "management_token"),
        ("admin", "emails"),
        ("admin", "management_identity"),
        ("storage", "plugin"),
        ("storage", "path"),
        ("server", "trusted_proxies"),
        ("federation", "providers"),
    ]:
        assert name in SCHEMA[section]


def test_validate_accepts_a_parsed_dict():
    config = validate({"version": 1, "admin": {"management_token": "x" * 20}})
    assert config.server.port == 8000


def _attribute_reads() -> set[tuple[str, str]]:
    """Every `<section>.<key>` attribute read in grantd's code (appliance/, plugins/, tui/), outside
    the config package (appliance/config/): `config.server.port`, `services.config.grants.pending_ttl`, or `admin.emails` after
    `admin = config.admin` all count as reading that key (an AST scan: strings and comments do not)."""
    reads: set[tuple[str, str]] = set()
    for folder in ("appliance", "plugins", "tui"):
        for path in (ROOT / folder).rglob("*.py"):
            if (ROOT / "appliance" / "config") in path.parents:
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Attribute):
                    owner = node.value
                    section = (
                        owner.attr
                        if isinstance(owner, ast.Attribute)
                        else owner.id
                        if isinstance(owner, ast.Name)
                        else None
                    )
                    if section:
                        reads.add((section, node.attr))
    return reads


def test_every_config_key_is_read_by_the_code():
    """Nothing speculative: a key in the schema that no code reads is a promise to operators that
    grantd does not keep. The rule: each `section.key` of SCHEMA appears as an attribute read
    `<section>.<key>` (see _attribute_reads) somewhere in grantd's code outside the config package. The
    top-level `version` is the format version, read by config.validate itself."""
    from grantd.config import SCHEMA

    reads = _attribute_reads()
    unread = [
        f"{section}.{name}"
        for section, keys in SCHEMA.items()
        if section
        for name in keys
        if (section, name) not in reads
    ]
    assert not unread, f"config keys no code reads (make them work or remove them): {unread}"
    assert list(SCHEMA[""]) == ["version"]


def test_the_key_scan_would_notice_an_unread_key():
    reads = _attribute_reads()
    assert ("server", "port") in reads and ("admin", "emails") in reads
    assert ("server", "no_such_key") not in reads


def test_sp_keys_are_checked(tmp_path):
    """SP login (D9): [sp] is off by default; nameservers are addresses; the fallback IdP a URL."""
    config = load(write(tmp_path, GOOD))
    assert (
        config.sp.enabled is False and config.sp.nameservers == [] and config.sp.dns_negative_cache_ttl == 60
    )
    text = (
        GOOD + '[sp]\nenabled = true\nnameservers = ["127.0.0.1:5353", "dns.example.com"]\n'
        'fallback_idp = "idp.example.com"\nallow_http = true\n'
    )
    with pytest.raises(ConfigError) as caught:
        load(write(tmp_path, text))
    problems = "\n".join(caught.value.problems)
    assert "sp.nameservers: 'dns.example.com' is not an IP address" in problems
    assert "sp.fallback_idp: must be an http(s) URL" in problems
    assert 'sp.allow_http: unknown key (did you mean "sp.allow_http_idp"?)' in problems


def test_storage_dsn_is_a_secret(tmp_path, monkeypatch):
    """PostgreSQL's DSN may hold a password: file:/env: like every secret, never shown."""
    monkeypatch.setenv("GRANTD_TEST_DSN", "host=/run/postgresql dbname=grantd password=hunter2")
    config = load(write(tmp_path, GOOD + '[storage]\nplugin = "postgres"\ndsn = "env:GRANTD_TEST_DSN"\n'))
    assert config.storage.dsn.endswith("password=hunter2") and config.storage.pool_size == 10
    assert "hunter2" not in repr(config.storage)
    with pytest.raises(ConfigError) as caught:
        load(write(tmp_path, GOOD + '[storage]\ndsn = "env:GRANTD_NO_SUCH_DSN"\n'))
    assert "storage.dsn: environment variable GRANTD_NO_SUCH_DSN is not set or empty" in caught.value.problems


def _with_proxies(line: str) -> str:
    return GOOD.replace("[admin]", f"trusted_proxies = {line}\n[admin]")


def test_trusted_proxies_are_addresses_or_networks(tmp_path):
    config = load(write(tmp_path, _with_proxies('["10.0.0.1", "192.168.0.0/16", "::1", "fd00::/8"]')))
    assert config.server.trusted_proxies == (
        ipaddress.ip_network("10.0.0.1/32"),
        ipaddress.ip_network("192.168.0.0/16"),
        ipaddress.ip_network("::1/128"),
        ipaddress.ip_network("fd00::/8"),
    )
    with pytest.raises(ConfigError) as caught:
        load(write(tmp_path, _with_proxies('["proxy.example.com", "10.0.0.1/8"]')))
    problems = "\n".join(caught.value.problems)
    assert "server.trusted_proxies: 'proxy.example.com' is not an IP address or CIDR network" in problems
    assert "'10.0.0.1/8' is not an IP address or CIDR network (10.0.0.1/8 has host bits set)" in problems
    with pytest.raises(ConfigError, match="server.trusted_proxies: every item must be a string"):
        load(write(tmp_path, _with_proxies("[10]")))


def test_federation_provider_tables_have_a_unique_url_safe_id_and_a_type(tmp_path):
    text = (
        GOOD
        + """
[[federation.providers]]
id = "corp"
type = "oidc"
[[federation.providers]]
id = "corp"
type = "oidc"
[[federation.providers]]
id = "a b/c"
type = 3
[[federation.providers]]
name = ""
"""
    )
    with pytest.raises(ConfigError) as caught:
        load(write(tmp_path, text))
    assert caught.value.problems == [
        "federation.providers[1].id: 'corp' is already the id of federation.providers[0]",
        "federation.providers[2].id: must be 1-64 letters, digits, '.', '_' or '-' (it is used in URLs), got 'a b/c'",
        "federation.providers[2].type: must be a non-empty string, got 3",
        "federation.providers[3].id: missing",
        'federation.providers[3].type: missing (a provider type such as "oidc"; `grantd plugins` lists who provides which)',
        "federation.providers[3].name: must be a non-empty string, got ''",
    ]
    with pytest.raises(ConfigError, match="federation.providers: every item must be a table"):
        load(write(tmp_path, GOOD + "[federation]\nproviders = ['corp']\n"))
    config = load(
        write(tmp_path, GOOD + '[[federation.providers]]\nid = "corp"\ntype = "oidc"\nissuer = "x"\n')
    )
    assert config.federation.providers == ({"id": "corp", "type": "oidc", "issuer": "x", "name": "corp"},)


# -- typed sections (issue 21.3) ------------------------------------------------------------------


def test_each_typed_section_has_the_schemas_keys_with_types_that_agree():
    """grantd.config.sections is checked against SCHEMA: one frozen dataclass per section, the same
    keys in the same order, and each field's type agrees with its key's kind (a list may be parsed
    into a tuple; a key without a default may be None unless validation always fills it in)."""
    import dataclasses
    import types
    import typing

    from grantd.config import SCHEMA, SECTION_TYPES

    assert list(SECTION_TYPES) == list(SCHEMA)
    for section, keys in SCHEMA.items():
        cls = SECTION_TYPES[section]
        assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen, cls  # type: ignore[attr-defined]
        assert [f.name for f in dataclasses.fields(cls)] == list(keys), section
        hints = typing.get_type_hints(cls)
        for name, key in keys.items():
            hint = hints[name]
            args = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
            concrete = [typing.get_origin(a) or a for a in args if a is not type(None)]
            allowed = (list, tuple) if key.kind is list else (key.kind,)
            assert len(concrete) == 1 and concrete[0] in allowed, f"{section}.{name}: {hint} vs {key.kind}"
            if type(None) in args:
                assert key.default is None, f"{section}.{name} may be None but has a default"


def test_a_checked_config_hands_out_typed_sections_and_hides_secrets():
    from grantd.config.sections import AdminSection, ServerSection

    config = validate({"version": 1, "admin": {"management_token": "s3cret-" * 4}, "server": {"port": 8100}})
    assert isinstance(config.server, ServerSection) and config.server.port == 8100
    assert config.server.issuer == "http://127.0.0.1:8100"
    assert isinstance(config.admin, AdminSection) and "s3cret" not in repr(config.admin)
    with pytest.raises(AttributeError):
        config.server.prot  # type: ignore[attr-defined]  # noqa: B018
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.server.port = 1  # type: ignore[misc]


def test_a_misspelt_config_key_fails_mypy(tmp_path):
    """The point of typed sections: a typo or a wrong type in code that reads the config is a mypy
    error, not an AttributeError at run time (before issue 21 every value was Any)."""
    from unit.test_quality import _import_tree

    tree = _import_tree(tmp_path / "tree")
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from grantd.config import Config\n\n\ndef f(config: Config) -> str:\n"
        "    print(config.server.prot)\n    return config.grants.pending_ttl\n"
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(ROOT / ".mypy_cache"),
            str(probe),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "MYPYPATH": str(tree)},
    )
    assert '"ServerSection" has no attribute "prot"' in result.stdout, result.stdout + result.stderr
    assert 'Incompatible return value type (got "int", expected "str")' in result.stdout, result.stdout


# -- sections declared outside the schema (issue 21.3) --------------------------------------------


def test_config_validate_reports_approval_policy_mistakes_with_key_paths(tmp_path):
    """The approval policies are the first declared section (grantd.config.extensions.REVIEW): their
    keys are known, and `grantd config validate` lists their mistakes with the rest, by key path."""
    bad = GOOD + (
        '\n[[groups]]\nid = "ops"\nmembers = ["a@example.com"]\n'
        '\n[[policies]]\nid = "p"\nforbid = ["ownr"]\n[[policies.require]]\nid = "r"\ngroups = ["ops", "nope"]\napprove = 0\n'
    )
    result = subprocess.run(
        [*GRANTD, "config", "validate", str(write(tmp_path, bad))],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "TEST_GRANTD_TOKEN": "t" * 32},
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "policies[0].require[0].approve: must be at least 1, got 0" in result.stderr
    assert "policies[0].require[0].groups[1]: unknown group 'nope'" in result.stderr
    assert "policies[0].forbid" in result.stderr
    assert "unknown key" not in result.stderr  # groups and policies are declared keys


def test_valid_approval_policies_are_loaded_into_the_typed_config(tmp_path, monkeypatch):
    """Issue 22: the grants service enforces [[groups]], [[rules]], [[policies]], so a valid set
    loads (the refusal of "checked but not yet enforced" is gone); a bad one is still refused."""
    from grantd.core.review import ReviewConfig

    monkeypatch.setenv("TEST_GRANTD_TOKEN", "t" * 32)
    good_policy = GOOD + (
        '\n[[groups]]\nid = "ops"\nmembers = ["A@example.com", "b@example.com"]\n'
        '\n[[rules]]\nid = "ro"\neffect = "approve"\nreason = "read-only"\nmatch.argv = [["id"]]\n'
        '\n[[policies]]\nid = "p"\nmatch.run_as = ["root"]\n[[policies.require]]\nid = "r"\n'
        'groups = ["ops"]\napprove = 2\n'
    )
    review = load(write(tmp_path, good_policy)).extra["review"]
    assert isinstance(review, ReviewConfig)
    assert [p.id for p in review.policies] == ["p"] and [r.id for r in review.rules] == ["ro"]
    assert review.members["ops"] == frozenset({"a@example.com", "b@example.com"})
    with pytest.raises(ConfigError, match=r"policies\[0\]\.require\[0\]\.approve"):
        load(write(tmp_path, good_policy.replace("approve = 2", "approve = 0")))
    assert load(write(tmp_path, GOOD)).extra["review"] is not None  # none configured: today's default policy


def test_a_declared_section_cannot_take_a_key_of_the_schema_or_of_another_section():
    """Sections come from grantd (the approval policies) and from plugins (hook config_sections):
    none may take over a key of the schema or one another section owns."""
    from grantd.config import BUILTIN_SECTIONS, ConfigSection

    def nothing(raw):
        return None, ()

    doc = {"version": 1, "admin": {"management_token": "x" * 20}}
    with pytest.raises(
        ConfigError, match="server: declared by the config section 'mine' but a key of grantd's own"
    ):
        validate(doc, None, (*BUILTIN_SECTIONS, ConfigSection("mine", ("server",), nothing)))
    with pytest.raises(ConfigError, match="policies: declared by both 'review' and 'mine'"):
        validate(doc, None, (*BUILTIN_SECTIONS, ConfigSection("mine", ("policies",), nothing)))
