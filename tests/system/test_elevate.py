"""`grantd elevate` as a real process against a real grantd server's JWKS (D10).

Refusals are checked against the module's running server. The positive paths that do not need
the grants API use an issuer that went away after its keys were fetched: with the opt-in
`offline_grant_types = ["timed"]`, `timed` grants then run on the cached JWKS (and `once` grants
fail closed). How consume answers is tried against hand-made issuers (FakeIssuer: 500, HTML, a
redirect, silence, a refused connection). The end-to-end flow through the grants API is in
test_agent_cli_e2e.py.
"""

from __future__ import annotations

import grp
import json
import os
import pathlib
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from conftest import Server, free_port, make_server
from elevate_support import (
    GRANTD,
    HOST,
    PLUGIN_DIR,
    FakeIssuer,
    Target,
    attempts,
    claims_for,
    dirty_env,
    elevate,
    error_line,
    exits,
    make_target,
    mint_token,
)

ARGV = ["id", "-u"]


@pytest.fixture
def target(server: Server, tmp_path: Path) -> Target:
    return make_target(tmp_path / "target", [server.url])


# -- configuration -----------------------------------------------------------------------------------


def test_world_writable_config_is_refused_with_exit_1(server, target):
    target.config.chmod(0o666)
    result = elevate(target, ARGV, token=mint_token(server, ARGV))
    assert result.returncode == 1, result.stderr
    line = error_line(result)
    assert line["error"] == "config" and "world-writable" in line["reason"]


def test_group_writable_config_is_refused(server, target):
    target.config.chmod(0o664)
    assert elevate(target, ARGV, token=mint_token(server, ARGV)).returncode == 1


def test_config_not_owned_by_root_is_refused(server, target):
    os.chown(target.config, 65534, 65534)
    result = elevate(target, ARGV, token=mint_token(server, ARGV))
    assert result.returncode == 1
    assert "not owned by root" in error_line(result)["reason"]


def test_config_in_a_world_writable_directory_is_refused(server, target):
    target.config.parent.chmod(0o777)
    result = elevate(target, ARGV, token=mint_token(server, ARGV))
    assert result.returncode == 1
    assert "config directory" in error_line(result)["reason"]


def test_symlinked_config_is_refused(server, target):
    link = target.config.parent / "link.toml"
    link.symlink_to(target.config)
    result = elevate(link, ARGV, token=mint_token(server, ARGV))
    assert result.returncode == 1 and error_line(result)["error"] == "config"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("allowed_approvers = ['a@example.com']\n", "allowed_issuers: required"),
        (
            "allowed_issuers = ['http://x']\nallowed_approvers = ['a@example.com']\nallowed_issuer = 1\n",
            "did you mean",
        ),
        ("allowed_issuers = 'http://x'\nallowed_approvers = ['a@example.com']\n", "list of http(s) URLs"),
        ("allowed_issuers = [\n", "not valid TOML"),
        ("allowed_issuers = ['http://x']\nallowed_approvers = ['a@example.com']\ntimeout = 0\n", "timeout"),
    ],
)
def test_config_errors_exit_1_and_name_the_problem(server, target, content, message):
    target.config.write_text(content)
    result = elevate(target, ARGV, token=mint_token(server, ARGV))
    assert result.returncode == 1, result.stderr
    assert message in error_line(result)["reason"]


def test_missing_config_exits_1(tmp_path):
    result = elevate(tmp_path / "nope.toml", ARGV, token="x.y.z")
    assert result.returncode == 1 and "does not exist" in error_line(result)["reason"]


def test_check_config_prints_the_effective_settings(target):
    result = elevate(target, [], extra_args=["--check-config"])
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert shown["host"] == HOST and shown["allowed_audiences"] == ["escapes", "grantd"]
    assert shown["offline_grant_types"] == [] and "every grant needs the issuer" in shown["offline"]
    assert target.audit_lines() == []  # not an attempt


def test_check_config_names_the_offline_opt_in(server, tmp_path):
    target = make_target(tmp_path / "t", [server.url], offline_grant_types=["timed"])
    result = elevate(target, [], extra_args=["--check-config"])
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert shown["offline_grant_types"] == ["timed"]
    assert "timed grants run on cached keys when the issuer cannot be connected to at all" in shown["offline"]


def test_once_grants_cannot_be_made_offline(server, tmp_path):
    target = make_target(tmp_path / "t", [server.url], offline_grant_types=["timed", "once"])
    result = elevate(target, [], extra_args=["--check-config"])
    assert result.returncode == 1 and "offline_grant_types" in error_line(result)["reason"]


def test_a_sudo_caller_cannot_pick_its_own_config(server, target):
    env = {**os.environ, "SUDO_UID": "65534", "SUDO_GID": "65534", "SUDO_USER": "nobody"}
    result = elevate(target, ARGV, token=mint_token(server, ARGV), env=env)
    assert result.returncode == 1 and "for root only" in error_line(result)["reason"]


def test_no_command_and_no_grant_are_errors(server, target):
    assert elevate(target, [], token=mint_token(server, ARGV)).returncode == 1
    result = elevate(target, ARGV)
    assert result.returncode == 1 and error_line(result)["error"] == "usage"


# -- refusals, in D10 order ----------------------------------------------------------------------------


