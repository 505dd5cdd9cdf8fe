"""schemathesis drives GET /openapi.json against a real in-process server.

For every operation of the document (the event stream aside: it streams, see the test below),
schemathesis generates requests from the document's own schemas (positive and negative data, random
path values and the ids of real records) and sends them as one caller: the management token, an
agent, or a signed-in person (cookie). Each answer must pass: no 5xx (``not_a_server_error``), a
documented status, the documented content type, a body that matches the documented schema and the
documented headers. A failure is a bug in the document or in the server; all failures of a run are
reported together, each with the request that produced it.

Deterministic (derandomize, no example database, no shrinking) and bounded: EXAMPLES per
operation and mode. The abuse limits are off (as in test_no_5xx.py), or refused bearers would soon
turn everything into 429.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from inproc import InProcessServer
from people_support import create_person, start_session
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from grantd.config import SCHEMA

from conftest import signed_in
from grants_support import grant_body

# Examples per operation: (positive, negative, positive aimed at real records). The management token
# reaches every route, so it gets the most; the whole file stays under ~90 s on 2 shared cores.
EXAMPLES = {"management": (8, 4, 8), "agent": (5, 3, 5), "person": (4, 2, 4)}
MIN_SUCCEEDED = {"management": 25, "agent": 10, "person": 8}  # lower bounds, well below what a run reaches
STREAMING = {"grants.events"}
LIMITS_OFF = [
    "authenticate_per_agent",
    "authenticate_per_address",
    "enroll_per_address",
    "failed_bearer_per_address",
    "grants_per_agent",
    "pending_per_agent",
    "pending_per_owner",
    "agents_per_person",
    "verify_per_address",
    "challenge_per_agent",
    "challenge_per_address",
    "token_per_address",
]
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
]


def limits_off() -> str:
    keys = "".join(f"{key} = 0\n" for key in LIMITS_OFF if key in SCHEMA.get("limits", {}))
    metrics = "\n[metrics]\nenabled = true\n" if "metrics" in SCHEMA else ""  # so /metrics answers 200
    return f"{metrics}\n[limits]\n{keys}"


class World:
    """A server with real records to aim path parameters at, and the callers."""

    def __init__(self, directory: Path):
        self.server = InProcessServer(directory / "srv", extra=limits_off()).start()
        srv = self.server
        self.agent = signed_in(srv, directory / "keys")  # type: ignore[arg-type]
        victim = signed_in(srv, directory / "victim")  # type: ignore[arg-type]
        person = create_person(srv, admin=False)
        self.cookie = start_session(srv, person["email"])
        with srv.client(self.agent.token) as http:
            grants = [
                http.post("/api/grants", json=grant_body(reason=f"r{i}")).json()["id"] for i in range(6)
            ]
        with srv.admin() as http:
            approved = grants[-1]
            http.post(f"/api/grants/{approved}/approve", json={})
            delegation = http.post(
                "/api/delegations", json={"delegate": victim.email, "audience": "x"}
            ).json()["id"]
            registration = http.post(
                "/api/admin/registration-urls", json={"email": "invitee@example.com"}
            ).json()["id"]
        self.ids: dict[str, list[str]] = {
            "grant_id": grants,
            "delegation_id": [delegation],
            "ident": [victim.email, victim.agent_id, person["email"], person["person_id"], registration],
            "family_id": ["fam_unknown"],
            "credential_id": ["unknown-credential"],
        }
        self.document = httpx.get(f"{srv.url}/openapi.json", timeout=10).json()

    def headers(self, caller: str) -> dict[str, str]:
        if caller == "management":
            return {"Authorization": f"Bearer {self.server.token}"}
        if caller == "agent":
            return {"Authorization": f"Bearer {self.agent.token}"}
        return {"Cookie": f"grantd_session={self.cookie}"}


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path)
    yield w
    w.server.stop()


def strategies(
    operation: Any, ids: dict[str, list[str]], budget: tuple[int, int, int]
) -> list[tuple[int, Any]]:
    """(examples, strategy): positive and negative data with generated path values, and positive
    data aimed at real records."""
    positive, negative, real = budget
    found = [(positive, operation.as_strategy(schemathesis.GenerationMode.POSITIVE))]
    if operation.body or operation.query or operation.path_parameters or operation.headers:
        found.append(
            (negative, operation.as_strategy(schemathesis.GenerationMode.NEGATIVE))
        )  # something to get wrong
    names = [p.name for p in operation.path_parameters]
    if names and all(n in ids for n in names):
        values = st.fixed_dictionaries({n: st.sampled_from(ids[n]) for n in names})
        found.append((real, values.flatmap(lambda v: operation.as_strategy(path_parameters=v))))
    return found


def run_operation(examples: int, strategy: st.SearchStrategy[Any], call: Callable[[Any], None]) -> None:
    @settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
    )
    @given(case=strategy)
    def run(case: Any) -> None:
        call(case)

    run()


def describe(exc: BaseException) -> str:
    """A failure with what schemathesis says about it (each check's message and the curl line)."""
    if isinstance(exc, BaseExceptionGroup):
        return str(exc) + "".join(f"\n  - {describe(e)}" for e in exc.exceptions)
    return f"{type(exc).__name__}: {exc}"


@pytest.mark.parametrize("caller", ["agent", "person", "management"])
def test_document_holds_against_the_server(world: World, caller: str) -> None:
    schema = schemathesis.openapi.from_dict(world.document)
    base_url = world.server.url
    headers = world.headers(caller)
    failures: list[str] = []
    started = time.monotonic()
    operations = 0

    succeeded: set[str] = set()  # operations that answered 2xx at least once: the success shapes were checked
    statuses: Counter[int] = Counter()

    def call(case: Any) -> None:
        response = case.call_and_validate(base_url=base_url, headers=headers, checks=CHECKS, timeout=10)
        statuses[response.status_code] += 1
        if 200 <= response.status_code < 300:
            succeeded.add(f"{case.operation.method.upper()} {case.operation.path}")

    for result in schema.get_all_operations():
        operation = result.ok()
        if operation.definition.raw.get("operationId") in STREAMING:
            continue
        operations += 1
        for examples, strategy in strategies(operation, world.ids, EXAMPLES[caller]):
            try:
                run_operation(examples, strategy, call)
            except (Exception, BaseExceptionGroup) as exc:  # noqa: BLE001 - all reported at the end
                failures.append(f"{operation.method.upper()} {operation.path}: {describe(exc)}")
                break
    elapsed = time.monotonic() - started
    assert operations >= 40
    print(
        f"schemathesis as {caller}: {operations} operations, {sum(statuses.values())} requests in {elapsed:.1f} s, "
        f"{len(succeeded)} operations answered 2xx; statuses {dict(sorted(statuses.items()))}"
    )
    assert len(succeeded) >= MIN_SUCCEEDED[caller], sorted(succeeded)
    assert not failures, (
        f"{len(failures)} operation(s) failed as {caller} ({elapsed:.0f} s):\n\n" + "\n\n".join(failures)
    )


@pytest.mark.parametrize("caller", ["agent", "management"])
def test_event_stream_answers_as_documented(world: World, caller: str) -> None:
    """The stream is left out above (it does not end); its status, media type and errors here."""
    op = world.document["paths"]["/api/grants/events"]["get"]
    assert "text/event-stream" in op["responses"]["200"]["content"]
    with httpx.Client(base_url=world.server.url, headers=world.headers(caller), timeout=10) as http:
        with http.stream("GET", "/api/grants/events", headers={"Last-Event-ID": "0"}) as r:
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/event-stream")
            first = next(r.iter_text())
            assert first.startswith("retry:")
        bad = http.get("/api/grants/events", headers={"Last-Event-ID": "x1"})
        assert str(bad.status_code) in op["responses"], bad.status_code
        assert bad.headers["content-type"].startswith("application/problem+json")
    anonymous = httpx.get(f"{world.server.url}/api/grants/events", timeout=10)
    assert anonymous.status_code == 401 and "401" in op["responses"]
