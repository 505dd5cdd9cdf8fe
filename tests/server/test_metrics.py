"""GET /metrics (issue 12): Prometheus text over every worker process, route patterns (never raw
paths), grants read from the store, open streams, limit refusals; a token when configured; 404 when off."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import Server, make_server, problem, signed_in

METRICS_TOKEN = "scrape-" + "s" * 24


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def value(found: dict, name: str, **labels: str) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


def scrape(srv: Server, token: str | None = METRICS_TOKEN) -> str:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    r = httpx.get(f"{srv.url}/metrics", headers=headers, timeout=10)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain"), r.headers
    return r.text


@pytest.fixture(scope="module")
def metered(tmp_path_factory: pytest.TempPathFactory):
    directory = tmp_path_factory.mktemp("metered")
    tmp = directory / "tmp"
    tmp.mkdir()
    (directory / "metrics-token").write_text(METRICS_TOKEN + "\n")
    (directory / "metrics-token").chmod(0o600)
    srv = make_server(
        directory,
        workers=2,
        env={"TMPDIR": str(tmp)},
        extra='[metrics]\nenabled = true\ntoken = "file:metrics-token"\n\n[limits]\nverify_per_address = 3\n',
    )
    srv.start()
    yield srv
    srv.stop()
    assert list(tmp.iterdir()) == [], "the metrics directory outlived the server"


def test_a_scrape_sees_every_worker_and_only_route_patterns(metered: Server, tmp_path: Path) -> None:
    raw_path = f"/no/such/{uuid.uuid4().hex}"
    with httpx.Client(base_url=metered.url, timeout=10) as http:  # new connections: both workers get some
        for _ in range(20):
            assert http.get("/healthz", headers={"Connection": "close"}).status_code == 200
        assert http.get(raw_path).status_code == 404
    agent = signed_in(metered, tmp_path / "keys")
    with metered.client(agent.token) as http:
        r = http.post(
            "/api/grants",
            json={"target_host": "web1", "audience": "escapes", "grant_type": "once", "command": ["id"]},
        )
        assert r.status_code == 201, r.text
        grant_id = r.json()["id"]
        assert http.get(f"/api/grants/{grant_id}").status_code == 200
    with httpx.Client(base_url=metered.url, timeout=10) as http:
        codes = [http.post("/api/grants/verify", json={"token": "x"}).status_code for _ in range(5)]
    assert codes == [200, 200, 200, 429, 429]

    text = scrape(metered)
    found = samples(text)
    assert value(found, "grantd_http_requests_total", route="/healthz", method="GET", status="200") == 20
    assert (
        value(
            found,
            "grantd_http_requests_total",
            route="/api/grants/<grant_id:str>",
            method="GET",
            status="200",
        )
        >= 1
    )
    assert value(found, "grantd_http_requests_total", route="-", method="-", status="404") >= 1
    assert raw_path not in text and grant_id not in text  # patterns only: no per-id or per-URL series
    assert value(found, "grantd_http_request_duration_seconds_count", route="/healthz", method="GET") == 20
    assert value(found, "grantd_rate_limit_refusals_total", limit="verify.address") == 2
    assert (
        value(found, "grantd_http_requests_total", route="/api/grants/verify", method="POST", status="429")
        == 2
    )
    assert value(found, "grantd_grants", status="pending") == 1
    assert value(found, "grantd_grants", status="approved") == 0
    assert value(found, "grantd_oldest_pending_grant_age_seconds") > 0


def test_open_event_streams_are_counted_over_processes(metered: Server) -> None:
    opened, done = threading.Event(), threading.Event()

    def follow() -> None:
        with httpx.stream(
            "GET",
            f"{metered.url}/api/grants/events",
            headers={"Authorization": f"Bearer {metered.token}"},
            timeout=httpx.Timeout(30, read=30),
        ) as response:
            assert response.status_code == 200
            opened.set()
            for _ in response.iter_raw():
                if done.is_set():
                    break

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    assert opened.wait(20)
    try:
        deadline = time.monotonic() + 10
        while value(samples(scrape(metered)), "grantd_event_streams") != 1:
            assert time.monotonic() < deadline, scrape(metered)
            time.sleep(0.2)
    finally:
        done.set()


@pytest.mark.parametrize(
    "header", [None, "Bearer wrong-token-wrong-token", f"Basic {METRICS_TOKEN}", "Bearer"]
)
def test_metrics_need_the_token(metered: Server, header: str | None) -> None:
    r = httpx.get(f"{metered.url}/metrics", headers={"Authorization": header} if header else {}, timeout=10)
    assert r.status_code == 401 and problem(r)["detail"] == "metrics need the [metrics] token"
    assert "grantd_" not in r.text
    r = httpx.get(f"{metered.url}/metrics", headers={"Authorization": f"Bearer {metered.token}"}, timeout=10)
    assert r.status_code == 401  # the management token is not the scrape token


def test_metrics_are_off_by_default(server: Server) -> None:
    r = httpx.get(f"{server.url}/metrics", timeout=10)
    assert r.status_code == 404 and problem(r)["detail"] == "no such route"
    r = httpx.get(f"{server.url}/metrics", headers={"Authorization": f"Bearer {server.token}"}, timeout=10)
    assert r.status_code == 404


def test_one_process_without_a_token(tmp_path: Path) -> None:
    srv = make_server(tmp_path / "one", extra="[metrics]\nenabled = true\n").start()
    try:
        for _ in range(3):
            httpx.get(f"{srv.url}/healthz", timeout=10)
        found = samples(scrape(srv, token=None))
        assert value(found, "grantd_http_requests_total", route="/healthz", method="GET", status="200") == 3
        assert value(found, "grantd_grants", status="pending") == 0
    finally:
        srv.stop()