def refusal(result: subprocess.CompletedProcess[str]) -> dict[str, str]:
    assert result.returncode == 5, (result.returncode, result.stdout, result.stderr)
    return error_line(result)


def test_issuer_not_allowed(server, tmp_path):
    target = make_target(tmp_path / "t", ["https://other-idp.example.com"])
    line = refusal(elevate(target, ARGV, token=mint_token(server, ARGV)))
    assert line == {"error": "issuer_not_allowed", "reason": "issuer not in allowed issuers"}
    assert not target.cache.exists() or not any(target.cache.iterdir())  # no key fetched for a stranger


def test_issuer_with_a_trailing_slash_is_another_issuer(server, tmp_path):
    target = make_target(tmp_path / "t", [server.url + "/"])
    assert refusal(elevate(target, ARGV, token=mint_token(server, ARGV)))["error"] == "issuer_not_allowed"


def test_bad_signature(server, target):
    import jwt as pyjwt

    good = mint_token(server, ARGV)
    kid = pyjwt.get_unverified_header(good)["kid"]
    forged = pyjwt.encode(
        claims_for(server, ARGV),
        Ed25519PrivateKey.generate(),
        algorithm="EdDSA",
        headers={"kid": kid, "typ": "JWT"},
    )
    line = refusal(elevate(target, ARGV, token=forged))
    assert line == {"error": "bad_signature", "reason": "bad signature"}


def test_tampered_claims_break_the_signature(server, target):
    import base64

    header, payload, signature = mint_token(server, ["id", "-u"]).split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["command"] = ["id", "-g"]
    forged_payload = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    line = refusal(elevate(target, ["id", "-g"], token=f"{header}.{forged_payload}.{signature}"))
    assert line["error"] == "bad_signature"


def test_unknown_kid_and_other_algorithms_are_bad_signatures(server, target):
    import jwt as pyjwt

    unknown = pyjwt.encode(
        claims_for(server, ARGV),
        Ed25519PrivateKey.generate(),
        algorithm="EdDSA",
        headers={"kid": "key-nobody"},
    )
    assert refusal(elevate(target, ARGV, token=unknown))["error"] == "bad_signature"
    hs = pyjwt.encode(
        claims_for(server, ARGV),
        "secret-secret-secret-secret-secret",
        algorithm="HS256",
        headers={"kid": "key-nobody"},
    )
    assert refusal(elevate(target, ARGV, token=hs))["error"] == "bad_signature"


def test_expired(server, target):
    now = int(time.time())
    line = refusal(elevate(target, ARGV, token=mint_token(server, ARGV, iat=now - 900, exp=now - 600)))
    assert line == {"error": "expired", "reason": "expired"}


def test_audience_mismatch(server, target):
    line = refusal(elevate(target, ARGV, token=mint_token(server, ARGV, aud="shapes")))
    assert line == {"error": "audience_mismatch", "reason": "audience mismatch"}


def test_target_host_differs(server, target):
    line = refusal(elevate(target, ARGV, token=mint_token(server, ARGV, target_host="db1.example.com")))
    assert line == {
        "error": "target_host_mismatch",
        "reason": "target_host differs from the system host name",
    }


def test_approver_not_allowed(server, target):
    line = refusal(elevate(target, ARGV, token=mint_token(server, ARGV, decided_by="mallory@example.com")))
    assert line == {"error": "approver_not_allowed", "reason": "approver not allowed"}


@pytest.mark.parametrize(
    "argv", [["id", "-g"], ["id", "-u", "root"], ["id"], ["id -u"], ["/usr/bin/id", "-u"]]
)
def test_command_differs(server, target, argv):
    line = refusal(elevate(target, argv, token=mint_token(server, ARGV)))
    assert line["error"] == "cmd_hash_mismatch" and "cmd_hash mismatch" in line["reason"]


def test_cmd_hash_alone_is_checked_with_or_without_prefix(server, target):
    from grantd.plugins.elevate_default import cmd_hash

    wrong = mint_token(server, ARGV, command=None, cmd_hash=cmd_hash(["id", "-g"]))
    assert refusal(elevate(target, ARGV, token=wrong))["error"] == "cmd_hash_mismatch"
    neither = mint_token(server, ARGV, command=None, cmd_hash=None)
    assert refusal(elevate(target, ARGV, token=neither))["error"] == "cmd_hash_mismatch"


def test_checks_run_in_d10_order(server, target):
    # Wrong audience, host, approver and command at once: the audience is named (the first check).
    token = mint_token(server, ["x"], aud="shapes", target_host="elsewhere", decided_by="m@example.com")
    assert refusal(elevate(target, ARGV, token=token))["error"] == "audience_mismatch"
    now = int(time.time())
    expired = mint_token(server, ["x"], aud="shapes", exp=now - 600)
    assert refusal(elevate(target, ARGV, token=expired))["error"] == "expired"


def test_malformed_tokens_are_refused(server, target):
    assert refusal(elevate(target, ARGV, token="not-a-jwt"))["error"] == "malformed_token"
    no_grant_id = mint_token(server, ARGV, grant_id=None)
    assert refusal(elevate(target, ARGV, token=no_grant_id))["error"] == "malformed_token"


