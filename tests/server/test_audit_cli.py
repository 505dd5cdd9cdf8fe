"""`grantd audit verify` and `grantd audit export` against a real `grantd serve` process and its
SQLite file (D14, issue 23): a clean log exits 0 and saves its state; an edited leaf row exits 2
naming its index; the newest leaves deleted (and the server restarted) exit 2 against the saved
state; a forged leaf sequence (a `once` grant consumed twice, signed with the stolen log key) in an
export exits 3; an export verifies offline."""

from __future__ import annotations

import base64
import json
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from support import postgres as pg

from grantd.core.tlog import leaves as L
from grantd.core.tlog.export import export_files, load_export, write_export
from grantd.core.tlog.merkle import MemoryTree
from grantd.core.tlog.note import Checkpoint, Signer, parse_checkpoint, parse_note, sign_note

from conftest import Server, signed_in

pytestmark = pg.sqlite_only("edits the SQLite file of the server")


def wait_for_size(srv: Server, size: int, timeout: float = 10) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = httpx.get(f"{srv.url}/api/audit/checkpoint", timeout=5)
        if r.status_code == 200 and int(r.text.split("\n")[1]) >= size:
            return r.text
        time.sleep(0.05)
    raise AssertionError(f"no checkpoint of {size} leaves")


def once_grant_used(srv: Server, tmp: Path) -> str:
    agent = signed_in(srv, tmp)
    with srv.client(agent.token) as http:
        grant = http.post(
            "/api/grants",
            json={"target_host": "web-1", "audience": "escapes", "command": ["id"], "grant_type": "once"},
        ).json()
    with srv.admin() as http:
        authz = http.post(f"/api/grants/{grant['id']}/approve", json={}).json()["authz_jwt"]
    with srv.client(authz) as http:
        assert http.post(f"/api/grants/{grant['id']}/consume").status_code == 200
    return str(grant["id"])


def audit(srv: Server, *args: str) -> Any:
    return srv.grantd("audit", *args, "--token-file", str(srv.directory / "management-token"), check=False)


def vkey(srv: Server) -> str:
    return httpx.get(f"{srv.url}/api/audit/key", timeout=5).text.splitlines()[0]


@pytest.mark.slow
def test_verify_passes_then_catches_an_edited_leaf_and_deleted_leaves(server_factory, tmp_path):
    srv = server_factory("cli", extra="[audit]\nsequencer_interval_ms = 50\n").start()
    once_grant_used(srv, tmp_path / "keys")
    once_grant_used(srv, tmp_path / "keys")
    wait_for_size(srv, 8)
    state = tmp_path / "state.json"
    key = vkey(srv)

    ok = audit(srv, "verify", "--url", srv.url, "--key", key, "--state", str(state), "--json")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    saved = json.loads(state.read_text())
    assert saved["size"] >= 8 and oct(state.stat().st_mode & 0o777) == "0o600"

    # an administrator (or an attacker with the file) edits one leaf row
    db = sqlite3.connect(srv.directory / "grantd.db")
    original = bytes(db.execute("SELECT leaf FROM tlog_leaves WHERE idx = 5").fetchone()[0])
    db.execute("UPDATE tlog_leaves SET leaf = ? WHERE idx = 5", (original.replace(b'"ts":', b'"ts":1'),))
    db.commit()
    edited = audit(srv, "verify", "--url", srv.url, "--key", key, "--state", str(state), "--json")
    assert edited.returncode == 2, edited.stdout + edited.stderr
    assert json.loads(edited.stdout)["bad_index"] == 5
    text = audit(srv, "verify", "--url", srv.url, "--key", key, "--state", str(state))
    assert text.returncode == 2 and "first bad index 5" in text.stdout
    db.execute("UPDATE tlog_leaves SET leaf = ? WHERE idx = 5", (original,))
    db.commit()
    assert audit(srv, "verify", "--url", srv.url, "--key", key, "--state", str(state)).returncode == 0

    # the newest leaves deleted, with their nodes and checkpoints, and the server restarted
    srv.stop()
    keep = 3
    db.execute("DELETE FROM tlog_leaves WHERE idx >= ?", (keep,))
    db.execute("DELETE FROM tlog_nodes WHERE ((idx + 1) << level) > ?", (keep,))
    db.execute("DELETE FROM tlog_checkpoints WHERE size > ?", (keep,))
    db.execute("UPDATE tlog_state SET size = ?", (keep,))
    db.commit()
    db.close()
    srv.start()
    wait_for_size(srv, 0)
    shrunk = audit(srv, "verify", "--url", srv.url, "--key", key, "--state", str(state), "--json")
    assert shrunk.returncode == 2, shrunk.stdout + shrunk.stderr
    assert (
        "shrank" in json.loads(shrunk.stdout)["reason"] or "consisten" in json.loads(shrunk.stdout)["reason"]
    )
    assert json.loads(state.read_text()) == saved  # a failed run keeps the state it was checked against


