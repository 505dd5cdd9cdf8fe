"""A stateful property test: hypothesis drives random sequences of grant operations against a real
HTTP server and checks every answer against a small model of the specification's state table (D6).

The server runs in this process with a ManualClock (tests/inproc.py): time moves only when the
machine says so, so every deadline is exact and a run is the same every time (derandomized).
Pending grants expire after PENDING_TTL seconds, timed grants after their duration.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, rule, run_state_machine_as_test
from inproc import InProcessServer

from conftest import Agent, signed_in

PENDING_TTL = 3
COMMANDS = [["systemctl", "restart", "nginx"], ["id", "-u"]]
UNUSABLE = {"consumed": "already_consumed", "revoked": "revoked", "denied": "denied", "expired": "expired",
            "pending": "not_approved"}


@pytest.fixture(scope="module")
def sm_server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    srv = InProcessServer(tmp_path_factory.mktemp("stateful"),
                          extra=f"[grants]\npending_ttl = {PENDING_TTL}\nexpiry_sweep_interval = 1\n").start()
    yield srv
    srv.stop()


def run_machine(server: InProcessServer, agents: list[Agent]) -> None:
    clock = server.clock

    def possible(grant: dict[str, Any]) -> set[str]:
        """The status the server must report for this grant now (a set, for the rules' readability)."""
        status = grant["status"]
        if status == "pending":
            deadline = grant["created_at"] + PENDING_TTL * 1000
        elif status == "approved" and grant["expires_at"] is not None:
            deadline = grant["expires_at"]
        else:
            return {status}
        return {"expired"} if clock.now_ms() >= deadline else {status}

    clients = {a.email: httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {a.token}"}, timeout=20)
               for a in agents}
    admin = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {server.token}"}, timeout=20)

    class GrantMachine(RuleBasedStateMachine):
        grants = Bundle("grants")

        def __init__(self) -> None:
            super().__init__()
            self.model: dict[str, dict[str, Any]] = {}
            # The server outlives each example: a fresh host keeps earlier examples' grants out of reuse.
            self.host = f"host-{uuid.uuid4().hex[:12]}"

        def settle(self, grant: dict[str, Any], actual: str) -> None:
            allowed = possible(grant)
            assert actual in allowed, f"server says {actual}, model allows {allowed} for {grant}"
            grant["status"] = actual

        @rule(target=grants, who=st.sampled_from(range(len(agents))), grant_type=st.sampled_from(["once", "timed", "always"]),
              command=st.sampled_from(range(len(COMMANDS))), duration=st.integers(1, 2))
        def create(self, who: int, grant_type: str, command: int, duration: int) -> str:
            requester = agents[who].email
            body: dict[str, Any] = {"target_host": self.host, "audience": "escapes", "grant_type": grant_type,
                                    "command": COMMANDS[command]}
            if grant_type == "timed":
                body["duration"] = duration
            r = clients[requester].post("/api/grants", json=body)
            key = (requester, grant_type, command)
            if r.status_code == 200:  # reuse
                answer = r.json()
                assert grant_type in ("timed", "always") and answer["status"] == "approved"
                reused = self.model[answer["id"]]
                assert reused["key"][:2] == key[:2] and reused["key"][2] == command
                assert "approved" in possible(reused)
                return str(answer["id"])
            assert r.status_code == 201, r.text
            answer = r.json()
            if grant_type in ("timed", "always"):  # nothing reusable may have existed for certain
                certain = [g for g in self.model.values() if g["key"] == key and possible(g) == {"approved"}
                           and g["grant_type"] == grant_type]
                assert not certain, f"a reusable grant existed: {certain}"
            self.model[answer["id"]] = {"id": answer["id"], "requester": requester, "key": key, "status": "pending",
                                        "grant_type": grant_type, "created_at": answer["created_at"],
                                        "expires_at": None, "token": None, "token_exp": None}
            return str(answer["id"])

        @rule(gid=grants, override=st.sampled_from([None, ("timed", 1), ("timed", 2), ("always", None), ("once", None)]))
        def approve(self, gid: str, override: tuple[str, int | None] | None) -> None:
            grant = self.model[gid]
            before = possible(grant)
            body = {} if override is None else {"grant_type": override[0], **({"duration": override[1]} if override[1] else {})}
            r = admin.post(f"/api/grants/{gid}/approve", json=body)
            if r.status_code == 200:
                assert "pending" in before
                decided = r.json()["grant"]
                grant.update(status="approved", grant_type=decided["request"]["grant_type"],
                             expires_at=decided["expires_at"], token=r.json()["authz_jwt"])
                grant["key"] = (grant["key"][0], grant["grant_type"], grant["key"][2])
                grant["token_exp"] = self._exp(grant)
            else:
                assert r.status_code == 400, r.text
                if body.get("grant_type") == "timed" and "duration" not in body:
                    return
                self.settle(grant, r.json()["grant_status"])
                assert grant["status"] != "pending"

        def _exp(self, grant: dict[str, Any]) -> int:
            """When the AuthZ-JWT just handed out expires (D6: once tokens end with the grant too)."""
            if grant["grant_type"] == "timed":
                return int(grant["expires_at"] // 1000)
            if grant["grant_type"] == "once":
                return min(clock.now_s() + 300, int(grant["expires_at"] // 1000))
            return clock.now_s() + 3600

        @rule(gid=grants, reason=st.one_of(st.none(), st.text(max_size=20)))
        def deny(self, gid: str, reason: str | None) -> None:
            grant = self.model[gid]
            before = possible(grant)
            r = admin.post(f"/api/grants/{gid}/deny", json={"reason": reason} if reason and reason.strip() else {})
            if r.status_code == 400 and r.json().get("field") == "reason":
                return  # a reason with control characters is refused before the grant is looked at (D12)
            if r.status_code == 200:
                assert "pending" in before
                grant["status"] = "denied"
            else:
                assert r.status_code == 400, r.text
                self.settle(grant, r.json()["grant_status"])
                assert grant["status"] != "pending"

        @rule(gid=grants, by_requester=st.booleans())
        def revoke(self, gid: str, by_requester: bool) -> None:
            grant = self.model[gid]
            before = possible(grant)
            http = clients[grant["requester"]] if by_requester else admin
            r = http.post(f"/api/grants/{gid}/revoke")
            if r.status_code == 200:  # revoking a revoked grant answers with it (D6)
                assert before & {"pending", "approved", "revoked"}
                grant["status"] = "revoked"
            else:
                assert r.status_code == 400, r.text
                self.settle(grant, r.json()["grant_status"])
                assert grant["status"] not in ("pending", "approved")

        @rule(gid=grants)
        def token(self, gid: str) -> None:
            grant = self.model[gid]
            before = possible(grant)
            r = clients[grant["requester"]].post(f"/api/grants/{gid}/token")
            if r.status_code == 200:
                assert "approved" in before
                grant["status"] = "approved"
                grant["token"] = r.json()["authz_jwt"]
                grant["token_exp"] = self._exp(grant)
            else:
                assert r.status_code == 400, r.text
                self.settle(grant, r.json()["grant_status"])

        @rule(gid=grants)
        def consume(self, gid: str) -> None:
            grant = self.model[gid]
            if grant["token"] is None:
                return
            before = possible(grant)
            r = httpx.post(f"{server.url}/api/grants/{gid}/consume", headers={"Authorization": f"Bearer {grant['token']}"},
                           timeout=20)
            if r.status_code == 401:  # the token itself ran out (timed tokens end with the grant)
                assert clock.now_s() >= grant["token_exp"], r.text
                return
            assert r.status_code == 200, r.text
            answer = r.json()
            if "error" in answer:
                self.settle(grant, answer["status"])
                assert UNUSABLE[grant["status"]] == answer["error"]
            elif answer["status"] == "consumed":
                assert "approved" in before and grant["grant_type"] == "once"
                grant["status"] = "consumed"
            else:
                assert answer["status"] == "valid" and "approved" in before and grant["grant_type"] != "once"
                grant["status"] = "approved"

        @rule(gid=grants)
        def verify(self, gid: str) -> None:
            grant = self.model[gid]
            if grant["token"] is None:
                return
            before = possible(grant)
            answer = httpx.post(f"{server.url}/api/grants/verify", json={"token": grant["token"]}, timeout=20).json()
            if answer["valid"]:
                assert "approved" in before and answer["claims"]["grant_id"] == gid
                grant["status"] = "approved"
            elif answer["error"] == "token expired":
                assert clock.now_s() >= grant["token_exp"]
            else:
                self.settle(grant, answer["status"])

        @rule(gid=grants)
        def read(self, gid: str) -> None:
            r = clients[self.model[gid]["requester"]].get(f"/api/grants/{gid}")
            assert r.status_code == 200
            self.settle(self.model[gid], r.json()["status"])

        @rule(seconds=st.sampled_from([0.5, 1, 2.5]))
        def let_time_pass(self, seconds: float) -> None:
            clock.advance(seconds)

        @invariant()
        def listing_agrees(self) -> None:
            if not self.model:
                return
            seen = {}
            for email, http in clients.items():
                for g in http.get("/api/grants", params={"limit": 100}).json()["data"]:
                    seen[g["id"]] = (g, email)
            for gid, grant in self.model.items():
                if gid in seen:
                    listed, email = seen[gid]
                    assert email == grant["requester"]
                    self.settle(grant, listed["status"])

    try:
        run_state_machine_as_test(
            GrantMachine,
            settings=settings(max_examples=30, stateful_step_count=30, deadline=None, database=None,
                              derandomize=True, phases=(Phase.explicit, Phase.generate, Phase.shrink),
                              suppress_health_check=list(HealthCheck)),
        )
    finally:
        for http in (*clients.values(), admin):
            http.close()


def test_random_operation_sequences_follow_the_state_table(sm_server: InProcessServer, tmp_path: Path) -> None:
    agents = []
    for i in range(2):
        agent = signed_in(sm_server, tmp_path / f"a{i}")
        agents.append(agent)
    run_machine(sm_server, agents)