def test_consume_is_asked_at_the_issuer(server, target):
    # A well-signed token for a grant the issuer does not know: the issuer's answer refuses it.
    result = elevate(target, ARGV, token=mint_token(server, ARGV, grant_type="once"))
    assert result.returncode == 5, result.stderr
    assert error_line(result)["error"] in ("rejected_by_issuer", "not_approved", "consume_refused")


@pytest.mark.parametrize("via", ["stdin", "fd", "file", "argv"])
def test_every_way_of_passing_the_grant_reaches_verification(server, target, via):
    line = refusal(elevate(target, ARGV, token=mint_token(server, ARGV, aud="shapes"), via=via))
    assert line["error"] == "audience_mismatch"


def test_grant_file_is_opened_with_the_callers_permissions(server, tmp_path):
    """Under sudo, --grant-file is opened as the calling user: root's files cannot be used."""
    shared = Path(tempfile.mkdtemp(prefix="grantd-test-"))  # a directory the caller can enter
    shared.chmod(0o755)
    secret = shared / "root-only.jwt"
    secret.write_text("eyJroot-only-token")
    secret.chmod(0o600)
    readable = shared / "readable.jwt"  # the caller's own, private
    readable.write_text("eyJreadable-token\n")
    readable.chmod(0o600)
    os.chown(readable, 65534, 65534)
    probe = (
        "import argparse, json, sys\n"
        "from grantd.elevate.cli import read_grant, Stop\n"
        "args = argparse.Namespace(grant=None, grant_fd=None, grant_stdin=False, grant_file=sys.argv[1])\n"
        "try:\n    print(json.dumps({'token': read_grant(args, 5)}))\n"
        "except Stop as e:\n    print(json.dumps({'error': e.reason}))\n"
    )
    env = {**os.environ, "SUDO_UID": "65534", "SUDO_GID": "65534", "SUDO_USER": "nobody"}
    for path, expected in ((secret, "error"), (readable, "token")):
        out = subprocess.run(
            [sys.executable, "-c", probe, str(path)],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            cwd=str(Path(__file__).resolve().parents[2]),
        )
        answer = json.loads(out.stdout)
        assert expected in answer, (path, answer, out.stderr)
        if expected == "error":
            assert "Permission denied" in answer["error"]
        else:
            assert answer["token"] == "eyJreadable-token"
    shutil.rmtree(shared)


# -- the unreachable issuer ------------------------------------------------------------------------------


def test_an_issuer_that_never_answers_times_out_with_exit_1(server, tmp_path, black_hole):
    import jwt as pyjwt

    target = make_target(tmp_path / "t", [black_hole], timeout=2)
    token = pyjwt.encode(
        {**claims_for(server, ARGV), "iss": black_hole},
        Ed25519PrivateKey.generate(),
        algorithm="EdDSA",
        headers={"kid": "k1"},
    )
    started = time.monotonic()
    result = elevate(target, ARGV, token=token, timeout=60)
    elapsed = time.monotonic() - started
    assert result.returncode == 1, result.stderr
    line = error_line(result)
    assert line["error"] == "network" and "no answer" in line["reason"] or "timed out" in line["reason"]
    assert elapsed < 30
    assert target.audit_lines()[-1]["result"] == "error"


# -- an issuer that went away after its keys were fetched ------------------------------------------------


@pytest.fixture(scope="module")
def gone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Target]]:
    """A server whose JWKS was fetched into the target's cache; then it stopped."""
    base = tmp_path_factory.mktemp("gone")
    srv = make_server(base / "idp").start()
    target = make_target(
        base / "target",
        [srv.url],
        timeout=3,
        jwks_refresh=0,
        plugin_dirs=[PLUGIN_DIR],
        offline_grant_types=["timed"],
    )
    elevate(target, ARGV, token=mint_token(srv, ARGV))  # fetches and caches the keys
    assert any(target.cache.iterdir()), "the JWKS was not cached"
    srv.stop()
    yield srv, target


def test_timed_grants_run_on_cached_keys_while_the_issuer_is_down(gone):
    srv, target = gone
    result = elevate(target, ARGV, token=mint_token(srv, ARGV))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "0"
    last = attempts(target)[-1]
    assert (
        last["result"] == "allowed" and "jwks from cache" in last["jwks"] and "unreachable" in last["consume"]
    )
    assert "offline_grant_types" in last["consume"]


def test_once_grants_fail_closed_while_the_issuer_is_down(gone):
    srv, target = gone
    result = elevate(target, ARGV, token=mint_token(srv, ARGV, grant_type="once"))
    assert result.returncode == 1, result.stderr
    assert error_line(result)["error"] == "network"


def test_the_key_cache_has_a_bound(gone, tmp_path):
    srv, target = gone
    bounded = make_target(
        tmp_path / "bounded",
        [srv.url],
        timeout=3,
        jwks_refresh=0,
        jwks_max_stale=60,
        jwks_cache_dir=str(target.cache),
        offline_grant_types=["timed"],
    )
    cached = next(target.cache.iterdir())
    entry = json.loads(cached.read_text())
    entry["fetched_at"] -= 3600
    cached.write_text(json.dumps(entry))
    try:
        result = elevate(bounded, ARGV, token=mint_token(srv, ARGV))
        assert result.returncode == 1 and error_line(result)["error"] == "network"
    finally:
        entry["fetched_at"] += 3600
        cached.write_text(json.dumps(entry))