def test_export_verifies_offline_and_a_forged_sequence_exits_3(server_factory, tmp_path):
    srv = server_factory("export", extra="[audit]\nsequencer_interval_ms = 50\n").start()
    grant_id = once_grant_used(srv, tmp_path / "keys")
    wait_for_size(srv, 4)
    key = vkey(srv)
    out = tmp_path / "export"
    exported = audit(srv, "export", str(out), "--url", srv.url)
    assert exported.returncode == 0, exported.stdout + exported.stderr
    assert (out / "leaves.jsonl").exists() and list((out / "checkpoints").iterdir())
    state = tmp_path / "offline.json"
    offline = srv.grantd(
        "audit", "verify", "--from-export", str(out), "--key", key, "--state", str(state), check=False
    )
    assert offline.returncode == 0, offline.stdout + offline.stderr

    # Someone with the log key (read from the database) appends a second consume of the once grant.
    db = sqlite3.connect(srv.directory / "grantd.db")
    name, seed = db.execute("SELECT name, seed FROM tlog_keys WHERE retired_at IS NULL").fetchone()
    db.close()
    signer = Signer.from_seed(name, base64.b64decode(seed))
    export = load_export(out)
    last = L.parse_leaf(export.leaves[-1])
    forged = [*export.leaves, L.grant_consumed(last.seq + 1, last.ts + 1, {"kind": "system"}, grant_id)]
    tree = MemoryTree.of_leaves(forged)
    note = sign_note(Checkpoint(name, len(forged), tree.root()).text(), [signer])
    forged_dir = tmp_path / "forged"
    write_export(forged_dir, export_files(forged, [*export.checkpoints, note], export.keys))
    result = srv.grantd(
        "audit",
        "verify",
        "--from-export",
        str(forged_dir),
        "--key",
        key,
        "--state",
        str(tmp_path / "forged-state.json"),
        "--json",
        check=False,
    )
    assert result.returncode == 3, result.stdout + result.stderr
    assert json.loads(result.stdout)["bad_index"] == len(forged) - 1
    assert parse_checkpoint(parse_note(note)[0]).size == len(forged)


def test_verify_without_credentials_or_with_a_bad_key_exits_1(server_factory, tmp_path):
    srv = server_factory("creds", extra="[audit]\nsequencer_interval_ms = 50\n").start()
    once_grant_used(srv, tmp_path / "keys")
    wait_for_size(srv, 4)
    state = str(tmp_path / "s.json")
    env = {k: v for k, v in srv.env.items() if k != "GRANTD_MANAGEMENT_TOKEN"}
    env["GRANTD_SESSION_FILE"] = str(tmp_path / "none.json")
    nobody = subprocess.run(
        [*srv.command, "audit", "verify", "--url", srv.url, "--key", vkey(srv), "--state", state],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=srv.directory,
    )
    assert nobody.returncode == 1 and "401" in nobody.stderr
    bad = audit(srv, "verify", "--url", srv.url, "--key", "not-a-vkey", "--state", state)
    assert bad.returncode == 1 and "--key" in bad.stderr


@pytest.mark.slow
def test_keys_rotate_log_makes_a_new_log_key_and_keeps_the_old_listed(server_factory, tmp_path):
    srv = server_factory("rotate", extra="[audit]\nsequencer_interval_ms = 50\n").start()
    old = vkey(srv)
    rotated = srv.grantd("keys", "rotate", "--log", "--json", "--config", str(srv.config_path))
    new = json.loads(rotated.stdout)["vkey"]
    keys = httpx.get(f"{srv.url}/api/audit/key", timeout=5).text.splitlines()
    assert keys == [new, old]
    once_grant_used(srv, tmp_path / "keys")
    wait_for_size(srv, 5)  # the rotation's key.rotated leaf and the grant's four
    state = tmp_path / "state.json"
    assert audit(srv, "verify", "--url", srv.url, "--key", new, "--state", str(state)).returncode == 0
