"""Issue 20, continued (split from test_newcomer.py): what `grantd config validate` accepts and
`grantd serve` starts (D18), and what the very first start shows: the management token framed last,
the overrides of `--port`, a quiet install.

Real `grantd` processes and CLI runs as subprocesses, each in a directory of its own.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import httpx
import pytest
from serve_support import serve_in, stop_serving

from conftest import GRANTD, ROOT, Server


def clean_env() -> dict[str, str]:
    """The environment without GRANTD_* settings, as a newcomer's shell has it."""
    return {k: v for k, v in os.environ.items() if not k.startswith("GRANTD_")}


def grantd(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """One `grantd` command run to its end in ``cwd``, its output captured."""
    return subprocess.run([*GRANTD, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=60)


# -- item 3: what `grantd config validate` accepts, `grantd serve` starts (D18) ----------------------

BASE = """version = 1
[server]
host = "127.0.0.1"
port = {port}
[admin]
management_token = "file:token"
"""
OIDC = """
[[federation.providers]]
id = "corp"
type = "{kind}"
issuer = "https://sso.example.com"
client_id = "grantd"
client_secret = "file:{secret}"
"""

# (name, extra TOML, every problem `config validate` must list in one run). Serve prints the same
# list, except for the storage's own preconditions, which its preflight reports in its one start-up
# line when it opens the storage (STORAGE_CASES: what that line says).
STORAGE_CASES = {
    "postgres without a dsn": "storage.dsn: missing",
    "a database path under a file": "cannot open the SQLite database",
    "a PostgreSQL that cannot be reached": "cannot connect to PostgreSQL",
    "a database path naming a file that is no database": "file is not a database",
}
BAD_CONFIGS = [
    (
        "unknown storage plugin",
        '[storage]\nplugin = "sqlight"\n',
        ["storage.plugin: no storage plugin named 'sqlight' (did you mean \"sqlite\"?)"],
    ),
    (
        "unknown provider type beside a bad key",
        "[log]\nformt = 'json'\n" + OIDC.format(kind="odic", secret="token"),
        [
            'log.formt: unknown key (did you mean "log.format"?)',
            "federation.providers[0].type: no provider type named 'odic' (did you mean \"oidc\"?)",
        ],
    ),
    (
        "unknown storage plugin and an unreadable token file",
        '[storage]\nplugin = "mysql"\n',
        ["storage.plugin: no storage plugin named 'mysql'", "admin.management_token:"],
    ),
    (
        "a plugin module that is not there and an unknown provider type",
        '[plugins]\nmodules = ["no_such_grantd_plugin"]\n' + OIDC.format(kind="saml", secret="token"),
        [
            "plugins.modules: cannot import 'no_such_grantd_plugin'",
            "federation.providers[0].type: no provider type named 'saml'",
        ],
    ),
    (
        "a provider secret that cannot be read",
        OIDC.format(kind="oidc", secret="no-such-secret"),
        ["federation.providers[0].client_secret:"],
    ),
    ("postgres without a dsn", '[storage]\nplugin = "postgres"\n', ["storage.dsn: missing"]),
    (
        "a PostgreSQL that cannot be reached",
        '[storage]\nplugin = "postgres"\ndsn = "host=/nonexistent-grantd-socket-dir dbname=grantd connect_timeout=2"\n',
        ["storage.dsn: cannot connect to PostgreSQL"],
    ),
    (
        "a database path under a file",
        '[storage]\npath = "token/grantd.db"\n',
        ["storage.path: cannot create"],
    ),
    (
        "a database path naming a file that is no database",
        '[storage]\npath = "token"\n',
        ["storage.path: " + "{tmp}/token is not an SQLite database"],
    ),
]


@pytest.mark.parametrize(("name", "extra", "problems"), BAD_CONFIGS, ids=[c[0] for c in BAD_CONFIGS])
def test_config_validate_refuses_what_serve_refuses_and_lists_it_all_at_once(tmp_path, name, extra, problems):
    from conftest import free_port

    (tmp_path / "token").write_text("t" * 32)
    (tmp_path / "token").chmod(0o600)
    text = BASE.format(port=free_port()) + extra
    if name == "unknown storage plugin and an unreadable token file":
        text = text.replace('"file:token"', '"file:missing-token"')
    path = tmp_path / "grantd.toml"
    path.write_text(text)
    env = clean_env()
    validated = grantd(tmp_path, env, "config", "validate", str(path))
    assert validated.returncode == 1, validated.stdout
    listed = [line.strip()[2:] for line in validated.stderr.splitlines() if line.strip().startswith("- ")]
    for problem in problems:
        problem = problem.replace("{tmp}", str(tmp_path))
        assert any(line.startswith(problem) for line in listed), (problem, validated.stderr)
    assert f"({len(listed)} problem" in validated.stderr

    served = grantd(tmp_path, env, "serve", "--config", str(path))
    assert served.returncode == 1, served.stderr
    assert "grantd: serving" not in served.stderr and "Traceback" not in served.stderr, served.stderr
    if name in STORAGE_CASES:
        assert "grantd: cannot start: " in served.stderr and STORAGE_CASES[name] in served.stderr, (
            served.stderr
        )
    else:
        assert validated.stderr in served.stderr  # the same list, word for word


def test_config_validate_accepts_what_serve_starts(tmp_path):
    from conftest import free_port

    (tmp_path / "token").write_text("t" * 32)
    (tmp_path / "token").chmod(0o600)
    (tmp_path / "secret").write_text("s" * 32)
    (tmp_path / "secret").chmod(0o600)
    path = tmp_path / "grantd.toml"
    port = free_port()
    path.write_text(BASE.format(port=port) + OIDC.format(kind="oidc", secret="secret"))
    env = clean_env()
    validated = grantd(tmp_path, env, "config", "validate", str(path))
    assert validated.returncode == 0, validated.stderr
    srv = Server(tmp_path, port, "t" * 32, GRANTD, env)
    srv.start()
    try:
        listed = httpx.get(f"{srv.url}/api/federation/providers").json()["providers"]
        assert [p["id"] for p in listed] == ["corp"]
    finally:
        assert srv.stop() == 0


# -- item 8: the first start's management token, last and framed; a quiet install -------------------


def test_the_first_start_prints_the_management_token_last_in_a_frame(tmp_path):
    from conftest import free_port

    proc, lines = serve_in(tmp_path, free_port(), clean_env())
    stop_serving(proc, lines)
    token = (tmp_path / "management-token").read_text().strip()
    text = "".join(lines)
    assert text.count(token) == 1, text
    ours = [
        line.rstrip("\n") for line in lines if line.startswith("grantd:")
    ]  # the banner, before the server's log
    at = next(i for i, line in enumerate(ours) if token in line)
    frame = ours[at - 3 : at + 5]
    assert frame[0] == frame[-1] == "grantd: " + "=" * 72, "\n".join(ours)
    assert "management token (shown once" in frame[1] and str(tmp_path / "management-token") in frame[1]
    assert "acts as admin@grantd.local (admin.management_identity)" in "\n".join(frame)
    after = ours[at + 5 :]
    assert after == [], f"the token is the banner's last word, found after it: {after}"
    before = "\n".join(ours[:at])
    assert "grantd: serving http://localhost:" in before and "first administrator admin@localhost" in before
    assert f"{ROOT / 'README.md'}, 'Sign in an agent with curl and ssh-keygen'" in before


def test_a_port_given_to_serve_is_the_issuer_of_every_server_process(tmp_path):
    """`grantd serve --port P` on the generated development config: every process (two workers, so
    the other one re-reads the file) issues with http://localhost:P, the issuer the banner prints,
    not the one the file was written with."""
    import signal
    import time

    import httpx

    from conftest import free_port

    env = clean_env()
    env["PYTHONPATH"] = str(ROOT)
    first = grantd(tmp_path, env, "config", "init", "--path", str(tmp_path / "grantd.toml"))
    assert first.returncode == 0, first.stderr
    text = (tmp_path / "grantd.toml").read_text()
    assert 'issuer = "http://localhost:8000"' in text  # the generated development issuer
    (tmp_path / "grantd.toml").write_text(text.replace("# workers = 1\n", "workers = 2\n", 1))
    port = free_port()
    proc = subprocess.Popen(
        [*GRANTD, "serve", "--config", str(tmp_path / "grantd.toml"), "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stderr=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        issuers: set[str] = set()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(issuers) < 1:
            try:
                issuers.add(
                    httpx.get(f"http://127.0.0.1:{port}/.well-known/openid-configuration", timeout=2).json()[
                        "issuer"
                    ]
                )
            except httpx.HTTPError:
                time.sleep(0.1)
        for _ in range(40):  # new connections land on either worker
            with httpx.Client(timeout=5) as http:
                issuers.add(
                    http.get(f"http://127.0.0.1:{port}/.well-known/openid-configuration").json()["issuer"]
                )
        assert issuers == {f"http://localhost:{port}"}, issuers
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)


def test_building_grantd_gives_no_setuptools_warnings(tmp_path):
    """The first `scripts/serve` showed 92 setuptools warnings about grantd's own pyproject.toml
    (grantd.web.static and grantd.web.templates missing from the package list)."""
    import sys

    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-v",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    output = built.stdout + built.stderr
    assert "absent from the `packages` configuration" not in output and "Warning" not in output, output
    import zipfile

    [wheel] = tmp_path.glob("grantd-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "grantd/web/templates/login.html" in names and "grantd/web/static/grantd.js" in names


def _fake_venv_bootstrap(tmp_path: Path, pip_exit: int) -> subprocess.CompletedProcess[str]:
    """scripts/bootstrap in a copy of the checkout whose .venv/bin/python is a stand-in that writes
    200 lines of install noise and exits with ``pip_exit`` (what pip's build warnings looked like)."""
    import shutil

    checkout = tmp_path / f"checkout-{pip_exit}"
    (checkout / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "bootstrap", checkout / "scripts" / "bootstrap")
    shutil.copy(ROOT / "pyproject.toml", checkout / "pyproject.toml")
    (checkout / ".venv" / "bin").mkdir(parents=True)
    stand_in = checkout / ".venv" / "bin" / "python"
    stand_in.write_text(
        f'#!/bin/sh\ncase "$*" in *pip*) for i in $(seq 200); do echo "noise $i" >&2; done; '
        f"exit {pip_exit};; esac\nexit 0\n"
    )
    stand_in.chmod(0o755)
    return subprocess.run(
        ["bash", str(checkout / "scripts" / "bootstrap")], capture_output=True, text=True, timeout=60
    )


def test_the_install_is_quiet_unless_it_fails(tmp_path):
    quiet = _fake_venv_bootstrap(tmp_path, 0)
    assert quiet.returncode == 0, quiet.stderr
    assert "noise" not in quiet.stdout + quiet.stderr
    assert quiet.stdout == "" and quiet.stderr.count("\n") == 1 and "installing grantd" in quiet.stderr
    failed = _fake_venv_bootstrap(tmp_path, 1)
    assert failed.returncode == 1
    assert "noise 200" in failed.stderr and "the install failed" in failed.stderr