def test_a_cache_others_can_write_is_not_trusted(gone, tmp_path):
    srv, target = gone
    loose = tmp_path / "loose-cache"
    loose.mkdir()
    (loose / next(target.cache.iterdir()).name).write_text(next(target.cache.iterdir()).read_text())
    loose.chmod(0o777)
    other = make_target(tmp_path / "other", [srv.url], timeout=3, jwks_cache_dir=str(loose))
    result = elevate(other, ARGV, token=mint_token(srv, ARGV))
    assert result.returncode == 1 and "JWKS cache disabled" in result.stderr


def test_the_command_gets_a_clean_environment(gone):
    srv, target = gone
    result = elevate(target, ["env"], token=mint_token(srv, ["env"]), env=dirty_env(TZ="../../etc/shadow"))
    assert result.returncode == 0, result.stderr
    env = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    for name in (
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "PYTHONPATH",
        "PYTHONSTARTUP",
        "IFS",
        "BASH_ENV",
        "ENV",
        "CDPATH",
        "PERL5OPT",
        "TZ",
    ):
        assert name not in env, name
    assert env["PATH"] == "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    assert env["USER"] == env["LOGNAME"] == "root" and env["HOME"] == pwd.getpwnam("root").pw_dir
    assert env["LANG"] == "C.UTF-8" and env["TERM"] == "xterm"


def test_command_not_found_is_127_and_does_not_use_the_grant(gone):
    srv, target = gone
    argv = ["grantd-no-such-program", "x"]
    result = elevate(target, argv, token=mint_token(srv, argv))
    assert result.returncode == 127, result.stderr
    assert error_line(result)["error"] == "not_found"
    assert "consume" not in target.audit_lines()[-1]


def test_not_executable_is_126(gone, tmp_path):
    srv, target = gone
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    result = elevate(target, [str(script)], token=mint_token(srv, [str(script)]))
    assert result.returncode == 126, result.stderr


def test_commands_are_not_searched_in_the_callers_path(gone, tmp_path):
    srv, target = gone
    evil = tmp_path / "evil-bin"
    evil.mkdir()
    (evil / "grantd-only-here").write_text("#!/bin/sh\necho pwned\n")
    (evil / "grantd-only-here").chmod(0o755)
    env = {**os.environ, "PATH": f"{evil}:{os.environ.get('PATH', '')}"}
    result = elevate(target, ["grantd-only-here"], token=mint_token(srv, ["grantd-only-here"]), env=env)
    assert result.returncode == 127 and "pwned" not in result.stdout


@pytest.fixture
def test_user() -> Iterator[pwd.struct_passwd]:
    suffix = uuid.uuid4().hex[:6]
    group, name = f"gdg{suffix}", f"gdu{suffix}"
    subprocess.run(["groupadd", group], check=True)
    subprocess.run(["useradd", "-M", "-s", "/bin/sh", "-G", group, name], check=True)
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], check=False)
        subprocess.run(["groupdel", group], check=False)
        subprocess.run(["groupdel", name], check=False, capture_output=True)


def test_run_as_a_user_gets_that_users_uid_and_groups(gone, test_user, tmp_path):
    srv, target = gone
    argv = ["sh", "-c", "id -u; id -g; id -G"]
    workdir = tmp_path / "work"
    workdir.mkdir()
    workdir.chmod(0o755)
    result = elevate(target, argv, token=mint_token(srv, argv, run_as=test_user.pw_name), cwd=workdir)
    assert result.returncode == 0, result.stderr
    uid, gid, groups = result.stdout.split("\n")[:3]
    expected = {g.gr_gid for g in grp.getgrall() if test_user.pw_name in g.gr_mem} | {test_user.pw_gid}
    assert int(uid) == test_user.pw_uid and int(gid) == test_user.pw_gid
    assert {int(g) for g in groups.split()} == expected
    assert 0 not in {int(g) for g in groups.split()}  # none of root's groups survive
    last = attempts(target)[-1]
    assert last["run_as"] == test_user.pw_name and last["uid"] == test_user.pw_uid
    assert exits(target)[-1]["status"] == 0 and exits(target)[-1]["run_as"] == test_user.pw_name


def test_run_as_an_unknown_user_exits_1(gone):
    srv, target = gone
    result = elevate(target, ARGV, token=mint_token(srv, ARGV, run_as="grantd-nobody-here"))
    assert result.returncode == 1 and error_line(result)["error"] == "unknown_user"


