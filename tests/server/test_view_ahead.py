"""GET /api/grants/:id and its token route read the grant before the authentication chain when
the bearer is an identity token verified before (grantd.services.grants.view_ahead, issue 27):
the grant's one statement carries its requesting agent as it is now, so an agent polling its own
grant is checked from that row instead of a statement of its own. What must not change, tried
here: D11 (a disabled, re-keyed or deleted agent is refused at once, before anything about the
grant), the order of the answers (401 before 404), and a live stream's later checks (they read
the agent again, never the one read ahead)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
from inproc import InProcessServer
from support import postgres as pg

from authz_world import NO_LIMITS, World, build_world, new_public_key
from conftest import problem


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    srv = InProcessServer(tmp_path_factory.mktemp("ahead"), extra=NO_LIMITS).start()
    try:
        yield build_world(srv)
    finally:
        srv.stop()


def _answers(w: World, token: str, grant_id: str) -> tuple[int, int]:
    """(GET's status, the token route's status) for this bearer and grant."""
    with w.http(token) as http:
        return (
            http.get(f"/api/grants/{grant_id}").status_code,
            http.post(f"/api/grants/{grant_id}/token").status_code,
        )


def test_an_agent_polling_its_grant_is_refused_at_once_when_disabled(world: World) -> None:
    agent = world.signed_in("ahead-disabled")
    _, grant_id = world.approved(agent, command=["uptime"])
    assert _answers(world, agent.token, grant_id) == (200, 200)  # the token is remembered now
    r = world.admin("PUT", f"/api/admin/agents/{agent.agent_id}", json={"status": "disabled"})
    assert r.status_code == 200, r.text
    with world.http(agent.token) as http:
        r = http.get(f"/api/grants/{grant_id}")
    assert r.status_code == 401 and "disabled" in problem(r)["detail"], r.text
    assert _answers(world, agent.token, grant_id) == (401, 401)
    # 401 before 404: a grant that does not exist tells a dead token nothing either
    assert _answers(world, agent.token, "grt_does_not_exist") == (401, 401)


def test_an_agent_whose_key_was_replaced_is_refused_at_once(world: World) -> None:
    agent = world.signed_in("ahead-rekeyed")
    grant_id = world.grant(agent, command=["uptime"])["id"]
    assert _answers(world, agent.token, grant_id)[0] == 200
    r = world.admin("PUT", f"/api/admin/agents/{agent.agent_id}", json={"publicKey": new_public_key()[1]})
    assert r.status_code == 200, r.text
    assert _answers(world, agent.token, grant_id) == (401, 401)


def test_an_agent_deleted_and_enrolled_again_is_not_its_old_token(world: World) -> None:
    agent = world.signed_in("ahead-deleted")
    grant_id = world.grant(agent, command=["uptime"])["id"]
    assert _answers(world, agent.token, grant_id)[0] == 200
    assert world.admin("DELETE", f"/api/admin/agents/{agent.agent_id}").status_code == 200
    assert _answers(world, agent.token, grant_id) == (401, 401)
    again = world.signed_in("ahead-deleted", email=agent.email)  # the same e-mail, a new agent
    assert again.agent_id != agent.agent_id
    assert _answers(world, agent.token, grant_id) == (401, 401)
    assert _answers(world, again.token, grant_id) == (404, 404)  # inherits nothing


def test_another_agents_grant_is_read_ahead_but_the_bearer_is_checked_on_its_own(world: World) -> None:
    """The grant read ahead belongs to another agent: the bearer's own agent is read by the chain
    (the row of the grant's requester is never taken for it), and the grant stays unseen."""
    owner_of_grant, other = world.signed_in("ahead-owner"), world.signed_in("ahead-other")
    grant_id = world.grant(owner_of_grant, command=["uptime"])["id"]
    assert _answers(world, other.token, "grt_does_not_exist") == (404, 404)
    assert _answers(world, other.token, grant_id) == (404, 404)
    assert (
        world.admin("PUT", f"/api/admin/agents/{other.agent_id}", json={"status": "disabled"}).status_code
        == 200
    )
    assert _answers(world, other.token, grant_id) == (401, 401)
    assert _answers(world, owner_of_grant.token, grant_id)[0] == 200


def test_the_read_ahead_is_not_kept_by_a_copy_of_the_credentials() -> None:
    """A live stream checks its credential again with ``dataclasses.replace`` of the first one: the
    copy must read the agent again, so it starts with no agent read."""
    from grantd.services.authn import Credentials

    first = Credentials(bearer="a.b.c")
    first.agents_read["agt_x"] = {"agent_id": "agt_x"}  # type: ignore[typeddict-item]
    assert dataclasses.replace(first, proof_verified=True).agents_read == {}
    assert Credentials(bearer="a.b.c").agents_read == {}


# -- what the store is asked (SQLite's statements, traced) -------------------------------------------


def _traced(w: World, bearer: str, path: str) -> tuple[int, list[str]]:
    """One GET's status and the statements that touched agents or grants while it ran (the
    in-process server's read connection, traced; its background work may add others)."""
    seen: list[str] = []
    conn = w.srv.services.store._db.conn
    with w.http(bearer) as http:
        http.get("/healthz")  # the connection is open before the trace starts
        conn.set_trace_callback(seen.append)
        try:
            status = http.get(path).status_code
        finally:
            conn.set_trace_callback(None)
    return status, [s for s in seen if "FROM agents" in s or "FROM grants" in s]


@pg.sqlite_only("traces the statements of the SQLite store (PostgreSQL's: the same store method, `view`)")
def test_an_agent_polling_its_own_grant_costs_one_statement(world: World) -> None:
    agent = world.signed_in("ahead-one")
    grant_id = world.grant(agent, command=["uptime"])["id"]
    assert _answers(world, agent.token, grant_id)[0] == 200  # remembered from here on
    status, statements = _traced(world, agent.token, f"/api/grants/{grant_id}")
    assert status == 200
    assert len(statements) == 1 and "a.agent_id = g.requester_id" in statements[0], statements
    # a token never verified reads no grant: the chain refuses it before the route reads anything
    status, statements = _traced(world, agent.token[:-6] + "AAAAAA", f"/api/grants/{grant_id}")
    assert status == 401 and not any("FROM grants" in s for s in statements), statements
    # any other bearer: the chain, then the route's one statement (as before this change)
    status, statements = _traced(world, world.srv.token, f"/api/grants/{grant_id}")
    assert status == 200 and sum("FROM grants" in s for s in statements) == 1, statements
