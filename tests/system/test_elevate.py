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

from conftest import Server, make_server
from elevate_support import (
    GRANTD,
    HOST,
    PLUGIN_DIR,
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