def test_rest_of_stdin_reaches_the_command(gone):
    srv, target = gone
    token = mint_token(srv, ["cat"])
    result = subprocess.run(
        [*GRANTD, "elevate", "--config", str(target.config), "--grant-stdin", "--", "cat"],
        input=token + "\nhello from stdin\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "hello from stdin\n"


# -- site plugins -----------------------------------------------------------------------------------------


def _office_hours(target: Target, start: str, end: str) -> None:
    text = target.config.read_text()
    text = text.replace("plugin_dirs", 'plugins = ["elevate_office_hours"]\nplugin_dirs')
    target.config.write_text(text + f'\n[office_hours]\nstart = "{start}"\nend = "{end}"\n')


def test_an_office_hours_plugin_can_refuse(gone, tmp_path):
    srv, base = gone
    target = make_target(
        tmp_path / "t",
        [srv.url],
        timeout=3,
        jwks_refresh=0,
        jwks_cache_dir=str(base.cache),
        plugin_dirs=[PLUGIN_DIR],
        offline_grant_types=["timed"],
    )
    now = time.gmtime()
    closed_from = f"{(now.tm_hour + 1) % 24:02d}:00"
    closed_to = f"{(now.tm_hour + 2) % 24:02d}:00"
    _office_hours(target, closed_from, closed_to)
    line = refusal(elevate(target, ARGV, token=mint_token(srv, ARGV)))
    assert line["error"] == "refused_by_plugin" and "outside office hours" in line["reason"]
    assert "outside office hours" in target.audit_lines()[-1]["reason"]


def test_an_office_hours_plugin_lets_grants_through_in_hours(gone, tmp_path):
    srv, base = gone
    target = make_target(
        tmp_path / "t",
        [srv.url],
        timeout=3,
        jwks_refresh=0,
        jwks_cache_dir=str(base.cache),
        plugin_dirs=[PLUGIN_DIR],
        offline_grant_types=["timed"],
    )
    now = time.gmtime()
    _office_hours(
        target, f"{now.tm_hour:02d}:00", f"{(now.tm_hour + 1) % 24:02d}:00" if now.tm_min < 59 else "23:59"
    )
    result = elevate(target, ARGV, token=mint_token(srv, ARGV))
    assert result.returncode == 0, result.stderr


def test_the_default_checks_still_come_first_with_a_plugin(gone, tmp_path):
    srv, base = gone
    target = make_target(
        tmp_path / "t",
        [srv.url],
        timeout=3,
        jwks_refresh=0,
        jwks_cache_dir=str(base.cache),
        plugin_dirs=[PLUGIN_DIR],
        offline_grant_types=["timed"],
    )
    now = time.gmtime()
    _office_hours(target, f"{(now.tm_hour + 1) % 24:02d}:00", f"{(now.tm_hour + 2) % 24:02d}:00")
    result = elevate(target, ARGV, token=mint_token(srv, ARGV, aud="shapes"))
    line = refusal(result)
    assert line["error"] == "audience_mismatch" and len(line["reasons"]) == 2


def test_a_plugin_that_cannot_be_imported_is_a_config_error(server, tmp_path):
    target = make_target(tmp_path / "t", [server.url], plugins=["elevate_no_such_plugin"])
    result = elevate(target, ARGV, token=mint_token(server, ARGV))
    assert result.returncode == 1 and "cannot import plugin" in error_line(result)["reason"]


def test_a_plugin_directory_others_can_write_is_refused(server, tmp_path):
    loose = tmp_path / "plugins"
    loose.mkdir()
    loose.chmod(0o777)
    target = make_target(tmp_path / "t", [server.url], plugin_dirs=[str(loose)])
    result = elevate(target, ARGV, token=mint_token(server, ARGV))
    assert result.returncode == 1 and "plugin directory" in error_line(result)["reason"]


# -- audit log --------------------------------------------------------------------------------------------


def test_every_attempt_is_one_json_line_in_the_audit_log(gone, tmp_path):
    srv, base = gone
    target = make_target(
        tmp_path / "t",
        [srv.url],
        timeout=3,
        jwks_refresh=0,
        jwks_cache_dir=str(base.cache),
        offline_grant_types=["timed"],
    )
    tries = [
        (ARGV, mint_token(srv, ARGV), 0),
        (["id", "-g"], mint_token(srv, ARGV), 5),
        (ARGV, mint_token(srv, ARGV, aud="nope"), 5),
        (ARGV, mint_token(srv, ARGV, grant_type="once"), 1),
        (["grantd-missing"], mint_token(srv, ["grantd-missing"]), 127),
        (ARGV, "garbage", 5),
    ]
    for argv, token, code in tries:
        assert elevate(target, argv, token=token).returncode == code
    raw = target.audit_log.read_text().splitlines()
    assert len(raw) == len(tries) + 1  # the allowed one also says how it ended
    lines = [json.loads(line) for line in raw]
    assert [line["event"] for line in lines] == ["attempt", "exit"] + ["attempt"] * (len(tries) - 1)
    ended = lines.pop(1)
    assert ended["status"] == 0 and ended["result"] == "exited" and ended["grant_id"] == lines[0]["grant_id"]
    required = {
        "time",
        "real_uid",
        "agent",
        "grant_id",
        "grant_type",
        "decided_by",
        "command",
        "cmd_hash",
        "run_as",
        "host",
        "cwd",
        "result",
        "reason",
    }
    for line in lines:
        assert required <= set(line), line
        assert line["real_uid"] == os.getuid() and line["host"] == HOST
    assert [line["result"] for line in lines] == [
        "allowed",
        "refused",
        "refused",
        "error",
        "error",
        "refused",
    ]
    assert lines[0]["agent"] == "agent+test@example.com" and lines[0]["decided_by"] == "admin@example.com"
    assert lines[1]["reason"].startswith("cmd_hash mismatch") and lines[1]["command"] == ["id", "-g"]
    assert oct(target.audit_log.stat().st_mode & 0o777) == "0o640"
    assert "eyJ" not in target.audit_log.read_text()  # tokens are never logged


# -- consume must answer 200 with JSON (D10) --------------------------------------------------------------


@pytest.fixture
def issuer() -> Iterator[FakeIssuer]:
    fake = FakeIssuer().serve()
    yield fake
    fake.close()


BAD_ANSWERS = {
    "http-500": (500, "application/json", b'{"status": "valid"}', {}),
    "http-503-html": (503, "text/html", b"<html>down for maintenance</html>", {}),
    "html-200": (200, "text/html", b"<html><body>Sign in to the portal</body></html>", {}),
    "redirect": (302, "text/html", b"", {"Location": "http://127.0.0.1:9/elsewhere"}),
    "json-not-an-object": (200, "application/json", b'["valid"]', {}),
    "unknown-status": (200, "application/json", b'{"status": "ok"}', {}),
    "empty-204": (204, "application/json", b"", {}),
}


@pytest.mark.parametrize("offline", [[], ["timed", "always"]], ids=["default", "offline-opt-in"])
@pytest.mark.parametrize("answer", list(BAD_ANSWERS))
def test_a_bad_consume_answer_is_a_failure_never_an_outage(issuer, tmp_path, answer, offline):
    issuer.answer = BAD_ANSWERS[answer]
    target = issuer.target(tmp_path / "t", offline_grant_types=offline)
    result = elevate(target, ARGV, token=issuer.token(ARGV))
    assert result.returncode == 1, (result.stdout, result.stderr)
    line = error_line(result)
    assert line["error"] == "consume_failed" and "cannot consume the grant at the issuer" in line["reason"]
    assert result.stdout == ""  # nothing ran
    assert len(issuer.consumed) == 1  # it was asked, once
    assert attempts(target)[-1]["result"] == "error" and exits(target) == []


@pytest.mark.parametrize("grant_type", ["timed", "always"])
def test_an_issuer_that_answers_500_does_not_let_revoked_grants_run(issuer, tmp_path, grant_type):
    # The attack: the issuer knows the grant is revoked, but a 5xx (an overloaded proxy, or one
    # the attacker provoked) used to count as "the issuer is away" and let it run on cached keys.
    issuer.answer = (500, "text/plain", b"Internal Server Error", {})
    target = issuer.target(tmp_path / "t", offline_grant_types=["timed", "always"])
    result = elevate(
        target, ["sh", "-c", "echo ran"], token=issuer.token(["sh", "-c", "echo ran"], grant_type=grant_type)
    )
    assert result.returncode == 1 and "ran" not in result.stdout
    assert "HTTP 500" in error_line(result)["reason"]


def test_an_issuer_that_answers_200_json_lets_the_grant_run(issuer, tmp_path):
    target = issuer.target(tmp_path / "t")
    result = elevate(target, ARGV, token=issuer.token(ARGV))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "0"
    assert attempts(target)[-1]["consume"] == "consume: valid"


@pytest.mark.parametrize(("grant_type", "answer"), [("once", "valid"), ("timed", "consumed")])
def test_consume_must_answer_the_status_of_the_grant_type(issuer, tmp_path, grant_type, answer):
    issuer.answer = (200, "application/json", json.dumps({"status": answer}).encode(), {})
    target = issuer.target(tmp_path / "t")
    result = elevate(target, ARGV, token=issuer.token(ARGV, grant_type=grant_type))
    assert result.returncode == 1 and error_line(result)["error"] == "consume_failed"


def test_a_consume_refusal_refuses_even_with_the_offline_opt_in(issuer, tmp_path):
    issuer.answer = (200, "application/json", b'{"error": "revoked", "status": "revoked"}', {})
    target = issuer.target(tmp_path / "t", offline_grant_types=["timed", "always"])
    result = elevate(target, ARGV, token=issuer.token(ARGV))
    assert result.returncode == 5
    assert error_line(result) == {"error": "revoked", "reason": "grant revoked"}


@pytest.mark.parametrize("offline", [[], ["timed", "always"]], ids=["default", "offline-opt-in"])
def test_a_silent_issuer_is_a_failure_not_an_outage(tmp_path, black_hole, offline):
    silent = FakeIssuer(black_hole)
    target = silent.target(tmp_path / "t", timeout=2, offline_grant_types=offline)
    started = time.monotonic()
    result = elevate(target, ARGV, token=silent.token(ARGV))
    assert result.returncode == 1, (result.stdout, result.stderr)
    line = error_line(result)
    assert line["error"] == "network" and ("timed out" in line["reason"] or "no answer" in line["reason"])
    assert result.stdout == "" and time.monotonic() - started < 30


@pytest.fixture
def refusing(tmp_path: Path) -> FakeIssuer:
    """An issuer nobody listens for: every connection is refused."""
    return FakeIssuer(f"http://127.0.0.1:{free_port()}")


def test_a_refused_connection_fails_without_the_offline_opt_in(refusing, tmp_path):
    target = refusing.target(tmp_path / "t")
    result = elevate(target, ARGV, token=refusing.token(ARGV))
    assert result.returncode == 1 and result.stdout == ""
    line = error_line(result)
    assert line["error"] == "network" and "Connection refused" in line["reason"]
    assert "offline_grant_types" in line["reason"]  # says how to opt in


def test_a_refused_connection_runs_a_grant_whose_type_is_opted_in(refusing, tmp_path):
    target = refusing.target(tmp_path / "t", offline_grant_types=["timed"])
    result = elevate(target, ARGV, token=refusing.token(ARGV))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "0"
    note = attempts(target)[-1]["consume"]
    assert "issuer unreachable" in note and "Connection refused" in note
    always = elevate(
        target, ARGV, token=refusing.token(ARGV, grant_type="always")
    )  # not named: needs the issuer
    assert always.returncode == 1 and error_line(always)["error"] == "network"


def test_a_once_grant_always_needs_the_issuer(refusing, tmp_path):
    target = refusing.target(tmp_path / "t", offline_grant_types=["timed", "always"])
    result = elevate(target, ARGV, token=refusing.token(ARGV, grant_type="once"))
    assert result.returncode == 1 and result.stdout == ""
    assert "once grants always need the issuer" in error_line(result)["reason"]


def test_an_unresolvable_issuer_counts_as_unreachable(tmp_path):
    gone = FakeIssuer("http://grantd-test-no-such-host.invalid")
    target = gone.target(tmp_path / "t", timeout=5, offline_grant_types=["timed"])
    result = elevate(target, ARGV, token=gone.token(ARGV))
    if result.returncode == 1 and ("timed out" in result.stderr or "no answer" in result.stderr):
        pytest.skip("this machine's resolver does not answer for .invalid in time")
    assert result.returncode == 0, result.stderr
    assert "issuer unreachable" in attempts(target)[-1]["consume"]


def test_the_gone_issuer_without_the_opt_in_is_a_failure(gone, tmp_path):
    srv, base = gone
    target = make_target(tmp_path / "t", [srv.url], timeout=3, jwks_refresh=0, jwks_cache_dir=str(base.cache))
    result = elevate(target, ARGV, token=mint_token(srv, ARGV))
    assert result.returncode == 1 and result.stdout == "" and error_line(result)["error"] == "network"


# -- the token never goes into argv under sudo (D10) --------------------------------------------------------

SUDO_ENV = {"SUDO_UID": "65534", "SUDO_GID": "65534", "SUDO_USER": "nobody"}


def test_grant_in_argv_is_refused_under_sudo(server, target):
    token = mint_token(server, ARGV)
    for extra in (SUDO_ENV, {"SUDO_USER": "nobody"}, {"SUDO_UID": "0"}):
        result = elevate(target, ARGV, token=token, via="argv", env={**os.environ, **extra})
        assert result.returncode == 1, (extra, result.stderr)
        line = error_line(result)
        assert line["error"] == "grant_in_argv"
        for way in ("--grant-stdin", "--grant-fd N", "--grant-file FILE"):
            assert way in line["reason"]
        assert token not in result.stderr and result.stdout == ""


@pytest.mark.skipif(shutil.which("sudo") is None, reason="needs sudo")
def test_grant_in_argv_is_refused_through_real_sudo(server, target):
    token = mint_token(server, ARGV, aud="shapes")
    base = ["sudo", "-n", sys.executable, "-I", "-m", "grantd", "elevate", "--config", str(target.config)]
    through_argv = subprocess.run(
        [*base, "--grant", token, "--", *ARGV], capture_output=True, text=True, timeout=60, cwd="/"
    )
    if "a password is required" in through_argv.stderr or "not allowed" in through_argv.stderr:
        pytest.skip("sudo is not usable here")
    assert through_argv.returncode == 1, through_argv.stderr
    assert error_line(through_argv)["error"] == "grant_in_argv"
    # The same token through stdin reaches verification (and is refused there: wrong audience).
    through_stdin = subprocess.run(
        [*base, "--grant-stdin", "--", *ARGV],
        input=token + "\n",
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
    )
    assert through_stdin.returncode == 5, through_stdin.stderr
    assert error_line(through_stdin)["error"] == "audience_mismatch"


def test_grant_in_argv_from_a_root_shell_works_with_a_warning(server, target):
    result = elevate(
        target,
        ARGV,
        token=mint_token(server, ARGV, aud="shapes"),
        via="argv",
        env={k: v for k, v in os.environ.items() if not k.startswith("SUDO_")},
    )
    assert result.returncode == 5 and error_line(result)["error"] == "audience_mismatch"
    assert "process list" in result.stderr


def _grant_file(directory: Path, token: str, mode: int, owner: int) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o755)
    path = directory / "grant.jwt"
    path.write_text(token)
    path.chmod(mode)
    os.chown(path, owner, owner)
    return path


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620, 0o666])
def test_a_grant_file_others_can_read_or_write_is_refused(server, target, tmp_path, mode):
    path = _grant_file(tmp_path / "files", mint_token(server, ARGV), mode, 0)
    result = elevate(target, ARGV, extra_args=["--grant-file", str(path)])
    assert result.returncode == 1, result.stderr
    line = error_line(result)
    assert (
        line["error"] == "usage"
        and "readable or writable by others" in line["reason"]
        and "0600" in line["reason"]
    )


