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
UNUSABLE = {
    "consumed": "already_consumed",
    "revoked": "revoked",
    "denied": "denied",
    "expired": "expired",
    "pending": "not_approved",
}


@pytest.fixture(scope="module")
def sm_server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    srv = InProcessServer(
        tmp_path_factory.mktemp("stateful"),
        extra=f"[grants]\npending_ttl = {PENDING_TTL}\nexpiry_sweep_interval = 1\n",
    ).start()
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

    clients = {
        a.email: httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {a.token}"}, timeout=20)
        for a in agents
    }
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

        @rule(
            target=grants,
            who=st.sampled_from(range(len(agents))),
            grant_type=st.sampled_from(["once", "timed", "always"]),
            command=st.sampled_from(range(len(COMMANDS))),
            duration=st.integers(1, 2),
        )
        def create(self, who: int, grant_type: str, command: int, duration: int) -> str:
            requester = agents[who].email
            body: dict[str, Any] = {
                "target_host": self.host,
                "audience": "escapes",
                "grant_type": grant_type,
                "command": COMMANDS[command],
            }
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
                certain = [
                    g
                    for g in self.model.values()
                    if g["key"] == key and possible(g) == {"approved"} and g["grant_type"] == grant_type
                ]
                assert not certain, f"a reusable grant existed: {certain}"
            self.model[answer["id"]] = {
                "id": answer["id"],
                "requester": requester,
                "key": key,
                "status": "pending",
                "grant_type": grant_type,
                "created_at": answer["created_at"],
                "expires_at": None,
                "token": None,
                "token_exp": None,
            }
            return str(answer["id"])

        @rule(
            gid=grants,
            override=st.sampled_from([None, ("timed", 1), ("timed", 2), ("always", None), ("once", None)]),
        )
        def approve(self, gid: str, override: tuple[str, int | None] | None) -> None:
            grant = self.model[gid]
            before = possible(grant)
            body = (
                {}
                if override is None
                else {"grant_type": override[0], **({"duration": override[1]} if override[1] else {})}
            )
            r = admin.post(f"/api/grants/{gid}/approve", json=body)
            if r.status_code == 200:
                assert "pending" in before
                decided = r.json()["grant"]
                grant.update(
                    status="approved",
                    grant_type=decided["request"]["grant_type"],
                    expires_at=decided["expires_at"],
                    token=r.json()["authz_jwt"],
                )
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
            r = admin.post(
                f"/api/grants/{gid}/deny", json={"reason": reason} if reason and reason.strip() else {}
            )
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
            r = httpx.post(
                f"{server.url}/api/grants/{gid}/consume",
                headers={"Authorization": f"Bearer {grant['token']}"},
                timeout=20,
            )
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
            answer = httpx.post(
                f"{server.url}/api/grants/verify", json={"token": grant["token"]}, timeout=20
            ).json()
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
            settings=settings(
                max_examples=30,
                stateful_step_count=30,
                deadline=None,
                database=None,
                derandomize=True,
                phases=(Phase.explicit, Phase.generate, Phase.shrink),
                suppress_health_check=list(HealthCheck),
            ),
        )
    finally:
        for http in (*clients.values(), admin):
            http.close()


@pytest.mark.slow
def test_random_operation_sequences_follow_the_state_table(
    sm_server: InProcessServer, tmp_path: Path
) -> None:
    agents = []
    for i in range(2):
        agent = signed_in(sm_server, tmp_path / f"a{i}")
        agents.append(agent)
    run_machine(sm_server, agents)


# -- votes under an approval policy (D13) ---------------------------------------------------------

QUORUM_MEMBERS = [f"q{i}@quorum.example" for i in range(1, 5)]
QUORUM_OWNER = "qowner@quorum.example"
QUORUM_CONFIG = f"""
[grants]
pending_ttl = {PENDING_TTL}
expiry_sweep_interval = 1

[[groups]]
id = "q"
members = [{", ".join(f'"{e}"' for e in [*QUORUM_MEMBERS, QUORUM_OWNER])}]

[[policies]]
id = "two-of-q"
forbid = ["owner", "approver"]
[[policies.require]]
id = "q"
groups = ["q"]
approve = 2
"""


@pytest.fixture(scope="module")
def quorum_server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    srv = InProcessServer(tmp_path_factory.mktemp("stateful-quorum"), extra=QUORUM_CONFIG).start()
    yield srv
    srv.stop()


