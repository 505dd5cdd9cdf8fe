"""The OpenAPI document (GET /openapi.json) against the app's own router.

Every route of a real in-process app is in the document with its methods, and every operation of
the document is a route of the app: a route added without its ``Op`` line in grantd.web.openapi
fails here. Browser pages are exempt (by blueprint, with the reason below); an /api/ route never
is. The document must validate as OpenAPI 3.1 (openapi-spec-validator) and every ``$ref`` resolve.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from inproc import InProcessServer
from openapi_spec_validator import validate

# Route-name prefixes (Sanic blueprint names) that the document does not describe, and why.
EXEMPT_BLUEPRINTS = {
    "grantd.pages.": "server-rendered HTML pages and their static files, for people's browsers, not an API",
    "grantd.review_links.review_link_page": "the page a review link opens (D15), for people's browsers",
}
METHODS = {"get", "put", "post", "delete", "patch", "head", "options", "trace"}


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessServer]:
    server = InProcessServer(tmp_path_factory.mktemp("openapi") / "srv").start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def document(srv: InProcessServer) -> dict:
    r = httpx.get(f"{srv.url}/openapi.json", timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


def openapi_path(sanic_uri: str) -> str:
    """``/api/grants/<grant_id:str>`` -> ``/api/grants/{grant_id}``."""
    return re.sub(r"<(\w+)(?::[^>]*)?>", r"{\1}", sanic_uri)


def app_routes(srv: InProcessServer) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """(documented-needed, exempt) sets of (METHOD, path) from the app's router."""
    needed: set[tuple[str, str]] = set()
    exempt: set[tuple[str, str]] = set()
    for route in srv.app.router.routes:
        path = openapi_path("/" + route.path.lstrip("/"))
        target = exempt if any(route.name.startswith(p) for p in EXEMPT_BLUEPRINTS) else needed
        for method in route.methods:
            target.add((method.upper(), path))
    return needed, exempt


def documented(document: dict) -> set[tuple[str, str]]:
    return {(m.upper(), path) for path, item in document["paths"].items() for m in item if m in METHODS}


def test_served_without_credential_and_cacheable(srv: InProcessServer) -> None:
    r = httpx.get(f"{srv.url}/openapi.json", timeout=10)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("application/json")
    assert r.headers["cache-control"] == "public, max-age=300"
    doc = r.json()
    assert doc["openapi"].startswith("3.1")
    assert doc["info"]["title"] == "grantd"
    import grantd

    assert doc["info"]["version"] == grantd.__version__
    assert doc["servers"] == [{"url": srv.services.issuer}]
    schemes = doc["components"]["securitySchemes"]
    assert {"managementToken", "agentToken", "authzJwt", "session"} <= set(schemes)
    assert schemes["session"] == {
        **schemes["session"],
        "type": "apiKey",
        "in": "cookie",
        "name": "grantd_session",
    }


def test_every_route_is_documented_and_nothing_else(srv: InProcessServer, document: dict) -> None:
    needed, exempt = app_routes(srv)
    in_doc = documented(document)
    assert not {r for r in exempt if r[1].startswith("/api/")}, "an /api/ route may not be exempt"
    missing = sorted(needed - in_doc)
    extra = sorted(in_doc - needed)
    assert not missing, f"routes of the app missing from grantd.web.openapi.OPERATIONS: {missing}"
    assert not extra, f"operations in the document that the app does not route: {extra}"
    assert not (in_doc & exempt), "an exempt route is documented: drop it from the exemption or the document"


def test_operation_ids_are_the_route_names(srv: InProcessServer, document: dict) -> None:
    """operationId = the Sanic route name without the app prefix: the document names the handler."""
    names = {}
    for route in srv.app.router.routes:
        for method in route.methods:
            names[(method.upper(), openapi_path("/" + route.path.lstrip("/")))] = route.name.removeprefix(
                "grantd."
            )
    for path, item in document["paths"].items():
        for method, operation in item.items():
            assert operation["operationId"] == names[(method.upper(), path)], (method, path)


def test_document_is_valid_openapi_31(document: dict) -> None:
    validate(document)  # raises OpenAPIValidationError with the path of the first problem


def test_every_ref_resolves_and_every_schema_is_used(document: dict) -> None:
    text = json.dumps(document)
    refs = set(re.findall(r'"\$ref": "#/components/schemas/([^"]+)"', text))
    schemas = set(document["components"]["schemas"])
    assert refs <= schemas, f"unresolved: {sorted(refs - schemas)}"
    assert schemas <= refs, f"unused schemas: {sorted(schemas - refs)}"


def test_errors_are_problem_json_and_api_errors_documented(document: dict) -> None:
    """D2: every documented error is problem+json; every /api/ operation documents 400, an
    authenticated one 401/403/429 (with WWW-Authenticate / Retry-After), one with an id 404."""
    for path, item in document["paths"].items():
        for method, op in item.items():
            responses = op["responses"]
            for status, answer in responses.items():
                if (
                    int(status) >= 400
                    and not path.startswith("/api/")
                    and list(answer["content"]) == ["text/html"]
                ):
                    continue  # a browser redirect's failure (federated sign-in): an HTML page for the person
                if int(status) >= 400 and path in (
                    "/token",
                    "/revoke",
                    "/userinfo",
                    "/device_authorization",
                    "/introspect",
                    "/bc-authorize",
                ):  # D2: the OAuth error shape (CIBA's endpoint too, D16)
                    assert answer["content"]["application/json"]["schema"] == {
                        "$ref": "#/components/schemas/OAuthError"
                    }
                elif int(status) >= 400:
                    assert list(answer["content"]) == ["application/problem+json"], (method, path, status)
                elif int(status) != 304 and not 300 <= int(status) < 400:  # a redirect has no body
                    assert answer.get("content"), f"{method} {path} {status}: every 2xx has a body (D6)"
            if path.startswith("/api/"):
                assert "400" in responses, (method, path)
            if {"managementToken", "agentToken", "session"} & {k for s in op["security"] for k in s}:
                assert {"401", "403", "429"} <= set(responses), (method, path)
                assert "WWW-Authenticate" in responses["401"]["headers"]
                assert "Retry-After" in responses["429"]["headers"]
            if "{" in path:
                assert "404" in responses, (method, path)
            assert not any(int(s) >= 500 and s != "503" for s in responses), (method, path)


def test_a_new_route_is_one_entry() -> None:
    """The document is generated from OPERATIONS: one Op is the whole of a new route's entry."""
    from grantd.web.openapi import OPERATIONS, Ok, Op, build_document, ref

    extra = Op(
        "GET", "/api/example/{thing_id}", "example.get", "An example", "bearer", ok={200: Ok(ref("Ok"))}
    )
    doc = build_document("https://idp.example.com", (*OPERATIONS, extra))
    op = doc["paths"]["/api/example/{thing_id}"]["get"]
    assert {"200", "400", "401", "403", "404", "429"} == set(op["responses"])
    assert op["parameters"][0] == {**op["parameters"][0], "name": "thing_id", "in": "path", "required": True}
    validate(doc)


def test_document_module_has_no_server_state(tmp_path: Path) -> None:
    """build_document is pure: the same issuer gives the same document."""
    from grantd.web.openapi import build_document

    assert build_document("https://a.example") == build_document("https://a.example")
    assert build_document("https://a.example")["servers"] != build_document("https://b.example")["servers"]