def test_a_grant_file_of_another_user_is_refused(server, target, tmp_path):
    path = _grant_file(tmp_path / "files", mint_token(server, ARGV), 0o600, 65534)
    result = elevate(target, ARGV, extra_args=["--grant-file", str(path)])
    assert result.returncode == 1 and "not owned by you" in error_line(result)["reason"]


def test_a_private_grant_file_of_the_caller_is_read(server, target, tmp_path):
    path = _grant_file(tmp_path / "files", mint_token(server, ARGV, aud="shapes"), 0o600, 0)
    result = elevate(target, ARGV, extra_args=["--grant-file", str(path)])
    assert result.returncode == 5 and error_line(result)["error"] == "audience_mismatch"


# -- the command runs as a child: its end is audited and its status is elevate's (D10) -----------------------


def test_the_exit_status_is_propagated_and_audited(gone, tmp_path):
    srv, base = gone
    target = make_target(
        tmp_path / "t",
        [srv.url],
        timeout=3,
        jwks_refresh=0,
        jwks_cache_dir=str(base.cache),
        offline_grant_types=["timed"],
    )
    argv = ["sh", "-c", "echo out; echo err >&2; exit 7"]
    token = mint_token(srv, argv)
    result = elevate(target, argv, token=token)
    assert result.returncode == 7, result.stderr
    assert result.stdout == "out\n" and result.stderr.endswith("err\n")
    started, ended = target.audit_lines()
    assert started["event"] == "attempt" and started["result"] == "allowed"
    assert ended["event"] == "exit" and ended["result"] == "exited"
    assert ended["status"] == 7 and ended["exit_code"] == 7 and "signal" not in ended
    assert (
        ended["grant_id"] == started["grant_id"]
        and ended["command"] == argv
        and ended["pid"] == started["pid"]
    )
    assert ended["child_pid"] != ended["pid"] and ended["duration_ms"] >= 0
    assert "eyJ" not in target.audit_log.read_text()