def test_random_votes_follow_the_quorum(quorum_server: InProcessServer, tmp_path: Path) -> None:
    """Votes, duplicate votes, concurrent votes and eligibility changes (the agent's approver moves
    to a voter, whom `forbid = ["approver"]` then excludes) against a model of D13's counting."""
    import concurrent.futures

    from people_support import cookie_client, create_person, enrol_agent, start_session

    server = quorum_server
    clock = server.clock
    for email in [*QUORUM_MEMBERS, QUORUM_OWNER]:
        create_person(server, email)
    agent, token = enrol_agent(server, owner=QUORUM_OWNER)
    voters = {
        email: cookie_client(server, start_session(server, email))
        for email in [*QUORUM_MEMBERS, QUORUM_OWNER]
    }
    requester = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=20)
    admin = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {server.token}"}, timeout=20)
    approver = [QUORUM_OWNER]

    def set_approver(email: str) -> None:
        r = admin.put(f"/api/admin/agents/{agent['agent_id']}", json={"approver": email})
        assert r.status_code == 200, r.text
        approver[0] = email

    class QuorumMachine(RuleBasedStateMachine):
        grants = Bundle("qgrants")

        def __init__(self) -> None:
            super().__init__()
            self.model: dict[str, dict[str, Any]] = {}
            set_approver(QUORUM_OWNER)

        def excluded(self, email: str) -> str | None:
            if email == QUORUM_OWNER:
                return "owner excluded"
            if email == approver[0]:
                return "approver excluded"
            return None

        def status(self, grant: dict[str, Any]) -> str:
            if grant["status"] == "pending" and clock.now_ms() >= grant["created_at"] + PENDING_TTL * 1000:
                return "expired"
            return str(grant["status"])

        def expected_after(self, grant: dict[str, Any]) -> str:
            """D13's tally of the recorded votes that still hold (exclusions re-checked now)."""
            holding = [(e, d) for e, d in grant["votes"] if self.excluded(e) is None]
            if any(d == "deny" for _, d in holding):
                return "denied"
            return "approved" if sum(1 for _, d in holding if d == "approve") >= 2 else "pending"

        @rule(target=grants)
        def create(self) -> str:
            r = requester.post(
                "/api/grants",
                json={"target_host": "q-1", "audience": "escapes", "command": ["id"], "grant_type": "once"},
            )
            assert r.status_code == 201, r.text
            answer = r.json()
            assert answer["review"]["policy_ids"] == ["two-of-q"]
            self.model[answer["id"]] = {"status": "pending", "created_at": answer["created_at"], "votes": []}
            return str(answer["id"])

        def check_vote(self, gid: str, email: str, decision: str, r: httpx.Response) -> None:
            grant = self.model[gid]
            status = self.status(grant)
            if status != "pending":
                assert r.status_code == 400, r.text
                grant["status"] = status
                return
            if any(e == email for e, _ in grant["votes"]):
                assert r.status_code == 409 and r.json()["reason"] == "already reviewed", r.text
                return
            why = self.excluded(email)
            if why is not None:
                assert r.status_code == 403 and r.json()["reason"] == why, r.text
                return
            assert r.status_code == 200, r.text
            grant["votes"].append((email, decision))
            expected = self.expected_after(grant)
            answer = r.json()
            assert answer["grant"]["status"] == expected, (answer, grant, approver)
            assert ("authz_jwt" in answer) == (expected == "approved")
            grant["status"] = expected

        @rule(
            gid=grants,
            voter=st.sampled_from([*QUORUM_MEMBERS, QUORUM_OWNER]),
            decision=st.sampled_from(["approve", "approve", "approve", "deny"]),
            path=st.sampled_from(["review", "approve", "deny"]),
        )
        def vote(self, gid: str, voter: str, decision: str, path: str) -> None:
            if path != "review":
                decision = path
            body = {"decision": decision} if path == "review" else {}
            self.check_vote(gid, voter, decision, voters[voter].post(f"/api/grants/{gid}/{path}", json=body))

        @rule(gid=grants, pair=st.sampled_from([(a, b) for a in QUORUM_MEMBERS for b in QUORUM_MEMBERS]))
        def concurrent_approvals(self, gid: str, pair: tuple[str, str]) -> None:
            """Two approvals at once (the same person twice, or two people): one vote per person,
            at most one answer approves, and the grant ends as the votes that hold say."""
            grant = self.model[gid]
            before_status = self.status(grant)
            with concurrent.futures.ThreadPoolExecutor(2) as pool:
                answers = list(
                    pool.map(lambda e: voters[e].post(f"/api/grants/{gid}/approve", json={}), pair)
                )
            assert all(a.status_code in (200, 400, 403, 409) for a in answers), [a.text for a in answers]
            assert sum(1 for a in answers if a.status_code == 200 and "authz_jwt" in a.json()) <= 1
            if (
                pair[0] == pair[1]
                and before_status == "pending"
                and self.excluded(pair[0]) is None
                and all(e != pair[0] for e, _ in grant["votes"])
            ):
                assert sorted(a.status_code for a in answers) in ([200, 409], [200, 400]), [
                    a.text for a in answers
                ]
            shown = admin.get(f"/api/grants/{gid}").json()
            for a, email in zip(answers, pair, strict=True):
                if a.status_code == 200 and (email, "approve") not in grant["votes"]:
                    grant["votes"].append((email, "approve"))
            recorded = [a["sub"] for a in shown["approvals"]]
            assert len(recorded) == len(set(recorded))
            grant["status"] = shown["status"]
            if shown["status"] == "pending":
                assert self.expected_after(grant) == "pending"

        @rule(email=st.sampled_from([*QUORUM_MEMBERS, QUORUM_OWNER]))
        def change_approver(self, email: str) -> None:
            set_approver(email)

        @rule(gid=grants)
        def read(self, gid: str) -> None:
            shown = admin.get(f"/api/grants/{gid}").json()
            grant = self.model[gid]
            status = self.status(grant)
            assert shown["status"] == status, (shown, grant)
            if status == "pending":
                holding = [e for e, d in grant["votes"] if d == "approve" and self.excluded(e) is None]
                assert sorted(shown["review"]["requirements"][0]["approvals"]) == sorted(holding)

        @rule(seconds=st.sampled_from([0.5, 1]))
        def let_time_pass(self, seconds: float) -> None:
            clock.advance(seconds)

    try:
        run_state_machine_as_test(
            QuorumMachine,
            settings=settings(
                max_examples=25,
                stateful_step_count=25,
                deadline=None,
                database=None,
                derandomize=True,
                phases=(Phase.explicit, Phase.generate, Phase.shrink),
                suppress_health_check=list(HealthCheck),
            ),
        )
    finally:
        for http in (*voters.values(), requester, admin):
            http.close()
