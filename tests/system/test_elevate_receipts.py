"""The target host's side of D14 "Hosts": `grantd elevate --init-host`, receipts after every attempt,
the spool while the issuer cannot be reached, `--flush-receipts` (real `grantd elevate` processes, as root).

The issuer here is a small real HTTP server (ReceiptIssuer): it answers consume, and checks every
receipt the way the server does, with grantd.core.tlog.receipts and the host's enrolled public line
(201 new, 200 a repeat which adds nothing, 401 a bad signature, 403 an unknown host).
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from grantd.core.tlog.receipts import BadReceipt, UnknownHost, receipt_key, verify_receipt
from grantd.sshkeys import parse_public_key

from conftest import free_port
from elevate_support import HOST, FakeIssuer, Target, attempts, elevate, error_line, exits

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="grantd elevate runs as root")

ARGV = ["id", "-u"]


class ReceiptIssuer:
    """A FakeIssuer's keys behind a real HTTP server on a fixed port (started and stopped by the test)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.fake = FakeIssuer(f"http://127.0.0.1:{self.port}")
        self.url = self.fake.url
        self.hosts: dict[str, str] = {}
        self.logged: dict[
            tuple[str, str, str], dict[str, Any]
        ] = {}  # receipt_key -> claims: what a leaf would hold
        self.answers: list[int] = []
        self.checkpoint = (7, base64.b64encode(hashlib.sha256(b"root").digest()).decode())
        self._server: Any = None

    def start(self) -> ReceiptIssuer:
        issuer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path.endswith("/consume"):
                    self._answer(200, {"status": "valid"})
                elif self.path == "/api/audit/receipts":
                    self._answer(*issuer.receive(body))
                else:
                    self._answer(404, {"detail": "no such route"})

            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                if self.path != "/api/audit/checkpoint":
                    self._answer(404, {"detail": "no such route"})
                    return
                size, root = issuer.checkpoint
                note = f"127.0.0.1/grantd\n{size}\n{root}\n\n\u2014 127.0.0.1/grantd AAAA\n".encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(note)))
                self.end_headers()
                self.wfile.write(note)

            def _answer(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def receive(self, body: bytes) -> tuple[int, dict[str, Any]]:
        try:
            token = json.loads(body)["receipt"]
            receipt = verify_receipt(token, self.url, self.hosts.get)
        except UnknownHost as exc:
            status = 403, {"detail": str(exc)}
        except (BadReceipt, ValueError, KeyError, TypeError) as exc:
            status = 401, {"detail": str(exc)}
        else:
            key = receipt_key(receipt.claims)
            if key in self.logged:
                status = 200, {"status": "repeat"}
            else:
                self.logged[key] = receipt.claims
                status = 201, {"status": "logged"}
        self.answers.append(status[0])
        return status

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


@pytest.fixture
def issuer() -> Iterator[ReceiptIssuer]:
    server = ReceiptIssuer()
    yield server
    server.stop()


def host_target(issuer: ReceiptIssuer, directory: Path, **keys: Any) -> Target:
    """A target trusting the issuer (keys cached), with host_key and receipt_spool in its folder;
    timed grants run while the issuer cannot be connected to (so a run happens with the issuer down)."""
    settings = {
        "offline_grant_types": ["timed"],
        "host_key": str(directory / "etc" / "host_ed25519"),
        "receipt_spool": str(directory / "spool"),
        "receipt_timeout": 2,
        **keys,
    }
    return issuer.fake.target(directory, **settings)


def init_host(target: Target) -> str:
    result = elevate(target, [], extra_args=["--init-host"])
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def spooled(directory: Path) -> list[Path]:
    spool = directory / "spool"
    return sorted(spool.glob("*.jws")) if spool.exists() else []


# -- the host key ----------------------------------------------------------------------------------------


def test_init_host_makes_a_root_0600_key_and_prints_its_ssh_ed25519_line(issuer, tmp_path):
    target = host_target(issuer, tmp_path / "t")
    line = init_host(target)
    key_file = tmp_path / "t" / "etc" / "host_ed25519"
    st = key_file.stat()
    assert st.st_uid == 0 and stat.S_IMODE(st.st_mode) == 0o600 and stat.S_ISREG(st.st_mode)
    assert line.startswith("ssh-ed25519 ") and line.endswith(" " + HOST) and "\n" not in line
    public, normalized, _ = parse_public_key(line)
    from cryptography.hazmat.primitives import serialization

    private = serialization.load_ssh_private_key(key_file.read_bytes(), password=None)
    assert private.public_key().public_bytes_raw() == public.public_bytes_raw()
    assert [x["event"] for x in target.audit_lines()] == [
        "host_key"
    ]  # a record of who made it, not an attempt


def test_init_host_never_overwrites_a_key(issuer, tmp_path):
    target = host_target(issuer, tmp_path / "t")
    init_host(target)
    key_file = tmp_path / "t" / "etc" / "host_ed25519"
    before = key_file.read_bytes()
    again = elevate(target, [], extra_args=["--init-host"])
    assert again.returncode == 1 and "refusing to overwrite" in error_line(again)["reason"]
    assert key_file.read_bytes() == before and again.stdout == ""
    key_file.unlink()
    key_file.symlink_to(tmp_path / "elsewhere")  # a dangling symlink is something there too
    assert elevate(target, [], extra_args=["--init-host"]).returncode == 1
    assert not (tmp_path / "elsewhere").exists()


def test_sudo_grantd_elevate_init_host_is_the_normal_way_and_the_key_stays_roots(issuer, tmp_path):
    """`sudo grantd elevate --init-host` (issue 23): allowed through sudo; the key is root's alone
    (root-owned 0600), the caller sees only the public line, and elevate's audit log names who ran it.
    Here an administrator's root shell through sudo (SUDO_UID 0: a config outside /etc/grantd/ is
    allowed to it); for any other sudo caller the rule that the config must be root's in /etc/grantd/
    still holds, below."""
    target = host_target(issuer, tmp_path / "t")
    env = {**os.environ, "SUDO_UID": "0", "SUDO_GID": "0", "SUDO_USER": "admin"}
    env.pop("GRANTD_ELEVATE_CONFIG", None)
    result = elevate(target, [], extra_args=["--init-host"], env=env)
    assert result.returncode == 0, result.stderr
    line = result.stdout.strip()
    assert line.startswith("ssh-ed25519 ") and line.endswith(" " + HOST)
    key_file = tmp_path / "t" / "etc" / "host_ed25519"
    st = key_file.lstat()
    assert (
        stat.S_ISREG(st.st_mode) and st.st_uid == 0 and st.st_gid == 0 and stat.S_IMODE(st.st_mode) == 0o600
    )
    assert "PRIVATE KEY" not in result.stdout + result.stderr
    made = target.audit_lines()
    assert [(m["event"], m["sudo_user"], m["public_key"]) for m in made] == [("host_key", "admin", line)]
    # another sudo caller cannot point elevate at a config of its own to make a key somewhere else
    other = {**env, "SUDO_UID": "65534", "SUDO_GID": "65534", "SUDO_USER": "nobody"}
    again = elevate(host_target(issuer, tmp_path / "u"), [], extra_args=["--init-host"], env=other)
    assert again.returncode == 1 and "for root only" in error_line(again)["reason"]
    assert not (tmp_path / "u" / "etc" / "host_ed25519").exists()


def test_init_host_refuses_a_folder_others_can_write(issuer, tmp_path):
    target = host_target(issuer, tmp_path / "t", host_key=str(tmp_path / "open" / "host_ed25519"))
    (tmp_path / "open").mkdir(mode=0o777)
    (tmp_path / "open").chmod(0o777)
    result = elevate(target, [], extra_args=["--init-host"])
    assert result.returncode == 1 and "host key directory" in error_line(result)["reason"]
    assert not (tmp_path / "open" / "host_ed25519").exists()


def test_check_config_shows_receipts_and_refuses_bad_keys_and_spools(issuer, tmp_path):
    target = host_target(issuer, tmp_path / "t")
    shown = json.loads(elevate(target, [], extra_args=["--check-config"]).stdout)
    assert shown["receipts"] is False  # default: on only when the host key exists
    init_host(target)
    result = elevate(target, [], extra_args=["--check-config"])
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert shown["receipts"] is True and shown["receipt_spool"] == str(tmp_path / "t" / "spool")
    key_file = tmp_path / "t" / "etc" / "host_ed25519"
    key_file.chmod(0o640)
    result = elevate(target, [], extra_args=["--check-config"])
    assert result.returncode == 1 and "mode 0600" in error_line(result)["reason"]
    key_file.chmod(0o600)
    (tmp_path / "t" / "spool").mkdir(mode=0o755)
    (tmp_path / "t" / "spool").chmod(0o755)
    result = elevate(target, [], extra_args=["--check-config"])
    assert result.returncode == 1 and "receipt spool" in error_line(result)["reason"]


def test_receipts_forced_on_without_a_key_and_bad_values_are_config_errors(issuer, tmp_path):
    target = host_target(issuer, tmp_path / "t", receipts=True)
    result = elevate(target, [], extra_args=["--check-config"])
    assert result.returncode == 1 and "--init-host" in error_line(result)["reason"]
    for bad, message in (
        ({"receipts": "yes"}, "true or false"),
        ({"receipt_spool": "spool"}, "absolute path"),
        ({"receipt_timeout": 0}, "receipt_timeout"),
    ):
        target = host_target(issuer, tmp_path / f"b{len(message)}", **bad)
        result = elevate(target, [], extra_args=["--check-config"])
        assert result.returncode == 1 and message in error_line(result)["reason"], result.stderr


# -- receipts --------------------------------------------------------------------------------------------


def test_a_run_and_a_refusal_each_post_a_receipt_the_issuer_verifies(issuer, tmp_path):
    issuer.start()
    target = host_target(issuer, tmp_path / "t")
    issuer.hosts[HOST] = init_host(target)
    token = issuer.fake.token(ARGV)
    result = elevate(target, ARGV, token=token)
    assert result.returncode == 0 and result.stdout.strip() == "0", result.stderr
    (claims,) = issuer.logged.values()
    import jwt

    sent = jwt.decode(token, options={"verify_signature": False})
    assert claims["iss"] == f"host:{HOST}" and claims["aud"] == issuer.url
    assert (claims["grant_id"], claims["authz_jti"], claims["result"], claims["exit_code"]) == (
        sent["grant_id"],
        sent["jti"],
        "exited",
        0,
    )
    assert claims["cmd_hash"] == sent["cmd_hash"] and claims["run_as"] == "root"
    assert claims["started_at"] <= claims["ended_at"] and isinstance(claims["duration_ms"], int)
    assert exits(target)[-1]["receipt"] == "sent"

    wrong = issuer.fake.token(["id", "-g"])
    result = elevate(target, ARGV, token=wrong)
    assert result.returncode == 5 and error_line(result)["error"] == "cmd_hash_mismatch"
    refusal = [c for c in issuer.logged.values() if c["result"] == "refused"]
    assert (
        len(refusal) == 1
        and refusal[0]["exit_code"] == 5
        and refusal[0]["reason"].startswith("cmd_hash mismatch")
    )
    assert attempts(target)[-1]["result"] == "refused" and attempts(target)[-1]["receipt"] == "sent"
    assert issuer.answers == [201, 201]
    assert spooled(tmp_path / "t") == []
    # The first receipt had seen no checkpoint yet; the second carries the one the issuer served after the first.
    assert "seen_checkpoint" not in claims
    assert refusal[0]["seen_checkpoint"] == {"size": issuer.checkpoint[0], "root": issuer.checkpoint[1]}


def test_exit_status_and_signal_reach_the_receipt_unchanged(issuer, tmp_path):
    issuer.start()
    target = host_target(issuer, tmp_path / "t")
    issuer.hosts[HOST] = init_host(target)
    seven = ["sh", "-c", "exit 7"]
    assert elevate(target, seven, token=issuer.fake.token(seven)).returncode == 7
    killed = ["sh", "-c", "kill -TERM $$"]
    assert elevate(target, killed, token=issuer.fake.token(killed)).returncode == 128 + 15
    results = sorted((c["result"], c["exit_code"]) for c in issuer.logged.values())
    assert results == [("exited", 7), ("signaled", 15)]


def test_no_receipt_without_a_host_key_for_an_issuer_not_allowed_or_a_forged_token(issuer, tmp_path):
    issuer.start()
    target = host_target(issuer, tmp_path / "t")
    assert elevate(target, ARGV, token=issuer.fake.token(ARGV)).returncode == 0
    assert issuer.answers == [] and "receipt" not in exits(target)[-1]
    issuer.hosts[HOST] = init_host(target)
    stranger = FakeIssuer(issuer.url + "/other")
    assert elevate(target, ARGV, token=stranger.token(ARGV)).returncode == 5
    assert issuer.answers == [] and "receipt" not in attempts(target)[-1]
    # A token naming the allowed issuer but signed by someone else names no real grant: no receipt,
    # or any local user could add log leaves for grants nobody made.
    forger = FakeIssuer(issuer.url)
    forger.kid = issuer.fake.kid
    result = elevate(target, ARGV, token=forger.token(ARGV))
    assert result.returncode == 5 and error_line(result)["error"] == "bad_signature"
    assert issuer.answers == [] and "receipt" not in attempts(target)[-1] and spooled(tmp_path / "t") == []


@pytest.mark.slow
def test_receipts_wait_in_the_spool_while_the_issuer_is_down_and_arrive_exactly_once(issuer, tmp_path):
    target = host_target(issuer, tmp_path / "t")
    issuer.hosts[HOST] = init_host(target)
    three = ["sh", "-c", "exit 3"]
    assert elevate(target, three, token=issuer.fake.token(three)).returncode == 3  # the issuer is down
    assert elevate(target, ARGV, token=issuer.fake.token(["id", "-g"])).returncode == 5
    assert exits(target)[-1]["receipt"] == "spooled" and attempts(target)[-1]["receipt"] == "spooled"
    files = spooled(tmp_path / "t")
    assert len(files) == 2
    spool = tmp_path / "t" / "spool"
    assert stat.S_IMODE(spool.stat().st_mode) == 0o700 and spool.stat().st_uid == 0
    assert all(stat.S_IMODE(f.stat().st_mode) == 0o600 and f.stat().st_uid == 0 for f in files)
    kept = elevate(target, [], extra_args=["--flush-receipts"])
    assert kept.returncode == 1 and json.loads(kept.stdout)["kept"] == 2  # still down: nothing lost
    saved = files[0].read_text()

    issuer.start()
    assert elevate(target, ARGV, token=issuer.fake.token(ARGV)).returncode == 0  # flushes first, then its own
    assert issuer.answers == [201, 201, 201] and len(issuer.logged) == 3
    assert sorted(c["result"] for c in issuer.logged.values()) == ["exited", "exited", "refused"]
    assert spooled(tmp_path / "t") == []
    result = elevate(target, [], extra_args=["--flush-receipts"])
    assert result.returncode == 0 and json.loads(result.stdout) == {
        "receipt_spool": str(spool),
        "sent": 0,
        "kept": 0,
        "dropped": 0,
    }
    # A receipt sent twice (a crash between the answer and the unlink) is a repeat: it adds nothing.
    files[0].write_text(saved)
    files[0].chmod(0o600)
    result = elevate(target, [], extra_args=["--flush-receipts"])
    assert result.returncode == 0 and json.loads(result.stdout)["sent"] == 1
    assert issuer.answers[-1] == 200 and len(issuer.logged) == 3 and spooled(tmp_path / "t") == []


def test_flush_receipts_sends_them_after_the_outage(issuer, tmp_path):
    target = host_target(issuer, tmp_path / "t")
    issuer.hosts[HOST] = init_host(target)
    assert elevate(target, ARGV, token=issuer.fake.token(ARGV)).returncode == 0
    assert len(spooled(tmp_path / "t")) == 1
    issuer.start()
    result = elevate(target, [], extra_args=["--flush-receipts"])
    assert result.returncode == 0 and json.loads(result.stdout)["sent"] == 1, result.stderr
    assert issuer.answers == [201] and spooled(tmp_path / "t") == []


def test_an_unenrolled_host_keeps_its_receipts_and_a_bad_signature_drops_them(issuer, tmp_path):
    issuer.start()
    target = host_target(issuer, tmp_path / "t")
    line = init_host(target)
    assert elevate(target, ARGV, token=issuer.fake.token(ARGV)).returncode == 0
    assert issuer.answers == [403] and exits(target)[-1]["receipt"] == "spooled"
    issuer.hosts[HOST] = line  # enrolled later: the spooled receipt now counts
    assert json.loads(elevate(target, [], extra_args=["--flush-receipts"]).stdout)["sent"] == 1
    assert issuer.answers == [403, 201]
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from grantd.receipts import host_public_key_line

    issuer.hosts[HOST] = host_public_key_line(Ed25519PrivateKey.generate())  # another key enrolled
    assert elevate(target, ARGV, token=issuer.fake.token(ARGV)).returncode == 0
    assert issuer.answers[-1] == 401 and exits(target)[-1]["receipt"] == "rejected"
    assert spooled(tmp_path / "t") == []
    # a refusal whose receipt the issuer rejects: stderr is still the refusal's one JSON line (D10)
    refusal = elevate(target, ["echo", "other"], token=issuer.fake.token(ARGV))
    assert refusal.returncode == 5 and issuer.answers[-1] == 401
    lines = refusal.stderr.strip().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["error"] == "cmd_hash_mismatch", refusal.stderr


def test_a_spool_with_bad_modes_is_refused_and_the_run_still_ends_the_same(issuer, tmp_path):
    target = host_target(issuer, tmp_path / "t")
    issuer.hosts[HOST] = init_host(target)
    spool = tmp_path / "t" / "spool"
    spool.mkdir(mode=0o755)
    spool.chmod(0o755)
    four = ["sh", "-c", "exit 4"]
    result = elevate(target, four, token=issuer.fake.token(four))
    assert result.returncode == 4, result.stderr
    assert exits(target)[-1]["receipt"].startswith("lost:") and list(spool.iterdir()) == []
    result = elevate(target, [], extra_args=["--flush-receipts"])
    assert result.returncode == 1 and "receipt spool" in error_line(result)["reason"]
    # A planted file in a good spool is not sent: only root's 0600 files are receipts.
    spool.chmod(0o700)
    planted = spool / ("0" * 32 + ".jws")
    planted.write_text("x.y.z")
    planted.chmod(0o644)
    issuer.start()
    result = elevate(target, [], extra_args=["--flush-receipts"])
    assert result.returncode == 1 and issuer.answers == [] and planted.exists()


def test_a_silent_issuer_holds_a_receipt_only_for_receipt_timeout(tmp_path, black_hole):
    import time

    silent = ReceiptIssuer()
    silent.fake = FakeIssuer(black_hole)
    silent.url = black_hole
    target = host_target(silent, tmp_path / "t", timeout=30, receipt_timeout=1)
    init_host(target)
    started = time.monotonic()
    result = elevate(target, ARGV, token=silent.fake.token(["id", "-g"]))  # refused before consume
    elapsed = time.monotonic() - started
    assert result.returncode == 5 and error_line(result)["error"] == "cmd_hash_mismatch"
    assert attempts(target)[-1]["receipt"] == "spooled" and len(spooled(tmp_path / "t")) == 1
    assert elapsed < 10  # receipt_timeout (1 s), not timeout (30 s)


def test_the_spool_has_a_bound_and_a_full_spool_changes_no_exit_status(issuer, tmp_path):
    from grantd.elevate.receipts import MAX_SPOOLED

    target = host_target(issuer, tmp_path / "t")
    issuer.hosts[HOST] = init_host(target)
    spool = tmp_path / "t" / "spool"
    spool.mkdir(mode=0o700)
    for n in range(MAX_SPOOLED):
        planted = spool / f"{n:032x}.jws"
        planted.write_text("x.y.z")
        planted.chmod(0o600)
    six = ["sh", "-c", "exit 6"]
    result = elevate(target, six, token=issuer.fake.token(six))  # the issuer is down
    assert result.returncode == 6, result.stderr
    assert exits(target)[-1]["receipt"] == "lost: spool full" and "spool full" not in result.stdout
    assert len(spooled(tmp_path / "t")) == MAX_SPOOLED


def test_a_spool_whose_parent_is_missing_is_made_root_0700(issuer, tmp_path):
    target = host_target(issuer, tmp_path / "t", receipt_spool=str(tmp_path / "t" / "var" / "lib" / "spool"))
    issuer.hosts[HOST] = init_host(target)
    result = elevate(target, [], extra_args=["--check-config"])
    assert result.returncode == 0 and json.loads(result.stdout)["receipts"] is True, result.stderr
    assert elevate(target, ARGV, token=issuer.fake.token(ARGV)).returncode == 0  # the issuer is down
    spool = tmp_path / "t" / "var" / "lib" / "spool"
    assert exits(target)[-1]["receipt"] == "spooled" and stat.S_IMODE(spool.stat().st_mode) == 0o700
    assert stat.S_IMODE(spool.parent.stat().st_mode) == 0o755 and len(list(spool.glob("*.jws"))) == 1