def test_a_command_ended_by_a_signal_gives_128_plus_n(gone, tmp_path):
    srv, base = gone
    target = make_target(
        tmp_path / "t",
        [srv.url],
        timeout=3,
        jwks_refresh=0,
        jwks_cache_dir=str(base.cache),
        offline_grant_types=["timed"],
    )
    argv = ["sh", "-c", "kill -TERM $$"]
    result = elevate(target, argv, token=mint_token(srv, argv))
    assert result.returncode == 128 + 15, result.stderr
    ended = exits(target)[-1]
    assert ended["result"] == "signalled" and ended["signal"] == 15 and ended["signal_name"] == "SIGTERM"
    assert ended["exit_code"] == 143 and "status" not in ended


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as fh:
        return [int(p) for p in fh.read().split()]


def test_sigterm_sent_to_elevate_reaches_the_command(gone, tmp_path):
    srv, base = gone
    target = make_target(
        tmp_path / "t",
        [srv.url],
        timeout=3,
        jwks_refresh=0,
        jwks_cache_dir=str(base.cache),
        offline_grant_types=["timed"],
    )
    argv = ["sleep", "60"]
    proc = subprocess.Popen(
        [*GRANTD, "elevate", "--config", str(target.config), "--grant-stdin", "--", *argv],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None
    proc.stdin.write(mint_token(srv, argv) + "\n")
    proc.stdin.close()
    deadline = time.monotonic() + 30
    while not (children := _children(proc.pid)):
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else None
        assert time.monotonic() < deadline, "the command did not start"
        time.sleep(0.05)
    # the child execs the verified argv right after the fork: wait for the exec, then look (no token)
    while (cmdline := pathlib.Path(f"/proc/{children[0]}/cmdline").read_bytes()).split(b"\0")[0] != b"sleep":
        assert time.monotonic() < deadline, f"the command did not start: {cmdline!r}"
        time.sleep(0.05)
    assert cmdline.split(b"\0")[:2] == [b"sleep", b"60"]
    with open(f"/proc/{children[0]}/environ", "rb") as fh:
        assert b"eyJ" not in fh.read()
    started = time.monotonic()
    proc.terminate()  # SIGTERM to elevate, as sudo relays it or a supervisor sends it
    assert proc.wait(timeout=30) == 128 + 15, proc.stderr.read() if proc.stderr else None
    assert time.monotonic() - started < 10  # the command ended at once, not after its 60 s
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()
    ended = exits(target)[-1]
    assert ended["signal"] == 15 and ended["child_pid"] == children[0] and ended["duration_ms"] < 30000


def test_an_exec_failure_in_the_child_is_126_and_audited(gone, tmp_path, test_user):
    # Executable by root, not by the run_as user: found before consume, refused by the kernel in the child.
    srv, base = gone
    target = make_target(
        tmp_path / "t",
        [srv.url],
        timeout=3,
        jwks_refresh=0,
        jwks_cache_dir=str(base.cache),
        offline_grant_types=["timed"],
    )
    script = tmp_path / "root-only.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o700)
    tmp_path.chmod(0o755)
    argv = [str(script)]
    result = elevate(target, argv, token=mint_token(srv, argv, run_as=test_user.pw_name))
    assert result.returncode == 126, result.stderr
    assert error_line(result)["error"] == "not_executable" and "hi" not in result.stdout
    ended = exits(target)[-1]
    assert ended["result"] == "error" and ended["status"] == 126 and "not executable" in ended["reason"]
