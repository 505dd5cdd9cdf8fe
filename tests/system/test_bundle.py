"""The PyInstaller bundle (issue 2, "The bundle"; issue 5, the TUI in the bundle) and its installer.

`packaging/build` is run once per session (it rebuilds dist/grantd only when the content hash of
its inputs differs from the one stored beside it, dist/grantd.inputs); then the frozen program itself is driven: version and help of every command group, the
built-in plugins, `config init`, a real server with the enroll -> challenge -> authenticate flow
(real `ssh-keygen -Y sign`), the token checked against the JWKS with PyJWT, the TUI in a real
pseudo-terminal, and `grantd run` handing a grant to the bundle's own `grantd elevate`.

A frozen program does not read PYTHONPATH (PyInstaller's bootloader starts Python with the
environment ignored), so a plugin named in `[plugins] modules` that lives outside the bundle cannot
be imported by it: the test pins that down, and that the built-in plugins load inside the bundle.

`packaging/sudoers.grantd` is checked with visudo and its parsed form (cvtsudoers), and
`packaging/install --root DIR` lays the files out with their owners and modes.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import signal
import stat
import struct
import subprocess
import termios
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest

from grantd import __version__
from grantd.cli import COMMANDS
from grantd.plugin_manager import BUILTIN_PLUGINS

from conftest import ROOT, TESTS, Server, enroll, free_port, make_server, problem, sign_in
from elevate_support import APPROVER, HOST, make_target
from grants_support import request_grant
from system.test_agent_cli_e2e import decide, finish, pending_grant, server_grant

pytestmark = pytest.mark.slow

DIST = ROOT / "dist" / "grantd"
PROGRAM = DIST / "grantd"
BUILD = ROOT / "packaging" / "build"
INSTALL = ROOT / "packaging" / "install"
SUDOERS = ROOT / "packaging" / "sudoers.grantd"
INPUTS = ROOT / "packaging" / "bundle_inputs.py"
STAMP = ROOT / "dist" / "grantd.inputs"
BUILD_VENV_PYTHON = ROOT / "build" / "bundle-venv" / "bin" / "python"  # packaging/build's own venv
REQUIREMENTS = ROOT / "packaging" / "requirements-bundle.txt"
FOLDERS = {"appliance": "grantd", "plugins": "grantd.plugins", "tui": "grantd.tui"}  # pyproject's package-dir
PLUGIN_CONFIG = '[plugins]\nmodules = ["sample_plugin"]\n'
ANSI = re.compile(
    rb"\x1b\[[0-9;?<>=]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][A-Za-z0-9]|\x1b[=>78]"
)


# -- the build -------------------------------------------------------------------------------------


def inputs_digest() -> str:
    """packaging/bundle_inputs.py: the hash of our sources, the packaging and the build venv's distributions."""
    return subprocess.run(
        [str(BUILD_VENV_PYTHON), str(INPUTS)], capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.fixture(scope="session")
def bundle() -> Path:
    """dist/grantd/grantd, from `packaging/build`, which skips the build when its inputs did not change.

    A lock file makes parallel workers (pytest -n) wait for one build instead of building twice."""
    (ROOT / "build").mkdir(exist_ok=True)
    with open(ROOT / "build" / ".bundle-test.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        started = time.monotonic()
        result = subprocess.run([str(BUILD)], cwd=ROOT, capture_output=True, text=True, timeout=1800)
        took = time.monotonic() - started
        assert result.returncode == 0, (
            f"packaging/build failed after {took:.0f} s:\n{result.stdout[-4000:]}\n{result.stderr[-8000:]}"
        )
        assert PROGRAM.is_file() and (DIST / "_internal").is_dir(), result.stdout
        assert (
            f"(inputs {STAMP.read_text().strip()[:12]})" in result.stdout
        )  # the digest of what it was built from
    return PROGRAM


def test_the_build_is_skipped_while_the_inputs_are_unchanged(bundle, tmp_path):
    """Same inputs: nothing is built. The digest covers the sources, pyproject.toml and the dependencies."""
    digest = STAMP.read_text().strip()
    assert len(digest) == 64
    if digest != inputs_digest():
        pytest.skip("a source changed since the bundle was built (an editor at work): nothing to compare")
    built = PROGRAM.stat().st_mtime_ns
    result = subprocess.run([str(BUILD)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    if "up to date" not in result.stdout and inputs_digest() != digest:
        pytest.skip("a source changed during the check (an editor at work)")
    assert "up to date" in result.stdout, result.stdout
    assert PROGRAM.stat().st_mtime_ns == built
    listed = subprocess.run(
        [str(BUILD_VENV_PYTHON), str(INPUTS), "--list"], capture_output=True, text=True, check=True
    ).stdout
    names = {line.split("  ", 1)[1] for line in listed.splitlines()}
    assert {
        "file pyproject.toml",
        "file appliance/cli/__init__.py",
        "file plugins/elevate_default.py",
        "file tui/console.tcss",
        "file packaging/grantd.spec",
        "python",
    } <= names
    assert {"distribution sanic", "distribution textual", "distribution pyinstaller"} <= names


def test_the_bundle_is_built_from_the_pinned_requirements_only(bundle):
    """Issue 20 item 7: the bundle packed whatever .venv held (psycopg after the postgres extra). It is
    built in its own venv from packaging/requirements-bundle.txt: exactly those distributions, at
    those versions, and nothing of .venv's extras reaches the bundle."""
    import importlib.metadata

    pinned = {}
    for line in REQUIREMENTS.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            pinned[name.split("[")[0].lower()] = version
    listed = subprocess.run(
        [str(BUILD_VENV_PYTHON), "-m", "pip", "list", "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    installed = {d["name"].lower().replace("_", "-"): d["version"] for d in json.loads(listed)}
    installed.pop("pip", None)  # the venv's own installer
    assert installed == pinned
    internal = DIST / "_internal"
    assert not (internal / "psycopg").exists() and not (internal / "psycopg_binary").exists()
    if any(d.metadata["Name"].lower() == "psycopg" for d in importlib.metadata.distributions()):
        assert "psycopg" not in pinned  # .venv has it here (the test extras): the bundle still does not


def run(
    bundle: Path,
    *args: str,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 60,
    **kwargs: Any,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(bundle), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env if env is not None else clean_env(),
        cwd=cwd or ROOT,
        **kwargs,
    )


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRANTD_", "PYTEST", "PYTHON"))}
    env.update(extra)
    return env


# -- the program -----------------------------------------------------------------------------------


def test_the_bundle_is_a_onedir_program_built_from_this_tree(bundle):
    assert bundle == ROOT / "dist" / "grantd" / "grantd"
    assert bundle.stat().st_mode & stat.S_IXUSR
    internal = DIST / "_internal"
    assert (
        internal / "grantd" / "tui" / "console.tcss"
    ).is_file()  # the console's stylesheet is next to grantd/tui/app.py
    # the storage backends' numbered migrations, read as package data (grantd.store.migrations)
    assert (
        (internal / "grantd" / "plugins" / "storage_sqlite" / "schema" / "0001_core.sql")
        .read_text()
        .startswith("-- 1: ")
    )
    assert (
        (internal / "grantd" / "plugins" / "storage_postgres" / "schema" / "0001_core.sql")
        .read_text()
        .startswith("-- 1: ")
    )
    assert any((internal / "textual").rglob("*.scm"))  # Textual's own data files
    assert (internal / "tracerite" / "style.css").is_file() and (
        internal / "sanic" / "pages" / "styles"
    ).is_dir()
    # What the spec keeps out, to keep the bundle small.
    for left_out in (
        "tkinter",
        "_tkinter",
        "pytest",
        "_pytest",
        "hypothesis",
        "pip",
        "setuptools",
        "PyInstaller",
    ):
        assert not (internal / left_out).exists(), left_out
    assert sum(p.stat().st_size for p in DIST.rglob("*") if p.is_file()) < 120 * 1024 * 1024


def test_every_module_of_appliance_plugins_and_tui_is_in_the_bundle(bundle):
    """Built-ins (BUILTIN_PLUGINS) and subcommand modules (grantd.cli.COMMANDS) are imported by name: all are in."""
    from PyInstaller.archive.readers import CArchiveReader

    archive = CArchiveReader(str(bundle)).open_embedded_archive("PYZ.pyz")
    frozen = set(archive.toc)
    ours = set()
    for top, name in FOLDERS.items():
        for path in (ROOT / top).rglob("*.py"):
            parts = path.relative_to(ROOT / top).with_suffix("").parts
            module = ".".join([name, *(parts[:-1] if parts[-1] == "__init__" else parts)])
            if not module.startswith(
                "grantd.testing"
            ):  # the contract suite for plugin authors: pytest, not bundled
                ours.add(module)
    assert set(BUILTIN_PLUGINS) <= ours
    assert {entry.module for entry in COMMANDS.values()} <= ours
    assert not {name for name in frozen if name.split(".")[0] in FOLDERS}  # only the grantd names
    assert ours - frozen == set()
    for dependency in (
        "sanic",
        "sanic_routing",
        "tracerite",
        "html5tagger",
        "textual",
        "webauthn",
        "jwt",
        "cryptography",
        "sqlite_utils",
        "pluggy",
        "tomli_w",
        "httpx",
        "dns",
        "uvloop",
    ):
        assert dependency in frozen, dependency
    assert "textual.widgets._data_table" in frozen and "sanic.worker.loader" in frozen


def test_version(bundle):
    result = run(bundle, "version")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"grantd {__version__}\n"
    assert run(bundle, "--version").stdout == f"grantd {__version__}\n"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--help"], "usage: grantd"),
        (["serve", "--help"], "usage: grantd serve"),
        (["tui", "--help"], "usage: grantd tui"),
        (["elevate", "--help"], "usage: grantd elevate"),
        (["agent", "--help"], "usage: grantd agent"),
        (["run", "--help"], "usage: grantd run"),
        (["grant", "--help"], "usage: grantd grant"),
    ],
)
def test_every_command_group_is_in_the_bundle(bundle, args, expected):
    result = run(bundle, *args)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(expected), result.stdout


def test_the_built_in_plugins_load_inside_the_bundle(bundle):
    result = run(bundle, "plugins", "--json")
    assert result.returncode == 0, result.stderr
    listed = {p["name"]: p for p in json.loads(result.stdout)}
    assert set(BUILTIN_PLUGINS) <= set(listed)
    assert all(
        listed[name]["source"] == "builtin" and listed[name]["version"] == __version__
        for name in BUILTIN_PLUGINS
    )
    assert listed["grantd.plugins.storage_sqlite"]["hooks"] == ["storage_backends"]
    assert listed["grantd.plugins.elevate_default"]["hooks"] == ["elevate_verify"]
    text = run(bundle, "plugins").stdout
    assert f"grantd.plugins.storage_sqlite {__version__} (builtin)" in text


def test_pythonpath_cannot_add_plugins_or_code_to_the_bundle(bundle, tmp_path):
    """The source install imports a plugin from PYTHONPATH; the frozen program never reads PYTHONPATH.

    That is PyInstaller's bootloader (Python starts with the environment ignored), and it is what a
    program started through sudo as root should do; external plugins need the source install."""
    srv = make_server(tmp_path / "srv", extra=PLUGIN_CONFIG)
    assert str(TESTS / "plugins") in srv.env["PYTHONPATH"].split(os.pathsep)
    from_source = srv.grantd("plugins", "--json", "--config", str(srv.config_path))
    assert "sample_plugin" in {p["name"] for p in json.loads(from_source.stdout)}

    frozen = run(bundle, "plugins", "--config", str(srv.config_path), env=srv.env)
    assert frozen.returncode == 1
    assert "plugins.modules: cannot import 'sample_plugin': No module named 'sample_plugin'" in frozen.stderr
    served = run(bundle, "serve", "--config", str(srv.config_path), env=srv.env, cwd=srv.directory)
    assert served.returncode == 1 and "cannot import 'sample_plugin'" in served.stderr
    # Nor do PYTHONSTARTUP, PYTHONHOME or PYTHONINSPECT change what the bundle runs.
    evil = tmp_path / "evil.py"
    evil.write_text("open(__file__ + '.ran', 'w').close()\n")
    hostile = clean_env(
        PYTHONPATH=str(tmp_path), PYTHONSTARTUP=str(evil), PYTHONHOME=str(tmp_path), PYTHONINSPECT="1"
    )
    result = run(bundle, "version", env=hostile)
    assert result.returncode == 0 and result.stdout == f"grantd {__version__}\n", result.stderr
    assert not Path(f"{evil}.ran").exists()


# -- a server from the bundle ----------------------------------------------------------------------


def test_plugin_paths_load_a_site_plugin_inside_the_bundle(bundle, tmp_path):
    """What PYTHONPATH cannot do, `[plugins] paths` (from the root-owned config) does."""
    site = tmp_path / "site"
    site.mkdir(mode=0o755)
    (site / "sample_plugin.py").write_text((TESTS / "plugins" / "sample_plugin.py").read_text())
    srv = make_server(
        tmp_path / "srv",
        extra=f'[plugins]\nmodules = ["sample_plugin"]\npaths = ["{site}"]\n',
        command=[str(bundle)],
        env=clean_env(),
    )
    listed = json.loads(
        run(bundle, "plugins", "--json", "--config", str(srv.config_path), env=clean_env()).stdout
    )
    assert {p["name"]: p for p in listed}["sample_plugin"]["hooks"] == ["register_routes", "startup"]
    srv.start()
    try:
        with srv.client() as http:
            assert http.get("/sample-plugin/ping").json() == {"plugin": "sample", "issuer": srv.url}
        assert (srv.directory / "sample-plugin-started").read_text().strip().isdigit()
    finally:
        srv.stop()


def test_config_init_writes_a_config_the_bundle_serves(bundle, tmp_path):
    directory = tmp_path / "fresh"
    directory.mkdir()
    port = free_port()
    init = run(
        bundle, "config", "init", "--path", str(directory / "grantd.toml"), "--port", str(port), cwd=directory
    )
    assert init.returncode == 0, init.stderr
    token = (directory / "management-token").read_text().strip()
    assert token in init.stdout and stat.S_IMODE((directory / "management-token").stat().st_mode) == 0o600
    valid = run(bundle, "config", "validate", str(directory / "grantd.toml"), cwd=directory)
    # a loopback host gets the issuer http://localhost:PORT (browsers refuse passkeys on an IP address)
    assert valid.returncode == 0 and f"issuer http://localhost:{port}" in valid.stdout, valid.stderr

    srv = Server(directory, port, token, [str(bundle)], clean_env()).start()
    try:
        with srv.admin() as http:
            assert http.get("/healthz").status_code == 200
            assert http.get("/api/admin/agents").status_code == 200
    finally:
        code = srv.stop()
    assert code == 0, srv.log()
    assert (directory / "grantd.db").is_file()


@pytest.fixture(scope="module")
def served(bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """`dist/grantd/grantd serve` with a config written the way conftest writes one (asking for 2 workers)."""
    srv = make_server(
        tmp_path_factory.mktemp("bundle-server"), workers=2, command=[str(bundle)], env=clean_env()
    )
    srv.start()
    yield srv
    srv.stop()


def test_the_bundle_serves_in_one_process(served):
    log = served.log()
    assert "the bundle serves in one process; [server] workers = 2 is ignored" in log
    assert f"grantd listening on {served.url} (issuer {served.url}, 1 process)" in log
    assert served.proc is not None
    children = Path(f"/proc/{served.proc.pid}/task/{served.proc.pid}/children").read_text().split()
    assert children == []


def test_enroll_challenge_authenticate_with_ssh_keygen_and_the_token_verifies(served, tmp_path):
    agent = enroll(served, tmp_path / "keys")
    token = sign_in(served, agent, ssh=True)  # the real `ssh-keygen -Y sign -n grantd`
    with served.client() as http:
        keys = http.get("/.well-known/jwks.json").json()
    jwks = jwt.PyJWKSet.from_dict(keys)
    header = jwt.get_unverified_header(token)
    assert header["alg"] == "EdDSA" and header["typ"] == "JWT"
    key = next(k for k in jwks.keys if k.key_id == header["kid"])
    claims = jwt.decode(token, key.key, algorithms=["EdDSA"], audience="apes-cli", issuer=served.url)
    assert claims["sub"] == agent.email and claims["act"] == "agent"
    with served.client(token) as http:
        me = http.get("/api/me")
    assert me.status_code == 200 and me.json()["email"] == agent.email

    raw = sign_in(served, agent)  # the raw Ed25519 signature works too
    assert (
        jwt.decode(raw, key.key, algorithms=["EdDSA"], audience="apes-cli", issuer=served.url)["sub"]
        == agent.email
    )


def test_errors_are_problem_json_in_the_bundle(served, tmp_path):
    agent = enroll(served, tmp_path / "keys")
    with served.client() as http:
        challenge = http.post("/api/agent/challenge", json={"agent_id": agent.agent_id}).json()["challenge"]
        forged = agent.sign_raw("not the challenge")
        r = http.post(
            "/api/agent/authenticate",
            json={"agent_id": agent.email, "challenge": challenge, "signature": forged},
        )
        assert r.status_code == 401 and problem(r)["detail"] == "invalid signature"
        again = http.post(
            "/api/agent/authenticate",
            json={"agent_id": agent.email, "challenge": challenge, "signature": agent.sign_raw(challenge)},
        )
        assert again.status_code == 401 and problem(again)["detail"] == "expired challenge"
        assert (
            problem(http.post("/api/agent/challenge", json={"agent_id": "nobody@example.com"}))["status"]
            == 404
        )
        assert problem(http.get("/no/such/route"))["status"] == 404
    with served.client() as http:
        r = http.post("/api/agent/enroll", json={"email": "x@example.com"})
    assert r.status_code == 401 and problem(r)


# -- the TUI in a real terminal --------------------------------------------------------------------


class Terminal:
    """A program on a pseudo-terminal of a fixed size; what it drew, with the escape sequences removed."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path, rows: int = 40, cols: int = 120):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: exec at once, never return into the test
            try:
                os.chdir(cwd)
                os.execve(argv[0], argv, env)
            finally:
                os._exit(127)
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        os.kill(self.pid, signal.SIGWINCH)
        self.raw = b""
        self.status: int | None = None

    def text(self) -> str:
        return ANSI.sub(b"", self.raw).decode(errors="replace")

    def read(self, timeout: float) -> None:
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if ready:
            try:
                self.raw += os.read(self.fd, 1 << 16)
            except OSError:  # EIO: the program ended
                time.sleep(timeout)

    def wait_for(self, what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while what not in self.text():
            if time.monotonic() > deadline:
                raise AssertionError(f"{what!r} did not appear on the terminal:\n{self.text()[-3000:]}")
            self.read(0.2)

    def press(self, keys: str) -> None:
        os.write(self.fd, keys.encode())

    def exit_status(self, timeout: float = 30) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = os.waitstatus_to_exitcode(status)
                return self.status
            self.read(0.1)
        raise AssertionError(f"the program did not end:\n{self.text()[-3000:]}")

    def close(self) -> None:
        if self.status is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except ProcessLookupError:
                pass
        os.close(self.fd)


def test_the_tui_runs_from_the_bundle_shows_a_pending_grant_and_approves_it(served, tmp_path):
    agent = enroll(served, tmp_path / "keys")
    sign_in(served, agent)
    marker = f"bundle-tui-{os.getpid()}"
    grant = request_grant(served, agent, command=[marker, "--now"])
    terminal = Terminal(
        [str(served.command[0]), "tui", "--config", str(served.config_path), "--management-token"],
        clean_env(TERM="xterm-256color", LANG="C.UTF-8"),
        served.directory,
    )
    try:
        terminal.wait_for(marker)  # Textual, its CSS and the console's stylesheet work in the bundle
        deadline = time.monotonic() + 60
        pressed = 0.0
        while server_grant(served, grant["id"])["status"] != "approved":
            assert time.monotonic() < deadline, (
                f"the TUI did not approve the grant:\n{terminal.text()[-3000:]}"
            )
            if time.monotonic() - pressed > 5:  # again if a busy machine dropped the first key press
                terminal.press("a")
                pressed = time.monotonic()
            terminal.read(0.2)
        terminal.press("q")
        assert terminal.exit_status() == 0
    finally:
        terminal.close()
    assert server_grant(served, grant["id"])["decided_by"] == "admin@example.com"


# -- grantd run -> the bundle's own grantd elevate --------------------------------------------------


def test_run_hands_the_grant_to_the_bundles_elevate(served, bundle, tmp_path):
    """As root, `grantd run` execs `sys.executable elevate --grant-fd N`: in the bundle that is the
    bundle itself, which checks the AuthZ-JWT against the server's JWKS, consumes it and runs the command."""
    if os.geteuid() != 0:
        pytest.fail("this test runs grantd elevate as root: run the suite as root (CI does)")
    target = make_target(tmp_path / "target", [served.url], allowed_approvers=[APPROVER])
    home = tmp_path / "home"
    home.mkdir()
    env = clean_env(
        HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), GRANTD_ELEVATE_CONFIG=str(target.config)
    )
    env = {k: v for k, v in env.items() if not k.startswith("XDG_") or k == "XDG_CONFIG_HOME"}
    email = f"bundle-run-{os.getpid()}@example.com"
    made = run(bundle, "agent", "keygen", "--comment", email, "--json", env=env, cwd=home)
    assert made.returncode == 0, made.stderr
    with served.admin() as http:
        enrolled = http.post(
            "/api/agent/enroll",
            json={"email": email, "name": "bundle", "publicKey": json.loads(made.stdout)["public_key"]},
        )
    assert enrolled.status_code == 201, enrolled.text
    login = run(bundle, "agent", "login", "--idp", served.url, "--email", email, env=env, cwd=home)
    assert login.returncode == 0, login.stderr

    argv = ["id", "-u"]
    proc = subprocess.Popen(
        [str(bundle), "run", "--as", "root", "--wait", "--", *argv],
        env=env,
        cwd="/",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    grant = pending_grant(served, email, argv, proc=proc)
    assert grant["request"]["target_host"] == HOST and grant["request"]["grant_type"] == "once"
    decide(served, grant["id"])
    code, out, err = finish(proc)
    assert (code, out) == (0, "0\n"), err
    assert server_grant(served, grant["id"])["status"] == "consumed"
    audit = [line for line in target.audit_lines() if line["grant_id"] == grant["id"]]
    # the attempt, then how the command ended (D10)
    assert [a.get("event") for a in audit] == ["attempt", "exit"], audit
    assert audit[0]["result"] == "allowed" and audit[0]["command"] == argv and audit[1]["status"] == 0


def test_the_server_stops_cleanly_on_sigterm(bundle, tmp_path):
    srv = make_server(tmp_path / "stop", command=[str(bundle)], env=clean_env()).start()
    with srv.client() as http:
        assert http.get("/readyz").status_code == 200
    assert srv.stop() == 0, srv.log()
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{srv.url}/readyz", timeout=2)


# -- sudoers rule and installer --------------------------------------------------------------------


def _require(tool: str) -> str:
    found = subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True, text=True).stdout.strip()
    assert found, f"{tool} is missing: run scripts/bootstrap test (it installs sudo)"
    return found


def test_the_sudoers_rule_parses_and_allows_only_grantd_elevate_as_root():
    result = subprocess.run([_require("visudo"), "-cf", str(SUDOERS)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    parsed = json.loads(
        subprocess.run(
            [_require("cvtsudoers"), "-f", "json", str(SUDOERS)], capture_output=True, text=True, check=True
        ).stdout
    )
    assert parsed["Command_Aliases"] == {"GRANTD_ELEVATE": [{"command": "/usr/local/bin/grantd elevate *"}]}
    [spec] = parsed["User_Specs"]
    assert spec["User_List"] == [{"username": "ALL"}] and spec["Host_List"] == [{"hostname": "ALL"}]
    [cmnd] = spec["Cmnd_Specs"]
    assert cmnd["runasusers"] == [{"username": "root"}] and "runasgroups" not in cmnd
    assert cmnd["Commands"] == [{"cmndalias": "GRANTD_ELEVATE"}]
    assert cmnd["Options"] == [{"authenticate": False}]  # NOPASSWD: the agent CLI runs sudo -n
    [defaults] = parsed["Defaults"]
    assert defaults["Binding"] == [{"cmndalias": "GRANTD_ELEVATE"}]
    options = {k: v for option in defaults["Options"] for k, v in option.items()}
    assert options == {
        "env_reset": True,
        "env_keep": False,
        "secure_path": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    }


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_install_lays_out_the_bundle_the_command_the_config_dir_and_the_sudoers_rule(bundle, tmp_path):
    root = tmp_path / "root"
    result = subprocess.run([str(INSTALL), "--root", str(root)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    as_root = os.geteuid() == 0

    opt = root / "opt" / "grantd"
    assert _mode(opt) == 0o755 and _mode(opt / "grantd") == 0o755
    for path in [opt, *opt.rglob("*")]:
        if path.is_symlink():  # a link's own mode means nothing: it must point inside the bundle
            assert path.resolve().is_relative_to(opt.resolve()), f"{path} points outside the bundle"
            continue
        assert not path.lstat().st_mode & (stat.S_IWGRP | stat.S_IWOTH), f"{path} is writable by others"
        if as_root:
            assert (path.lstat().st_uid, path.lstat().st_gid) == (0, 0), path
    installed = sorted(p.relative_to(opt) for p in opt.rglob("*"))
    # the bundle as built, plus the README and docs the unit's Documentation= and the banner name
    assert [p for p in installed if p.parts[0] != "docs"] == sorted(
        p.relative_to(DIST) for p in DIST.rglob("*")
    )
    shipped_docs = {p.name for p in installed if p.parts[0] == "docs" and len(p.parts) == 2}
    assert shipped_docs == {"README.md", *(d.name for d in (ROOT / "docs").glob("*.md"))}

    link = root / "usr" / "local" / "bin" / "grantd"
    assert link.is_symlink() and os.readlink(link) == "../../../opt/grantd/grantd"
    via_link = subprocess.run([str(link), "version"], capture_output=True, text=True, timeout=60)
    assert via_link.stdout == f"grantd {__version__}\n", (
        via_link.stderr
    )  # the bootloader finds _internal via the link

    etc = root / "etc" / "grantd"
    assert etc.is_dir() and _mode(etc) == 0o755
    rule = root / "etc" / "sudoers.d" / "grantd"
    assert _mode(rule) == 0o440 and rule.read_text() == SUDOERS.read_text()
    if as_root:
        assert (etc.stat().st_uid, rule.stat().st_uid, rule.stat().st_gid) == (0, 0, 0)
    assert subprocess.run([_require("visudo"), "-cf", str(rule)], capture_output=True).returncode == 0
    assert [p.name for p in (root / "etc" / "sudoers.d").iterdir()] == ["grantd"]  # no temporary left behind

    # Installing again (DESTDIR style) replaces the bundle and keeps the operator's configuration.
    (etc / "elevate.toml").write_text('allowed_issuers = ["https://idp.example.com"]\n')
    (opt / "stale-file").write_text("from an older version\n")
    again = subprocess.run(
        [str(INSTALL)], capture_output=True, text=True, timeout=300, env={**os.environ, "DESTDIR": str(root)}
    )
    assert again.returncode == 0, again.stdout + again.stderr
    assert not (opt / "stale-file").exists()
    assert (etc / "elevate.toml").read_text() == 'allowed_issuers = ["https://idp.example.com"]\n'
    assert sorted(p.name for p in (root / "opt").iterdir()) == ["grantd"]


def test_install_refuses_a_sudoers_rule_that_does_not_parse_and_installs_nothing(bundle, tmp_path):
    broken = tmp_path / "broken"
    broken.write_text("ALL ALL = (root) NOPASSWD /usr/local/bin/grantd elevate *\n")  # the colon is missing
    root = tmp_path / "root"
    result = subprocess.run(
        [str(INSTALL), "--root", str(root), "--sudoers", str(broken)], capture_output=True, text=True
    )
    assert result.returncode == 1
    assert "does not pass visudo -cf; nothing installed" in result.stderr
    assert not (root / "opt").exists() and not (root / "etc").exists()


def test_install_needs_a_built_bundle(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    result = subprocess.run(
        [str(INSTALL), "--root", str(tmp_path / "root"), "--bundle", str(empty)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1 and "run packaging/build first" in result.stderr


def test_the_packaging_scripts_are_bash_and_executable():
    for script in (BUILD, INSTALL):
        assert script.stat().st_mode & stat.S_IXUSR, script
        assert script.read_text().startswith("#!/usr/bin/env bash\n")
        assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
